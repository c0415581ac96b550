// Op "layernorm": PyTorch's LayerNorm over a sample's trailing dims ("dims": 1, 2 or 3 of
// [C, H, W]; all by default), with a per-element scale and shift ("affine", default true).
#include "nn/op_table.h"

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

std::vector<OpParam> norm_params(const LayerSpec& s) {
  if (!s.bias) return {};
  return {{"weight", ParamRole::norm_scale}, {"bias", ParamRole::norm_shift}};
}

const OpDesc& op_desc_layernorm() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::LayerNorm, "layernorm", "normalises each sample over its trailing dims (PyTorch LayerNorm)");
    o.onnx = {"LayerNormalization"};
    o.layouts = {"nchw", "flat"};
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
    return o;
  }();
  return d;
}

}  // namespace ember::nn
