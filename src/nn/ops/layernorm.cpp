// Op "layernorm": PyTorch's LayerNorm over a sample's trailing dims ("dims": 1, 2 or 3 of
// [C, H, W]; all by default), with a per-element scale and shift ("affine", default true).
#include <type_traits>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/norm.h"

namespace ember::nn {

OpField eps_field() {
  return {"eps", "number in (0, 1]", "1e-5",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
            s.eps = r.number(v, p, 0, 1, true, false, "a number in (0, 1]");
          },
          [](const LayerSpec& s, json& j) { j["eps"] = s.eps; }};
}

OpField affine_field() {
  return {"affine", "bool", "true",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.bias = r.boolean(v, p); },
          [](const LayerSpec& s, json& j) { j["affine"] = s.bias; }};
}

// A norm's ONNX scale and shift of this shape: its parameters, or ones and zeros without affine.
std::vector<std::string> norm_affine(OnnxOut& g, const LayerSpec& s, const std::vector<int64_t>& shape) {
  if (s.bias) return {g.param("weight", shape), g.param("bias", shape)};
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return {g.floats("ones", shape, std::vector<float>(n, 1.f)), g.floats("zeros", shape, std::vector<float>(n, 0.f))};
}

// LayerNormalization over the dims from axis on (their shape), as ember normalises them.
std::string export_ln(OnnxOut& g, const std::string& x, const LayerSpec& s, int64_t axis, std::vector<int64_t> shape) {
  std::vector<std::string> in{x};
  for (std::string& v : norm_affine(g, s, shape)) in.push_back(std::move(v));
  return g.op("LayerNormalization", in, {{"axis", axis}, {"epsilon", float(s.eps)}});
}

std::vector<OpParam> norm_params(const LayerSpec& s) {
  if (!s.bias) return {};
  return {{"weight", ParamRole::norm_scale}, {"bias", ParamRole::norm_shift}};
}

namespace {

// LayerNorm over the last norm_dims of the sample's dims (flat: [D]; images: [C, H, W], so 1 is
// [W], 2 is [H, W], 3 or 0 the whole sample). Rows: batch x the leading dims. Saves mean, rstd.
class LayerNorm final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    // dims 3 takes a flat [D] as the image [D, 1, 1] (a stage of 1x1 keeps PyTorch's [C, 1, 1]).
    const int rank = in.flat() && spec_.norm_dims != 3 ? 1 : 3, k = spec_.norm_dims ? spec_.norm_dims : rank;
    if (k > rank) throw Error("layernorm: dims " + std::to_string(k) + " is more than the input's " + std::to_string(rank));
    const int d3[3] = {in.c, in.h, in.w};
    shape_.assign(d3 + (rank == 1 ? 0 : 3 - k), d3 + (rank == 1 ? 1 : 3));
    D_ = 1;
    for (int x : shape_) D_ *= x;
    lead_ = int(in.size() / size_t(D_));
    return in_ = out_ = in;
  }
  std::vector<std::vector<int>> param_shapes() const override {
    if (!spec_.bias) return {};
    return {shape_, shape_};
  }
  bool param_constant(size_t t, double* v) const override { return *v = t == 0 ? 1 : 0, true; }
  // Channel-last over the whole image sample: the same rows, the affine parameters [C, H, W]
  // permuted to [H, W, C] in scratch (and their gradients back).
  bool runs_nhwc() const override { return shape_.size() == 3 && !in_.flat(); }
  size_t workspace_elems(int, int threads) const override {
    return ops::layernorm_workspace(D_, threads) + (nhwc() ? 4 * size_t(D_) : 0);
  }
  size_t saved_bytes(int batch, int, DType dt) const override { return 2 * size_t(batch) * lead_ * esize(dt); }
  std::string saved_what() const override { return "mean and rstd"; }
  bool backward_reads_output() const override { return false; }
  bool writes_bf16_output() const override { return true; }
  void forward_bf16(const ops::Exec& e, const Bufs& b, int n, uint16_t* yh, float* rows) override {
    float* mean = p<float>(b.saved);
    ops::layernorm_fwd_bf16(e, yh, mean, mean + rows_max(b), p<float>(b.x), p<float>(b.w), p<float>(b.b), n * lead_,
                            D_, float(spec_.eps), rows);
  }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const int R = n * lead_, Rmax = rows_max(b);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* mean = p<T>(b.saved);
      const T *w = p<T>(b.w), *bias = p<T>(b.b);
      if (nhwc() && w) {
        T* wp = p<T>(b.ws) + ops::layernorm_workspace(D_, e.pool.size());
        permute(e, wp, w, true), permute(e, wp + D_, bias, true);
        w = wp, bias = wp + D_;
      }
      ops::layernorm_fwd<T>(e, p<T>(b.y), mean, mean + Rmax, p<T>(b.x), w, bias, R, D_, T(spec_.eps));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const int R = n * lead_, Rmax = rows_max(b);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* mean = p<T>(b.saved);
      const T* w = p<T>(b.w);
      T *dw = p<T>(b.dw), *db = p<T>(b.db);
      T* wp = p<T>(b.ws) + ops::layernorm_workspace(D_, e.pool.size());
      const bool permuted = nhwc() && w;
      if (permuted) permute(e, wp, w, true), w = wp, dw = dw ? wp + 2 * D_ : nullptr, db = db ? wp + 3 * D_ : nullptr;
      ops::layernorm_bwd<T>(e, p<T>(b.dx), dw, db, p<T>(b.dy), p<T>(b.x), mean, mean + Rmax, w, R, D_, p<T>(b.ws));
      if (permuted && dw) permute(e, p<T>(b.dw), dw, false);
      if (permuted && db) permute(e, p<T>(b.db), db, false);
    });
  }

 private:
  // [C, H, W] -> [H, W, C] (to_hwc), or back: every forward of a channel-last plan (the weights
  // move in training), so fp32 takes the kernel table's blocked transpose (a plain loop scatters
  // with stride C: at batch 1 it cost more than the normalisation itself); f64 the loop.
  template <class T>
  void permute(const ops::Exec& e, T* dst, const T* src, bool to_hwc) const {
    const int C = in_.c, HW = in_.h * in_.w;
    if constexpr (std::is_same_v<T, float>) {
      if (to_hwc) e.k.transpose(dst, size_t(C), src, size_t(HW), C, HW);
      else e.k.transpose(dst, size_t(HW), src, size_t(C), HW, C);
      return;
    }
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < HW; ++i) {
        if (to_hwc) dst[size_t(i) * C + c] = src[size_t(c) * HW + i];
        else dst[size_t(c) * HW + i] = src[size_t(i) * C + c];
      }
  }
  int rows_max(const Bufs& b) const { return b.batch * lead_; }
  std::vector<int> shape_;
  int D_ = 1, lead_ = 1;
};

// Over the trailing dims: [N, D] at axis 1, or the last 1-3 dims of [N, C, H, W].
std::string export_layernorm(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const Dims d = g.in_dims();
  if (d.flat() && s.norm_dims != 3) return export_ln(g, g.flat(x), s, 1, {d.c});
  const int k = s.norm_dims ? s.norm_dims : 3;
  const int64_t all[3] = {d.c, d.h, d.w};
  return export_ln(g, g.img(x), s, 4 - k, std::vector<int64_t>(all + 3 - k, all + 3));
}

// LayerNormalization: over C of a channels-last view (a layernorm2d), over the trailing 1-3 dims
// of [N, C, H, W] ([N, C, L]: as [N, C, 1, L]), or over D of [N, D]; scale and bias constants.
bool import_layernorm(OnnxIn& g, int i) {
  const OnnxValue& x = g.tensor(i, 0);
  const OnnxAttrs& a = g.attrs(i);
  a.only({"axis", "epsilon", "stash_type"});
  for (int k = 1; k < 3; ++k)
    if (g.output_read(i, k)) throw Error(g.where(i) + ": the Mean and InvStdDev outputs are not supported");
  const int rank = onnx_rank(x.lay);
  int64_t axis = a.i("axis", -1);
  if (axis < 0) axis += rank;
  if (x.lay == OnnxLayout::NCL && axis == 2) axis = 3;  // [N, C, L] as [N, C, 1, L]: axis 1 stays, L is ember's W
  LayerSpec s;
  s.eps = a.f("epsilon", 1e-5f);
  size_t count = 0;
  if (x.lay == OnnxLayout::NHWC && axis == 3) s.kind = LayerKind::LayerNorm2d, count = size_t(x.d.c);
  else if (x.lay == OnnxLayout::Flat && axis == 1) s.kind = LayerKind::LayerNorm, count = x.d.size();
  else if ((x.lay == OnnxLayout::NCHW || x.lay == OnnxLayout::NCL) && axis >= 1 && axis <= 3 && (!x.d.flat() || axis == 1)) {
    s.kind = LayerKind::LayerNorm, s.norm_dims = int(4 - axis);
    const int d3[3] = {x.d.c, x.d.h, x.d.w};
    count = 1;
    for (int k = int(axis) - 1; k < 3; ++k) count *= size_t(d3[k]);
  } else throw Error(g.where(i) + ": axis " + std::to_string(a.i("axis", -1)) + " of this input is not supported");
  const OnnxConst& scale = g.constant(i, 1);
  if (scale.count() != count) throw Error(g.where(i) + ": scale has " + std::to_string(scale.count()) + " values, expected " + std::to_string(count));
  std::vector<float> bias(count, 0.f);
  if (g.has_input(i, 2)) {
    const OnnxConst& B = g.constant(i, 2);
    if (B.count() != count) throw Error(g.where(i) + ": bias has " + std::to_string(B.count()) + " values, expected " + std::to_string(count));
    bias = B.f;
  }
  OnnxValue y = g.emit_layer(s, {&x}, g.val(i, 1).weight_name, x.d, x.lay);
  g.weight(y.ref, "weight", scale.f);
  g.weight(y.ref, "bias", bias);
  g.set(i, 0, std::move(y));
  return true;
}

}  // namespace

const OpDesc& op_desc_layernorm() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerNorm, "layernorm", "normalises each sample over its trailing dims (PyTorch LayerNorm)");
    o.onnx = {"LayerNormalization"};
    o.layouts = {"nchw", "flat", "nhwc"};  // nhwc: over a whole image sample
    o.dtypes = fp_dtypes();
    o.fields = {{"dims", "1, 2 or 3", "all of the sample's dims",
                 [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.norm_dims = r.integer(v, p, 1, 3); },
                 [](const LayerSpec& s, json& j) {
                   if (s.norm_dims) j["dims"] = s.norm_dims;
                 }},
                eps_field(), affine_field()};
    o.params = norm_params;
    o.example = example_model("layernorm", R"({"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "layernorm"}, )"
                                           R"({"type": "relu"}, {"type": "linear", "out_features": 10})");
    o.make = make_as<LayerNorm>;
    o.onnx_export = export_layernorm;
    o.onnx_import = import_layernorm;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
