// The fixed tiny model the weights and checkpoint fuzz targets load into (a 7x7 stride-7 conv,
// flatten, linear: 220 parameters), so seed files stay a few KB. fuzz/make_io_corpus.sh writes
// the seeds with `ember train` on this model.
#pragma once
#include "ember/model.h"
#include "ember/plan.h"

inline const char* kFuzzTinyModel =
    R"({"name": "fuzz-tiny", "input": [1, 28, 28], "classes": 10, "layers": [)"
    R"({"type": "conv2d", "out_channels": 1, "kernel": 7, "stride": 7}, {"type": "flatten"},)"
    R"({"type": "linear", "out_features": 10}]})";

inline ember::Plan& fuzz_tiny_plan(ember::OptimizerKind opt) {
  static ember::Plan adam = [] {
    ember::PlanOptions o;
    o.batch = 1;
    return ember::Plan(ember::parse_model_json(kFuzzTinyModel, "fuzz-tiny"), o);
  }();
  static ember::Plan sgd = [] {
    ember::PlanOptions o;
    o.batch = 1;
    o.optimizer.kind = ember::OptimizerKind::SGD;
    return ember::Plan(ember::parse_model_json(kFuzzTinyModel, "fuzz-tiny"), o);
  }();
  return opt == ember::OptimizerKind::SGD ? sgd : adam;
}
