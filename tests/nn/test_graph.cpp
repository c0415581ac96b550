// Graph models: each compile pass alone (resolve, infer, fuse, prune_backward, place, lifetimes),
// then whole plans of residual and concat graphs: double finite-difference gradchecks (a tensor
// read by several nodes sums their gradients), f32 against f64, the "gradients final" hook,
// backward_step through it, inference plans that reuse buffers, and the JSON graph syntax.
#include <cmath>
#include <cstring>
#include <set>

#include "ember/ember.h"
#include "gradcheck.h"
#include "nn/plan_util.h"
#include "nn/graph.h"

namespace ember::test {
namespace {

// input -> conv "a" -> relu "r" -> conv -> relu "b" -> add(r, b) -> conv "c" -> concat(r, c) ->
// avgpool -> flatten -> linear: a residual block, a tensor (r) read three times, a concat.
Model residual_model() {
  Model m;
  m.name = "residual";
  m.in_c = 2, m.in_h = 6, m.in_w = 6;
  m.conv2d(3, 3, 1, 1).named("a").relu().named("r");
  m.conv2d(3, 3, 1, 1).relu().named("b");
  m.add({"r", "b"}).named("sum");
  m.conv2d(2, 1).named("c");
  m.concat({"r", "c"}).named("cat");
  m.avgpool2d(2).flatten().linear(10).named("fc");
  return m;
}

std::string error_of(const Model& m) {
  try {
    PlanOptions o;
    o.batch = 2;
    Plan p(m, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Graph, ResolveDefaultsToThePreviousNodeAndNamesInputs) {
  const Model m = residual_model();
  const nn::Graph g = nn::resolve(m);
  ASSERT_EQ(g.nodes.size(), m.layers.size());
  EXPECT_EQ(g.nodes[0].in, std::vector<int>{0});  // the model input
  EXPECT_EQ(g.nodes[1].in, std::vector<int>{1});
  EXPECT_EQ(g.nodes[4].in, (std::vector<int>{2, 4}));  // add(r, b)
  EXPECT_EQ(g.nodes[6].in, (std::vector<int>{2, 6}));  // concat(r, c)
  EXPECT_EQ(g.tensors[2].readers, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(g.nodes[0].param_prefix, "a");
  EXPECT_EQ(g.nodes[7].param_prefix, "7");
  EXPECT_EQ(g.nodes[4].label, "layers[4] (add \"sum\")");
}

TEST(Graph, ResolveErrorsNameTheNode) {
  auto expect = [](Model m, const std::string& part) {
    const std::string e = error_of(m);
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  Model later = residual_model();
  later.layers[4].inputs = {"r", "fc"};
  expect(later, "layers[4] (add \"sum\"): input \"fc\" names no earlier layer");
  Model dup = residual_model();
  dup.layers[2].name = "a";
  expect(dup, "layers[2] (conv2d \"a\"): the name is used by an earlier layer too");
  Model reserved = residual_model();
  reserved.layers[0].name = "input";
  expect(reserved, "\"input\" names the model's input");
  Model bad = residual_model();
  bad.layers[0].name = "a b";
  expect(bad, "a name is 1 to 128 letters");
  Model one = residual_model();
  one.layers[4].inputs = {"r"};
  expect(one, "layers[4] (add \"sum\"): expected 2 to 8 inputs, found 1");
  Model two = residual_model();
  two.layers[5].inputs = {"r", "b"};
  expect(two, "layers[5] (conv2d \"c\"): expected one input, found 2");
  Model dead = residual_model();
  dead.layers[5].inputs = {"b"};  // nothing reads the add any more
  expect(dead, "layers[4] (add \"sum\"): its output is never read");
  Model shapes = residual_model();
  shapes.layers[4].inputs = {"b", "input"};
  expect(shapes, "layers[4] (add \"sum\"): add needs inputs of one shape, found [3, 6, 6] and [2, 6, 6]");
  Model hw = residual_model();
  hw.layers[6].inputs = {"r", "fc"};
  expect(hw, "names no earlier layer");
}

TEST(Graph, InferGivesEveryTensorItsShapeAndDtype) {
  const Model m = residual_model();
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {2, 6, 6};
  nn::infer(g, DType::f64, 4);
  EXPECT_EQ(g.tensors[7].dims.c, 5);  // concat: 3 + 2 channels
  EXPECT_EQ(g.tensors[8].dims.h, 3);
  EXPECT_EQ(g.tensors[10].dims.c, 10);
  for (const nn::Tensor& t : g.tensors) EXPECT_EQ(t.dtype, DType::f64);
}

TEST(Graph, FusionMatchesThePatternOnlyWhereNothingElseReadsInside) {
  Model m;
  m.conv2d(4, 3, 1, 1).relu().maxpool2d(2).flatten().linear(10);
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {1, 8, 8};
  nn::infer(g, DType::f32, 2);
  auto units = nn::fuse(g, true, true);
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].kinds, "conv2d+relu+maxpool2d");
  // The ReLU's output also read by a later node: no fusion (it must be stored).
  Model r;
  r.conv2d(4, 3, 1, 1).relu().named("r").maxpool2d(2).flatten().named("f1");
  r.layers.push_back(r.layers.back());
  r.layers.back().name = "f2";
  r.layers.back().inputs = {"r"};
  r.concat({"f1", "f2"}).linear(10);
  nn::Graph g2 = nn::resolve(r);
  g2.tensors[0].dims = {1, 8, 8};
  nn::infer(g2, DType::f32, 2);
  auto units2 = nn::fuse(g2, true, true);
  EXPECT_EQ(units2[0].kinds, "conv2d");
  EXPECT_EQ(units2[1].kinds, "relu");
  nn::Graph g3 = nn::resolve(m);
  g3.tensors[0].dims = {1, 8, 8};
  nn::infer(g3, DType::f32, 2);
  EXPECT_EQ(nn::fuse(g3, false, true).size(), 5u);
}

// Conv2d -> BatchNorm2d is one unit in an inference plan only, and only where the BN alone reads
// the conv (a conv -> relu -> maxpool run keeps its own fusion).
TEST(Graph, ConvBatchNormFusesInInferencePlansOnly) {
  Model m;
  m.conv2d(4, 3, 1, 1);
  LayerSpec bn;
  bn.kind = LayerKind::BatchNorm2d;
  m.layers.push_back(bn);
  m.relu().conv2d(4, 3, 1, 1).relu().maxpool2d(2).flatten().linear(10);
  auto kinds = [&](const Model& model, bool training) {
    nn::Graph g = nn::resolve(model);
    g.tensors[0].dims = {2, 8, 8};
    nn::infer(g, DType::f32, 2);
    std::vector<std::string> k;
    for (const nn::Unit& u : nn::fuse(g, true, training)) k.push_back(u.kinds);
    return k;
  };
  EXPECT_EQ(kinds(m, false), (std::vector<std::string>{"conv2d+batchnorm2d+relu", "conv2d+relu+maxpool2d",
                                                       "flatten", "linear"}));
  EXPECT_EQ(kinds(m, true), (std::vector<std::string>{"conv2d", "batchnorm2d", "relu", "conv2d+relu+maxpool2d",
                                                      "flatten", "linear"}));
}

TEST(Graph, BackwardIsPrunedUpstreamOfTheFirstParameter) {
  Model m;
  m.maxpool2d(2).named("p").conv2d(2, 3, 1, 1).flatten().linear(10);
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {1, 8, 8};
  nn::infer(g, DType::f32, 2);
  auto units = nn::fuse(g, true, true);
  const std::vector<bool> needs = nn::prune_backward(g, units);
  EXPECT_EQ(needs, (std::vector<bool>{false, false, true, true, true}));
  EXPECT_FALSE(units[0].backward);
  EXPECT_TRUE(units[1].backward);
  EXPECT_FALSE(units[1].dx[0]);  // the conv needs no input gradient
}

TEST(Graph, PlaceNeverOverlapsBlocksAliveTogether) {
  std::vector<nn::Block> b = {{100, 0, 2}, {200, 1, 3}, {64, 3, 4}, {300, 4, 5}, {50, 0, 5}};
  const size_t total = nn::place(b);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].offset % 64, 0u);
    EXPECT_LE(b[i].offset + b[i].bytes, total);
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool live = b[i].first <= b[j].last && b[j].first <= b[i].last;
      const bool overlap = b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes;
      EXPECT_FALSE(live && overlap) << i << " and " << j;
    }
  }
  // 300 (steps 4-5) reuses the space of 100 and 200 (dead by step 4): less than the sum.
  EXPECT_LT(total, size_t(128 + 256 + 64 + 320 + 64));
}

// A training plan keeps an activation only until the last backward that reads it, and runs a
// ReLU whose input nothing else reads in place.
TEST(Graph, TrainingLifetimesEndAtTheLastBackwardThatReads) {
  Model m;  // input -> conv "a" -> relu "r" -> conv "b" -> gelu "g" -> add(r, g) -> flatten -> linear
  m.conv2d(3, 3, 1, 1).named("a").relu().named("r");
  m.conv2d(3, 3, 1, 1).named("b").act(LayerKind::GELU).named("g");
  m.add({"r", "g"}).named("sum").flatten().linear(10);
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {2, 6, 6};
  nn::infer(g, DType::f32, 2);
  auto units = nn::fuse(g, true, true);
  ASSERT_EQ(units.size(), 7u);
  const auto needs = nn::prune_backward(g, units);
  const nn::Lifetimes lt = nn::lifetimes(g, units, needs, true, 2, 4);
  const int end = 2 * 7;  // backward of unit u at step end - u
  EXPECT_EQ(lt.alias[2], 1);  // r over a's output: the conv's backward does not read it
  EXPECT_EQ(lt.alias[3], 3);  // b's output: the GELU reads it in backward, so its own storage
  EXPECT_EQ(lt.alias[4], 4);  // g: not in place (GELU's backward reads its input)
  EXPECT_EQ(lt.act[1].last, end - 1);  // a/r: until the ReLU's own backward (it reads its output)
  EXPECT_EQ(lt.act[3].last, end - 3);  // b: until the GELU's backward
  EXPECT_EQ(lt.act[4].last, 4);        // g: only the add reads it, in forward
  EXPECT_EQ(lt.act[5].last, end - 6);  // sum (= the flatten's storage): until the linear's backward
  EXPECT_EQ(lt.act[7].last, end);      // the output: throughout
  const nn::Lifetimes inf = nn::lifetimes(g, units, needs, false, 2, 4);
  EXPECT_EQ(inf.act[3].last, 3);       // inference: b dies after the GELU's forward
}

// Runs one forward and backward of the first n samples of random input; returns the loss.

TEST(Graph, ResidualAndConcatGradcheckInDouble) {
  PlanOptions o;
  o.batch = 3;
  o.dtype = DType::f64;
  Plan plan(residual_model(), o);
  plan.init_params(11);
  const int n = 2;
  pass(plan, n, 5);
  double* w = static_cast<double*>(plan.param_data());
  const double* g = static_cast<const double*>(plan.grad_data());
  for (const ParamInfo& p : plan.params()) {
    std::vector<double> vals(w + p.offset, w + p.offset + p.size);
    std::vector<double> grads(g + p.offset, g + p.offset + p.size);
    expect_gradient(p.name, vals, grads, [&] {
      std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
      plan.forward(n);
      return plan.loss(n, false);
    }, 1e-6, 1e-5, 1);
    std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
  }
  std::vector<std::string> names;
  for (const ParamInfo& p : plan.params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.weight", "a.bias", "2.weight", "2.bias", "c.weight", "c.bias",
                                             "fc.weight", "fc.bias"}));
}

// Every activation kind as a graph node: a double gradcheck through a residual model that uses it
// (backward reads the node's input for GELU, GELU-tanh, HardSwish, SiLU and FastSwish).
TEST(Graph, EachActivationGradchecksInAResidualModel) {
  for (LayerKind k : {LayerKind::ReLU, LayerKind::Sigmoid, LayerKind::Tanh, LayerKind::GELU, LayerKind::GELUTanh,
                      LayerKind::HardSwish, LayerKind::SiLU, LayerKind::FastSwish}) {
    SCOPED_TRACE(layer_kind_name(k));
    Model m;
    m.in_c = 2, m.in_h = 4, m.in_w = 4;
    m.conv2d(2, 3, 1, 1).named("x").act(k).conv2d(2, 1).named("y").add({"x", "y"}).flatten().linear(10);
    PlanOptions o;
    o.batch = 2;
    o.dtype = DType::f64;
    Plan plan(m, o);
    plan.init_params(5);
    double* w = static_cast<double*>(plan.param_data());
    for (size_t i = 0; i < plan.param_count(); ++i) w[i] *= 4;  // pre-activations across the kinks
    pass(plan, 2, 8);
    const double* g = static_cast<const double*>(plan.grad_data());
    const ParamInfo& p = plan.params()[0];  // x.weight: its gradient crosses the activation
    std::vector<double> vals(w + p.offset, w + p.offset + p.size), grads(g + p.offset, g + p.offset + p.size);
    expect_gradient(p.name, vals, grads, [&] {
      std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
      plan.forward(2);
      return plan.loss(2, false);
    }, 1e-6, 1e-4, 1);
  }
}

TEST(Graph, F32AgreesWithF64OnAResidualGraph) {
  for (int threads : {1, 2}) {
    PlanOptions o32, o64;
    o32.batch = o64.batch = 4;
    o32.threads = threads;
    o64.dtype = DType::f64;
    Plan p32(residual_model(), o32), p64(residual_model(), o64);
    p32.init_params(3);
    p64.init_params(3);
    const double l32 = pass(p32, 4, 9), l64 = pass(p64, 4, 9);
    EXPECT_NEAR(l32, l64, 1e-5 * std::abs(l64));
    expect_grads_match_f64(p32, p64, 1e-4, "threads " + std::to_string(threads));
  }
}

TEST(Graph, TheHookReportsEveryParameterOnceInBackwardOrder) {
  PlanOptions o;
  o.batch = 2;
  Plan plan(residual_model(), o);
  plan.init_params(1);
  pass(plan, 2, 1);
  struct Seen {
    std::vector<std::pair<int, int>> calls;
  } seen;
  plan.backward(2, [](void* c, int first, int count) { static_cast<Seen*>(c)->calls.push_back({first, count}); }, &seen);
  ASSERT_EQ(seen.calls.size(), 4u);  // four units with parameters
  int next = int(plan.params().size());
  for (auto [first, count] : seen.calls) {
    EXPECT_EQ(first + count, next);  // the last unit's first, contiguous down to 0
    next = first;
  }
  EXPECT_EQ(next, 0);
}

TEST(Graph, BackwardStepThroughTheHookMatchesBackwardThenUpdate) {
  for (int threads : {1, 2}) {
    PlanOptions o;
    o.batch = 8;
    o.threads = threads;
    o.optimizer.kind = OptimizerKind::AdamW;
    o.optimizer.weight_decay = 0.01;
    Plan a(residual_model(), o), b(residual_model(), o);
    a.init_params(4);
    b.init_params(4);
    for (int step = 0; step < 3; ++step) {
      pass(a, 8, 20 + step);
      a.optimizer_step(1e-2);
      const size_t D = size_t(b.model().in_c) * b.model().in_h * b.model().in_w;
      auto x = randn(8 * D, 20 + step);
      for (size_t i = 0; i < x.size(); ++i) static_cast<float*>(b.input())[i] = float(x[i]);
      for (int i = 0; i < 8; ++i) b.labels()[i] = (i * 7 + 3) % 10;
      b.forward(8);
      b.loss(8, true);
      EXPECT_EQ(b.backward_step(8, 1e-2), -1);
    }
    EXPECT_EQ(std::memcmp(a.param_data(), b.param_data(), a.param_count() * sizeof(float)), 0) << threads;
  }
}

TEST(Graph, InferencePlansReuseBuffersAndComputeTheSame) {
  PlanOptions t, i;
  t.batch = i.batch = 16;
  i.training = false;
  Model m;  // a deep chain: an inference plan needs two activations at a time, not all
  m.in_c = 4, m.in_h = 8, m.in_w = 8;
  for (int k = 0; k < 6; ++k) m.conv2d(4, 3, 1, 1).relu();
  m.flatten().linear(10);
  Plan pt(m, t), pi(m, i);
  pt.init_params(5);
  std::memcpy(pi.param_data(), pt.param_data(), pt.param_count() * sizeof(float));
  auto x = randn(16 * 256, 2);
  for (size_t k = 0; k < x.size(); ++k)
    static_cast<float*>(pt.input())[k] = static_cast<float*>(pi.input())[k] = float(x[k]);
  pt.forward(16);
  pi.forward(16);
  // The inference plan reads its weights packed (issue 56): its Linear's dense GEMM sums the same
  // products in another order than the training plan's sparse-input kernels (1e-5 relative).
  for (int k = 0; k < 16 * 10; ++k) {
    const float want = static_cast<const float*>(pt.output())[k];
    EXPECT_NEAR(static_cast<const float*>(pi.output())[k], want, 1e-5f * (1 + std::abs(want))) << k;
  }
  size_t packed = 0;  // the inference plan's packed weights are not activations
  for (const BufferInfo& b : pi.buffers())
    if (b.name.rfind("packed weight", 0) == 0) packed += b.bytes;
  if (std::string(pi.isa_name()) != "scalar") EXPECT_GT(packed, 0u);  // the reference GEMM packs nothing
  EXPECT_LT((pi.arena_bytes() - packed) * 2, pt.arena_bytes());
  EXPECT_THROW(pi.backward(16), Error);
  EXPECT_THROW(pi.loss(16, true), Error);
}

TEST(Graph, TrainingPlansReuseGradientBuffers) {
  PlanOptions o;
  o.batch = 16;
  Model m;
  m.in_c = 4, m.in_h = 8, m.in_w = 8;
  for (int k = 0; k < 6; ++k) m.conv2d(4, 3, 1, 1).relu();
  m.flatten().linear(10);
  Plan p(m, o);
  size_t grads = 0;
  for (const BufferInfo& b : p.buffers())
    if (b.name.rfind("activation gradient", 0) == 0) grads += b.bytes;
  // 12 activation gradients of 16 x 256 floats each, alive two at a time.
  const size_t one = 16 * 256 * sizeof(float);
  EXPECT_GE(grads, 11 * one);
  size_t all = 0;
  for (const BufferInfo& b : p.buffers()) all += b.bytes;
  EXPECT_LT(p.arena_bytes(), all - 8 * one);
}

TEST(Graph, JsonGraphsRoundTripAndNameTheirErrors) {
  const std::string text = R"({"name": "res", "input": [2, 6, 6], "layers": [
    {"type": "conv2d", "name": "a", "out_channels": 3, "kernel": 3, "padding": 1},
    {"type": "relu", "name": "r"},
    {"type": "conv2d", "out_channels": 3, "kernel": 3, "padding": 1},
    {"type": "add", "inputs": ["r", "layer2"]}]})";
  try {
    parse_model_json(text, "g.json");
    ADD_FAILURE() << "an unknown input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("g.json: layers[3] (add): input \"layer2\" names no earlier layer"),
              std::string::npos) << e.what();
  }
  const Model m = residual_model();
  const Model back = parse_model_json(model_to_json(m), "m.json");
  ASSERT_EQ(back.layers.size(), m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_EQ(back.layers[i].name, m.layers[i].name);
    EXPECT_EQ(back.layers[i].inputs, m.layers[i].inputs);
  }
  for (const char* bad : {R"("inputs": 3)", R"("inputs": [])", R"("name": "")", R"("inputs": ["a", 2])",
                          R"("inputs": "a\nb")", R"("name": "x\ny")"}) {
    const std::string t = std::string(R"({"layers": [{"type": "flatten", )") + bad + R"(}, {"type": "linear", "out_features": 10}]})";
    try {
      parse_model_json(t, "b.json");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("b.json: layers[0]", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace ember::test
