// QDQ import (onnx_quant.h): the file's graph rewritten as fp32 (onnx_qdq_graph.cpp), imported by
// the fp32 importer, then what was quantized mapped onto the model's layers: activation QParams by
// the layer that makes each value, int8 weights and int32 biases by the layer that took them.
#include <cmath>
#include <cstring>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/onnx_quant.h"
#include "nn/graph.h"
#include "quant/int8_check.h"
#include "onnx/onnx_import_ops.h"
#include "onnx/onnx_qdq.h"
#include "onnx/onnx_scan.h"

namespace ember {
namespace {

using onnx::QdqInfo;

std::vector<ParamInfo> params_with_offsets(const Model& m) {
  std::vector<ParamInfo> ps = model_params(m);
  size_t off = 0;
  for (ParamInfo& p : ps) p.offset = off, off += p.size;
  return ps;
}

// The ember model the file's metadata names, when the imported graph has its layers (kinds and
// parameter shapes, in order): its layer names then replace the importer's ("onnx_3" -> "3").
bool same_structure(const Model& a, const Model& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (size_t i = 0; i < a.layers.size(); ++i)
    if (a.layers[i].kind != b.layers[i].kind) return false;
  const auto pa = model_params(a), pb = model_params(b);
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].shape != pb[i].shape) return false;
  return true;
}

class Mapper {
 public:
  Mapper(const onnx::Importer& im, const QdqInfo& info, const OnnxImport& imp, const std::string& file)
      : im_(im), info_(info), imp_(imp), file_(file) {}

  QuantizedWeights run(const Model* meta) {
    QuantizedWeights q;
    q.model = imp_.model;
    std::vector<std::string> names = layer_prefixes(q.model);
    if (meta && same_structure(*meta, q.model)) {
      q.model = *meta;
      const std::vector<std::string> to = layer_prefixes(q.model);
      for (size_t i = 0; i < names.size(); ++i) rename_[names[i]] = to[i];
    }
    for (const auto& [name, p] : info_.acts) act(q, name, p);
    fill_values(q);
    const nn::Graph g = nn::resolve(q.model);
    for (size_t i = 0; i < g.nodes.size(); ++i) layer(q, g, i);
    q.calib.data = "onnx";
    return q;
  }

 private:
  static std::vector<std::string> layer_prefixes(const Model& m) {
    std::vector<std::string> v;
    for (size_t i = 0; i < m.layers.size(); ++i) v.push_back(m.layers[i].name.empty() ? std::to_string(i) : m.layers[i].name);
    return v;
  }
  std::string key(const std::string& ref) const {
    auto it = rename_.find(ref);
    return it == rename_.end() ? ref : it->second;
  }
  std::string tname(const std::string& n) const { return file_ + ": tensor '" + onnx::shown(n) + "'"; }

  void act(QuantizedWeights& q, const std::string& name, const QParams& p) {
    auto it = im_.values().find(name);
    if (it == im_.values().end() || it->second.is_const) return;  // a constant, or a value nothing reads
    q.acts.emplace(key(it->second.ref), p);                        // the first: the producer's own
  }

  // q.params and q.values, in the (possibly renamed) model's order, from the import's weights.
  void fill_values(QuantizedWeights& q) {
    q.params = params_with_offsets(q.model);
    const std::vector<ParamInfo> theirs = model_params(imp_.model);
    size_t total = 0;
    for (const ParamInfo& p : q.params) total += p.size;
    q.values.assign(total, 0.f);
    for (size_t k = 0; k < q.params.size(); ++k) {
      const std::vector<float>& v = imp_.weights.at(theirs[k].name);
      std::copy(v.begin(), v.end(), q.values.begin() + long(q.params[k].offset));
      source_[q.params[k].name] = theirs[k].name;
    }
  }
  const ParamInfo* param(const QuantizedWeights& q, const std::string& name) const {
    for (const ParamInfo& p : q.params)
      if (p.name == name) return &p;
    return nullptr;
  }
  // The ONNX initializer a parameter came from ("" if none).
  std::string onnx_source(const std::string& param) const {
    auto s = source_.find(param);
    if (s == source_.end()) return "";
    auto o = im_.sources().find(s->second);
    return o == im_.sources().end() ? "" : o->second;
  }

  void layer(QuantizedWeights& q, const nn::Graph& g, size_t i) {
    const nn::Node& n = g.nodes[i];
    if (n.spec->kind != LayerKind::Conv2d && n.spec->kind != LayerKind::Linear) return;
    const std::string src = onnx_source(n.param_prefix + ".weight");
    auto w = info_.weights.find(src);
    if (w == info_.weights.end()) return;  // an fp32 layer
    const ParamInfo& pw = *param(q, n.param_prefix + ".weight");
    QuantLayer l;
    l.prefix = n.param_prefix, l.shape = pw.shape;
    const size_t K = size_t(pw.shape[0]), per = pw.size / K;
    l.w_scale = channel_scales(w->second, src, K, q.values.data() + pw.offset, per);
    l.w.resize(pw.size);
    for (size_t j = 0; j < pw.size; ++j) {
      const double r = double(q.values[pw.offset + j]) / l.w_scale[j / per], qr = std::nearbyint(r);
      if (std::fabs(r - qr) > 1e-3 || qr < -128 || qr > 127)
        throw Error(tname(src) + ": the layer's weights are not integers -128..127 times its scales (a Gemm alpha?)");
      l.w[j] = int8_t(qr);
    }
    bias(q, g, n, l);
    q.layers.push_back(std::move(l));
  }

  // Per output channel: per tensor broadcast; per axis only along the axis that is the layer's K.
  std::vector<float> channel_scales(const QdqInfo::Weight& w, const std::string& src, size_t K, const float* fw, size_t per) {
    if (w.axis < 0) return std::vector<float>(K, w.scale[0]);
    // The importer keeps Conv's and Gemm-transB's [K, ...] as it is, and transposes MatMul's [C, K].
    bool transposed = false;
    if (w.dims.size() == 2 && w.dims[0] != w.dims[1]) transposed = w.dims[0] != int64_t(K);
    else if (w.dims.size() == 2) transposed = !same_data(src, fw, K * per);
    if (w.axis != (transposed ? 1 : 0) || w.scale.size() != K)
      throw Error(tname(src) + ": scales along axis " + std::to_string(w.axis) + " are per input channel; ember's are per output channel");
    return w.scale;
  }
  bool same_data(const std::string& src, const float* fw, size_t n) const {
    for (const auto& t : graph_->initializer())
      if (t.name() == src) return t.raw_data().size() == n * 4 && std::memcmp(fw, t.raw_data().data(), n * 4) == 0;
    return false;
  }

  void bias(QuantizedWeights& q, const nn::Graph& g, const nn::Node& n, QuantLayer& l) {
    const size_t K = l.w_scale.size();
    l.bias.assign(K, 0);
    l.has_bias = n.spec->bias;
    if (!l.has_bias) return;
    const int prod = g.tensors[size_t(n.in[0])].producer;
    const std::string in = prod < 0 ? "input" : g.nodes[size_t(prod)].param_prefix;
    auto a = q.acts.find(in);
    if (a == q.acts.end())
      throw Error(file_ + ": layer '" + l.prefix + "': its input '" + in + "' has no activation scale (a quantized bias needs one)");
    const ParamInfo& pb = *param(q, l.prefix + ".bias");
    const std::string src = onnx_source(l.prefix + ".bias");
    auto b = info_.biases.find(src);
    for (size_t k = 0; k < K; ++k) {
      const float unit = a->second.scale * l.w_scale[k];  // as the exporter computes it
      double v = double(q.values[pb.offset + k]) / unit;
      if (b != info_.biases.end()) v = b->second.scale[k] == unit ? b->second.q[k] : double(b->second.q[k]) * b->second.scale[k] / unit;
      if (!std::isfinite(v) || std::fabs(v) > 2147483647.0) throw Error(tname(src) + ": the bias does not fit int32 in its scale");
      l.bias[k] = int32_t(std::nearbyint(v));
    }
  }

 public:
  const onnx::pb::GraphProto* graph_ = nullptr;

 private:
  const onnx::Importer& im_;
  const QdqInfo& info_;
  const OnnxImport& imp_;
  std::string file_;
  std::map<std::string, std::string> rename_;  // the importer's layer name -> the metadata model's prefix
  std::map<std::string, std::string> source_;  // q's parameter name -> the import's parameter name
};

std::unique_ptr<Model> metadata_model(const onnx::pb::ModelProto& m, const std::string& file) {
  for (const auto& e : m.metadata_props())
    if (e.key() == "ember_model") try {
        return std::make_unique<Model>(parse_model_json(e.value(), file + ": metadata ember_model"));
      } catch (const Error&) {
        return nullptr;  // not ember's: the importer's names stay
      }
  return nullptr;
}

}  // namespace

QuantizedWeights import_onnx_quantized_from_memory(const uint8_t* bytes, size_t n, const std::string& name) {
  onnx::pb::ModelProto model;
  int opset = 0;
  onnx::parse_model(bytes, n, name, model, opset);
  try {
    const QdqInfo info = onnx::dequantize_graph(*model.mutable_graph(), name);
    if (!info.quantized) throw Error(name + ": no QuantizeLinear, DequantizeLinear or integer op: not a quantized model");
    onnx::Importer im(model.graph(), name, opset, n);
    const OnnxImport imp = onnx::run_import(im, name);
    Mapper m(im, info, imp, name);
    m.graph_ = &model.graph();
    const std::unique_ptr<Model> meta = metadata_model(model, name);
    // The quantized file's checks (quant/int8_check.h): scales the int8 arithmetic can carry, and
    // an exact u8 op's (ReLU, 2x2 max-pool, flatten) output QParams equal to its input's, which
    // the int8 plan keeps there: a file that requantizes at such an op is refused, never run with
    // the input's QParams in place of its own.
    return quant::checked_for_int8(m.run(meta.get()), name);
  } catch (const Error& e) {  // names from the file may hold newlines or control bytes
    throw Error(one_line(e.what()));
  }
}

bool is_quantized_onnx(const std::string& path) {
  const std::string bytes = read_input(path, onnx::ScanLimits{}.file_bytes, "ONNX model");
  onnx::pb::ModelProto model;
  int opset = 0;
  onnx::parse_model(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, model, opset);
  return onnx::has_quant_ops(model.graph());
}

QuantizedWeights import_onnx_quantized(const std::string& path) {
  const std::string bytes = read_input(path, onnx::ScanLimits{}.file_bytes, "ONNX model");
  return import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace ember
