// The layer implementations: Conv2d, Linear, MaxPool2d, AvgPool2d, Flatten, Softmax, the graph's
// Add and Concat, and the fused Conv2d -> ReLU -> MaxPool2d unit (the activations' layers are their
// op files', src/nn/ops/). Shape inference messages say what was expected and what was found;
// the plan prefixes them with the model file and the layer index.
#include "nn/layers.h"
#include "nn/op_table.h"

#include <cstdint>
#include <string>

#include "ember/error.h"
#include "ops/conv_desc.h"
#include "ops/conv_nhwc.h"

namespace ember::nn {

namespace {


std::string dims_str(const Dims& d) {
  return d.flat() ? "[" + std::to_string(d.c) + "]"
                  : "[" + std::to_string(d.c) + ", " + std::to_string(d.h) + ", " + std::to_string(d.w) + "]";
}

// The kernels index per-sample buffers with int: every such size must stay below 2^31.
constexpr int64_t kMaxIndex = INT32_MAX;

// Throws unless v (computed in 64 bits) fits the kernels' int indexing.
void check_index(const char* layer, const char* what, int64_t v) {
  if (v > kMaxIndex)
    throw Error(std::string(layer) + ": " + what + " " + std::to_string(v) + " is more than " +
                std::to_string(kMaxIndex) + " (too large)");
}

// The padding after (bottom, right): a pool's padding_end, else the padding before.
int pad_after_h(const LayerSpec& s) { return s.pad_h_end < 0 ? s.pad_h : s.pad_h_end; }
int pad_after_w(const LayerSpec& s) { return s.pad_w_end < 0 ? s.pad_w : s.pad_w_end; }

// Output size of a window sliding over `in` (PyTorch's floor formula), computed in 64 bits.
int64_t out_size64(int in, int k, int stride, int pad) {
  return (int64_t{in} + 2 * int64_t{pad} - k) / stride + 1;
}
int out_size(int in, int k, int stride, int pad) { return int(out_size64(in, k, stride, pad)); }

void check_window(const char* what, const Dims& in, const LayerSpec& s) {
  // A flat [D] is a [D, 1, 1] image: a window fits it only through padding (a 'same' 7x7 conv at
  // a stage of 1x1, as convnext-fashion's last).
  if (in.flat() && in.c > 0 && (1 + 2 * s.pad_h < s.kernel_h || 1 + 2 * s.pad_w < s.kernel_w))
    throw Error(std::string(what) + " needs an image input [C, H, W], found " + dims_str(in));
  if (s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 || s.pad_h < 0 || s.pad_w < 0)
    throw Error(std::string(what) + ": kernel and stride must be >= 1 and padding >= 0");
  const int64_t hp = int64_t{in.h} + s.pad_h + pad_after_h(s), wp = int64_t{in.w} + s.pad_w + pad_after_w(s);
  if (hp < s.kernel_h || wp < s.kernel_w)
    throw Error(std::string(what) + ": kernel " + std::to_string(s.kernel_h) + "x" +
                std::to_string(s.kernel_w) + " is larger than the padded input " + dims_str(in));
  check_index(what, "padded input size (C x H x W with padding)", int64_t{in.c} * hp * wp);
}

class Conv2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (spec_.same) {  // PyTorch's padding='same': symmetric only for odd kernels at stride 1
      if (spec_.stride_h != 1 || spec_.stride_w != 1 || spec_.kernel_h % 2 == 0 || spec_.kernel_w % 2 == 0)
        throw Error("conv2d: padding \"same\" needs stride 1 and an odd kernel, found kernel " +
                    std::to_string(spec_.kernel_h) + "x" + std::to_string(spec_.kernel_w) + " stride " +
                    std::to_string(spec_.stride_h) + "x" + std::to_string(spec_.stride_w));
      spec_.pad_h = (spec_.kernel_h - 1) / 2;
      spec_.pad_w = (spec_.kernel_w - 1) / 2;
    }
    check_window("conv2d", in, spec_);
    if (spec_.out < 1) throw Error("conv2d: out_channels must be >= 1, found " + std::to_string(spec_.out));
    if (spec_.groups < 1 || in.c % spec_.groups || spec_.out % spec_.groups)
      throw Error("conv2d: groups " + std::to_string(spec_.groups) + " must divide in-channels " +
                  std::to_string(in.c) + " and out_channels " + std::to_string(spec_.out));
    // Fan-in, fan-out, weights and the im2col buffer, in 64 bits before anything uses int.
    const int64_t rs = int64_t{spec_.kernel_h} * spec_.kernel_w;
    const int64_t fan_in = int64_t{in.c / spec_.groups} * rs;
    check_index("conv2d", "fan-in (in-channels / groups x kernel)", fan_in);
    check_index("conv2d", "fan-out (out_channels / groups x kernel)", int64_t{spec_.out / spec_.groups} * rs);
    check_index("conv2d", "weight count (out_channels x fan-in)", int64_t{spec_.out} * fan_in);
    const int64_t P = out_size64(in.h, spec_.kernel_h, spec_.stride_h, spec_.pad_h);
    const int64_t Q = out_size64(in.w, spec_.kernel_w, spec_.stride_w, spec_.pad_w);
    check_index("conv2d", "output size (out_channels x H x W)", int64_t{spec_.out} * P * Q);
    check_index("conv2d", "im2col buffer (fan-in x output H x W)", fan_in * P * Q);
    in_ = in;
    out_ = {spec_.out, int(P), int(Q)};
    return out_;
  }
  ConvShape shape(int n) const {
    return {n, in_.c, in_.h, in_.w, spec_.out, spec_.kernel_h, spec_.kernel_w, out_.h, out_.w,
            spec_.stride_h, spec_.stride_w, spec_.pad_h, spec_.pad_w, spec_.groups};
  }
  std::vector<std::vector<int>> param_shapes() const override {
    std::vector<std::vector<int>> v{{spec_.out, in_.c / spec_.groups, spec_.kernel_h, spec_.kernel_w}};
    if (spec_.bias) v.push_back({spec_.out});
    return v;
  }
  int fan_in() const override { return in_.c / spec_.groups * spec_.kernel_h * spec_.kernel_w; }
  int fan_out() const override { return spec_.out / spec_.groups * spec_.kernel_h * spec_.kernel_w; }
  // The descriptor for the plan's batch, layout and threads (ops::conv2d_desc); a layer run
  // outside a plan chooses for each call's batch.
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override {
    desc_ = ops::conv2d_desc(shape(batch), nhwc(), threads, pack ? *pack : kernels_for(Isa::scalar), pack != nullptr, bf16);
    planned_ = true;
  }
  std::string algorithm() const override { return ops::conv_algo_name(desc(1).algo); }
  std::string weight_format() const override {  // a bf16 plan's packed panels: "bf16-gemm-a-panels", ...
    const ops::ConvDesc d = desc(1);
    return std::string(d.bf16_weights ? "bf16-" : "") + ops::weight_format_name(d.weight_format);
  }
  std::vector<std::string> post_ops() const override {
    return spec_.bias ? std::vector<std::string>{"bias"} : std::vector<std::string>{};
  }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return ops::conv2d_weight_bytes_per_call(desc(batch), shape(batch), k, bf16, threads, spec_.bias);
  }
  size_t workspace_elems(int batch, int threads) const override {
    return planned_ ? desc_.workspace : ops::conv2d_desc(shape(batch), nhwc(), threads, kernels_for(Isa::scalar), false).workspace;
  }
  // The packed weight (f32 plans), 64-byte aligned in the arena.
  size_t saved_bytes(int, int, DType dt) const override {
    return dt == DType::f32 && planned_ ? WeightPack::bytes(desc_.packed_elems) : 0;
  }
  std::string saved_what() const override { return "packed weight"; }
  bool takes_post_act() const override {
    return planned_ && desc_.packed_elems && desc_.algo == ops::ConvAlgo::nhwc_gemm;
  }
  // Channel-last: every shape but grouped non-depthwise ones (ops/conv_desc.h).
  bool runs_nhwc() const override { return ops::conv2d_nhwc_algo(shape(1)) != ops::ConvAlgo::none; }
  double flops_per_sample() const override { return 2.0 * fan_in() * out_.size(); }
  bool bf16_products() const override { return desc(1).bf16_products; }
  bool reads_bf16_input() const override { return !nhwc() && desc(1).reads_bf16_input; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const float* wp = nullptr;
      if constexpr (std::is_same_v<T, float>) wp = packed(e, b);
      const ops::ConvAlgo a = algo(e, n);
      if constexpr (std::is_same_v<T, float>)
        if (b.post_act && wp && a == ops::ConvAlgo::nhwc_gemm)  // the activation in the GEMM's store
          return ops::linear_fwd_packed(e, p<T>(b.y), {p<T>(b.x)}, wp, p<T>(b.b), n * in_.h * in_.w, in_.c, spec_.out,
                                        b.post_act);
      if (nhwc()) return ops::conv2d_nhwc_fwd<T>(e, a, p<T>(b.y), p<T>(b.x), p<T>(b.w), p<T>(b.b), shape(n), p<T>(b.ws), wp);
      ops::conv2d_fwd<T>(e, a, p<T>(b.y), p<T>(b.x), p<T>(b.w), p<T>(b.b), shape(n), p<T>(b.ws), b.wh, b.xh, wp);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (nhwc())
        return ops::conv2d_nhwc_bwd<T>(e, algo(e, n), p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x),
                                       p<T>(b.w), shape(n), p<T>(b.ws));
      ops::conv2d_bwd<T>(e, algo(e, n), p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), p<T>(b.w),
                         shape(n), p<T>(b.ws), b.wh, b.xh);
    });
  }

 private:
  ops::ConvDesc desc(int batch) const {
    return planned_ ? desc_ : ops::conv2d_desc(shape(batch), nhwc(), 1, kernels_for(Isa::scalar), false);
  }
  ops::ConvAlgo algo(const ops::Exec& e, int n) const {
    return planned_ ? desc_.algo : ops::conv2d_desc(shape(n), nhwc(), e.pool.size(), e.k, false).algo;
  }
  // The weight in the descriptor's packed format, made again when the parameters moved (or the
  // weight is another copy: a fold), or null where the descriptor reads it as stored.
  const float* packed(const ops::Exec& e, const Bufs& b) {
    if (!planned_ || !desc_.packed_elems || !b.saved) return nullptr;
    return pack_.get(b, [&](float* wp) { ops::conv2d_pack(e.k, desc_, wp, p<float>(b.w), p<float>(b.b), shape(b.batch), p<float>(b.ws)); });
  }
  ops::ConvDesc desc_;
  bool planned_ = false;
  WeightPack pack_;
};

class Linear final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (!in.flat())
      throw Error("linear needs a flat input [D] (add a flatten layer), found " + dims_str(in));
    if (spec_.out < 1) throw Error("linear: out_features must be >= 1, found " + std::to_string(spec_.out));
    check_index("linear", "weight count (out_features x in-features)", int64_t{spec_.out} * in.c);
    in_ = in;
    out_ = {spec_.out, 1, 1};
    return out_;
  }
  std::vector<std::vector<int>> param_shapes() const override {
    std::vector<std::vector<int>> v{{spec_.out, in_.c}};
    if (spec_.bias) v.push_back({spec_.out});
    return v;
  }
  int fan_in() const override { return in_.c; }
  int fan_out() const override { return spec_.out; }
  double flops_per_sample() const override { return 2.0 * in_.c * spec_.out; }
  bool bf16_products() const override { return true; }
  bool backward_reads_output() const override { return false; }
  size_t workspace_elems(int batch, int threads) const override {
    const size_t t1 = in_.c >= ops::kLinearT1SplitRows ? 2 * size_t(spec_.out) : 0;  // batch 1, frozen
    return std::max(ops::linear_fwd_workspace_upto(batch, in_.c, spec_.out, threads), t1);
  }
  // An inference plan's Linear (pack) reads its weight packed once per parameter change (the
  // GEMM's op(B) = w^T panels; bf16 ones in a bf16 plan) instead of the sparse-input state of a
  // training plan's; a bf16 plan's small batch reads the bf16 copy in place instead (gemv_bf16).
  void choose_algorithm(int batch, int, const Kernels* pack, bool bf16) override {
    const bool gemv = bf16 && pack && pack->gemv_bf16 && batch <= ops::kLinearGemvRows;
    bf16_pack_ = bf16;
    packed_elems_ = pack && pack->gemm_packs && !gemv ? ops::linear_pack_elems(*pack, in_.c, spec_.out, bf16) : 0;
  }
  std::string algorithm() const override { return packed_elems_ ? "gemm" : "gemm, sparse-input"; }
  std::string weight_format() const override {
    return packed_elems_ ? (bf16_pack_ ? "bf16-gemm-b-panels" : "gemm-b-panels") : "kc";
  }
  std::vector<std::string> post_ops() const override {
    return spec_.bias ? std::vector<std::string>{"bias"} : std::vector<std::string>{};
  }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return packed_elems_ ? 0 : ops::linear_weight_bytes_per_call(k, batch, in_.c, spec_.out, threads, bf16, spec_.bias);
  }
  std::string saved_what() const override { return packed_elems_ ? "packed weight" : "sparse-input state"; }
  size_t saved_bytes(int batch, int threads, DType dt) const override {
    if (dt != DType::f32) return 0;
    return packed_elems_ ? WeightPack::bytes(packed_elems_)
                         : ops::linear_sp_saved_bytes(batch, in_.c, spec_.out, threads);
  }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    // bf16 plans run every Linear as the bf16 GEMM: the sparse-input and frozen batch-1 kernels are fp32
    if (b.wt && n == 1 && b.dt == DType::f32 && !e.bf16) {  // frozen: read only the rows non-zero inputs select
      ops::linear_fwd_t1(e, p<float>(b.y), p<float>(b.x), b.wt, p<float>(b.b), in_.c, spec_.out, p<float>(b.ws));
      return;
    }
    if (packed_elems_ && b.saved && b.dt == DType::f32 && e.bf16 == bf16_pack_) {
      const float* wp = pack_.get(b, [&](float* to) { ops::linear_pack(e.k, to, p<float>(b.w), in_.c, spec_.out, bf16_pack_); });
      ops::linear_fwd_packed(e, p<float>(b.y), {p<float>(b.x)}, wp, p<float>(b.b), n, in_.c, spec_.out);
      if (b.bg) ops::linear_bg_fwd(e, p<float>(b.y), *b.bg, p<float>(b.w), n, spec_.out);
      return;
    }
    if (b.saved && !e.bf16) {  // f32, large enough: sparse where the input is mostly zero
      ops::linear_fwd_sp(e, p<float>(b.y), b.saved, p<float>(b.x), p<float>(b.w), p<float>(b.b), n,
                         in_.c, spec_.out, p<float>(b.ws), b.wt);
      if (b.bg) ops::linear_bg_fwd(e, p<float>(b.y), *b.bg, p<float>(b.w), n, spec_.out);
      return;
    }
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::linear_fwd<T>(e, p<T>(b.y), p<T>(b.x), p<T>(b.w), p<T>(b.b), n, in_.c, spec_.out, p<T>(b.ws), b.wh);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (b.saved && !e.bf16 && !packed_elems_) {
      ops::linear_bwd_sp(e, p<float>(b.dx), p<float>(b.dw), p<float>(b.db), p<float>(b.dy),
                         p<float>(b.x), p<float>(b.w), b.saved, b.dx_unused_at_zero, n, in_.c, spec_.out);
      if (b.bg) ops::linear_bg_bwd(e, p<float>(b.dw), *b.bg, p<float>(b.dy), p<float>(b.w), n, spec_.out);
      return;
    }
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::linear_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), p<T>(b.w),
                         n, in_.c, spec_.out, b.wh);
    });
  }

 private:
  size_t packed_elems_ = 0;  // floats of the packed weight (an inference plan's), 0: none
  bool bf16_pack_ = false;   // ... in the bf16 panels (a bf16 plan's)
  WeightPack pack_;
};

// Linear over the channels at each position (torchvision's channels-last Linear): a 1x1
// convolution whose weight keeps PyTorch's Linear layout [K, C] (the same memory).
class ChannelLinear final : public Layer {
 public:
  explicit ChannelLinear(const LayerSpec& s) : Layer(s), conv_(as_conv(s)) {}
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = conv_.infer(in);
  }
  std::vector<std::vector<int>> param_shapes() const override {
    std::vector<std::vector<int>> v{{spec_.out, in_.c}};
    if (spec_.bias) v.push_back({spec_.out});
    return v;
  }
  int fan_in() const override { return conv_.fan_in(); }
  int fan_out() const override { return conv_.fan_out(); }
  size_t workspace_elems(int batch, int threads) const override { return conv_.workspace_elems(batch, threads); }
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override { conv_.choose_algorithm(batch, threads, pack, bf16); }
  std::string algorithm() const override { return conv_.algorithm(); }
  std::string weight_format() const override { return conv_.weight_format(); }
  std::vector<std::string> post_ops() const override { return conv_.post_ops(); }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return conv_.weight_bytes_packed_per_call(batch, threads, k, bf16);
  }
  size_t saved_bytes(int batch, int threads, DType dt) const override { return conv_.saved_bytes(batch, threads, dt); }
  std::string saved_what() const override { return conv_.saved_what(); }
  bool takes_post_act() const override { return conv_.takes_post_act(); }
  bool runs_nhwc() const override { return conv_.runs_nhwc(); }  // a GEMM over batch x pixels
  void set_layout(Layout l) override {
    layout_ = l;
    conv_.set_layout(l);
  }
  double flops_per_sample() const override { return conv_.flops_per_sample(); }
  bool bf16_products() const override { return true; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override { conv_.forward(e, b, n); }
  void backward(const ops::Exec& e, const Bufs& b, int n) override { conv_.backward(e, b, n); }

 private:
  static LayerSpec as_conv(LayerSpec s) {
    s.kind = LayerKind::Conv2d;
    s.kernel_h = s.kernel_w = 1;
    return s;
  }
  Conv2d conv_;
};

class Pool2d final : public Layer {
 public:
  Pool2d(const LayerSpec& s, bool max) : Layer(s), max_(max) {}
  Dims infer(const Dims& in) override {
    const char* what = max_ ? "maxpool2d" : "avgpool2d";
    check_window(what, in, spec_);
    const int eh = pad_after_h(spec_), ew = pad_after_w(spec_);
    // Every window holds an input position: each padding below the kernel (PyTorch: at most half).
    if (std::max(spec_.pad_h, eh) >= spec_.kernel_h || std::max(spec_.pad_w, ew) >= spec_.kernel_w || eh < 0 || ew < 0)
      throw Error(std::string(what) + ": padding (before and after) must be less than the kernel");
    in_ = in;
    out_ = {in.c, int((int64_t{in.h} + spec_.pad_h + eh - spec_.kernel_h) / spec_.stride_h + 1),
            int((int64_t{in.w} + spec_.pad_w + ew - spec_.kernel_w) / spec_.stride_w + 1)};
    return out_;
  }
  ref::PoolShape shape(int n) const {
    return {n, in_.c, in_.h, in_.w, out_.h, out_.w, spec_.kernel_h, spec_.kernel_w,
            spec_.stride_h, spec_.stride_w, spec_.pad_h, spec_.pad_w, max_ || spec_.count_include_pad};
  }
  size_t index_elems(int batch) const override { return max_ ? size_t(batch) * out_.size() : 0; }
  // A max of 0 routes its gradient to an input that is 0 (padding never wins).
  bool grad_unused_at_zero_output(bool in) const override { return max_ && in; }
  bool backward_reads_inputs() const override { return false; }  // max: the saved indices
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return max_; }  // max: channel-last loops over windows of C runs
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (max_) ops::maxpool2d_fwd<T>(e, p<T>(b.y), b.idx, p<T>(b.x), shape(n), nhwc());
      else ops::avgpool2d_fwd<T>(e, p<T>(b.y), p<T>(b.x), shape(n));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (max_) ops::maxpool2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), b.idx, shape(n), nhwc());
      else ops::avgpool2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), shape(n));
    });
  }

 private:
  bool max_;
};

class Flatten final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    out_ = {int(in.size()), 1, 1};
    return out_;
  }
  bool aliases_input() const override { return true; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool grad_unused_at_zero_output(bool in) const override { return in; }
  void forward(const ops::Exec&, const Bufs&, int) override {}
  // The output's storage is the input's; the gradient's too unless the input has other readers
  // (then the plan gives it its own buffer and this copies).
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx || b.dx == b.dy) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::copy_or_add<T>(e, p<T>(b.dx), p<T>(b.dy), size_t(n) * in_.size(), false);
    });
  }
};

// Residual sum of 2 to 8 inputs of one shape: y = x0 + x1 + ...; each input's gradient is dy.
class Add final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return infer_inputs({in}); }
  Dims infer_inputs(const std::vector<Dims>& in) override {
    for (const Dims& d : in)
      if (d.c != in[0].c || d.h != in[0].h || d.w != in[0].w)
        throw Error("add needs inputs of one shape, found " + dims_str(in[0]) + " and " + dims_str(d));
    return in_ = out_ = in[0];
  }
  bool layout_agnostic() const override { return true; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::add_fwd<T>(e, p<T>(b.y), reinterpret_cast<const T* const*>(b.xs), b.nin, size_t(n) * out_.size());
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      for (int j = 0; j < b.nin; ++j)
        if (b.dxs[j]) ops::copy_or_add<T>(e, p<T>(b.dxs[j]), p<T>(b.dy), size_t(n) * out_.size(), false);
    });
  }
};

// Concatenation of 2 to 8 inputs along channels (images of one H x W) or features (flat inputs):
// torch.cat(dim=1).
class Concat final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return infer_inputs({in}); }
  Dims infer_inputs(const std::vector<Dims>& in) override {
    int64_t c = 0;
    sizes_.clear();
    for (const Dims& d : in) {
      if (d.h != in[0].h || d.w != in[0].w)
        throw Error("concat needs inputs of one height and width, found " + dims_str(in[0]) + " and " + dims_str(d));
      c += d.c;
      sizes_.push_back(d.size());
    }
    check_index("concat", "output channels", c);
    in_ = in[0];
    out_ = {int(c), in[0].h, in[0].w};
    return out_;
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::concat_fwd<T>(e, p<T>(b.y), reinterpret_cast<const T* const*>(b.xs), sizes_.data(), b.nin, n);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::concat_bwd<T>(e, reinterpret_cast<T* const*>(b.dxs), p<T>(b.dy), sizes_.data(), b.nin, n);
    });
  }

 private:
  std::vector<size_t> sizes_;  // elements per sample of each input
};

// Conv2d (stride 1) -> ReLU -> MaxPool2d 2x2/2 as one unit (the plan fuses the three model
// layers when it finds them in a row): the conv output and the ReLU output are never stored.
class ConvReluPool final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    conv_out_ = conv_.infer(in);
    in_ = in;
    out_ = {conv_out_.c, conv_out_.h / 2, conv_out_.w / 2};
    return out_;
  }
  std::vector<std::vector<int>> param_shapes() const override { return conv_.param_shapes(); }
  bool grad_unused_at_zero_output(bool) const override { return true; }  // code -1: no gradient
  // bf16 products in forward (Kernels::conv_s1_relu_pool_bf16); the weight gradient from the
  // pooled gradient stays fp32 (C = 1: shape-bound, see docs/bf16.md).
  bool bf16_products() const override { return true; }
  bool bf16_backward_products() const override { return conv_.bf16_products(); }
  int fan_in() const override { return conv_.fan_in(); }
  int fan_out() const override { return conv_.fan_out(); }
  size_t workspace_elems(int batch, int threads) const override {
    return ops::conv_relu_pool_workspace(conv_.shape(batch), threads);
  }
  std::string algorithm() const override { return "conv-relu-pool (fused direct kernels)"; }
  std::string weight_format() const override { return packed_elems_ ? "kernel-tiles" : "kcrs"; }
  std::vector<std::string> post_ops() const override { return {"bias", "relu", "maxpool2d"}; }
  // An inference plan's (pack) fused kernel reads its weights and bias packed once per parameter
  // change in its own layout (Kernels::conv_s1_relu_pool_pack); unpacked, the fast tables' kernels
  // arrange them per sample (the reference reads them as stored).
  void choose_algorithm(int batch, int, const Kernels* pack, bool bf16) override {
    packed_elems_ = pack ? ops::conv_relu_pool_pack_elems(*pack, conv_.shape(batch), bf16) : 0;
  }
  size_t saved_bytes(int, int, DType dt) const override {
    return dt == DType::f32 ? WeightPack::bytes(packed_elems_) : 0;
  }
  std::string saved_what() const override { return "packed weight"; }
  size_t weight_bytes_packed_per_call(int batch, int, const Kernels& k, bool) const override {
    return k.gemm_packs && !packed_elems_ ? size_t(batch) * conv_.fan_in() * spec_.out * sizeof(float) : 0;
  }
  // One int8 window code per pooled value, packed four to an int32 index element.
  size_t index_elems(int batch) const override { return (size_t(batch) * out_.size() + 3) / 4; }
  double flops_per_sample() const override { return conv_.flops_per_sample(); }
  bool backward_reads_output() const override { return false; }  // the window codes
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const float* wpk = nullptr;
      if constexpr (std::is_same_v<T, float>)
        if (packed_elems_ && b.saved)
          wpk = pack_.get(b, [&](float* to) {
            ops::conv_relu_pool_pack(e, to, p<float>(b.w), p<float>(b.b), conv_.shape(b.batch), p<float>(b.ws));
          });
      ops::conv_relu_pool_fwd<T>(e, p<T>(b.y), reinterpret_cast<int8_t*>(b.idx), p<T>(b.x), p<T>(b.w), p<T>(b.b),
                                 conv_.shape(n), p<T>(b.ws), b.bg, !b.frozen, wpk);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::conv_relu_pool_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy),
                                 reinterpret_cast<const int8_t*>(b.idx), p<T>(b.x), p<T>(b.w), conv_.shape(n), p<T>(b.ws));
    });
    if (b.bg && b.db)  // the background windows' bias gradient, from the Linear's backward
      for (int k = 0; k < out_.c; ++k) p<float>(b.db)[k] += b.bg->bias_grad[k];
  }
  // Whether a link (ops::Background) can carry this unit's background: groups 1, a padded input
  // of at most 64 x 64 and a kernel of at most 32 x 32 (the row bit masks), and a bias (without
  // one the background is 0 already).
  bool can_split_background() const override {
    return spec_.groups == 1 && spec_.bias && in_.h + 2 * spec_.pad_h <= 64 && in_.w + 2 * spec_.pad_w <= 64 &&
           spec_.kernel_h <= 32 && spec_.kernel_w <= 32;
  }

 private:
  Conv2d conv_{spec_};
  Dims conv_out_;
  size_t packed_elems_ = 0;  // floats of the packed weights (an inference plan's), 0: none
  WeightPack pack_;
};

// Softmax over the features of a flat input [D].
class Softmax final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (!in.flat()) throw Error("softmax needs a flat input [D], found " + dims_str(in));
    return in_ = out_ = in;
  }
  bool backward_reads_inputs() const override { return false; }
  void forward(const ops::Exec&, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ref::softmax_fwd<T>(p<T>(b.y), p<T>(b.x), n, in_.c);
    });
  }
  void backward(const ops::Exec&, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ref::softmax_bwd<T>(p<T>(b.dx), p<T>(b.dy), p<T>(b.y), n, in_.c);
    });
  }
};

}  // namespace

bool can_fuse_conv_relu_pool(const LayerSpec* l, size_t count, const Dims& in) {
  if (count < 3 || l[0].kind != LayerKind::Conv2d || l[1].kind != LayerKind::ReLU ||
      l[2].kind != LayerKind::MaxPool2d)
    return false;
  const LayerSpec &c = l[0], &m = l[2];
  const int P = out_size(in.h, c.kernel_h, 1, c.pad_h), Q = out_size(in.w, c.kernel_w, 1, c.pad_w);
  return c.stride_h == 1 && c.stride_w == 1 && m.kernel_h == 2 && m.kernel_w == 2 &&
         m.stride_h == 2 && m.stride_w == 2 && m.pad_h == 0 && m.pad_w == 0 && m.pad_h_end <= 0 && m.pad_w_end <= 0 &&
         P >= 2 && Q >= 2;
}

std::unique_ptr<Layer> make_conv_relu_pool(const LayerSpec& conv) {
  return std::make_unique<ConvReluPool>(conv);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& s) {
  if (const auto make = op_desc(s.kind).make) return make(s);  // an op that brings its own layer
  switch (s.kind) {
    case LayerKind::Conv2d: return std::make_unique<Conv2d>(s);
    case LayerKind::Linear:
      if (s.over_channels) return std::make_unique<ChannelLinear>(s);
      return std::make_unique<Linear>(s);
    case LayerKind::MaxPool2d: return std::make_unique<Pool2d>(s, true);
    case LayerKind::AvgPool2d: return std::make_unique<Pool2d>(s, false);
    case LayerKind::Flatten: return std::make_unique<Flatten>(s);
    case LayerKind::Softmax: return std::make_unique<Softmax>(s);
    case LayerKind::Add: return std::make_unique<Add>(s);
    case LayerKind::Concat: return std::make_unique<Concat>(s);
    default: break;
  }
  if (auto l = make_convnext_layer(s)) return l;
  throw Error("unknown layer kind");
}

}  // namespace ember::nn
