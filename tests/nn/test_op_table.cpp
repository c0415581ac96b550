// The op table (src/nn/op_table.h, ember/ops.h): every layer kind has exactly one descriptor;
// every op's example model parses, writes back to the same description, and trains (a fixed
// batch's loss falls); parameters get their roles and L2 follows them; --act's and Python's
// activation names come from it; every activation brings its layer and ONNX mappings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "ember/ember.h"
#include "nn/op_table.h"
#include "plan_util.h"

namespace ember::test {
namespace {

TEST(OpTable, EveryLayerKindHasOneDescriptor) {
  const auto& t = nn::op_table();
  std::set<int> kinds;
  std::set<std::string> names;
  for (const nn::OpDesc* d : t) {
    EXPECT_TRUE(kinds.insert(int(d->kind)).second) << d->name << ": a second descriptor of its kind";
    EXPECT_TRUE(names.insert(d->name).second) << d->name << ": a second op of that name";
    EXPECT_EQ(nn::find_op(d->name), d);
    EXPECT_FALSE(d->layouts.empty()) << d->name;
    EXPECT_FALSE(d->dtypes.empty()) << d->name;
    EXPECT_NE(d->make, nullptr) << d->name << ": its layer is its op file's (make)";
  }
  for (int k = 0; k < kLayerKinds; ++k) EXPECT_TRUE(kinds.count(k)) << "layer kind " << k << " has no op";
  EXPECT_EQ(t.size(), size_t(kLayerKinds));
  EXPECT_EQ(nn::find_op("nonesuch"), nullptr);
}

// One training run of the example: Adam on one fixed batch of the synthetic data for 80 steps.
// Returns the first and last losses.
std::pair<double, double> train_example(const Model& m) {
  PlanOptions o;
  o.batch = 16;
  o.optimizer.kind = OptimizerKind::Adam;
  Plan plan(m, o);
  plan.init_params(3);
  const Dataset d = synthetic(16, 5);
  float* x = static_cast<float*>(plan.input());
  for (size_t i = 0; i < d.images.size(); ++i) x[i] = d.images[i] / 255.f;
  for (int i = 0; i < 16; ++i) plan.labels()[i] = d.labels[size_t(i)];
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    plan.forward(16);
    last = plan.loss(16, true);
    if (step == 0) first = last;
    plan.backward_step(16, 1e-2);
  }
  return {first, last};
}

TEST(OpTable, EveryExampleParsesWritesBackAndTrains) {
  for (const nn::OpDesc* d : nn::op_table()) {
    SCOPED_TRACE(d->name);
    const Model m = parse_model_json(d->example, "example");
    bool uses = false;
    for (const LayerSpec& s : m.layers) uses = uses || s.kind == d->kind;
    EXPECT_TRUE(uses) << "the example does not use its op";
    EXPECT_EQ(m.in_c, 1);
    EXPECT_EQ(m.in_h, 28);
    EXPECT_EQ(m.in_w, 28);
    EXPECT_EQ(m.num_classes, 10);
    const std::string text = model_to_json(m);
    EXPECT_EQ(model_to_json(parse_model_json(text, "written")), text);
    const auto [first, last] = train_example(m);
    EXPECT_TRUE(std::isfinite(last));
    EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  }
}

// A training plan runs partial batches (the last of an epoch; Python's predict after fit): each
// sample's output is its output in the full batch, within fp32 rounding (a batch smaller than a
// Linear's outputs runs as y^T = w x^T), and nothing is written outside the arena (the workspace
// of the smallest batch once was not reserved: ASan found it through this test).
TEST(OpTable, EveryExampleRunsPartialBatches) {
  for (const nn::OpDesc* d : nn::op_table()) {
    SCOPED_TRACE(d->name);
    PlanOptions o;
    o.batch = 16;
    Plan plan(parse_model_json(d->example, "example"), o);
    plan.init_params(2);
    plan.set_train_mode(false);
    const auto x = randn(16 * 784, 4);
    float* in = static_cast<float*>(plan.input());
    for (size_t i = 0; i < x.size(); ++i) in[i] = float(x[i]);
    plan.forward(16);
    const std::vector<float> full(static_cast<const float*>(plan.output()), static_cast<const float*>(plan.output()) + 160);
    double scale = 0;
    for (float v : full) scale = std::max(scale, double(std::abs(v)));
    for (int n : {1, 3, 9}) {
      plan.forward(n);
      const float* y = static_cast<const float*>(plan.output());
      for (int i = 0; i < n * 10; ++i) ASSERT_NEAR(y[i], full[size_t(i)], 1e-5 * scale) << "batch " << n << ", output " << i;
    }
  }
}

// An op that brings its own layer (OpDesc::make: an activation, nn/activation.h):
// the example's parameter gradients, which pass through the op's backward, against central
// differences of the loss in double.
TEST(OpTable, OwnLayersMatchFiniteDifferences) {
  int checked = 0;
  for (const nn::OpDesc* d : nn::op_table()) {
    if (!d->make) continue;
    SCOPED_TRACE(d->name);
    PlanOptions o;
    o.batch = 2;
    o.dtype = DType::f64;
    Plan plan(parse_model_json(d->example, "example"), o);
    plan.init_params(5);
    pass(plan, 2, 6);
    double* w = static_cast<double*>(plan.param_data());
    const double* g = static_cast<const double*>(plan.grad_data());
    for (const ParamInfo& p : plan.params()) {
      // A straight-through op's own parameters: its backward is the estimator (test_qat.cpp), and
      // its example puts it first, so every other gradient here is the derivative.
      if (d->straight_through && p.layer == 0) continue;
      std::vector<double> vals(w + p.offset, w + p.offset + p.size), grads(g + p.offset, g + p.offset + p.size);
      expect_gradient(p.name, vals, grads, [&] {
        std::copy(vals.begin(), vals.end(), w + p.offset);
        plan.forward(2);
        return plan.loss(2, false);
      }, 1e-6, 1e-5, std::max<size_t>(1, p.size / 30));
      std::copy(vals.begin(), vals.end(), w + p.offset);
    }
    ++checked;
  }
  EXPECT_GE(checked, 1) << "no op of the table brings its own layer";
}

TEST(OpTable, FieldsAreCheckedByTheDescriptor) {
  auto error_of = [](const std::string& layer) {
    try {
      parse_layer_json(layer, "f.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"type": "conv2d", "kernel": 3})"), "f.json: layer.out_channels: missing");
  EXPECT_NE(error_of(R"({"type": "relu", "kernel": 3})").find("layer.kernel: unknown key (expected one of type, name, inputs)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "nonesuch"})").find("unknown layer \"nonesuch\" (expected add, avgpool2d, batchnorm2d, concat, conv2d,"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "droppath", "p": 1})").find("layer.p: expected a probability in [0, 1), found 1"),
            std::string::npos);
  const LayerSpec s = parse_layer_json(R"({"type": "maxpool2d", "kernel": [3, 2]})", "f.json");
  EXPECT_EQ(s.stride_h, 3);  // a pool's stride defaults to its kernel
  EXPECT_EQ(s.stride_w, 2);
}

TEST(OpTable, ParameterRolesDecideWeightDecay) {
  const Model m = parse_model_json(R"({"layers": [{"type": "flatten"}, {"type": "linear", "out_features": 8},
      {"type": "layernorm"}, {"type": "layerscale"}, {"type": "linear", "out_features": 10}]})", "roles");
  PlanOptions o;
  o.batch = 4;
  o.optimizer.kind = OptimizerKind::SGD;
  o.optimizer.l2 = 0.5;
  Plan plan(m, o);
  plan.init_params(1);
  std::map<std::string, ParamRole> role;
  for (const ParamInfo& p : plan.params()) role[p.name] = p.role;
  EXPECT_EQ(role.at("1.weight"), ParamRole::weight);
  EXPECT_EQ(role.at("1.bias"), ParamRole::bias);
  EXPECT_EQ(role.at("2.weight"), ParamRole::norm_scale);
  EXPECT_EQ(role.at("2.bias"), ParamRole::norm_shift);
  EXPECT_EQ(role.at("3.layer_scale"), ParamRole::layer_scale);
  // With zero gradients, only L2 moves a parameter: the decaying roles shrink, the others stay.
  float* w = static_cast<float*>(plan.param_data());
  for (const ParamInfo& p : plan.params())
    for (size_t i = 0; i < p.size; ++i) w[p.offset + i] = 1.f;
  std::fill_n(static_cast<float*>(plan.grad_data()), plan.params().back().offset + plan.params().back().size, 0.f);
  plan.optimizer_step(0.1);
  for (const ParamInfo& p : plan.params()) {
    EXPECT_EQ(p.is_weight, param_decays(p.role)) << p.name;
    const float want = param_decays(p.role) ? 1.f - 0.1f * 0.5f : 1.f;
    EXPECT_FLOAT_EQ(w[p.offset], want) << p.name << " (" << param_role_name(p.role) << ")";
  }
}

TEST(OpTable, ActivationNamesComeFromTheTable) {
  std::vector<std::string> want;
  for (const nn::OpDesc* d : nn::op_table())
    if (d->activation) want.push_back(d->name);
  EXPECT_EQ(activation_names(), want);
  EXPECT_GE(want.size(), 8u);
  for (const std::string& n : want) {
    LayerKind k;
    ASSERT_TRUE(find_activation(n, &k)) << n;
    EXPECT_EQ(layer_kind_name(k), n);
  }
  LayerKind k;
  EXPECT_FALSE(find_activation("conv2d", &k));
  EXPECT_NE(activation_list().find("gelu-tanh"), std::string::npos);
}

// Every activation lives in its op file: its layer, its ONNX export and its import (issue 39).
TEST(OpTable, ActivationsBringTheirLayerAndOnnxMappings) {
  for (const nn::OpDesc* d : nn::op_table()) {
    if (!d->activation) continue;
    EXPECT_NE(d->make, nullptr) << d->name;
    EXPECT_NE(d->onnx_export, nullptr) << d->name;
    EXPECT_NE(d->onnx_import, nullptr) << d->name;
    EXPECT_FALSE(d->onnx.empty()) << d->name;
  }
}

// Every op with ONNX types maps itself both ways in its file (issue 56): its export, and its import
// but for two: droppath exports Identity, a pass-through of the importer's, and layernorm2d's
// Transpose -> LayerNormalization is layernorm's import (the channels-last case).
TEST(OpTable, EveryOpBringsItsOnnxExportAndImport) {
  for (const nn::OpDesc* d : nn::op_table()) {
    if (d->onnx.empty()) continue;
    EXPECT_NE(d->onnx_export, nullptr) << d->name;
    const bool by_other = std::string(d->name) == "droppath" || std::string(d->name) == "layernorm2d";
    EXPECT_EQ(d->onnx_import == nullptr, by_other) << d->name;
  }
}

// `ember info --ops` (text): each op's line says the dtypes and layouts its descriptor declares
// ("runs: f32,f64,bf16,u8 nchw,nhwc"), the same the JSON lists.
TEST(OpTable, TheTextTableSaysWhatEachOpRuns) {
  const std::string text = "\n" + ops_text();  // every line after a newline
  for (const OpInfo& o : op_infos()) {
    std::string runs;
    for (const std::string& d : o.dtypes) runs += (runs.empty() ? "" : ",") + d;
    runs += " ";
    for (size_t i = 0; i < o.layouts.size(); ++i) runs += (i ? "," : "") + o.layouts[i];
    const size_t line = text.find("\n" + o.name + " ");
    ASSERT_NE(line, std::string::npos) << o.name;
    EXPECT_NE(text.substr(line, text.find('\n', line + 1) - line).find("  runs: " + runs), std::string::npos) << o.name << ": " << runs;
  }
  EXPECT_NE(text.find("\nconv2d "), std::string::npos);
  EXPECT_NE(text.find("runs: f32,f64,bf16,u8 nchw,nhwc"), std::string::npos) << "conv2d";
}

// Every fused unit a plan makes is a pattern of the fusion table that `ember info --ops --json`
// lists ("<act>": any activation op), in a plan and layout the table gives it.
TEST(OpTable, FusedUnitsArePatternsOfTheListedFusionTable) {
  const nlohmann::json j = nlohmann::json::parse(ops_json(-1));
  ASSERT_TRUE(j.contains("fusions"));
  EXPECT_EQ(j["fusions"].size(), 7u);
  auto listed = [&](const UnitInfo& u, bool training) {
    for (const auto& f : j["fusions"]) {
      std::string name = f["name"], ops;
      for (const std::string& op : u.ops) {
        const nn::OpDesc* d = nn::find_op(op);
        ops += (ops.empty() ? "" : "+") + (d && d->activation && name.find("<act>") != std::string::npos ? "<act>" : op);
      }
      const std::string plan = training ? "training" : "inference", layout = f["layout"];
      bool in_plan = false;
      for (const auto& p : f["plans"]) in_plan = in_plan || p == plan;
      if (ops == name && in_plan && (layout == "either" || layout == u.layout_in || (layout == "nchw" && u.layout_in == "flat")))
        return true;
    }
    return false;
  };
  int fused = 0;
  for (const char* name : {"mnist-cnn", "convnext-fashion", "resnet18"})
    for (const char* layout : {"nchw", "nhwc"})
      for (bool training : {true, false}) {
        PlanOptions o;
        o.batch = 2, o.training = training, o.layout = layout;
        const Plan p(builtin_model(name), o);
        for (const UnitInfo& u : p.units()) {
          if (u.ops.size() < 2 || u.ops[0] == "reorder") continue;
          ++fused;
          EXPECT_TRUE(listed(u, training)) << name << " " << layout << (training ? " training: " : " inference: ") << u.name;
        }
      }
  EXPECT_GT(fused, 10);
}

TEST(OpTable, InfoJsonListsEveryOpWithItsExample) {
  const nlohmann::json j = nlohmann::json::parse(ops_json(-1));
  ASSERT_TRUE(j.contains("ops"));
  ASSERT_EQ(j["ops"].size(), nn::op_table().size());
  for (const auto& op : j["ops"]) {
    for (const char* key : {"name", "onnx", "layouts", "dtypes", "params", "example"}) EXPECT_TRUE(op.contains(key)) << key;
    for (const auto& p : op["params"]) EXPECT_TRUE(p.contains("name") && p.contains("role"));
    EXPECT_EQ(op["example"]["input"], nlohmann::json({1, 28, 28}));
    EXPECT_NO_THROW(parse_model_json(op["example"].dump(), "example"));
  }
}

}  // namespace
}  // namespace ember::test
