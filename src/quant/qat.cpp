// Quantization-aware training's hand-over to post-training quantization (docs/int8.md): a model
// trained with Model::qat loses its fakequant nodes, and the ranges they learnt become the
// activation QParams of their tensors (the calibration still covers every other tensor).
#include <cmath>
#include <map>

#include "ember/error.h"
#include "quant/qat.h"
#include "quant/quant_math.h"

namespace ember::quant {

QatStripped strip_qat(const Model& model, const std::vector<float>& values) {
  const std::vector<ParamInfo> all = model_params(model);
  size_t total = 0;
  for (const ParamInfo& p : all) total = std::max(total, p.offset + p.size);
  if (values.size() != total)
    throw Error("quantize: " + std::to_string(values.size()) + " parameter values for a QAT model of " + std::to_string(total));
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : all) by_name[p.name] = &p;
  QatStripped s;
  s.model = model;
  s.model.qat = {};
  for (const ParamInfo& p : model_params(s.model)) {
    const ParamInfo* q = by_name.at(p.name);  // the same layers: every name is there
    s.values.insert(s.values.end(), values.begin() + long(q->offset), values.begin() + long(q->offset + q->size));
  }
  for (const std::string& t : model.qat.tensors) {
    const float* r = values.data() + by_name.at(t + ".fake_quant.range")->offset;
    const float seen = values[by_name.at(t + ".fake_quant.observed")->offset];
    if (!(seen >= 0.5f)) continue;  // never observed: calibration decides
    if (!std::isfinite(r[0]) || !std::isfinite(r[1]) || r[0] > r[1])
      throw Error(t + ".fake_quant.range: expected finite [lo, hi] with lo <= hi, found [" + std::to_string(r[0]) + ", " +
                  std::to_string(r[1]) + "]");
    s.ranges[t] = qparams_for_range(double(r[0]), double(r[1]));
  }
  return s;
}

}  // namespace ember::quant
