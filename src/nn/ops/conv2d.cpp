// Op "conv2d": 2D convolution, PyTorch's Conv2d (weight [K, C/G, R, S], bias [K]), grouped and
// depthwise included; its paths (direct, im2col + GEMM, fused with ReLU and a 2x2 max-pool,
// depthwise) are chosen in src/ops/conv2d.cpp.
#include <string>
#include <type_traits>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/conv_desc.h"
#include "ops/conv_nhwc.h"

namespace ember::nn {

namespace {

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
  ConvShape shape(int n) const { return conv2d_shape(spec_, in_, out_, n); }
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
      const ops::ConvPost<T> post{p<T>(b.post_residual), b.post_act};
      if constexpr (std::is_same_v<T, float>)
        if (b.post_act && !b.post_residual && wp && a == ops::ConvAlgo::nhwc_gemm)  // the activation in the GEMM's store
          return ops::linear_fwd_packed(e, p<T>(b.y), {p<T>(b.x)}, wp, p<T>(b.b), n * in_.h * in_.w, in_.c, spec_.out,
                                        b.post_act);
      if (nhwc()) {  // the post-ops in one pass after
        ops::conv2d_nhwc_fwd<T>(e, a, p<T>(b.y), p<T>(b.x), p<T>(b.w), p<T>(b.b), shape(n), p<T>(b.ws), wp);
        return ops::post_ops_fwd<T>(e, p<T>(b.y), post, size_t(n) * out_.size());
      }
      ops::conv2d_fwd<T>(e, a, p<T>(b.y), p<T>(b.x), p<T>(b.w), p<T>(b.b), shape(n), p<T>(b.ws), b.wh, b.xh, wp, post);
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

// Conv: weight [K, C/G, R, S] (+ bias [K]), symmetric pads ("same": k / 2), group.
std::string export_conv2d(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const Dims d = g.in_dims();
  std::vector<std::string> in{g.img(x), g.weight("weight", {s.out, d.c / s.groups, s.kernel_h, s.kernel_w})};
  if (s.bias) in.push_back(g.weight("bias", {s.out}));
  const int ph = s.same ? s.kernel_h / 2 : s.pad_h, pw = s.same ? s.kernel_w / 2 : s.pad_w;
  return g.op("Conv", in,
              {{"kernel_shape", {s.kernel_h, s.kernel_w}}, {"strides", {s.stride_h, s.stride_w}}, {"pads", {ph, pw, ph, pw}},
               {"group", s.groups}});
}

// Conv: [N, C, H, W] * W [K, C/G, R, S] (+ B [K]) -> [N, K, H', W']; symmetric pads, no dilation.
// 1-D: [N, C, L] * W [K, C/G, S] -> [N, K, L'], as ember's image [C, 1, L] with a 1 x S kernel.
bool import_conv2d(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const bool one_d = x.lay == OnnxLayout::NCL;
  const std::string at = g.where(i);
  if (x.lay != OnnxLayout::NCHW && !one_d) throw Error(at + ": expected an [N, C, H, W] or [N, C, L] input (not channels-last, not [N, D])");
  const OnnxConst& W = g.constant(i, 1);
  if (W.dims.size() != (one_d ? 3u : 4u))
    throw Error(at + ": weight must be " + (one_d ? "[K, C/G, S]" : "[K, C/G, R, S]") + ", found rank " + std::to_string(W.dims.size()));
  const OnnxAttrs& a = g.attrs(i);
  a.only({"kernel_shape", "strides", "pads", "group", "dilations", "auto_pad"});  // Conv-1 to Conv-11: the same
  const int64_t G = a.i("group", 1), K = W.dims[0], R = one_d ? 1 : W.dims[2], S = W.dims.back();
  if (!onnx_all_are(a.ints("dilations", {1, 1}), 1))
    throw Error(at + ": attribute dilations " + onnx_ints_str(a.ints("dilations", {})) + " is not supported (ember's conv2d has no dilation)");
  if (g.window_ints(a, "kernel_shape", {R, S}, one_d) != std::vector<int64_t>{R, S})
    throw Error(at + ": kernel_shape " + onnx_ints_str(a.ints("kernel_shape", {})) + " does not match the weight");
  const auto st = g.window_ints(a, "strides", {1, 1}, one_d);
  if (st.size() != 2) throw Error(at + ": attribute strides " + onnx_ints_str(st) + " must be 2-D");
  g.check_strides(i, st, one_d);
  if (R < 1 || S < 1 || R > 65536 || S > 65536) throw Error(at + ": weight " + onnx_ints_str(W.dims) + ": kernel sizes outside 1..65536");
  const std::vector<int64_t> pads = g.window_pads(i, a, x.d, {R, S}, st, one_d, nullptr);
  if (G < 1 || x.d.c % G || K % G || W.dims[1] * G != x.d.c)
    throw Error(at + ": weight " + onnx_ints_str(W.dims) + " with group " + std::to_string(G) + " does not fit " +
                std::to_string(x.d.c) + " input channels");
  for (int64_t v : {K, R, S, st[0], st[1], pads[0], pads[1], G})
    if (v < 0 || v > 65536) throw Error(at + ": a size, stride or pad outside 0..65536");
  LayerSpec s;
  s.kind = LayerKind::Conv2d, s.out = int(K), s.kernel_h = int(R), s.kernel_w = int(S);
  s.stride_h = int(st[0]), s.stride_w = int(st[1]), s.pad_h = int(pads[0]), s.pad_w = int(pads[1]), s.groups = int(G);
  s.bias = g.has_input(i, 2);
  const int64_t Ho = (x.d.h + 2 * pads[0] - R) / st[0] + 1, Wo = (x.d.w + 2 * pads[1] - S) / st[1] + 1;
  if (st[0] < 1 || st[1] < 1 || Ho < 1 || Wo < 1) throw Error(at + ": the kernel does not fit the input");
  OnnxValue y = g.emit_layer(s, {&x}, g.val(i, 1).weight_name, {int(K), int(Ho), int(Wo)}, x.lay);
  g.weight(y.ref, "weight", W.f, g.input(i, 1));
  if (s.bias) {
    const OnnxConst& B = g.constant(i, 2);
    if (B.count() != size_t(K)) throw Error(at + ": bias has " + std::to_string(B.count()) + " values, expected " + std::to_string(K));
    g.weight(y.ref, "bias", B.f, g.input(i, 2));
  }
  g.set(i, 0, std::move(y));
  return true;
}

}  // namespace

const OpDesc& op_desc_conv2d() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::Conv2d, "conv2d", "2D convolution [C, H, W] -> [K, P, Q] (PyTorch Conv2d)");
    o.onnx = {"Conv"};
    o.layouts = {"nchw", "nhwc"};  // nhwc: every shape but grouped non-depthwise ones
    o.dtypes = all_dtypes();
    o.dtypes.push_back("u8");  // the int8 plan: groups 1 and depthwise, BatchNorm2d, the residual add and ReLU in its requantization
    o.fields = {
        {"out_channels", "int", nullptr,
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.out = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["out_channels"] = s.out; }},
        kernel_field(true), stride_field("1"), padding_field(true, false),
        {"groups", "int", "1",
         [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.groups = r.integer(v, p, 1, 1 << 20); },
         [](const LayerSpec& s, json& j) { j["groups"] = s.groups; }},
        bias_field(), init_field()};
    o.params = weight_and_bias;
    o.example = example_model("conv2d", R"({"type": "conv2d", "out_channels": 8, "kernel": 5, "padding": 2}, {"type": "relu"}, )"
                                        R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<Conv2d>;
    o.onnx_export = export_conv2d;
    o.onnx_import = import_conv2d;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
