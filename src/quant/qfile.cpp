// The quantized weight file (ember/quant.h): safetensors with I8 weights beside their F32 scales
// and I8 zero points, I32 biases, per-tensor activation scales and U8 zero points, every other
// parameter F32, the model and the calibration in __metadata__. The reader checks every tensor
// against the model before it allocates, and refuses bad scales, zero points, shapes and mixes, and
// whatever the int8 plan or the QDQ export could not compute with (quant/int8_check.h).
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "ember/error.h"
#include "ember/quant.h"
#include "ember/version.h"
#include "ember_support/json.h"
#include "io/source.h"
#include "quant/int8_check.h"
#include "quant/node_graph.h"
#include "quant/quant_math.h"

namespace ember {

namespace {
using json = nlohmann::json;

using quant::act_scale_name, quant::act_zp_name;

std::vector<int64_t> shape64(const std::vector<int>& s) { return {s.begin(), s.end()}; }

// The tensor name of the input of the node owning parameter p ("input" or a producer's prefix).
std::string input_act(const nn::Graph& g, int layer) {
  const int t = g.nodes[size_t(layer)].in[0];
  return t == 0 ? "input" : g.nodes[size_t(g.tensors[size_t(t)].producer)].param_prefix;
}
}  // namespace

void save_quantized(const QuantizedWeights& q, const std::string& path) {
  quant::checked_for_int8(q, "save " + path);  // never a file the reader refuses
  std::vector<io::TensorOut> out;
  std::vector<std::vector<int8_t>> zeros;  // the weight zero points
  zeros.reserve(q.layers.size());
  std::vector<std::vector<uint16_t>> halves;  // the fp32 parameters that binary16 holds exactly
  halves.reserve(q.params.size());
  for (const ParamInfo& p : q.params) {
    const QuantLayer* l = nullptr;
    for (const QuantLayer& c : q.layers)
      if (p.name == c.prefix + ".weight" || (c.has_bias && p.name == c.prefix + ".bias")) l = &c;
    if (!l) {
      const float* v = q.values.data() + p.offset;
      if (io::param_is_count(p) || !quant::exact_in_half(v, p.size)) {
        out.push_back({p.name, shape64(p.shape), v, p.size, false, io::param_is_count(p)});
        continue;
      }
      std::vector<uint16_t>& h = halves.emplace_back(p.size);  // quantize_model rounded it to fit
      for (size_t i = 0; i < p.size; ++i) h[i] = float_to_half(v[i]);
      out.push_back({p.name, shape64(p.shape), nullptr, p.size, false, false, h.data(), "F16", 2});
      continue;
    }
    const size_t K = l->w_scale.size();
    if (p.name == l->prefix + ".bias") {
      out.push_back({p.name, {int64_t(K)}, nullptr, K, false, false, l->bias.data(), "I32", 4});
      continue;
    }
    out.push_back({p.name, shape64(l->shape), nullptr, l->w.size(), false, false, l->w.data(), "I8", 1});
    out.push_back({l->prefix + ".weight_scale", {int64_t(K)}, l->w_scale.data(), K});
    const std::vector<int8_t>& z = zeros.emplace_back(K, 0);
    out.push_back({l->prefix + ".weight_zero_point", {int64_t(K)}, nullptr, K, false, false, z.data(), "I8", 1});
  }
  std::vector<uint8_t> zps;
  zps.reserve(q.acts.size());
  for (const auto& [name, a] : q.acts) {
    out.push_back({act_scale_name(name), {}, &a.scale, 1});
    zps.push_back(uint8_t(a.zero_point));
    out.push_back({act_zp_name(name), {}, nullptr, 1, false, false, &zps.back(), "U8", 1});
  }
  const json calib = {{"version", 1},
                      {"scheme", "int8 weights symmetric per output channel; u8 activations per tensor"},
                      {"calib", calib_method_name(q.calib.method)},
                      {"calib_samples", q.calib.samples},
                      {"percentile", q.calib.percentile},
                      {"weight_bits", q.calib.weight_bits},
                      {"qat_ranges", q.calib.qat_ranges},
                      {"data", q.calib.data}};
  io::write_safetensors(path, out,
                        {{"format", "pt"}, {"ember_version", kVersion}, {"model", model_to_json(q.model)},
                         {"ember_quant", json_text(calib)}});
}

namespace {
// Reads and checks the file's tensors against the model (everything before anything large is allocated).
class Reader {
 public:
  // A BatchNorm2d's running variance is >= 0, as ONNX's import requires it (the export writes it
  // as it is): a negative one would load, then make a file ember's own import refuses.
  void check_variances(const QuantizedWeights& q) const {
    constexpr std::string_view kVar = "running_var";
    for (const ParamInfo& p : q.params) {
      if (p.role != ParamRole::running_stat || !std::string_view(p.name).ends_with(kVar)) continue;
      for (size_t i = 0; i < p.size; ++i)
        if (q.values[p.offset + i] < 0)
          throw Error(file_ + ": tensor '" + p.name + "' [" + std::to_string(i) + "] is " +
                      std::to_string(q.values[p.offset + i]) + "; a variance is >= 0");
    }
  }

  Reader(const io::ByteSource& src) : src_(src), h_(io::read_safetensors_header(src)), file_(src.name()) {}

  QuantizedWeights read() {
    QuantizedWeights q;
    read_metadata(q);
    const quant::NodeGraph ng = quant::make_node_graph(q.model, 1, 1);
    q.params = ng.params;
    size_t total = 0;
    for (const ParamInfo& p : q.params) total = std::max(total, p.offset + p.size);
    check_layout(q, ng);
    read_acts(q, ng.g);
    q.values.assign(total, 0.0f);
    for (const ParamInfo& p : q.params)
      if (!quantized(p)) io::read_tensor_f32(src_, h_, entry(p.name), q.values.data() + p.offset, p.size);
    for (const ParamInfo& p : q.params)
      if (!quantized(p)) io::check_finite(q.values.data() + p.offset, p.size, file_ + ": tensor '" + p.name + "'");
    check_variances(q);
    for (size_t i = 0; i < ng.g.nodes.size(); ++i) read_layer(q, ng, i);
    for (const SafetensorsEntry& e : h_.tensors)
      if (!used_.count(e.name)) fail(e.name, "is not a tensor of model " + q.model.name + "'s quantized weights");
    return quant::checked_for_int8(std::move(q), file_);
  }

 private:
  [[noreturn]] void fail(const std::string& tensor, const std::string& msg) const {
    throw Error(file_ + ": tensor '" + tensor + "': " + msg);
  }
  const SafetensorsEntry& entry(const std::string& name) {
    const SafetensorsEntry* e = h_.find(name);
    if (!e) throw Error(file_ + ": tensor '" + name + "' is missing");
    used_.insert(name);
    return *e;
  }
  const SafetensorsEntry& typed(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) {
    const SafetensorsEntry& e = entry(name);
    if (e.dtype != dtype) fail(name, std::string("expected dtype ") + dtype + ", found " + e.dtype);
    if (e.shape != shape) fail(name, "expected shape " + json_text(json(shape)) + ", found " + json_text(json(e.shape)));
    return e;
  }
  bool quantized(const ParamInfo& p) const { return quantized_.count(p.name) > 0; }

  void read_metadata(QuantizedWeights& q) {
    const auto m = h_.metadata.find("model");
    const auto c = h_.metadata.find("ember_quant");
    if (c == h_.metadata.end())
      throw Error(file_ + ": __metadata__.ember_quant is missing: not a quantized weights file (`ember quantize` writes one)");
    if (m == h_.metadata.end()) throw Error(file_ + ": __metadata__.model is missing");
    q.model = parse_model_json(m->second, file_ + ": __metadata__.model");
    const json j = parse_json(c->second, file_ + ": __metadata__.ember_quant");
    const std::string where = file_ + ": __metadata__.ember_quant";
    if (!j.is_object() || !j.contains("calib") || !j["calib"].is_string())
      throw Error(where + ": expected an object with \"calib\" (minmax, percentile or mse)");
    q.calib.method = parse_calib_method(j["calib"].get<std::string>(), where + ".calib");
    if (j.contains("calib_samples") && j["calib_samples"].is_number_integer())
      q.calib.samples = int(std::clamp<int64_t>(j["calib_samples"].get<int64_t>(), 0, INT32_MAX));
    if (j.contains("percentile") && j["percentile"].is_number()) q.calib.percentile = j["percentile"].get<double>();
    if (j.contains("data") && j["data"].is_string()) q.calib.data = j["data"].get<std::string>();
    if (j.contains("qat_ranges") && j["qat_ranges"].is_number_integer())
      q.calib.qat_ranges = int(std::clamp<int64_t>(j["qat_ranges"].get<int64_t>(), 0, INT32_MAX));
    if (j.contains("weight_bits")) {  // what was asked (7: read_layer checks the weights); the I8 values decide the kernels
      const json& b = j["weight_bits"];
      if (!b.is_number_integer() || (b.get<int64_t>() != 7 && b.get<int64_t>() != 8))
        throw Error(where + ".weight_bits: expected 7 or 8, found " + json_text(b));
      q.calib.weight_bits = int(b.get<int64_t>());
    }
  }

  // Which parameters are quantized (an I8 weight), each with the shapes it must have; mixes refused.
  void check_layout(const QuantizedWeights& q, const quant::NodeGraph& ng) {
    for (const ParamInfo& p : q.params) {
      const SafetensorsEntry* e = h_.find(p.name);
      if (!e) throw Error(file_ + ": tensor '" + p.name + "' is missing");
      if (e->shape != shape64(p.shape))
        fail(p.name, "expected shape " + json_text(json(p.shape)) + ", found " + json_text(json(e->shape)));
      const LayerKind k = ng.g.nodes[size_t(p.layer)].spec->kind;
      const bool qk = k == LayerKind::Conv2d || k == LayerKind::Linear;
      if (e->dtype == "I8" && (!qk || p.role != ParamRole::weight))
        fail(p.name, "is I8, but only Conv2d and Linear weights are quantized");
      if (e->dtype == "I8") quantized_.insert(p.name);
      const bool fp = e->dtype == "F32" || e->dtype == "F16" || e->dtype == "BF16" || e->dtype == "F64" ||
                      (e->dtype == "I64" && p.role == ParamRole::running_stat);
      if (e->dtype != "I8" && e->dtype != "I32" && !fp)
        fail(p.name, "has dtype " + e->dtype + ": expected I8 (a quantized weight), I32 (its bias) or a float type");
      if (e->dtype == "I32" && (!qk || p.role != ParamRole::bias)) fail(p.name, "is I32, but only quantized biases are");
    }
    for (const ParamInfo& p : q.params) {
      if (p.role != ParamRole::bias) continue;
      const std::string w = ng.g.nodes[size_t(p.layer)].param_prefix + ".weight";
      const bool wq = quantized_.count(w) > 0, bq = h_.find(p.name)->dtype == "I32";
      if (wq != bq)
        fail(p.name, std::string(bq ? "is I32 (quantized) but '" : "is fp32 but '") + w +
                         (wq ? "' is I8: a quantized layer's bias is I32" : "' is fp32: quantized and fp32 tensors mixed in one layer"));
      if (bq) quantized_.insert(p.name);
    }
  }

  float scalar_scale(const std::string& name) {
    float s;
    src_.read(&s, 4, h_.data_offset + typed(name, "F32", {}).begin, name);
    return s;
  }

  // Per tensor, where the file has one (a QDQ import quantizes only some tensors: the others stay
  // fp32); both halves or neither.
  void read_acts(QuantizedWeights& q, const nn::Graph& g) {
    std::vector<std::string> names{"input"};
    for (const nn::Node& n : g.nodes) names.push_back(n.param_prefix);
    for (const std::string& a : names) {
      const bool has_s = h_.find(act_scale_name(a)) != nullptr, has_z = h_.find(act_zp_name(a)) != nullptr;
      if (has_s != has_z) fail(has_s ? act_zp_name(a) : act_scale_name(a), std::string("is missing (the file has ") + (has_s ? act_scale_name(a) : act_zp_name(a)) + ")");
      if (!has_s) continue;
      QParams p;
      p.scale = scalar_scale(act_scale_name(a));
      uint8_t z;
      src_.read(&z, 1, h_.data_offset + typed(act_zp_name(a), "U8", {}).begin, act_zp_name(a));
      p.zero_point = z;
      if (const quant::Problem e = quant::qparams_problem(p, act_scale_name(a), act_zp_name(a))) fail(e.tensor, e.what);
      q.acts[a] = p;
    }
  }

  void read_layer(QuantizedWeights& q, const quant::NodeGraph& ng, size_t i) {
    const nn::Node& node = ng.g.nodes[i];
    const std::string w = node.param_prefix + ".weight";
    if (!quantized_.count(w)) return;
    const ParamInfo* wp = nullptr;
    const ParamInfo* bp = nullptr;
    for (const ParamInfo& p : q.params)
      if (p.layer == int(i)) (p.role == ParamRole::bias ? bp : wp) = &p;
    QuantLayer l;
    l.prefix = node.param_prefix;
    l.shape = wp->shape;
    const int64_t K = wp->shape[0];
    l.w.resize(wp->size);
    src_.read(l.w.data(), l.w.size(), h_.data_offset + entry(w).begin, w);
    l.w_scale.resize(size_t(K));
    src_.read(l.w_scale.data(), size_t(K) * 4, h_.data_offset + typed(w + "_scale", "F32", {K}).begin, w + "_scale");
    std::vector<int8_t> z(static_cast<size_t>(K));
    src_.read(z.data(), z.size(), h_.data_offset + typed(w + "_zero_point", "I8", {K}).begin, w + "_zero_point");
    for (int64_t k = 0; k < K; ++k)
      if (z[size_t(k)] != 0)
        fail(w + "_zero_point", "the zero point at index " + std::to_string(k) + " is " + std::to_string(z[size_t(k)]) +
                                    ": weights are symmetric (zero points 0)");
    l.has_bias = bp != nullptr;
    l.bias.assign(size_t(K), 0);
    if (bp) src_.read(l.bias.data(), size_t(K) * 4, h_.data_offset + entry(bp->name).begin, bp->name);
    const size_t per = wp->size / size_t(K);
    const auto in_act = q.acts.find(input_act(ng.g, int(i)));
    if (in_act == q.acts.end())
      fail(act_scale_name(input_act(ng.g, int(i))), "is missing: quantized layer " + node.param_prefix + " reads that tensor");
    const float in_scale = in_act->second.scale;
    if (const quant::Problem e = quant::layer_problem(l, in_scale, act_scale_name(input_act(ng.g, int(i))))) fail(e.tensor, e.what);
    check_weight_bits(q, l);
    for (size_t k = 0; k < size_t(K); ++k) {
      for (size_t j = 0; j < per; ++j) q.values[wp->offset + k * per + j] = float(l.w[k * per + j]) * l.w_scale[k];
      if (bp) q.values[bp->offset + k] = float(double(l.bias[k]) * double(in_scale) * l.w_scale[k]);
    }
    io::check_finite(q.values.data() + wp->offset, wp->size, file_ + ": tensor '" + w + "' dequantized");
    if (bp) io::check_finite(q.values.data() + bp->offset, bp->size, file_ + ": tensor '" + bp->name + "' dequantized");
    q.layers.push_back(std::move(l));
  }

  // 7-bit weights (__metadata__.ember_quant.weight_bits 7, `ember quantize --weight-bits 7`) lie in
  // [-63, 63], the range its scales max|w| / 63 give.
  void check_weight_bits(const QuantizedWeights& q, const QuantLayer& l) const {
    if (q.calib.weight_bits != 7) return;
    for (size_t j = 0; j < l.w.size(); ++j)
      if (l.w[j] < -63 || l.w[j] > 63)
        fail(l.prefix + ".weight", "holds " + std::to_string(l.w[j]) + " at index " + std::to_string(j) +
                                       ": __metadata__.ember_quant.weight_bits 7 means weights in [-63, 63]");
  }

  const io::ByteSource& src_;
  SafetensorsHeader h_;
  std::string file_;
  std::set<std::string> used_, quantized_;
};
}  // namespace

QuantizedWeights load_quantized(const std::string& path) {
  const io::FileSource src(path);
  return Reader(src).read();
}

QuantizedWeights load_quantized_from_memory(const uint8_t* bytes, size_t n, const std::string& name) {
  const io::MemorySource src(bytes, n, name);
  return Reader(src).read();
}

bool is_quantized_file(const std::string& path) {
  const io::FileSource src(path);
  return io::read_safetensors_header(src).metadata.count("ember_quant") > 0;
}

}  // namespace ember
