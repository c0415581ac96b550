// Quantization-aware training's hand-over to quantize_model (qat.cpp): a model with Model::qat
// stripped of its fakequant nodes, its other parameters, and the learnt ranges as QParams.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ember/quant.h"

namespace ember::quant {

struct QatStripped {
  Model model;                            // qat off
  std::vector<float> values;              // model_params(model) order
  std::map<std::string, QParams> ranges;  // per tensor name the QAT model listed and observed
};
// values: model_params(model) order of the QAT model. Throws Error naming a range that is not
// finite or not ordered.
QatStripped strip_qat(const Model& model, const std::vector<float>& values);

}  // namespace ember::quant
