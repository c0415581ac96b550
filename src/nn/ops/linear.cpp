// Op "linear": PyTorch's Linear (weight [K, C], bias [K]) over a sample's flattened features, or
// with "over": "channels" over the channels at each position of [C, H, W] (torchvision's
// channels-last Linear in a ConvNeXt block).
#include <algorithm>

#include "fs/json_read.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

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
  // A training plan's Linear keeps its sparse-input kernels (the seed CNN's ReLU-sparse features).
  void set_precision(Precision, bool backward) override { training_ = backward; }
  void choose_algorithm(int batch, int, const Kernels* pack, bool bf16) override {
    if (training_) pack = nullptr;
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
  bool training_ = false;    // its backward runs (set_precision)
  WeightPack pack_;
};

// Linear over the channels at each position (torchvision's channels-last Linear): a 1x1
// convolution whose weight keeps PyTorch's Linear layout [K, C] (the same memory).
class ChannelLinear final : public Layer {
 public:
  explicit ChannelLinear(const LayerSpec& s) : Layer(s), conv_(op_desc(LayerKind::Conv2d).make(as_conv(s))) {}
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = conv_->infer(in);
  }
  std::vector<std::vector<int>> param_shapes() const override {
    std::vector<std::vector<int>> v{{spec_.out, in_.c}};
    if (spec_.bias) v.push_back({spec_.out});
    return v;
  }
  int fan_in() const override { return conv_->fan_in(); }
  int fan_out() const override { return conv_->fan_out(); }
  size_t workspace_elems(int batch, int threads) const override { return conv_->workspace_elems(batch, threads); }
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override { conv_->choose_algorithm(batch, threads, pack, bf16); }
  std::string algorithm() const override { return conv_->algorithm(); }
  std::string weight_format() const override { return conv_->weight_format(); }
  std::vector<std::string> post_ops() const override { return conv_->post_ops(); }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return conv_->weight_bytes_packed_per_call(batch, threads, k, bf16);
  }
  size_t saved_bytes(int batch, int threads, DType dt) const override { return conv_->saved_bytes(batch, threads, dt); }
  std::string saved_what() const override { return conv_->saved_what(); }
  bool takes_post_act() const override { return conv_->takes_post_act(); }
  bool runs_nhwc() const override { return conv_->runs_nhwc(); }  // a GEMM over batch x pixels
  void set_layout(Layout l) override {
    layout_ = l;
    conv_->set_layout(l);
  }
  double flops_per_sample() const override { return conv_->flops_per_sample(); }
  bool bf16_products() const override { return true; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override { conv_->forward(e, b, n); }
  void backward(const ops::Exec& e, const Bufs& b, int n) override { conv_->backward(e, b, n); }

 private:
  static LayerSpec as_conv(LayerSpec s) {
    s.kind = LayerKind::Conv2d;
    s.kernel_h = s.kernel_w = 1;
    return s;
  }
  std::unique_ptr<Layer> conv_;  // conv2d's layer
};

// Over features: the GEMM layer; over channels: a 1x1 conv2d on the same weight memory.
std::unique_ptr<Layer> make_linear(const LayerSpec& s) {
  if (s.over_channels) return std::make_unique<ChannelLinear>(s);
  return std::make_unique<Linear>(s);
}

// Gemm on [N, D] (transB: the weight [K, D] as stored); over channels a 1x1 Conv, the weight
// [K, C] seen as [K, C, 1, 1].
std::string export_linear(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const Dims d = g.in_dims();
  const bool conv = s.over_channels;
  std::vector<std::string> in{conv ? g.img(x) : g.flat(x),
                              g.weight("weight", conv ? std::vector<int64_t>{s.out, d.c, 1, 1}
                                                      : std::vector<int64_t>{s.out, int64_t(d.size())})};
  if (s.bias) in.push_back(g.weight("bias", {s.out}));
  if (conv) return g.op("Conv", in, {{"kernel_shape", {1, 1}}});
  return g.op("Gemm", in, {{"transB", 1}});
}

}  // namespace

const OpDesc& op_desc_linear() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Linear, "linear", "fully connected [D] -> [K], or over the channels of [C, H, W] (PyTorch Linear)");
    o.onnx = {"Gemm", "Conv"};
    o.layouts = {"flat", "nchw", "nhwc"};  // nchw, nhwc: over channels
    o.dtypes = all_dtypes();
    o.fields = {
        {"out_features", "int", nullptr,
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.out = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["out_features"] = s.out; }},
        {"over", "\"features\" or \"channels\"", "\"features\"",
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
           if (v != "features" && v != "channels") r.fail(p, "expected \"features\" or \"channels\", found " + json_brief(v));
           s.over_channels = v == "channels";
         },
         [](const LayerSpec& s, json& j) {
           if (s.over_channels) j["over"] = "channels";
         }},
        bias_field(), init_field()};
    o.params = weight_and_bias;
    o.example = example_model("linear", R"({"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"}, )"
                                        R"({"type": "linear", "out_features": 10})");
    o.make = make_linear;
    o.onnx_export = export_linear;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
