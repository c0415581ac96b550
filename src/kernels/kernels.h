// The kernel table: one function pointer per fp32 kernel, one table per instruction set.
// Kernels take raw pointers and sizes; they never allocate, throw, log or start threads.
// Threading and shape checks live one level up (src/ops). Dimension letters: N batch,
// C in-channels, K out-channels, H/W input height/width, R/S kernel, P/Q output height/width.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember {

// The kernel sets, best last. amx is the avx512 table with its bf16 matrix products on AMX tiles.
enum class Isa { scalar, avx2, avx512, amx };
constexpr int kKernelSets = 4;

const char* isa_name(Isa isa);
// Parses "scalar", "avx2", "avx512", "amx"; returns false on anything else.
bool parse_isa(std::string_view text, Isa* out);
// What the CPU running this process supports (the one probe, kernels/cpu_probe.h): avx2 needs
// AVX2 and FMA, avx512 AVX-512 F, BW, VL and DQ; amx also AVX512_BF16, AMX-BF16, the tile
// permission and tiles that keep their contents across preemption (amx_tiles_hold_state).
bool isa_supported(Isa isa);
// The best ISA the CPU supports.
Isa best_isa();
// The one place an instruction-set name from a user is read: empty gives best_isa(); a name this
// parser or this CPU does not know throws ember::Error starting "WHAT: " (the flag, option or
// environment variable it came from), naming the best set available.
Isa resolve_isa(std::string_view text, const std::string& what);
// A plan's kernel set: `option` ("isa", as resolve_isa reads it) when given, else the EMBER_ISA
// environment variable when set, else best_isa().
Isa resolve_isa_option(const std::string& option);

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, all row-major.
// op(A) = A, stored [M, lda >= K]; or A^T when trans_a, A stored [K, lda >= M].
// op(B) = B, stored [K, ldb >= N]; or B^T when trans_b, B stored [N, ldb >= K].
// beta == 0 overwrites C without reading it. Single-threaded.
using SgemmFn = void (*)(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const float* A, int lda, const float* B, int ldb, float beta, float* C,
                         int ldc);

// A weight operand packed once (a plan's pre-packed B, ops::PackedWeight): op(B) [K, N] written
// into dst (64-byte aligned) in the table's GEMM panel format (null dst: only the size); returns its floats. The
// scalar table's format is op(B) itself, [K, N] row-major.
using PackBFn = size_t (*)(bool trans_b, int K, int N, const float* B, int ldb, float* dst);
// C[M, n] = alpha * op(A)[M, K] * columns [j0, j0 + n) of a packed op(B) [K, N] + beta * C (C: the
// product's column j0; j0 a multiple of Kernels::gemm_nr): the bits of SgemmFn on the unpacked B
// for M > Kernels::gemm_stream_rows (which streams op(B) unpacked instead).
using SgemmPackedBFn = void (*)(bool trans_a, int M, int n, int K, float alpha, const float* A, int lda,
                                const float* Bp, int N, int j0, float beta, float* C, int ldc);

// The same for a weight that is op(A) [M, K] (an NCHW convolution's w[K, CRS]), and the GEMM
// C[m, N] = alpha * rows [i0, i0 + m) of the packed op(A) (M rows in all; i0 a multiple of
// Kernels::gemm_mr) * op(B) + beta * C (C: the product's row i0), with the bits of SgemmFn for
// M > gemm_stream_rows.
using PackAFn = size_t (*)(bool trans_a, int M, int K, const float* A, int lda, float* dst);
using SgemmPackedAFn = void (*)(bool trans_b, int m, int N, int K, float alpha, const float* Ap, int M, int i0,
                                const float* B, int ldb, float beta, float* C, int ldc);

// bfloat16 (kernels/bf16.h holds the scalar rounding): dst[i] = f32_to_bf16(src[i]), and back.
using CvtF32Bf16Fn = void (*)(uint16_t* dst, const float* src, size_t n);
using CvtBf16F32Fn = void (*)(float* dst, const uint16_t* src, size_t n);
// C[M,N] (fp32) = alpha * op(A) * op(B) + beta * C as SgemmFn, with A and B in bf16: the products
// are exact in fp32 and summed in fp32 (the order is the kernel's), so every kernel equals the
// fp32 GEMM of the bf16 values within fp32 rounding of the sums. Odd K is fine.
using SbgemmFn = void (*)(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                          const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta,
                          float* C, int ldc);

// An operand of the bf16 GEMMs given both ways: `f` the fp32 values (rounded to bf16 as packed),
// and `h`, when not null, the same values already rounded (a bf16 plan's weight copy), read instead.
struct Bf16Operand {
  const float* f = nullptr;
  const uint16_t* h = nullptr;
};
using GemvBf16Fn = void (*)(float* y, int ldy, const float* x, int ldx, const uint16_t* wh, int ldw, int N, int C,
                            int K);
// sgemm_bf16 with each operand from its bf16 copy where it has one: the same results (the copy
// holds exactly the rounding packing would do), half the bytes read for that operand.
using GemmBf16MixedFn = void (*)(bool trans_a, bool trans_b, int M, int N, int K, float alpha, Bf16Operand A,
                                 int lda, Bf16Operand B, int ldb, float beta, float* C, int ldc);
// A bf16 plan's weight packed once (PackBFn / PackAFn signatures: Kernels::pack_b_bf16,
// pack_a_bf16): rounded to bf16 into the table's bf16 GEMM panels, 32-bit elements (bf16 pairs
// along k where the table multiplies bf16: AVX512_BF16, AMX; the fp32 panels of the rounded values
// where it widens bf16 to fp32). The GEMMs that read them take the other operand fp32 (rounded as
// packed) or from its bf16 copy, with the column (j0, a multiple of bf16_nr) or row (i0, a
// multiple of bf16_mr) splits of SgemmPackedBFn / SgemmPackedAFn: the fp32 GEMM of the bf16 values.
using GemmBf16PackedBFn = void (*)(bool trans_a, int M, int n, int K, float alpha, Bf16Operand A, int lda,
                                   const float* Bp, int N, int j0, float beta, float* C, int ldc);
using GemmBf16PackedAFn = void (*)(bool trans_b, int m, int N, int K, float alpha, const float* Ap, int M, int i0,
                                   Bf16Operand B, int ldb, float beta, float* C, int ldc);
// Calls run(a, b) with each operand's copy where it has one, else its fp32 values (four typed
// combinations, for the templated GEMMs behind GemmBf16MixedFn).
template <class Run>
void by_operands(Bf16Operand A, Bf16Operand B, Run run) {
  if (A.h && B.h) run(A.h, B.h);
  else if (A.h) run(A.h, B.f);
  else if (B.h) run(A.f, B.h);
  else run(A.f, B.f);
}

// Convolution geometry shared by the conv kernels (one sample, one group at a time for im2col).
struct ConvShape {
  int N, C, H, W;   // input  [N, C, H, W]
  int K, R, S;      // weight [K, C/groups, R, S]
  int P, Q;         // output [N, K, P, Q]
  int stride_h, stride_w, pad_h, pad_w, groups;
};

// Pooling geometry: x [N, C, H, W] -> y [N, C, P, Q], window R x S, stride, padding.
struct PoolShape {
  int N, C, H, W, P, Q, R, S, stride_h, stride_w, pad_h, pad_w;
  bool count_pad = true;  // AvgPool2d: padding counted in the divisor; false: the window's input values only
};
// MaxPool2d forward of the N * C planes of x [N, C, H, W] (NCHW): y and argmax [N, C, P, Q] as
// ref::maxpool2d_fwd gives them, bit for bit (the window's in-image taps in order, padding never
// wins, a NaN wins and ends its row of taps; argmax the flat h * W + w inside the plane).
using MaxPoolFwdFn = void (*)(float* y, int32_t* argmax, const float* x, const PoolShape& s);

// col[(c*R + r)*S + s, p*Q + q] = x[c, p*stride_h - pad_h + r, q*stride_w - pad_w + s] (0 outside),
// for c in [0, Cg): x is one sample's [Cg, H, W] slice, col is [Cg*R*S, P*Q].
using Im2colFn = void (*)(float* col, const float* x, int Cg, const ConvShape& s);
// The adjoint: dx[Cg, H, W] += scatter of col[Cg*R*S, P*Q]. dx must be initialised by the caller.
using Col2imFn = void (*)(float* dx, const float* col, int Cg, const ConvShape& s);

// Depthwise convolution with a channel multiplier (groups == in-channels, M outputs per group),
// stride 1, one sample: x [G, H, W] (unpadded), w [G*M, R, S], y [G*M, P, Q], output k reading
// input channel k / M; padding pad_h, pad_w (zeros outside). ConvNeXt's Conv2d(d, 4d, 7,
// groups=d, padding='same').
struct DwShape {
  int G, M, H, W, R, S, P, Q, pad_h, pad_w;
};
// y = conv + b[k] (b may be null). scratch: dw_scratch_elems(d) floats.
using DwFwdFn = void (*)(float* y, const float* x, const float* w, const float* b, const DwShape& d,
                         float* scratch);
// dw [G*M, R, S] += the filter gradient; dx [G, H, W] = the input gradient (overwritten; skipped
// when null). scratch: dw_scratch_elems(d) floats.
using DwBwdFn = void (*)(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d,
                         float* scratch);
// The kernels work on one input channel zero-padded to Hp x Wp planes and on output planes of
// P rounded up to 4 rows and Q rounded up to 8 columns (4 x 8 register blocks; the extra rows and
// columns are computed and dropped), for the output and, in backward, for dy and dx.
inline int dw_rows(const DwShape& d) { return (d.P + 3) / 4 * 4; }
inline int dw_cols(const DwShape& d) { return (d.Q + 7) / 8 * 8; }
inline int dw_padded_h(const DwShape& d) {
  const int a = d.H + 2 * d.pad_h, b = dw_rows(d) + d.R - 1, c = (d.H + 3) / 4 * 4 + d.R - 1;
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}
inline int dw_padded_w(const DwShape& d) {
  const int a = d.W + 2 * d.pad_w, b = dw_cols(d) + d.S - 1, c = (d.W + 7) / 8 * 8 + d.S - 1;
  return a > b ? (a > c ? a : c) : (b > c ? b : c);
}
// The AVX512_BF16 kernels' planes (x86/dw_avx512bf16.cpp): bf16 copies of one channel of x and
// of dy, Hb x Wb with the zero border, pairs of their rows, and an fp32 output plane.
inline int dw_bf16_rows(const DwShape& d) {
  const int p = dw_rows(d), h = (d.H + 3) / 4 * 4;
  return (p > h ? p : h) + d.R;
}
inline int dw_bf16_cols(const DwShape& d) {
  const int q = dw_cols(d), w = (d.W + 7) / 8 * 8;
  return (q > w ? q : w) + d.S + 3;
}
inline size_t dw_scratch_elems(const DwShape& d) {
  const size_t f32 = 4 * size_t(dw_padded_h(d)) * dw_padded_w(d) + 2 * size_t(d.R) * d.S;
  const size_t bf16 = 5 * size_t(dw_bf16_rows(d)) * dw_bf16_cols(d) + 64;  // + two channels' weight pairs
  return f32 > bf16 ? f32 : bf16;
}

// The same depthwise convolution on channel-last data, one sample: x [H, W, G], y [P, Q, G*M],
// w [G*M, R, S] (PyTorch's layout), b [G*M] or null; output channel k reads input channel k / M.
// y = conv + b. scratch: dw_nhwc_scratch_elems(d) floats.
using DwNhwcFwdFn = void (*)(float* y, const float* x, const float* w, const float* b, const DwShape& d,
                             float* scratch);
// dw [G*M, R, S] += the filter gradient, db [G*M] += the sums of dy (db may be null); dx [H, W, G]
// = the input gradient (overwritten; skipped when null). dy [P, Q, G*M].
using DwNhwcBwdFn = void (*)(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                             const DwShape& d, float* scratch);
// The fast kernels work on blocks of 16 output channels (8 with AVX2) of a zero-padded, channel-
// expanded copy of the map, 8 output columns at a time (Q rounded up to 8, the extra columns
// computed and dropped): per block the tap weights [R*S, 16], x expanded to [P+R-1, cols, 16]
// and, backward, dy padded to [H+R-1, cols, 16].
inline int dw_nhwc_cols(int q, int S) { return (q + 7) / 8 * 8 + S - 1; }
inline size_t dw_nhwc_scratch_elems(const DwShape& d) {
  const size_t xe = size_t(d.P + d.R - 1) * dw_nhwc_cols(d.Q, d.S), dyp = size_t(d.H + d.R - 1) * dw_nhwc_cols(d.W, d.S);
  return 16 * (2 * size_t(d.R) * d.S + xe + dyp);
}

// The activations, one header each in src/kernels/act/ (act_vec.h: formula, optional vector form),
// by name: ActId::relu, ActId::gelu_tanh, ... (act_list.inc, generated from that folder). Over n
// elements: y = f(x) (y may be x); dx = dy f'(.) from v, the input x or, where the activation's
// from_output, the output y (dx may be dy).
enum class ActId : int {
#define EMBER_ACT(name) name,
#include "kernels/act_list.inc"
#undef EMBER_ACT
};
constexpr int kActs = 0
#define EMBER_ACT(name) +1
#include "kernels/act_list.inc"
#undef EMBER_ACT
    ;
using ActFwdFn = void (*)(float* y, const float* x, size_t n);
using ActBwdFn = void (*)(float* dx, const float* dy, const float* v, size_t n);
using ActFwd64Fn = void (*)(double* y, const double* x, size_t n);
using ActBwd64Fn = void (*)(double* dx, const double* dy, const double* v, size_t n);
// An activation's traits and its double reference (the same on every kernel set).
struct ActInfo {
  const char* name;   // its header's name (gelu_tanh)
  bool from_output;   // the backward reads y (so the plan may run it in place)
  bool dead_at_zero;  // y == 0 gives dx == 0 (ReLU): a gradient there is never read
  bool vector;        // it has a vector form (the fast sets run it; else they run the formula)
  ActFwd64Fn fwd64;
  ActBwd64Fn bwd64;
};
const ActInfo& act_info(ActId a);

// LayerNorm over R contiguous rows of D (y, x [R, D]; mean, rstd [R]; gamma, beta [D]) and
// LayerNorm2d over C at each position of x [N, C, HW] (mean, rstd [N, HW]; gamma, beta [C]), as
// ref::layernorm_fwd / layernorm2d_fwd. Backward: dgamma, dbeta overwritten with the sums over the
// call's rows or samples; dx may be null (ref::layernorm_bwd / layernorm2d_bwd).
using LnRowsFwdFn = void (*)(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                             const float* beta, int R, int D, float eps);
using LnRowsBwdFn = void (*)(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                             const float* mean, const float* rstd, const float* gamma, int R, int D);
using Ln2dFwdFn = void (*)(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                           const float* beta, int N, int C, int HW, float eps);
using Ln2dBwdFn = void (*)(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                           const float* mean, const float* rstd, const float* gamma, int N, int C, int HW);

// y[rows, cols] += bias[cols]  (Linear) — or per channel: y[N, K, PQ] += bias[K] (Conv).
using BiasRowsFn = void (*)(float* y, const float* bias, int rows, int cols);
using BiasChannelsFn = void (*)(float* y, const float* bias, int N, int K, int PQ);

// Geometry of a stride-1 convolution of one sample and one group over an input that is already
// zero-padded: xp[C, Hp, Wp] with Hp >= P + R - 1 and Wp >= Q + S - 1; w[K, C, R, S]; y[K, P, Q].
struct ConvS1 {
  int C, K, Hp, Wp, R, S, P, Q;
};
// A direct kernel's weights packed once (conv_s1_fwd_pack, conv_s1_relu_pool_pack): dst = w[K, C,
// R, S] and b[K] (may be null) in the kernel's own layout; returns the floats (dst null: only the
// count), 0 where the kernel reads w and b as stored (the reference, shapes it does not tile).
using ConvS1PackFn = size_t (*)(float* dst, const float* w, const float* b, const ConvS1& d);
// The fast tables' conv_s1_fwd takes its channel-last kernel (the weights transposed into a tile,
// per call or packed once) for a short reduction and at most 64 channels and 64 columns.
inline bool conv_s1_cl_fits(const ConvS1& d) { return d.C * d.R * d.S <= 80 && d.K <= 64 && d.Q <= 64; }
// y[k,p,q] = b[k] + sum_{c,r,s} w[k,c,r,s] * xp[c, p+r, q+s]  (b may be null). wpk: w and b as
// Kernels::conv_s1_fwd_pack wrote them (a plan's, once per parameter change), or null.
using ConvS1FwdFn = void (*)(float* y, const float* xp, const float* w, const float* b,
                             const ConvS1& d, const float* wpk);
// dw[k,c,r,s] += sum_{p,q} dy[k,p,q] * xp[c, p+r, q+s];  db[k] += sum_{p,q} dy[k,p,q] (db may be null).
using ConvS1WgradFn = void (*)(float* dw, float* db, const float* dy, const float* xp,
                               const ConvS1& d);
// Fused ReLU + 2x2 stride-2 max-pool of one sample: y[K, P/2, Q/2] = max over each window of
// max(x[K, P, Q], 0); code[K, P/2, Q/2] = the window position (0..3, row-major, first maximum) of
// the maximum, or -1 when it is <= 0 (then no gradient flows).
using ReluMaxpool2Fn = void (*)(float* y, int32_t* code, const float* x, int K, int P, int Q);
// Its adjoint: dx[K, P, Q] = dy[K, P/2, Q/2] at the coded positions, 0 elsewhere (overwrites dx).
using ReluMaxpool2BwdFn = void (*)(float* dx, const float* dy, const int32_t* code, int K, int P,
                                   int Q);

// Conv (as ConvS1FwdFn) + ReLU + 2x2 max-pool in one pass, the conv output never stored:
// y[K, P/2, Q/2] as ReluMaxpool2Fn computes it from y[K, P, Q] (rows and columns past 2*(P/2),
// 2*(Q/2) are not computed), and the window codes (int8: 0..3, or -1: no gradient) channel-last,
// code[P/2 * Q/2, K], the layout the weight gradient reads. ws: conv_relu_pool_scratch(d) floats.
// wpk: w and b as the same kernel's pack entry wrote them (a plan's, once per parameter change),
// or null: the kernel arranges them in ws itself on each call.
using ConvS1ReluPoolFn = void (*)(float* y, int8_t* code, const float* xp, const float* w,
                                  const float* b, const ConvS1& d, float* ws, const float* wpk);
size_t conv_relu_pool_scratch(const ConvS1& d);

// The background windows of that fused conv + ReLU + pool (ops::Background), in two calls. With
// xp: mask[i * Q/2 + j] = 1 for each pooled window (i, j) whose input patch (padded rows 2i ..
// 2i+R, columns 2j .. 2j+S) is zero in every channel, 0 elsewhere; returns how many it marked
// (needs Hp, Wp <= 64 and R, S <= 32). With y (and code): where mask is set, y[k, i, j] = 0 and
// the codes -1; y and the codes elsewhere are left as they are. Either may be null.
using ConvPoolBackgroundFn = int (*)(float* mask, float* y, int8_t* code, const float* xp,
                                     const ConvS1& d);

// Weight and bias gradients of that fused conv + ReLU + pool, from the pooled gradient
// dy[K, P/2, Q/2] and the codes [P/2 * Q/2, K]: dw[K, C, R, S] += sum_{p,q} dout[k,p,q] *
// xp[c, p+r, q+s] and db[K] += sum dout (db may be null), where dout[K, P, Q] holds dy at each
// window's coded position and 0 elsewhere. ws: conv_pool_wgrad_scratch(d) floats of scratch.
using ConvS1PoolWgradFn = void (*)(float* dw, float* db, const float* dy, const int8_t* code,
                                   const float* xp, const ConvS1& d, float* ws);
size_t conv_pool_wgrad_scratch(const ConvS1& d);

// A batch-1 Linear forward over the weight stored transposed, wt[C, ldw >= K] (wt[c, k] = the
// PyTorch-layout w[k, c]), skipping zero inputs: y[k] = acc_k (+ b[k] when b is not null), where
// acc_k = 0 then, for c ascending with x[c] != 0 (NaN counts as non-zero), acc_k = fma(x[c],
// wt[c, k], acc_k). Only the rows of wt that non-zero inputs select are read: after ReLU and
// max-pool most inputs are zero. Every ISA computes the same bits.
using LinearT1Fn = void (*)(float* y, const float* x, const float* wt, size_t ldw, const float* b,
                            int C, int K);

// Sparse-input Linear, one column range [c0, c1) of the input x[N, ldx] (ReLU and max-pool outputs
// are mostly zero: each kernel does work only for the non-zero x[n, c]; NaN counts as non-zero).
// Weights in PyTorch's layout w[K, ldw]. Each sum is an fma chain started at 0 in the order given,
// so the forward and the weight gradient are the same bits on every ISA.
// Forward: y[n, k] = sum over c ascending with x[n, c] != 0 of x[n, c] * w[k, c] (y[N, K],
// overwritten), and wt[c - c0, k] = w[k, c] (wt[c1 - c0, K]: the transposed range, kept for the
// input gradient). With wt null, w is that transposed range already (w[c - c0, ldw >= K]: a
// frozen plan's copy) and is only read. An input that is exactly 0 contributes nothing, even
// against an Inf weight.
using LinearSpFwdFn = void (*)(float* y, float* wt, const float* x, size_t ldx, const float* w,
                               size_t ldw, int N, int K, int c0, int c1);
// Weight gradient: dw[k, c] = sum over n ascending with x[n, c] != 0 of x[n, c] * dy[n, k], for
// c in [c0, c1) and every k (dw[K, ldw], dy[N, K]; columns with no non-zero input get 0).
using LinearSpWgradFn = void (*)(float* dw, size_t ldw, const float* dy, const float* x,
                                 size_t ldx, int N, int K, int c0, int c1);
// Input gradient where the input is non-zero: dx[n, c] = sum_k dy[n, k] * wt[c - c0, k] when
// x[n, c] != 0, else 0 (dx has x's layout [N, ldx]). For a layer whose input gradient is unused
// wherever its input is 0 (after ReLU). Summation order is the kernel's (not bit-exact).
using LinearSpDgradFn = void (*)(float* dx, const float* dy, const float* x, size_t ldx,
                                 const float* wt, int N, int K, int c0, int c1);
// How many x[n, c] != 0 for n < N and c in [c0, c1) (NaN counts).
using CountNonzeroFn = size_t (*)(const float* x, size_t ldx, int N, int c0, int c1);

// The background of a flattened [C, P] input x[N, C*P] (ops::Background): channel c holds v[c]
// wherever a mask marks the position p. These fold it through a Linear's weight w[K, ldw >= C*P];
// channels with v[c] == 0 are skipped. Summation orders are the kernels' (not bit-exact).
// out[k, p] = sum over c with v[c] != 0 of v[c] * w[k, c*P + p] (out[K, P]; 0 where none).
using ChannelSumFn = void (*)(float* out, const float* w, size_t ldw, const float* v, int C, int P,
                              int K);
// dw[k, c*P + p] += v[c] * u[k, p] for every c with v[c] != 0 (u[K, P], dw[K, ldw]).
using ChannelAxpyFn = void (*)(float* dw, size_t ldw, const float* u, const float* v, int C, int P,
                               int K);
// out[c] = sum over k, p of w[k, c*P + p] * u[k, p] for c in [c0, c1) with v[c] != 0, else 0.
using ChannelDotFn = void (*)(float* out, const float* w, size_t ldw, const float* u, const float* v,
                              int P, int K, int c0, int c1);

// Adam / AdamW over n elements: g' = g + l2 * w; w *= 1 - lr * wd; m = b1 m + (1 - b1) g';
// v = b2 v + (1 - b2) g'^2; w -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps).
// Returns how many g[i] are NaN or Inf (read anyway: the check costs no memory traffic).
struct AdamArgs {
  float lr, beta1, beta2, eps, l2, wd, bias1, bias2;  // bias_i = 1 - beta_i^t
};
using AdamFn = size_t (*)(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a);
// The same update, also writing the new weights' bf16 copy wh[i] = f32_to_bf16(w[i]) in the same
// pass (bf16 training: the matrix products read wh; w, m, v stay the fp32 masters).
using AdamBf16Fn = size_t (*)(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a,
                              uint16_t* wh);

// dst[c * ldd + r] = src[r * lds + c] for a [rows, cols] matrix: a channel-last plan's per-sample
// [H*W, C] <-> [C, H*W] (ops/conv_nhwc.h). W x W register blocks.
using TransposeFn = void (*)(float* dst, size_t ldd, const float* src, size_t lds, int rows, int cols);

// The number of non-finite values (NaN, +-Inf) among x[0..n).
using CountNonfiniteFn = size_t (*)(const float* x, size_t n);

// Benchmark kernel: `iters` rounds of independent FMAs on vector registers (the machine's FMA
// peak for this ISA); returns the floating-point operations done and writes a result to *sink.
using FmaLoopFn = double (*)(int64_t iters, float* sink);

struct Kernels {
  Isa isa;
  SgemmFn sgemm;
  PackBFn pack_b;
  SgemmPackedBFn sgemm_packed_b;
  PackAFn pack_a;
  SgemmPackedAFn sgemm_packed_a;
  int gemm_nr;           // the packed B's panel width (column splits of sgemm_packed_b align to it)
  int gemm_mr;           // the packed A's panel height (row splits of sgemm_packed_a align to it)
  int gemm_stream_rows;  // sgemm streams op(B) in place, packing nothing, for M <= this (0: never)
  int gemm_direct_a_cols;  // sgemm reads op(A) = A in place, unpacked, for N <= this (0: never)
  int gemm_packs;          // 1 where sgemm packs panels at all (the fast tables), 0 (the scalar reference)
  // bf16: VDPBF16PS (two bf16 products per fp32 lane: twice the fp32 FMA rate) where the CPU has
  // AVX512_BF16 and the table is avx512; elsewhere bf16 blocks converted to fp32 for this table's
  // sgemm. bf16_path names the choice (ember info); bf16_rate: products per fp32 FMA (2 or 1).
  SbgemmFn sbgemm;
  // The same products from fp32 operands rounded to bf16 (nearest even) as the kernel packs them:
  // equal to sbgemm on cvt_f32_bf16 copies of A and B, without the copies. A bf16 plan's GEMMs.
  SgemmFn sgemm_bf16;
  GemmBf16MixedFn gemm_bf16_mixed;
  // y[n, k] (row stride ldy) = sum over c of bf16(x[n, c]) * wh[k, c] (x fp32, row stride ldx;
  // wh the bf16 weight copy [K, C], row stride ldw): a small batch's Linear reading the weights in
  // place instead of packing them. VDPBF16PS; null where the table has none (then the GEMM).
  GemvBf16Fn gemv_bf16;
  CvtF32Bf16Fn cvt_f32_bf16;
  CvtBf16F32Fn cvt_bf16_f32;
  // A bf16 inference plan's weights, packed once (GemmBf16PackedBFn above); null on the scalar
  // table, whose GEMM reads its operands in place. bf16_nr / bf16_mr: their panels' width and height.
  PackBFn pack_b_bf16;
  GemmBf16PackedBFn gemm_bf16_packed_b;
  PackAFn pack_a_bf16;
  GemmBf16PackedAFn gemm_bf16_packed_a;
  int bf16_nr, bf16_mr;
  const char* bf16_path;
  int bf16_rate;
  Im2colFn im2col;
  Col2imFn col2im;
  BiasRowsFn bias_rows;
  BiasChannelsFn bias_channels;
  ConvS1FwdFn conv_s1_fwd;
  ConvS1PackFn conv_s1_fwd_pack;
  DwFwdFn dw_fwd;
  DwBwdFn dw_bwd;
  // The same with bf16 products (x, w and dy rounded to bf16, nearest even; sums in fp32): a bf16
  // plan's depthwise. VDPBF16PS on two taps per lane with AVX512_BF16, the loops above on rounded
  // copies elsewhere; equal to the fp32 kernels on rounded inputs within fp32 rounding of the sums.
  DwFwdFn dw_fwd_bf16;
  DwBwdFn dw_bwd_bf16;
  DwNhwcFwdFn dw_nhwc_fwd;
  DwNhwcBwdFn dw_nhwc_bwd;
  // Every activation, by ActId: the set's vector form, or the formula where it has none.
  ActFwdFn act_fwd[kActs];
  ActBwdFn act_bwd[kActs];
  LnRowsFwdFn ln_fwd;
  LnRowsBwdFn ln_bwd;
  Ln2dFwdFn ln2d_fwd;
  Ln2dBwdFn ln2d_bwd;
  ConvS1WgradFn conv_s1_wgrad;
  MaxPoolFwdFn maxpool_fwd;
  ReluMaxpool2Fn relu_maxpool2;
  ReluMaxpool2BwdFn relu_maxpool2_bwd;
  ConvS1ReluPoolFn conv_s1_relu_pool;
  ConvS1PackFn conv_s1_relu_pool_pack;
  // The same with bf16 products (xp and w rounded to bf16, sums in fp32): VDPBF16PS with AVX512_BF16;
  // null elsewhere, where the op rounds its padded input and weights and runs conv_s1_relu_pool.
  ConvS1ReluPoolFn conv_s1_relu_pool_bf16;
  ConvS1PackFn conv_s1_relu_pool_bf16_pack;
  ConvS1PoolWgradFn conv_s1_pool_wgrad;
  ConvPoolBackgroundFn conv_pool_background;
  LinearT1Fn linear_t1;
  LinearSpFwdFn linear_sp_fwd;
  LinearSpWgradFn linear_sp_wgrad;
  LinearSpDgradFn linear_sp_dgrad;
  CountNonzeroFn count_nonzero;
  // The largest share of non-zero inputs at which a column range runs the sparse kernels (forward,
  // weight gradient and, where the layer before ignores it at zeros, input gradient) rather than
  // the dense GEMM (measured per ISA: bench_kernels' linear_sp rows against the GEMM; 0: never).
  float linear_sp_max_density;
  ChannelSumFn channel_sum;
  ChannelAxpyFn channel_axpy;
  ChannelDotFn channel_dot;
  AdamFn adam;
  AdamBf16Fn adam_bf16;
  TransposeFn transpose;
  CountNonfiniteFn count_nonfinite;
  // Non-zero values of magnitude below 2^-126 (fp32 subnormals): what rounding to bf16 flushes to
  // a zero (kernels/bf16.h). A bf16 plan's flush count (Plan::flush_count).
  CountNonfiniteFn count_subnormal;
  FmaLoopFn fma_loop;
};

// A set's bf16 products and conversions, set together (each table's one line).
struct Bf16Entries {
  SbgemmFn sbgemm;
  SgemmFn sgemm_bf16;
  GemmBf16MixedFn gemm_bf16_mixed;
  CvtF32Bf16Fn cvt_f32_bf16;
  CvtBf16F32Fn cvt_bf16_f32;
  const char* path;
  int rate;
};
// The packed-weight bf16 GEMMs and their panel shape (each fast table's one line; scalar: none).
struct Bf16PackedEntries {
  PackBFn pack_b;
  GemmBf16PackedBFn gemm_packed_b;
  PackAFn pack_a;
  GemmBf16PackedAFn gemm_packed_a;
  int nr, mr;
};
inline void set_bf16_packed_entries(Kernels& k, const Bf16PackedEntries& b) {
  k.pack_b_bf16 = b.pack_b;
  k.gemm_bf16_packed_b = b.gemm_packed_b;
  k.pack_a_bf16 = b.pack_a;
  k.gemm_bf16_packed_a = b.gemm_packed_a;
  k.bf16_nr = b.nr;
  k.bf16_mr = b.mr;
}
inline void set_bf16_entries(Kernels& k, const Bf16Entries& b) {
  k.sbgemm = b.sbgemm;
  k.sgemm_bf16 = b.sgemm_bf16;
  k.gemm_bf16_mixed = b.gemm_bf16_mixed;
  k.cvt_f32_bf16 = b.cvt_f32_bf16;
  k.cvt_bf16_f32 = b.cvt_bf16_f32;
  k.bf16_path = b.path;
  k.bf16_rate = b.rate;
}

// The table for an ISA (static, immutable). The ISA must be supported by the CPU.
const Kernels& kernels_for(Isa isa);

// What each function entry of Kernels runs on each kernel set: by_set[scalar, avx2, avx512, amx] is
// the set's own code ("avx2", "avx512"), "avx512_bf16" (VDPBF16PS: only with AVX512_BF16),
// "amx_bf16" (TDPBF16PS tiles),
// "reference" (the scalar reference, the fallback of a set without its own), "-" (none: the op
// takes another path) or "?" (a set this CPU lacks: its table is never built). ember info
// --kernels prints them; a test fails where avx512 has its own code and avx2 does not.
struct KernelRow {
  const char* entry;
  const char* by_set[kKernelSets];
};
// The function entries (EMBER_KERNEL_ENTRIES), then each activation's act_fwd.<name>, act_bwd.<name>.
constexpr int kKernelEntries = 55;
constexpr int kKernelRows = kKernelEntries + 2 * kActs;
void kernel_rows(KernelRow (&rows)[kKernelRows]);

// Per-ISA entry points (defined in src/kernels/ref and src/kernels/x86).
void sgemm_ref(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
               int lda, const float* B, int ldb, float beta, float* C, int ldc);
size_t pack_b_ref(bool tb, int K, int N, const float* B, int ldb, float* dst);
void sgemm_packed_b_ref(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                        int j0, float beta, float* C, int ldc);
size_t pack_a_ref(bool ta, int M, int K, const float* A, int lda, float* dst);
void sgemm_packed_a_ref(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                           int ldb, float beta, float* C, int ldc);
size_t pack_a_avx2(bool ta, int M, int K, const float* A, int lda, float* dst);
void sgemm_packed_a_avx2(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                            int ldb, float beta, float* C, int ldc);
size_t pack_a_avx512(bool ta, int M, int K, const float* A, int lda, float* dst);
void sgemm_packed_a_avx512(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                              int ldb, float beta, float* C, int ldc);
size_t pack_b_avx2(bool tb, int K, int N, const float* B, int ldb, float* dst);
void sgemm_packed_b_avx2(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                         int j0, float beta, float* C, int ldc);
size_t pack_b_avx512(bool tb, int K, int N, const float* B, int ldb, float* dst);
void sgemm_packed_b_avx512(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                           int j0, float beta, float* C, int ldc);
void sgemm_avx2(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                int lda, const float* B, int ldb, float beta, float* C, int ldc);
void sgemm_avx512(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc);
// bf16 entry points: the scalar references (sbgemm_ref sums in k order in fp32), the
// converting fallbacks of each table (bf16 -> fp32 blocks, then that table's sgemm), the
// AVX-512F conversions (integer rounding) and the AVX512_BF16 kernels (VDPBF16PS, VCVTNEPS2BF16).
bool cpu_has_avx512_bf16();
void sbgemm_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                const uint16_t* B, int ldb, float beta, float* C, int ldc);
void sbgemm_f32_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, float beta, float* C, int ldc);
void sbgemm_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                     const uint16_t* B, int ldb, float beta, float* C, int ldc);
void sbgemm_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                       const uint16_t* B, int ldb, float beta, float* C, int ldc);
void sbgemm_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda,
                       const uint16_t* B, int ldb, float beta, float* C, int ldc);
void sgemm_bf16_ref(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);
void sgemm_bf16_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                         const float* B, int ldb, float beta, float* C, int ldc);
void sgemm_bf16_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc);
void sgemm_bf16_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc);
void gemm_bf16_mixed_ref(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                         Bf16Operand B, int ldb, float beta, float* C, int ldc);
void gemm_bf16_mixed_f32_avx2(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                              Bf16Operand B, int ldb, float beta, float* C, int ldc);
void gemm_bf16_mixed_f32_avx512(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                                Bf16Operand B, int ldb, float beta, float* C, int ldc);
void gemm_bf16_mixed_avx512bf16(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda,
                                Bf16Operand B, int ldb, float beta, float* C, int ldc);
void cvt_f32_bf16_ref(uint16_t* dst, const float* src, size_t n);
void cvt_bf16_f32_ref(float* dst, const uint16_t* src, size_t n);
void cvt_f32_bf16_avx2(uint16_t* dst, const float* src, size_t n);
void cvt_bf16_f32_avx2(float* dst, const uint16_t* src, size_t n);
void cvt_f32_bf16_avx512(uint16_t* dst, const float* src, size_t n);
void cvt_bf16_f32_avx512(float* dst, const uint16_t* src, size_t n);
void cvt_f32_bf16_avx512bf16(uint16_t* dst, const float* src, size_t n);
void gemv_bf16_avx512bf16(float* y, int ldy, const float* x, int ldx, const uint16_t* wh, int ldw, int N, int C,
                          int K);
// Depthwise with bf16 products: the AVX-512 table's rounding loops (dw_impl.h), and VDPBF16PS
// (7x7, 5x5, 3x3 on planes of 16 pixels or more; the loops elsewhere).
void dw_fwd_bf16_avx512(float* y, const float* x, const float* w, const float* b, const DwShape& d, float* scratch);
void dw_bwd_bf16_avx512(float* dx, float* dw, const float* dy, const float* x, const float* w, const DwShape& d,
                        float* scratch);
void conv_relu_pool_avx512bf16(float* y, int8_t* code, const float* xp, const float* w, const float* b,
                               const ConvS1& d, float* ws, const float* wpk);
size_t conv_relu_pool_pack_avx512bf16(float* dst, const float* w, const float* b, const ConvS1& d);
void dw_fwd_bf16_avx512bf16(float* y, const float* x, const float* w, const float* b, const DwShape& d,
                            float* scratch);
// AMX (x86/sbgemm_amx.cpp): the bf16 GEMMs on TDPBF16PS tiles, and the start-up check that this
// machine keeps tile contents across preemption (some VMs have been reported not to).
void sbgemm_amx(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
                int ldb, float beta, float* C, int ldc);
void sgemm_bf16_amx(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                    int ldb, float beta, float* C, int ldc);
void gemm_bf16_mixed_amx(bool ta, bool tb, int M, int N, int K, float alpha, Bf16Operand A, int lda, Bf16Operand B,
                         int ldb, float beta, float* C, int ldc);
// The packed-weight bf16 GEMMs: the scalar reference (op(B) / op(A) rounded, row-major; the
// plans do not pack on the scalar table) and each fast table's (gemm_bf16_packed.h).
size_t pack_b_bf16_ref(bool tb, int K, int N, const float* B, int ldb, float* dst);
void gemm_bf16_packed_b_ref(bool ta, int M, int n, int K, float alpha, Bf16Operand A, int lda, const float* Bp,
                            int N, int j0, float beta, float* C, int ldc);
size_t pack_a_bf16_ref(bool ta, int M, int K, const float* A, int lda, float* dst);
void gemm_bf16_packed_a_ref(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, Bf16Operand B,
                            int ldb, float beta, float* C, int ldc);
#define EMBER_BF16_PACKED_DECLS(set)                                                                        \
  size_t pack_b_bf16_##set(bool tb, int K, int N, const float* B, int ldb, float* dst);                     \
  void gemm_bf16_packed_b_##set(bool ta, int M, int n, int K, float alpha, Bf16Operand A, int lda,          \
                                const float* Bp, int N, int j0, float beta, float* C, int ldc);             \
  size_t pack_a_bf16_##set(bool ta, int M, int K, const float* A, int lda, float* dst);                     \
  void gemm_bf16_packed_a_##set(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0,  \
                                Bf16Operand B, int ldb, float beta, float* C, int ldc);
EMBER_BF16_PACKED_DECLS(avx2)
EMBER_BF16_PACKED_DECLS(avx512)
EMBER_BF16_PACKED_DECLS(avx512bf16)
EMBER_BF16_PACKED_DECLS(amx)
#undef EMBER_BF16_PACKED_DECLS
bool amx_tiles_hold_state();
// The tile peak's loop (FmaLoopFn): register-only TDPBF16PS on 2x2 accumulator tiles.
double amx_loop(int64_t iters, float* sink);
void dw_bwd_bf16_avx512bf16(float* dx, float* dw, const float* dy, const float* x, const float* w,
                            const DwShape& d, float* scratch);

// The kernel table of one fast set: every entry it has code for, null in the entries its list in
// kernel_entries.h leaves to the scalar reference (kernels_for fills those) or to none.
Kernels fast_kernels_avx2();
Kernels fast_kernels_avx512();

}  // namespace ember
