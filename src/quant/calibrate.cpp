// Post-training quantization (ember/quant.h): an inference plan of the fp32 model, with an observer
// node after every tensor (NCHW, unfused), runs over the calibration inputs while each observer
// records its tensor's range (and, for percentile and mse, a histogram); then every tensor gets u8
// QParams and every Conv2d and Linear int8 weights.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <limits>

#include "ember/error.h"
#include "ember/quant.h"
#include "kernels/ref/ref_fake_quant.h"
#include "nn/plan_impl.h"
#include "ops/ops.h"
#include "quant/int8_check.h"
#include "quant/node_graph.h"
#include "quant/qat.h"
#include "quant/quant_math.h"

namespace ember {

const char* calib_method_name(CalibMethod m) {
  switch (m) {
    case CalibMethod::percentile: return "percentile";
    case CalibMethod::mse: return "mse";
    default: return "minmax";
  }
}

CalibMethod parse_calib_method(const std::string& text, const std::string& what) {
  for (CalibMethod m : {CalibMethod::minmax, CalibMethod::percentile, CalibMethod::mse})
    if (text == calib_method_name(m)) return m;
  throw Error(what + ": expected minmax, percentile or mse, found '" + text + "'");
}

const QuantLayer* QuantizedWeights::layer(const std::string& prefix) const {
  for (const QuantLayer& l : layers)
    if (l.prefix == prefix) return &l;
  return nullptr;
}

namespace {
using quant::Observer;

// The tensor's name in QuantizedWeights::acts: "input", or its producer's parameter prefix.
std::string tensor_name(const nn::Graph& g, size_t t) {
  return t == 0 ? "input" : g.nodes[size_t(g.tensors[t].producer)].param_prefix;
}

// What the observers report to: see(tensor name, values, count) during one calibration pass.
using See = std::function<void(const std::string&, const float*, size_t)>;

// An observer node's layer: y = x (in place: the plan gives it its input's storage), and the
// tensor's values of this forward to *see.
class Observe final : public nn::Layer {
 public:
  Observe(const LayerSpec& s, std::shared_ptr<const See> see, std::string name)
      : Layer(s), see_(std::move(see)), name_(std::move(name)) {}
  nn::Dims infer(const nn::Dims& in) override { return in_ = out_ = in; }
  bool runs_in_place() const override { return true; }
  bool layout_agnostic() const override { return true; }
  void forward(const ops::Exec& e, const nn::Bufs& b, int n) override {
    const size_t count = size_t(n) * in_.size();
    const float* x = static_cast<const float*>(b.x);
    if (b.y != b.x) ops::copy_or_add<float>(e, static_cast<float*>(b.y), x, count, false);
    (*see_)(name_, x, count);
  }
  void backward(const ops::Exec&, const nn::Bufs&, int) override {}

 private:
  std::shared_ptr<const See> see_;
  std::string name_;
};

// The observer pass: after the producer of every tensor (the input too), an observer node that
// all the tensor's readers read instead (so no fusion joins nodes across it: each tensor is
// stored, and seen, as its own node writes it).
nn::GraphPass observer_pass(std::shared_ptr<const See> see) {
  return [see](nn::Graph& g) {
    const size_t tensors = g.tensors.size();
    const int out = nn::output(g);
    for (size_t t = 0; t < tensors; ++t) {
      nn::Node n = nn::identity_node();
      const std::string name = tensor_name(g, t);
      n.make = [see, name](const LayerSpec& s) { return std::make_unique<Observe>(s, see, name); };
      n.kind_name = "observe";
      n.label = "observe " + name;
      if (int(t) == out) nn::insert_after(g, g.tensors[t].producer, std::move(n));
      else nn::insert_reader(g, int(t), std::move(n), std::vector<int>(g.tensors[t].readers));  // a copy: the edit grows g.tensors
    }
  };
}

// The fp32 forward over all calibration inputs: an inference plan of the model with observer
// nodes (NCHW, unfused), batch by batch; see(name, data, count) per tensor and batch.
void calibration_pass(const Model& model, const std::vector<float>& values, const float* x, int n, int batch,
                      const QuantOptions& opt, const See& see) {
  auto sink = std::make_shared<See>();
  PlanOptions po;
  po.batch = batch, po.threads = opt.threads, po.isa = opt.isa, po.training = false, po.denormals = opt.denormals;
  po.layout = "nchw";
  Plan plan = plan_impl::plan_with_passes(model, po, {observer_pass(sink)});
  std::copy(values.begin(), values.end(), static_cast<float*>(plan.param_data()));
  const size_t D = size_t(model.in_c) * model.in_h * model.in_w;
  *sink = see;
  for (int s0 = 0; s0 < n; s0 += batch) {
    const int m = std::min(batch, n - s0);
    std::copy(x + size_t(s0) * D, x + size_t(s0 + m) * D, static_cast<float*>(plan.input()));
    plan.forward(m);
  }
}

bool quantizable(const LayerSpec& s) { return s.kind == LayerKind::Conv2d || s.kind == LayerKind::Linear; }

// Per output channel, symmetric: w [K, rest] fp32 -> int8 and scales; the values dequantized.
QuantLayer quantize_weights(const nn::Node& node, const ParamInfo& wp, const ParamInfo* bp, std::vector<float>& values,
                            float in_scale, int bits) {
  QuantLayer l;
  l.prefix = node.param_prefix;
  l.shape = wp.shape;
  const int K = wp.shape[0];
  const size_t per = wp.size / size_t(K);
  l.w.resize(wp.size);
  l.w_scale.resize(size_t(K));
  l.bias.assign(size_t(K), 0);
  l.has_bias = bp != nullptr;
  float* w = values.data() + wp.offset;
  for (int k = 0; k < K; ++k) {
    float* wk = w + size_t(k) * per;  // rewritten with what int8 represents
    const float s = ref::fake_quant_channel<float>(wk, wk, per, bits, l.w.data() + size_t(k) * per);
    l.w_scale[size_t(k)] = s;
    if (bp) {
      float& b = values[bp->offset + size_t(k)];
      l.bias[size_t(k)] = quant::quantize_bias(b, double(in_scale) * s);
      b = float(double(l.bias[size_t(k)]) * double(in_scale) * s);
    }
  }
  return l;
}
// The parameters that stay fp32 (norms, layer scales, running statistics), rounded to binary16
// where every value of the tensor is 0 or a normal half (2^-14 <= |v| <= 65504: 11 significant
// bits, far finer than the int8 steps around them); others (a layer scale of 1e-6) stay fp32.
// A norm's scale and shift may also hold values below 2^-14 (subnormal halves, or 0 below 2^-25):
// they act on normalised values of magnitude about 1, where an absolute error of at most 2^-25 is
// nothing beside the int8 steps. The file then stores them in half the bytes (save_quantized:
// F16 where exact).
void round_to_half(QuantizedWeights& q) {
  for (const ParamInfo& p : q.params) {
    const LayerKind k = q.model.layers[size_t(p.layer)].kind;
    if (k == LayerKind::Conv2d || k == LayerKind::Linear || (p.role == ParamRole::running_stat && p.shape.empty())) continue;
    const bool norm = p.role == ParamRole::norm_scale || p.role == ParamRole::norm_shift;
    float* v = q.values.data() + p.offset;
    bool fits = true;
    for (size_t i = 0; i < p.size && fits; ++i)
      fits = v[i] == 0 || ((norm || std::fabs(v[i]) >= 0x1p-14f) && std::fabs(v[i]) <= 65504.0f);
    if (fits)
      for (size_t i = 0; i < p.size; ++i) v[i] = half_to_float(float_to_half(v[i]));
  }
}
}  // namespace

namespace {
// Every Conv2d and Linear quantized from its fp32 weight and bias in `values` (into q.values, as
// int8 represents them), each bias in units of its input's scale in q.acts.
void quantize_layers(QuantizedWeights& q, const quant::NodeGraph& ng, const std::vector<float>& values, int bits) {
  const nn::Graph& g = ng.g;
  q.layers.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& node = g.nodes[i];
    if (!quantizable(*node.spec) || ng.first_param[i] < 0) continue;
    const size_t t0 = size_t(ng.first_param[i]);
    const ParamInfo* bp = t0 + 1 < ng.params.size() && ng.params[t0 + 1].layer == int(i) ? &ng.params[t0 + 1] : nullptr;
    for (const ParamInfo* p : {&ng.params[t0], bp})
      if (p) std::copy_n(values.begin() + long(p->offset), p->size, q.values.begin() + long(p->offset));
    const float in_scale = q.acts[tensor_name(g, size_t(node.in[0]))].scale;
    q.layers.push_back(quantize_weights(node, ng.params[t0], bp, q.values, in_scale, bits));
  }
}

// The output of each exact u8 op (ReLU, max-pool, flatten on u8 values) keeps its input's
// QParams in the int8 plan, and the reader refuses a file whose own pair there differs: those
// calibrated on their own are replaced by their input's, and the layers quantized again when one
// moved (a Linear after a flatten has its bias in that tensor's units).
void keep_exact_u8_qparams(QuantizedWeights& q, const quant::NodeGraph& ng, const std::vector<float>& values, int bits) {
  bool moved = false;
  for (const auto& [t, from] : quant::u8_passthrough(q)) {
    QParams& p = q.acts.at(t);
    const QParams f = q.acts.at(from);
    if (p.scale != f.scale || p.zero_point != f.zero_point) p = f, moved = true;
  }
  if (moved) quantize_layers(q, ng, values, bits);
}

// learnt: QAT's ranges (strip_qat), which replace the calibrated QParams of their tensors.
QuantizedWeights quantize(const Model& model, const std::vector<float>& values, const float* x, int n,
                          const QuantOptions& opt, const std::map<std::string, QParams>& learnt) {
  if (n < 1) throw Error("quantize: no calibration samples");
  if (opt.weight_bits != 7 && opt.weight_bits != 8)
    throw Error("weight_bits: expected 7 or 8, found " + std::to_string(opt.weight_bits));
  const quant::NodeGraph ng = quant::make_node_graph(model, std::min(n, 32), opt.threads);
  const nn::Graph& g = ng.g;
  size_t total = 0;
  for (const ParamInfo& p : ng.params) total = std::max(total, p.offset + p.size);
  if (values.size() != total)
    throw Error("quantize: " + std::to_string(values.size()) + " parameter values for a model of " + std::to_string(total));
  resolve_isa(opt.isa, "quantize: isa");
  std::map<std::string, Observer> obs;
  for (size_t t = 0; t < g.tensors.size(); ++t) obs[tensor_name(g, t)];
  calibration_pass(model, values, x, n, ng.batch, opt, [&](const std::string& t, const float* d, size_t c) { obs.at(t).range(d, c); });
  if (opt.method != CalibMethod::minmax) {
    for (auto& [t, o] : obs) o.start_histogram();
    calibration_pass(model, values, x, n, ng.batch, opt,
                     [&](const std::string& t, const float* d, size_t c) { obs.at(t).histogram(d, c); });
  }
  QuantizedWeights q;
  q.model = model;
  q.params = ng.params;
  q.values = values;
  q.calib = {opt.method, n, opt.percentile, opt.data, opt.weight_bits};
  for (size_t t = 0; t < g.tensors.size(); ++t) q.acts[tensor_name(g, t)] = obs.at(tensor_name(g, t)).qparams(opt.method, opt.percentile);
  for (const auto& [name, qp] : learnt) q.acts[name] = qp;
  q.calib.qat_ranges = int(learnt.size());
  round_to_half(q);
  quantize_layers(q, ng, values, opt.weight_bits);
  keep_exact_u8_qparams(q, ng, values, opt.weight_bits);
  return q;
}
}  // namespace

QuantizedWeights quantize_model(const Model& model, const std::vector<float>& values, const float* x, int n,
                                const QuantOptions& opt) {
  if (!model.qat.on()) return quantize(model, values, x, n, opt, {});
  if (opt.weight_bits != model.qat.weight_bits)
    throw Error("weight_bits: the model was trained with " + std::to_string(model.qat.weight_bits) +
                "-bit fake-quantized weights (qat.weight_bits); quantize it with " + std::to_string(model.qat.weight_bits));
  const quant::QatStripped s = quant::strip_qat(model, values);
  return quantize(s.model, s.values, x, n, opt, s.ranges);
}

}  // namespace ember
