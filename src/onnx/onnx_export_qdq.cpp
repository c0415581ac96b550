// QDQ export of an int8 model: the fp32 exporter (onnx_export.cpp) with a hook that puts
// QuantizeLinear -> DequantizeLinear after the input and every tensor that has activation
// QParams, and gives each quantized Conv/Linear DequantizeLinear of its INT8 weight and INT32 bias
// (for a QdqExport, with the BatchNorm2d the int8 plan folds into it already carried).
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/onnx_quant.h"
#include "ember_support/files.h"
#include "nn/graph.h"
#include "onnx/onnx_export.h"
#include "quant/quant_math.h"

namespace ember {
namespace {

namespace pb = ember_onnx;
using onnx::Writer;

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));  // little-endian
}

// The checks of the quantized file's reader and the int8 plan (quant_math.h): what they accept,
// the export writes, and the QDQ import reads back.
void check_qparams(const std::string& key, const QParams& p) {
  if (const quant::Problem e = quant::qparams_problem(p, quant::act_scale_name(key), quant::act_zp_name(key)))
    throw Error("export: activation '" + key + "': tensor '" + e.tensor + "': " + e.what);
}

// l read with input scale s_in (tensor in_t; unused without a bias).
void check_layer(const QuantLayer& l, float s_in, const std::string& in_t) {
  const size_t K = l.shape.empty() ? 0 : size_t(l.shape[0]);
  size_t n = 1;
  for (int d : l.shape) n *= size_t(d > 0 ? d : 0);
  if (K == 0 || l.w.size() != n || l.w_scale.size() != K || (l.has_bias && l.bias.size() != K))
    throw Error("export: layer '" + l.prefix + "': weight, scale and bias sizes disagree with its shape");
  if (const quant::Problem e = quant::layer_problem(l, s_in, in_t))
    throw Error("export: layer '" + l.prefix + "': tensor '" + e.tensor + "': " + e.what);
}

// The hook: Q -> DQ on activations, DQ of the int8 weights and int32 biases.
class QdqHook final : public onnx::ExportHook {
 public:
  QdqHook(const QuantizedWeights& q, const std::map<std::string, std::string>& folded_bn) : q_(q), folded_(folded_bn) {
    for (const auto& [k, p] : q.acts) check_qparams(k, p);
    const nn::Graph g = nn::resolve(q.model);
    for (const nn::Node& n : g.nodes) {
      const int t = n.in.empty() ? 0 : n.in[0];
      const int p = g.tensors[size_t(t)].producer;
      in_key_[n.param_prefix] = p < 0 ? "input" : g.nodes[size_t(p)].param_prefix;
    }
    for (const QuantLayer& l : q.layers) {
      const auto in = in_key_.find(l.prefix);
      const auto a = in == in_key_.end() ? q.acts.end() : q.acts.find(in->second);
      if (l.has_bias && a == q.acts.end())
        throw Error("export: layer '" + l.prefix + "': its input has no activation scale (the bias needs it)");
      check_layer(l, a == q.acts.end() ? 1.0f : a->second.scale, in == in_key_.end() ? "" : quant::act_scale_name(in->second));
      layers_[l.prefix] = &l;
    }
  }

  std::string tensor(Writer& w, const std::string& key, const std::string& name) override {
    auto it = q_.acts.find(key);
    if (it == q_.acts.end()) return name;
    const std::string base = key == "input" ? "input." : key + ".output_";
    const std::string s = w.floats(base + "scale", {}, &it->second.scale, 1);
    const std::vector<uint8_t> zp{uint8_t(it->second.zero_point)};
    const std::string z = w.raw(base + "zero_point", pb::TensorProto::UINT8, {}, bytes_of(zp));
    const std::string qv = w.op("QuantizeLinear", {name, s, z}, key);
    return w.op("DequantizeLinear", {qv, s, z}, key);
  }

  std::string param(Writer& w, const std::string& prefix, const std::string& what,
                    const std::vector<int64_t>& dims) override {
    auto it = layers_.find(prefix);
    if (it == layers_.end()) return "";
    const QuantLayer& l = *it->second;
    const int64_t K = int64_t(l.w_scale.size());
    return what == "weight" ? weight(w, l, dims, K) : bias(w, l, K);
  }

  bool keeps_weights(const std::string& prefix) const override { return layers_.count(prefix) > 0; }
  std::string folded_bn(const std::string& prefix) const override {
    const auto it = folded_.find(prefix);
    return it == folded_.end() ? "" : it->second;
  }

 private:
  std::string weight(Writer& w, const QuantLayer& l, const std::vector<int64_t>& dims, int64_t K) {
    size_t n = 1;
    for (int64_t d : dims) n *= size_t(d);
    if (dims.empty() || dims[0] != K || n != l.w.size())
      throw Error("export: layer '" + l.prefix + "': its int8 weight has " + std::to_string(l.w.size()) +
                  " values, the model's layer needs " + std::to_string(n));
    const std::string wq = w.raw(l.prefix + ".weight", pb::TensorProto::INT8, dims, bytes_of(l.w));
    const std::string s = w.floats(l.prefix + ".weight_scale", {K}, l.w_scale.data(), size_t(K));
    const std::string z = w.raw(l.prefix + ".weight_zero_point", pb::TensorProto::INT8, {K}, std::string(size_t(K), '\0'));
    return dq(w, {wq, s, z}, l.prefix + ".weight");
  }
  std::string bias(Writer& w, const QuantLayer& l, int64_t K) {
    if (!l.has_bias) throw Error("export: layer '" + l.prefix + "': the model's layer has a bias, the quantized one none");
    auto in = q_.acts.find(in_key_.at(l.prefix));
    if (in == q_.acts.end())
      throw Error("export: layer '" + l.prefix + "': its input '" + in_key_.at(l.prefix) + "' has no activation scale (the bias needs it)");
    std::vector<float> scale(static_cast<size_t>(K));
    for (size_t k = 0; k < scale.size(); ++k) scale[k] = in->second.scale * l.w_scale[k];  // normal: check_layer
    const std::string b = w.raw(l.prefix + ".bias", pb::TensorProto::INT32, {K}, bytes_of(l.bias));
    const std::string s = w.floats(l.prefix + ".bias_scale", {K}, scale.data(), scale.size());
    const std::string z = w.raw(l.prefix + ".bias_zero_point", pb::TensorProto::INT32, {K}, std::string(size_t(K) * 4, '\0'));
    return dq(w, {b, s, z}, l.prefix + ".bias");
  }
  static std::string dq(Writer& w, std::vector<std::string> in, const std::string& name) {
    const std::string out = w.fresh(name + "_dq");
    pb::NodeProto* n = w.node("DequantizeLinear", std::move(in), {out}, name);
    pb::AttributeProto* a = n->add_attribute();
    a->set_name("axis"), a->set_type(pb::AttributeProto::INT), a->set_i(0);
    return out;
  }

  const QuantizedWeights& q_;
  const std::map<std::string, std::string>& folded_;  // conv prefix -> the batchnorm2d its layer carries
  std::map<std::string, const QuantLayer*> layers_;
  std::map<std::string, std::string> in_key_;  // node prefix -> the key of the tensor it reads
};

}  // namespace

std::string onnx_export_quantized_bytes(const QdqExport& v) {
  const QuantizedWeights& q = v.q;
  std::map<std::string, const float*> weights;
  for (const ParamInfo& p : q.params) {
    if (p.offset + p.size > q.values.size() || p.offset + p.size < p.offset)
      throw Error("export: parameter '" + p.name + "' lies outside the values (" + std::to_string(q.values.size()) + ")");
    weights[p.name] = q.values.data() + p.offset;
  }
  for (const auto& [conv, bn] : v.folded_bn)
    if (!q.layer(conv)) throw Error("export: layer '" + conv + "' carries batchnorm2d '" + bn + "' but is not quantized");
  QdqHook hook(q, v.folded_bn);
  return onnx::export_model_bytes(q.model, weights, &hook,
                                  "ember int8 model " + q.model.name + " (QDQ): the output is the last layer's, fp32");
}

std::string onnx_export_quantized_bytes(const QuantizedWeights& q) { return onnx_export_quantized_bytes(QdqExport{q, {}}); }

void export_onnx_quantized(const QdqExport& v, const std::string& path) {
  const std::string bytes = onnx_export_quantized_bytes(v);
  write_file_atomic(path, {bytes});
}

void export_onnx_quantized(const QuantizedWeights& q, const std::string& path) { export_onnx_quantized(QdqExport{q, {}}, path); }

}  // namespace ember
