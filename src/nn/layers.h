// Layers: what a graph node (or a fused unit of nodes) runs. Each infers its output shape from
// its input shapes (throwing a message on mismatch), declares its parameters and scratch, and runs
// forward and backward on arena buffers through the ops. Per-sample shapes are [C, H, W]; flat is
// [D, 1, 1].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/model.h"
#include "ember/plan.h"
#include "ops/ops.h"

namespace ember::nn {

constexpr int kMaxInputs = ops::kMaxGraphInputs;  // add and concat: 2 to 8 inputs

struct Dims {
  int c = 0, h = 1, w = 1;
  size_t size() const { return size_t(c) * h * w; }
  bool flat() const { return h == 1 && w == 1; }
};

// How a tensor's per-sample elements lie: an image [C, H, W] in channel planes (nchw), an image
// channel-last [H, W, C] (nhwc: issue 41's layout pass, src/nn/layout.cpp), or a vector [D]
// (flat: what a flatten or linear outputs, dims h == w == 1, the same memory in either layout).
enum class Layout { nchw, flat, nhwc };
const char* layout_name(Layout l);  // "nchw", "flat", "nhwc"

// Pointers a layer runs on, resolved by the plan. Elements are float or double (dt).
struct Bufs {
  DType dt;
  int batch;       // the plan's compiled batch (saved state is laid out for it)
  const void* x;   // input  [N, in] (the first input)
  void* y;         // output [N, out]
  void* dx;        // input gradient (the first input's), null when no earlier layer has parameters
  int nin;         // inputs (add, concat: 2..kMaxInputs); xs[0] == x, dxs[0] == dx
  const void* xs[kMaxInputs];
  void* dxs[kMaxInputs];  // each null when not needed
  const void* dy;  // output gradient
  const void* w;   // parameters (weight, then bias), null when none
  const void* b;
  const float* wt; // a frozen f32 plan's Linear weight transposed [in, out] (Plan::freeze), or null
  void* dw;
  void* db;
  const void* w2;  // a fused unit's second node's parameters (LayerNorm -> conv: the conv's), or null
  const void* b2;
  void* dw2;
  void* db2;
  // BatchNorm2d's running statistics (running mean [C], running var [C], num_batches_tracked [1],
  // contiguous in the parameter block), or null: rs reads them; rs_update is the same memory where
  // this forward may update them (a training plan in train mode, not frozen, not
  // first_nonfinite_output's rerun), else null; drs their gradient (written 0: not trained).
  const void* rs;
  void* rs_update;
  void* drs;
  const uint16_t* wh;   // a bf16 plan's copy of w (and of w2) rounded to bf16, or null (Plan: weight copy)
  const uint16_t* wh2;
  const uint16_t* xh;   // the input in bf16 (a bf16 plan's fused LayerNorm -> 1x1 conv), or null;
                        // where set, x is null (reads_bf16_input)
  void* ws;        // shared scratch, workspace_elems() of dt
  int32_t* idx;    // saved indices (max-pool argmax), index_elems()
  void* saved;     // the layer's own state from forward to backward, saved_bytes(), or null
  bool dx_unused_at_zero;  // the layer before ignores dx wherever x == 0 (a ReLU's output)
  const ops::Background* bg;  // f32: the background link of a first conv unit and its Linear, or null
  const ops::Act* post_act;   // an activation the layer applies in its GEMM's store (conv2d+<act>), or null
  const void* post_residual;  // a tensor like y the layer adds before post_act (conv2d+batchnorm2d+add), or null
  bool frozen;                // the plan is frozen (Plan::freeze): the conv unit does not split
  bool train_mode;            // Plan::set_train_mode: stochastic depth draws masks
  uint64_t noise;             // this unit's random stream for this step (seed, optimizer step, unit)
  // Moves with every change of the plan's parameters (init_params, the non-const param_data(), an
  // optimizer step): a layer that keeps a copy derived from its parameters (conv2d+batchnorm2d's
  // fold, a packed weight) makes it again when it moves.
  uint64_t param_version;
};

// Runs f(float{}) or f(double{}) for a plan's element type; p<T> views an arena pointer as T.
template <class F>
void dispatch(DType dt, F&& f) {
  if (dt == DType::f64) f(double{});
  else f(float{});
}
template <class T> T* p(void* v) { return static_cast<T*>(v); }
template <class T> const T* p(const void* v) { return static_cast<const T*>(v); }

// A weight a layer keeps packed in its saved buffer (Layer::choose_algorithm's pack): get() returns it, packing it again (pack(dst)) when the parameters moved
// (Bufs::param_version) or the weight is another copy (a fold's).
class WeightPack {
 public:
  template <class Pack>
  const float* get(const Bufs& b, Pack&& pack) {
    float* wp = static_cast<float*>(b.saved);
    if (version_ != b.param_version || from_ != b.w) {
      pack(wp);
      version_ = b.param_version, from_ = b.w;
    }
    return wp;
  }
  static size_t bytes(size_t floats) { return (floats + 15) / 16 * 16 * sizeof(float); }  // 64-byte steps

 private:
  uint64_t version_ = ~uint64_t(0);
  const void* from_ = nullptr;
};

class Layer {
 public:
  explicit Layer(const LayerSpec& spec) : spec_(spec) {}
  virtual ~Layer() = default;
  const LayerSpec& spec() const { return spec_; }

  // Called once by the plan, in order. Throws std::string-carrying ember::Error on bad shapes.
  virtual Dims infer(const Dims& in) = 0;
  // Several inputs (add, concat override it); the others take exactly one.
  virtual Dims infer_inputs(const std::vector<Dims>& in) {
    if (in.size() != 1) throw Error("expected one input, found " + std::to_string(in.size()));
    return infer(in[0]);
  }
  // Weight [and bias] shapes in PyTorch layout; empty for parameter-free layers.
  virtual std::vector<std::vector<int>> param_shapes() const { return {}; }
  // (Each parameter's name and role: the op table, nn/op_table.h.)
  // Parameter t starts at this constant (LayerNorm: 1 and 0; layer scale: its init value)
  // instead of the model's random initialiser (weights) or zero (biases).
  virtual bool param_constant(size_t t, double* value) const { return false; }
  virtual int fan_in() const { return 0; }
  virtual int fan_out() const { return 0; }
  virtual size_t workspace_elems(int batch, int threads) const { return 0; }
  virtual size_t index_elems(int batch) const { return 0; }
  // Bytes the layer keeps from forward to backward in its own arena buffer (Bufs::saved).
  virtual size_t saved_bytes(int batch, int threads, DType dt) const { return 0; }
  // Whether, wherever this layer's output is 0, the gradient reaching its output is not used:
  // true for ReLU; `in`: the same for this layer's input (a Flatten or max-pool passes it on).
  virtual bool grad_unused_at_zero_output(bool in) const { return false; }
  virtual bool aliases_input() const { return false; }  // output is the input (Flatten)
  // What backward reads besides dy, parameters and its own saved state: its inputs, its output.
  // A training plan keeps an activation only until the last backward that reads it.
  virtual bool backward_reads_inputs() const { return true; }
  virtual bool backward_reads_output() const { return true; }
  // Forward may write its output over its input (elementwise, and backward reads only the
  // output): the plan does so where nothing else reads the input (ReLU after a convolution).
  virtual bool runs_in_place() const { return false; }
  // A fused conv unit whose background windows a link (ops::Background) can carry.
  virtual bool can_split_background() const { return false; }
  virtual double flops_per_sample() const { return 0; }
  // Whether the layer's products multiply bf16 operands in a bf16 plan (the GEMM, Exec::gemm, or
  // the depthwise kernels).
  virtual bool bf16_products() const { return false; }
  // The same for its backward (by default as forward).
  virtual bool bf16_backward_products() const { return bf16_products(); }
  // bf16 activation storage (a bf16 plan's LayerNorm -> 1x1 conv unit, NormConv): whether the
  // layer can take its input as Bufs::xh alone, and write its output in bf16 (forward_bf16: yh
  // instead of b.y; rows: scratch of threads x the output's per-sample size).
  virtual bool reads_bf16_input() const { return false; }
  virtual bool writes_bf16_output() const { return false; }
  virtual void forward_bf16(const ops::Exec& e, const Bufs& b, int n, uint16_t* yh, float* rows) {
    throw Error("internal: forward_bf16 on a layer that does not write bf16");
  }
  // Called by the plan before it sizes buffers: the plan's precision, and whether this unit's
  // backward runs (a layer may then keep more from forward to backward).
  virtual void set_precision(Precision p, bool backward) {}
  // The plan's batch and threads, once, before workspace_elems and saved_bytes: a layer with a
  // choice of algorithm (Conv2d, Linear) makes it here, its descriptor, and every call then runs
  // it. pack: the kernel table when the plan runs in f32: the layer may then pack its weight
  // once per parameter change (Bufs::param_version: an inference plan once, a training plan once
  // per step) into its saved buffer, in the bf16 panels where bf16 (a bf16 plan's products);
  // null: it reads the weight as stored.
  virtual void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) {}
  // The descriptor, for `ember info --model` (--json): the algorithm ("" where there is none),
  // the weight format the calls read ("" without a weight), the post-ops applied in the unit
  // ("bias", "batchnorm2d-fold", an activation, ...), and the weight bytes one call of `batch`
  // samples packs or reorders (0 where the packed weight is read).
  virtual std::string algorithm() const { return {}; }
  virtual std::string weight_format() const { return {}; }
  virtual std::vector<std::string> post_ops() const { return {}; }
  virtual size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const { return 0; }
  // Whether forward applies Bufs::post_act in its GEMM's store (a packed channel-last 1x1 conv).
  virtual bool takes_post_act() const { return false; }
  // The kernel table's activation this layer is (an activation op's, nn/activation.h), or null:
  // what a conv2d+<act> unit applies in its GEMM's store.
  virtual const ops::Act* kernel_act() const { return nullptr; }
  // What the saved buffer (saved_bytes) holds, for the plan's memory report.
  virtual std::string saved_what() const { return "saved state"; }

  // Channel-last (issue 41). The layout pass asks each layer, after infer, whether it runs its
  // images channel-last (runs_nhwc: its op has an NHWC path for these shapes), or runs either
  // layout unchanged (layout_agnostic: elementwise ops, add, stochastic depth); then infer runs
  // again with set_layout called first. A layer that runs nhwc reads and writes its images as
  // [N, H, W, C]; flat tensors are the same in both.
  virtual bool runs_nhwc() const { return false; }
  virtual bool layout_agnostic() const { return false; }
  virtual void set_layout(Layout l) { layout_ = l; }
  Layout layout() const { return layout_; }

  // Element types (an int8 plan's units): of input j and of the output, given the plan's dtype.
  virtual DType input_dtype(int j, DType plan) const { return plan; }
  virtual DType output_dtype(DType plan) const { return plan; }
  // A layer that describes its own unit (an int8 plan's: the model layers it runs, its u8 arithmetic)
  // fills u's name, ops, algorithm, layouts, dtype, weight format and post-ops and returns true; the
  // plan fills the rest. false: the plan describes it from the nodes and the other hooks.
  virtual bool describe_unit(UnitInfo* u) const { return false; }

  virtual void forward(const ops::Exec& e, const Bufs& b, int n) = 0;
  virtual void backward(const ops::Exec& e, const Bufs& b, int n) = 0;

 protected:
  LayerSpec spec_;
  Dims in_, out_;
  Layout layout_ = Layout::nchw;
  bool nhwc() const { return layout_ == Layout::nhwc; }
};

// An op's layer (its descriptor's make, nn/op_table.h); throws for a kind without one.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);
// The descriptor's make of an op whose layer L is built from its spec alone.
template <class L>
std::unique_ptr<Layer> make_as(const LayerSpec& s) {
  return std::make_unique<L>(s);
}

// Shape checks and sizes the layers share (layers.cpp); messages name the layer.
std::string dims_str(const Dims& d);  // "[D]" or "[C, H, W]"
// Throws unless v (computed in 64 bits) fits the kernels' int indexing (below 2^31).
void check_index(const char* layer, const char* what, int64_t v);
// Throws unless a window (kernel, stride, padding of s) fits the input.
void check_window(const char* what, const Dims& in, const LayerSpec& s);
// The padding after (bottom, right): a pool's padding_end, else the padding before.
inline int pad_after_h(const LayerSpec& s) { return s.pad_h_end < 0 ? s.pad_h : s.pad_h_end; }
inline int pad_after_w(const LayerSpec& s) { return s.pad_w_end < 0 ? s.pad_w : s.pad_w_end; }
// Output size of a window sliding over `in` (PyTorch's floor formula), computed in 64 bits.
inline int64_t out_size64(int in, int k, int stride, int pad) { return (int64_t{in} + 2 * int64_t{pad} - k) / stride + 1; }
inline int out_size(int in, int k, int stride, int pad) { return int(out_size64(in, k, stride, pad)); }
// A conv2d's shape for n samples: its spec (padding resolved by infer), input and output dims.
inline ConvShape conv2d_shape(const LayerSpec& s, const Dims& in, const Dims& out, int n) {
  return {n, in.c, in.h, in.w, s.out, s.kernel_h, s.kernel_w, out.h, out.w, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.groups};
}
inline size_t esize(DType dt) { return dt == DType::f64 ? 8 : dt == DType::u8 ? 1 : 4; }  // bytes of an element

// True when l[0..2] are Conv2d (stride 1), ReLU, MaxPool2d (2x2, stride 2, no padding) and the
// conv, fed `in` (already checked by infer), outputs at least 2x2 (conv_relu_pool.cpp).
bool can_fuse_conv_relu_pool(const LayerSpec* l, size_t count, const Dims& in);
// The three as one unit, from the conv's spec.
std::unique_ptr<Layer> make_conv_relu_pool(const LayerSpec& conv);
// True when `norm` is a LayerNorm or LayerNorm2d with an affine transform and `conv` a Conv2d or a
// Linear over channels (norm_conv.cpp).
bool can_fuse_norm_conv(const LayerSpec& norm, const LayerSpec& conv);
// The two as one unit that never stores the normalised tensor (a training plan's fusion): it
// takes over both nodes' layers, already inferred.
std::unique_ptr<Layer> make_norm_conv(std::unique_ptr<Layer> norm, std::unique_ptr<Layer> conv);
// True when `conv` is a Conv2d and `bn` a BatchNorm2d (conv_bn.cpp).
bool can_fuse_conv_bn(const LayerSpec& conv, const LayerSpec& bn);
// The two as one unit of an inference plan: the conv runs once with the eval-mode BN folded into
// its weight and bias (train mode: the two unfolded); it takes over both nodes' layers, inferred.
// residual: an add after the BN (the unit's second input the other addend); act (or null): an
// activation after that (its layer's kernel_act), both the conv's post-ops.
std::unique_ptr<Layer> make_conv_bn(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> bn, bool residual = false,
                                    std::unique_ptr<Layer> act = nullptr);
// True when `conv` is a 1x1 Conv2d (stride 1, no padding, groups 1) that runs channel-last
// (layout) and `act` the layer of an activation of the kernel table (conv_act.cpp).
bool can_fuse_conv_act(const LayerSpec& conv, const Layer& act, Layout layout);
// The two as one unit: one GEMM over the batch's pixels with the bias and the activation applied
// per row chunk; it takes over both nodes' layers, already inferred.
std::unique_ptr<Layer> make_conv_act(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> act);

}  // namespace ember::nn
