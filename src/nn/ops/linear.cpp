// Op "linear": PyTorch's Linear (weight [K, C], bias [K]) over a sample's flattened features, or
// with "over": "channels" over the channels at each position of [C, H, W] (torchvision's
// channels-last Linear in a ConvNeXt block).
#include <algorithm>
#include <cmath>

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

std::vector<float> transpose2(const OnnxConst& c) {  // [R, C] -> [C, R]
  const size_t R = size_t(c.dims[0]), C = size_t(c.dims[1]);
  std::vector<float> t(R * C);
  for (size_t r = 0; r < R; ++r)
    for (size_t q = 0; q < C; ++q) t[q * R + r] = c.f[r * C + q];
  return t;
}

// Gemm's C as the Linear's bias: beta x C where C broadcasts to [N, K] the same for every row: a
// scalar, [K], [1, K], [1, 1], or [M, K] / [M, 1] whose rows are all equal (the test's fixed batch).
std::vector<float> gemm_bias(OnnxIn& g, int i, int64_t K, float beta) {
  const OnnxConst& C = g.constant(i, 2);
  const std::vector<int64_t>& d = C.dims;
  const int64_t cols = d.empty() ? 1 : d.back(), rows = d.size() == 2 ? d[0] : 1;
  if (d.size() > 2 || (cols != K && cols != 1) || rows < 1 || C.count() != size_t(rows * cols))
    throw Error(g.where(i) + ": C " + onnx_ints_str(d) + " does not broadcast to [N, " + std::to_string(K) + "]");
  for (int64_t r = 1; r < rows; ++r)
    if (!std::equal(C.f.begin(), C.f.begin() + cols, C.f.begin() + r * cols))
      throw Error(g.where(i) + ": C " + onnx_ints_str(d) + " differs from row to row; ember's Linear adds one bias to every row");
  std::vector<float> b(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) b[size_t(k)] = beta * C.f[size_t(cols == 1 ? 0 : k)];
  return b;
}

// Gemm: alpha A [N, D] x B (transB: [K, D], else [D, K]) + beta C: a Linear, weight alpha B as
// [K, D], bias beta C. transA would transpose the data (the batch with the features): refused.
void import_gemm(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  if (x.lay != OnnxLayout::Flat) throw Error(g.where(i) + ": input must be [N, D] (flatten first)");
  const OnnxAttrs& a = g.attrs(i);
  a.only({"alpha", "beta", "transA", "transB"});
  const float alpha = a.f("alpha", 1), beta = a.f("beta", 1);
  if (!std::isfinite(alpha) || !std::isfinite(beta)) throw Error(g.where(i) + ": attribute alpha or beta is not finite");
  if (a.i("transA", 0) != 0)
    throw Error(g.where(i) + ": attribute transA 1 is not supported (it would transpose the data [N, D], batch with features)");
  const OnnxConst& B = g.constant(i, 1);
  if (B.dims.size() != 2) throw Error(g.where(i) + ": B must be 2-D");
  const bool tb = a.i("transB", 0) != 0;
  const int64_t K = tb ? B.dims[0] : B.dims[1], D = tb ? B.dims[1] : B.dims[0];
  if (K < 1 || K > (1 << 24)) throw Error(g.where(i) + ": " + std::to_string(K) + " outputs is outside 1..2^24");
  if (D != int64_t(x.d.c))
    throw Error(g.where(i) + ": B " + onnx_ints_str(B.dims) + " does not fit the input's " + std::to_string(x.d.c) + " features");
  LayerSpec s;
  s.kind = LayerKind::Linear, s.out = int(K);
  const bool has_c = g.has_input(i, 2);
  const std::vector<float> bias = has_c ? gemm_bias(g, i, K, beta) : std::vector<float>{};
  s.bias = has_c;
  std::string wname = g.val(i, 1).weight_name;
  if (!tb && !has_c) wname.clear();
  OnnxValue y = g.emit_layer(s, {&x}, wname, {int(K), 1, 1}, OnnxLayout::Flat);
  std::vector<float> w = tb ? B.f : transpose2(B);
  if (alpha != 1)
    for (float& v : w) v *= alpha;
  g.weight(y.ref, "weight", std::move(w), g.input(i, 1));
  if (has_c) g.weight(y.ref, "bias", bias, g.input(i, 2));
  g.set(i, 0, std::move(y));
}

// The Add after a MatMul (its output `value`) whose other input is a [K] constant (or [1, ..., K]
// no longer than the output): the Linear's bias and its name; the Add's node, or -1.
int fold_bias(OnnxIn& g, const std::string& value, int K, int rank, std::vector<float>* bias, std::string* name) {
  const int r = g.reader(value);
  if (r < 0 || g.op_type(r) != "Add" || g.input_count(r) != 2) return -1;
  const OnnxValue* c = g.find(g.input(r, g.input(r, 0) == value ? 1 : 0));
  if (!c || !c->is_const || c->c.count() != size_t(K)) return -1;
  const std::vector<int64_t>& bd = c->c.dims;
  if (bd.size() > size_t(rank) || (!bd.empty() && bd.back() != K)) return -1;
  *bias = c->c.f, *name = c->weight_name;
  g.consume(r);
  return r;
}

// MatMul: x [N, D] or channels-last [N, H, W, C] times a constant [D, K] (+ a following Add of a
// [K] constant): a Linear, over channels for the channels-last view (torchvision's CNBlock).
void import_matmul(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const OnnxConst& B = g.constant(i, 1);
  if (B.dims.size() != 2) throw Error(g.where(i) + ": the weight must be 2-D");
  const bool over = x.lay == OnnxLayout::NHWC;
  if (!over && x.lay != OnnxLayout::Flat) throw Error(g.where(i) + ": input must be [N, D] or channels-last [N, H, W, C]");
  const int64_t D = B.dims[0], K = B.dims[1];
  if (K < 1 || K > (1 << 24)) throw Error(g.where(i) + ": " + std::to_string(K) + " outputs is outside 1..2^24");
  if (D != (over ? x.d.c : int64_t(x.d.size())))
    throw Error(g.where(i) + ": weight " + onnx_ints_str(B.dims) + " does not fit the input's " +
                std::to_string(over ? x.d.c : int64_t(x.d.size())) + " features");
  std::vector<float> bias;
  std::string bname;
  const int add = fold_bias(g, g.output(i), int(K), over ? 4 : 2, &bias, &bname);
  LayerSpec s;
  s.kind = LayerKind::Linear, s.out = int(K), s.over_channels = over, s.bias = add >= 0;
  OnnxValue y = g.emit_layer(s, {&x}, bname, {int(K), over ? x.d.h : 1, over ? x.d.w : 1}, over ? OnnxLayout::NHWC : OnnxLayout::Flat);
  g.weight(y.ref, "weight", transpose2(B), g.input(i, 1));
  if (add >= 0) g.weight(y.ref, "bias", bias, bname);
  g.set(add >= 0 ? add : i, 0, std::move(y));
}

bool import_linear(OnnxIn& g, int i) {
  if (g.op_type(i) == "Gemm") import_gemm(g, i);
  else import_matmul(g, i);
  return true;
}

}  // namespace

const OpDesc& op_desc_linear() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Linear, "linear", "fully connected [D] -> [K], or over the channels of [C, H, W] (PyTorch Linear)");
    o.onnx = {"Gemm", "Conv"};
    o.layouts = {"flat", "nchw", "nhwc"};  // nchw, nhwc: over channels
    o.dtypes = all_dtypes();
    o.dtypes.push_back("u8");  // the int8 plan: its GEMM, a ReLU after it in the requantization
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
    o.onnx_import = import_linear;
    o.onnx_from = {"Gemm", "MatMul"};
    return o;
  }();
  return d;
}

}  // namespace ember::nn
