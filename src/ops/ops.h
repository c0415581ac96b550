// Ops: one level above the kernels. Each op checks nothing at run time (the plan checked the
// shapes once), splits work across the thread pool in a fixed partition (or fixed chunks taken
// dynamically, summed in a fixed order), and calls kernels from
// the table (f32) or the scalar references (f64). Outputs first, then inputs, then sizes.
// Letters: N batch, C in-channels, K out-channels, H/W in, R/S kernel, P/Q out, D features.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

namespace ember::ops {

// Work another op may run inside its own parallel region: chunks taken by whichever thread is
// free (the plan's optimizer updates whose gradients are complete, overlapped with a
// compute-bound backward pass). run(ctx, c) for each chunk c < chunks, each exactly once.
struct SideWork {
  int chunks;
  void (*run)(void* ctx, int chunk);
  void* ctx;
  std::atomic<int>* next;
  bool take() const {  // runs one chunk; false when none is left
    const int c = next->fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks) return false;
    run(ctx, c);
    return true;
  }
};

struct Exec {
  const Kernels& k;
  ThreadPool& pool;
  const SideWork* side = nullptr;  // optional; ops that can overlap it take chunks of it
  bool bf16 = false;               // a bf16 plan: matrix products multiply bf16-rounded operands
  // The GEMM of the layers' matrix products (convolutions, Linear): fp32, or bf16 products
  // summed in fp32 (Kernels::sgemm_bf16) in a bf16 plan.
  SgemmFn gemm() const { return bf16 ? k.sgemm_bf16 : k.sgemm; }
  // C = op(A) times a weight packed once as op(B) (packer_b), or a packed op(A) times op(B)
  // (packer_a), beta 0: the fp32 panels, or a bf16 plan's bf16 ones (A or B given fp32, or as its
  // bf16 copy there). Splits align to packed_nr() columns / packed_mr() rows.
  void gemm_packed_b(bool ta, int M, int n, int K, Bf16Operand A, int lda, const float* Bp, int N, int j0, float* C,
                     int ldc) const {
    if (bf16) return k.gemm_bf16_packed_b(ta, M, n, K, 1.f, A, lda, Bp, N, j0, 0.f, C, ldc);
    k.sgemm_packed_b(ta, M, n, K, 1.f, A.f, lda, Bp, N, j0, 0.f, C, ldc);
  }
  void gemm_packed_a(bool tb, int m, int N, int K, const float* Ap, int M, int i0, Bf16Operand B, int ldb, float* C,
                     int ldc) const {
    if (bf16) return k.gemm_bf16_packed_a(tb, m, N, K, 1.f, Ap, M, i0, B, ldb, 0.f, C, ldc);
    k.sgemm_packed_a(tb, m, N, K, 1.f, Ap, M, i0, B.f, ldb, 0.f, C, ldc);
  }
  int packed_nr() const { return bf16 ? k.bf16_nr : k.gemm_nr; }
  int packed_mr() const { return bf16 ? k.bf16_mr : k.gemm_mr; }
};
// An operand n elements further on (either form).
inline Bf16Operand operand_at(Bf16Operand o, size_t n) { return {o.f ? o.f + n : nullptr, o.h ? o.h + n : nullptr}; }
// A plan's weight packed once: the table's fp32 GEMM panels, or its bf16 ones for a bf16 plan.
inline PackBFn packer_b(const Kernels& k, bool bf16) { return bf16 ? k.pack_b_bf16 : k.pack_b; }
inline PackAFn packer_a(const Kernels& k, bool bf16) { return bf16 ? k.pack_a_bf16 : k.pack_a; }

// wh (linear, conv2d; may be null): a bf16 plan's copy of w rounded to bf16 (Plan: the weight
// copy), which the bf16 GEMMs read instead of rounding w as they pack it (the same products).
// Linear: y[N,K] = x[N,C] w[K,C]^T + b[K]. ws (may be null: then not used): at least
// linear_fwd_workspace(N, K) elements, which lets a small batch run as y^T = w x^T, and at least
// linear_fwd_split_workspace(N, C, K, threads) (below).
size_t linear_fwd_workspace(int N, int K);
// With threads, a deep product (C >= 2048 and at least 8 times N and K: fc1 at batch 64) splits C
// instead, each thread a fixed range into its own partial [N, K] (thread 0 into y), added in thread
// order: every thread then packs only its share of x, where a split of the outputs has each pack all
// of it. ws then needs (threads - 1) * N * K elements: this, or 0 when the shape does not split.
size_t linear_fwd_split_workspace(int N, int C, int K, int threads);
// What any batch of 1 to `batch` rows needs: a plan's workspace (a partial batch smaller than K
// runs as y^T = w x^T even where the full batch does not).
size_t linear_fwd_workspace_upto(int batch, int C, int K, int threads);
template <class T>
void linear_fwd(const Exec& e, T* y, const T* x, const T* w, const T* b, int N, int C, int K,
                T* ws = nullptr, const uint16_t* wh = nullptr);
// A GEMM activation epilogue (a channel-last 1x1 conv followed by an activation, nn/conv_act.cpp):
// y = act(x w^T + b) in row chunks, each chunk's bias and activation while it is in cache; z (or
// null): where the pre-activation is kept. The bits of linear_fwd then act_fwd (ws and wh null).
// Only where linear_act_chunked(N, K, threads): many rows, K a multiple of 8.
using Act = ActId;  // kernels.h: one per header in src/kernels/act/
// A bf16 plan's Linear over at most this many rows reads its bf16 weight copy in place
// (Kernels::gemv_bf16, where the table has it) instead of the GEMM.
constexpr int kLinearGemvRows = 4;
// A Linear's weight w[K, C] packed once for the GEMM (an inference plan's, at each parameter
// change): op(B) = w^T in the table's panel format, linear_pack_elems floats, 64-byte aligned.
// bf16: a bf16 plan's (the table's bf16 panels: packer_b).
size_t linear_pack_elems(const Kernels& k, int C, int K, bool bf16);
void linear_pack(const Kernels& k, float* wp, const float* w, int C, int K, bool bf16);
// y[N, K] = x[N, C] w^T + b (+ epilogue) from the packed wp (Exec::gemm_packed_b: fp32, or bf16
// products in a bf16 plan, x given fp32 or as its bf16 copy): no per-call packing of w. The
// rows split over the pool in 8-aligned chunks of at most 512 rows, each chunk's bias (and *act
// where act is not null; z: where the pre-activation is kept, or null) while it is in cache; few
// rows split the columns at the panel width. The same bits for any thread count.
void linear_fwd_packed(const Exec& e, float* y, Bf16Operand x, const float* wp, const float* b, int N, int C, int K,
                       const Act* act = nullptr, float* z = nullptr);
// Bytes of w a linear_fwd call without ws (a convolution's rows) packs for the table's GEMM: the
// panels of op(B) = w^T once per GEMM that packs (every chunk of rows; every thread of a row split),
// 0 where the GEMM streams w (at most gemm_stream_rows rows) or the table packs nothing.
size_t linear_weight_bytes_per_call(const Kernels& k, int N, int C, int K, int threads, bool bf16, bool bias);
bool linear_act_chunked(int N, int K, int threads);
void linear_act_fwd(const Exec& e, Act a, float* y, float* z, const float* x, const float* w, const float* b,
                    int N, int C, int K);
// One sample from the transposed weight wt[C,K], reading only the rows of non-zero inputs
// (kernels.h, LinearT1Fn). A frozen plan's batch-1 forward (Plan::freeze). With C >= 1024 and
// ws (2K elements) the rows go in two fixed halves, one per thread (in turn on one thread), each
// summed alone, y = (h0 + h1) + b: the same bits for any thread count, and each core streams only
// half the weight (fc1 at batch 1 is bound by the bandwidth of reading it). Else threads split K.
void linear_fwd_t1(const Exec& e, float* y, const float* x, const float* wt, const float* b, int C,
                   int K, float* ws = nullptr);
constexpr int kLinearT1SplitRows = 1024;
// Sparse-input Linear (f32): x's columns in fixed chunks (linear_sp_layout); the forward counts
// each chunk's non-zero inputs and runs the sparse kernels (kernels.h, LinearSp*Fn) on a chunk
// whose share is at most the table's threshold, the dense GEMM on the others, or the dense path
// above when no chunk is sparse. `saved` (linear_sp_saved_bytes) keeps, from forward to
// backward, the sparse chunks' transposed weights, the chunks' partial outputs and decisions.
// dx_unused_at_zero: the layer before ignores dx where x == 0 (after a ReLU), so the sparse input
// gradient may write 0 there. Bit-identical for a given thread count (fixed chunks, partial
// outputs summed in chunk order).
struct LinearSpLayout {
  int chunks = 0, width = 0;       // column chunks of `width` (the last one shorter)
  size_t wt = 0, parts = 0, flags = 0, bytes = 0;  // byte offsets into `saved`, and its size
};
LinearSpLayout linear_sp_layout(int N, int C, int K, int threads);
// Bytes of `saved` for a Linear that may run sparse, or 0 when it never does (small layers).
size_t linear_sp_saved_bytes(int N, int C, int K, int threads);
// frozen_wt (may be null): a frozen plan's weight transposed, wt[C, K]: sparse chunks read it
// instead of transposing w (their input gradient then runs dense).
void linear_fwd_sp(const Exec& e, float* y, void* saved, const float* x, const float* w,
                   const float* b, int N, int C, int K, float* ws, const float* frozen_wt = nullptr);
void linear_bwd_sp(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x,
                   const float* w, const void* saved, bool dx_unused_at_zero, int N, int C, int K);

// db[K] = sum over n of dy[N, K], rows in order.
template <class T>
void bias_grad(T* db, const T* dy, int N, int K) {
  for (int k = 0; k < K; ++k) db[k] = 0;
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) db[k] += dy[size_t(n) * K + k];
}
// dx[N,C] = dy w (skipped when dx is null); dw[K,C] = dy^T x; db[K] = sum_n dy. ws (may be null):
// linear_bwd_workspace(N, C, K) elements, with which a weight gradient over many rows sums fixed
// chunks of rows (weight_grad_chunks of them; the same bits for any thread count).
template <class T>
void linear_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int N,
                int C, int K, const uint16_t* wh = nullptr, T* ws = nullptr);
int weight_grad_chunks(int N, int C, int K);
size_t linear_bwd_workspace(int N, int C, int K);

// Conv2d. Its algorithm, workspace and weight format are chosen once, by conv2d_desc
// (ops/conv_desc.h), when a plan is built: every call then runs that algorithm.
enum class ConvAlgo : uint8_t;
// Elements of T the nchw algorithm a needs for up to s.N samples (conv2d_desc's workspace).
size_t conv2d_nchw_workspace(ConvAlgo a, const ConvShape& s, int threads);
// dw_dense's map of group g: T[M*PQ, HW] from w[K, R*S] (a packed weight: conv2d_pack).
void dw_dense_matrix(float* T, const float* w, int g, const ConvShape& s);
// Floats of one group's map packed as op(B) = T^T panels (Kernels::pack_b), 16-float aligned.
size_t dw_dense_packed_group(const Kernels& k, const ConvShape& s, bool bf16);
// What a convolution applies after its products and bias, in this order (a fused unit's post-ops):
// y += residual (the same shape and layout as y), then the activation *act. Per sample while the
// output is in cache where the algorithm runs per sample, else one pass after (post_ops_fwd).
template <class T>
struct ConvPost {
  const T* residual = nullptr;
  const Act* act = nullptr;
  bool any() const { return residual || act; }
};
// y[N,K,P,Q] = conv(x[N,C,H,W], w[K,C/G,R,S]) + b[K] by algorithm a (conv2d_desc's for a shape
// with at least s.N samples); ws: that plan's workspace. xh (bf16 plans; may be null): the input in
// bf16, which the GEMMs read instead of rounding x; with xh, x may be null where reads_bf16_input.
// T = double runs the reference whatever a is.
// wp (f32; may be null): the weight packed by conv2d_pack in the descriptor's format.
template <class T>
void conv2d_fwd(const Exec& e, ConvAlgo a, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws,
                const uint16_t* wh = nullptr, const uint16_t* xh = nullptr, const float* wp = nullptr,
                ConvPost<T> post = {});
// dx[N,C,H,W] (skipped when null), dw[K,C/G,R,S], db[K] (skipped when null), all overwritten.
template <class T>
void conv2d_bwd(const Exec& e, ConvAlgo a, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                const ConvShape& s, T* ws, const uint16_t* wh = nullptr, const uint16_t* xh = nullptr);

// The background of a fused Conv2d + ReLU + MaxPool unit whose output a Linear reads (through a
// Flatten), linked by the plan when the conv needs no input gradient (a first layer): a pooled
// window whose input patch is zero in every channel holds relu(b[c]) in every sample. Linked, the
// conv's forward writes 0 there instead (code -1: no gradient), marks the window in `mask` and
// keeps the values; the Linear adds their share back through a [K, P2] fold of its weight, and its
// backward adds their weight gradient and returns their conv-bias gradient. The Linear's sparse
// kernels then see only the foreground: early in training, when many conv biases are > 0, about
// half of mnist-cnn's pooled values are background.
// Letters: the unit's output [C, P2] (P2 = P/2 * Q/2 windows) is the Linear's input [C * P2].
struct Background {
  float* mask;       // [N, P2]: 1 where sample n's window p has an all-zero input patch, else 0
  float* value;      // [C]: relu(b[c]), what such a window pools in channel c
  float* bias_grad;  // [C]: the conv bias gradient of those windows (the Linear's backward)
  float* fold;       // [K, P2]: the Linear's scratch
  int channels, positions;  // C, P2
};
// Conv2d (stride 1) + ReLU + MaxPool 2x2/2 fused: y[N, K, P/2, Q/2] and a window code per pooled
// value (see ReluMaxpool2Fn); backward takes the codes. Workspace: conv_relu_pool_workspace.
// bg (f32 only, may be null): the background link above (needs groups 1, H + 2 pad and W + 2 pad
// <= 64, R and S <= 32); with split false (a frozen plan) it writes the true activations and all
// values 0, so the Linear adds nothing.
// wpk (f32, may be null): the weights as conv_relu_pool_pack wrote them (an inference plan's).
size_t conv_relu_pool_workspace(const ConvShape& s, int threads);
template <class T>
void conv_relu_pool_fwd(const Exec& e, T* y, int8_t* code, const T* x, const T* w, const T* b,
                        const ConvShape& s, T* ws, const Background* bg = nullptr, bool split = true,
                        const float* wpk = nullptr);
// The fused kernel's weights and bias packed once per parameter change (the kernel table's own
// layout, per group; bf16: the kernel a bf16 plan runs): its floats, 0 where the kernel reads w as
// stored; and the packing (ws: the forward's workspace, where a table without a bf16 kernel rounds w).
size_t conv_relu_pool_pack_elems(const Kernels& k, const ConvShape& s, bool bf16);
void conv_relu_pool_pack(const Exec& e, float* wpk, const float* w, const float* b, const ConvShape& s, float* ws);
// The Linear's side of the link, after its own forward / backward (y[N, K], w[K, C * P2]):
// y += mask fold^T with fold[k, p] = sum_c value[c] w[k, c*P2 + p]; and dw[k, c*P2 + p] +=
// value[c] sum_n dy[n, k] mask[n, p], bias_grad[c] = sum_{k, p} w[k, c*P2 + p] sum_n dy[n, k]
// mask[n, p] (0 for channels whose value is 0). Nothing to do when every value is 0.
void linear_bg_fwd(const Exec& e, float* y, const Background& bg, const float* w, int N, int K);
void linear_bg_bwd(const Exec& e, float* dw, const Background& bg, const float* dy, const float* w,
                   int N, int K);
template <class T>
void conv_relu_pool_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const int8_t* code,
                        const T* x, const T* w, const ConvShape& s, T* ws);

// dst[i] += parts[p * stride + i] for p = 0 .. nparts - 1 in that order, for i < n: the other
// threads' (or chunks') partial weight gradients (the first one was written into dst itself).
// Split over the pool by ranges of i, so the result is bit-identical for a thread count.
template <class T>
void add_partials(const Exec& e, T* dst, size_t n, const T* parts, size_t stride, int nparts) {
  const int P = e.pool.size();
  e.pool.run([&](int t) {
    const Range r = split_range((int64_t)n, t, P);
    for (int64_t i = r.begin; i < r.end; ++i) {
      T acc = dst[i];
      for (int p = 0; p < nparts; ++p) acc += parts[p * stride + i];
      dst[i] = acc;
    }
  });
}

// Pools over [N, C, H, W] -> [N, C, P, Q]; maxpool keeps argmax[N, C, P, Q] for backward. nhwc:
// channel-last, x [N, H, W, C], y and argmax [N, P, Q, C] (ref_pool_nhwc.h: the NCHW choice and sums).
template <class T>
void maxpool2d_fwd(const Exec& e, T* y, int32_t* argmax, const T* x, const ref::PoolShape& s, bool nhwc = false);
template <class T>
void maxpool2d_bwd(const Exec& e, T* dx, const T* dy, const int32_t* argmax, const ref::PoolShape& s,
                   bool nhwc = false);
template <class T>
void avgpool2d_fwd(const Exec& e, T* y, const T* x, const ref::PoolShape& s);
template <class T>
void avgpool2d_bwd(const Exec& e, T* dx, const T* dy, const ref::PoolShape& s);

// Pointwise activations over n elements (kernels.h's ActId: the table's vector form or formula on
// f32, the formula in double on f64). Backward takes the forward output y where the activation's
// act_info(a).from_output (ReLU, Sigmoid, Tanh), else the forward input x (act_reads_input).
inline bool act_reads_input(Act a) { return !act_info(a).from_output; }
template <class T>
void act_fwd(const Exec& e, Act a, T* y, const T* x, size_t n);
template <class T>
void act_bwd(const Exec& e, Act a, T* dx, const T* dy, const T* y_or_x, size_t n);
// The same on the calling thread alone (an epilogue inside a pool task: the same bits as act_fwd
// and act_bwd wherever the span starts; act_vec.h runs a tail as one padded vector).
template <class T>
void act_fwd_span(const Exec& e, Act a, T* y, const T* x, size_t n);
template <class T>
void act_bwd_span(const Exec& e, Act a, T* dx, const T* dy, const T* y_or_x, size_t n);

// A fused unit's post-ops over y[n] (ConvPost): y += residual, then the activation, in place; split
// over the pool (post_ops_fwd) or on the calling thread (post_ops_span). The bits of add_fwd, then
// act_fwd.
template <class T>
void post_ops_fwd(const Exec& e, T* y, ConvPost<T> post, size_t n);
template <class T>
void post_ops_span(const Exec& e, T* y, ConvPost<T> post, size_t n);

// Graph plumbing (f32 and f64, memory-bound loops split over the pool): y = xs[0] + ... + xs[nin-1]
// over n elements; dst = src, or dst += src (add) where a tensor read by several nodes sums their
// gradients; concat of nin inputs per sample (sizes: each input's elements per sample) and its
// backward (a null dxs[j] is skipped). At most kMaxGraphInputs inputs.
constexpr int kMaxGraphInputs = 8;
template <class T>
void add_fwd(const Exec& e, T* y, const T* const* xs, int nin, size_t n);
template <class T>
void copy_or_add(const Exec& e, T* dst, const T* src, size_t n, bool add);
template <class T>
void concat_fwd(const Exec& e, T* y, const T* const* xs, const size_t* sizes, int nin, int N);
template <class T>
void concat_bwd(const Exec& e, T* const* dxs, const T* dy, const size_t* sizes, int nin, int N);

// Optimizer updates over one parameter tensor of n elements (f32). State buffers as named.
struct SgdArgs { float lr, momentum, l2, wd; bool nesterov, use_momentum; };
// Both return how many g[i] are NaN or Inf (the update is applied regardless).
// wh (sgd_step, adam_step; may be null): a bf16 plan's weight copy, rewritten from the updated w
// in the same pass (Adam: the fused kernel; SGD: each range converted while it is in cache).
size_t sgd_step(const Exec& e, float* w, float* buf, const float* g, size_t n, const SgdArgs& a,
                uint16_t* wh = nullptr);
using ember::AdamArgs;  // see kernels.h
size_t adam_step(const Exec& e, float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a,
                 uint16_t* wh = nullptr);
// NaN and Inf values among x[0..n), split over the pool like the optimizer updates.
size_t count_nonfinite(const Exec& e, const float* x, size_t n);

}  // namespace ember::ops
