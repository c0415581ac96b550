// The generated op test (after ggml's test-backend-ops): every op of the op table (nn::op_table())
// in small models, forward, loss and backward on every kernel set the CPU has (scalar, avx2,
// avx512, and bf16 products on each), at 1-3 threads, in each dtype and layout the op declares,
// against the f64 plan (the scalar references in double); the f64 backward against finite differences;
// dtype u8: the int8 plan on every int8 set against the int32 scalar reference, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ember/ember.h"
#include "ember/quant.h"
#include "kernels/int8_kernels.h"
#include "gradcheck.h"
#include "kernels/kernels.h"
#include "nn/op_table.h"

namespace ember::test {
namespace {

// Tolerances, each against the f64 plan and relative to the largest magnitude of the compared
// quantity (the model's outputs, one parameter tensor's gradient; the loss: to max(1, |loss|)).
// fp32: a few hundred products summed per value, errors of 1e-6 or so; 1e-4 leaves room for a
// ReLU or max-pool decision the rounding moves and fails any wrong kernel.
constexpr double kTolFp32 = 1e-4;
// bf16: each product's operands rounded to 8 significant bits (2^-9 relative), through two or
// three layers of products: errors of about 1 %, more where the rounding moves a ReLU or max-pool
// decision in these small batches (measured: the worst is printed at the end).
constexpr double kTolBf16 = 0.25;
// bf16 on each kernel set against bf16 on the scalar reference table at 1 thread (the same
// operand roundings; other summation orders, and the bf16 roundings those move).
constexpr double kTolBf16Sets = 2e-2;
// f64 at 2 and 3 threads against 1 thread: other summation orders only.
constexpr double kTolF64Threads = 1e-10;
constexpr int kClasses = 5;        // the class count of the rows' models (a linear layer is appended)
constexpr int kGradcheckPoints = 12;  // finite-difference points per parameter tensor

// One model of a row: its layers (without the last linear to the classes; the last layer's output
// must be flat), the per-sample input [C, H, W] and the batch.
struct Net {
  std::string layers;
  int c, h, w, batch;
};

struct Row {
  std::string op;
  std::vector<Net> nets;  // besides the op's example model (the table's shapes), run at batch 3
};

// An activation after a 1x1 convolution over odd channels and a 3x5 image, and after a Linear
// with an odd width at batch 1.
std::vector<Net> activation_nets(const std::string& act) {
  return {{R"({"type": "conv2d", "out_channels": 13, "kernel": 1}, {"type": ")" + act + R"("}, {"type": "flatten"})", 3, 5, 3, 17},
          {R"({"type": "flatten"}, {"type": "linear", "out_features": 19}, {"type": ")" + act + R"("})", 2, 3, 3, 1}};
}

// The table of test cases: one row per op. Adding an op to src/nn/ops/ means adding its row here
// (EveryOpHasOneRow fails until then).
const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      {"conv2d",
       {{R"({"type": "conv2d", "out_channels": 5, "kernel": 3, "stride": 2, "padding": 1}, {"type": "relu"}, {"type": "flatten"})", 3, 9, 11, 17},
        {R"({"type": "conv2d", "out_channels": 6, "kernel": 7, "padding": "same", "groups": 6}, {"type": "gelu"},
            {"type": "conv2d", "out_channels": 12, "kernel": 1}, {"type": "globalavgpool"})", 6, 7, 7, 3},
        {R"({"type": "conv2d", "out_channels": 6, "kernel": 3, "padding": "same", "groups": 2, "bias": false}, {"type": "tanh"},
            {"type": "flatten"})", 4, 5, 6, 1},
        {R"({"type": "conv2d", "out_channels": 7, "kernel": 1}, {"type": "relu"}, {"type": "flatten"})", 5, 1, 1, 17},
        {R"({"type": "conv2d", "out_channels": 9, "kernel": 4, "stride": 4}, {"type": "layernorm2d"}, {"type": "flatten"})", 3, 8, 12, 3},
        {R"({"type": "conv2d", "out_channels": 13, "kernel": [3, 5], "stride": [2, 1], "padding": [1, 2]}, {"type": "silu"},
            {"type": "flatten"})", 2, 9, 10, 3},
        {R"({"type": "conv2d", "out_channels": 17, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
            {"type": "flatten"})", 3, 7, 9, 3},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 2, "stride": 3}, {"type": "flatten"})", 2, 7, 7, 3}}},
      {"linear",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 1}, {"type": "gelu"})", 7, 1, 1, 1},
        {R"({"type": "linear", "out_features": 9, "over": "channels"}, {"type": "gelu"},
            {"type": "linear", "out_features": 5, "over": "channels"}, {"type": "flatten"})", 5, 3, 4, 3},
        {R"({"type": "flatten"}, {"type": "linear", "out_features": 129}, {"type": "relu"})", 3, 5, 5, 17},
        {R"({"type": "flatten"}, {"type": "linear", "out_features": 33, "bias": false}, {"type": "sigmoid"})", 1, 4, 4, 3},
        {R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
            {"type": "flatten"}, {"type": "linear", "out_features": 40}, {"type": "relu"})", 1, 12, 12, 17}}},
      {"relu", activation_nets("relu")},
      {"maxpool2d",
       {{R"({"type": "conv2d", "out_channels": 4, "kernel": 1}, {"type": "maxpool2d", "kernel": 3, "stride": 2, "padding": 1},
            {"type": "flatten"})", 3, 7, 9, 17},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": "maxpool2d", "kernel": [2, 3]},
            {"type": "flatten"})", 2, 5, 7, 1},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 1}, {"type": "maxpool2d", "kernel": 1}, {"type": "flatten"})", 2, 1, 1, 3},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 1},
            {"type": "maxpool2d", "kernel": 3, "stride": 2, "padding": [0, 1], "padding_end": [2, 0]}, {"type": "flatten"})", 2, 6, 7, 3},
        {R"({"type": "conv2d", "out_channels": 16, "kernel": 3}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
            {"type": "flatten"})", 3, 6, 6, 17}}},
      {"flatten",
       {{R"({"type": "conv2d", "out_channels": 3, "kernel": 1}, {"type": "flatten"})", 2, 1, 1, 17},
        {R"({"type": "flatten"}, {"type": "linear", "out_features": 7}, {"type": "flatten"})", 3, 2, 2, 3}}},
      {"avgpool2d",
       {{R"({"type": "conv2d", "out_channels": 4, "kernel": 1}, {"type": "avgpool2d", "kernel": 3, "stride": 2, "padding": 1},
            {"type": "flatten"})", 3, 7, 9, 17},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 3, "padding": 1}, {"type": "avgpool2d", "kernel": [2, 3]},
            {"type": "flatten"})", 2, 5, 7, 1},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 1}, {"type": "avgpool2d", "kernel": 1}, {"type": "flatten"})", 2, 1, 1, 3},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 1}, {"type": "avgpool2d", "kernel": [3, 2], "stride": 2, "padding": [2, 0],
            "padding_end": [1, 1], "count_include_pad": false}, {"type": "flatten"})", 2, 6, 5, 3}}},
      {"sigmoid", activation_nets("sigmoid")},
      {"tanh", activation_nets("tanh")},
      {"softmax",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 9}, {"type": "softmax"})", 2, 3, 3, 17},
        {R"({"type": "flatten"}, {"type": "linear", "out_features": 2}, {"type": "softmax"})", 3, 1, 1, 1}}},
      {"gelu", activation_nets("gelu")},
      {"gelu-tanh", activation_nets("gelu-tanh")},
      {"silu", activation_nets("silu")},
      {"hardswish", activation_nets("hardswish")},
      {"fastswish", activation_nets("fastswish")},
      {"mish", activation_nets("mish")},
      {"softsign", activation_nets("softsign")},
      {"elu", activation_nets("elu")},
      {"layernorm",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 31}, {"type": "layernorm"}, {"type": "gelu"})", 2, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1, "bias": false}, {"type": "layernorm", "dims": 2}, {"type": "relu"},
            {"type": "flatten"})", 3, 5, 4, 3},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 1, "bias": false}, {"type": "layernorm", "dims": 1, "affine": false},
            {"type": "flatten"})", 2, 3, 3, 1},
        {R"({"type": "conv2d", "out_channels": 7, "kernel": 3}, {"type": "layernorm", "eps": 1e-6}, {"type": "flatten"})", 1, 6, 5, 1}}},
      {"layernorm2d",
       {{R"({"type": "conv2d", "out_channels": 7, "kernel": 3, "padding": "same"}, {"type": "layernorm2d"}, {"type": "gelu"},
            {"type": "flatten"})", 3, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 1}, {"type": "layernorm2d", "affine": false}, {"type": "flatten"})", 3, 1, 1, 1},
        {R"({"type": "conv2d", "out_channels": 24, "kernel": 2, "stride": 2}, {"type": "layernorm2d", "eps": 1e-6},
            {"type": "flatten"})", 3, 6, 6, 3},
        {R"({"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "layernorm2d"}, {"type": "flatten"})", 2, 4, 4, 1}}},
      {"batchnorm2d",  // train mode; no conv bias before it (its gradient is 0)
       {{R"({"type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1, "bias": false}, {"type": "batchnorm2d"}, {"type": "relu"},
            {"type": "flatten"})", 3, 5, 4, 17},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 1, "bias": false}, {"type": "batchnorm2d", "affine": false}, {"type": "flatten"})", 2, 3, 3, 1},
        {R"({"type": "conv2d", "out_channels": 7, "kernel": 1, "bias": false}, {"type": "batchnorm2d", "eps": 1e-3, "momentum": 0.3},
            {"type": "flatten"})", 3, 1, 1, 3},
        {R"({"type": "conv2d", "out_channels": 33, "kernel": 2, "stride": 2, "bias": false}, {"type": "batchnorm2d"}, {"type": "gelu"},
            {"type": "flatten"})", 2, 6, 6, 3}}},
      {"layerscale",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 11}, {"type": "layerscale", "init_value": 0.5})", 2, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1}, {"type": "layerscale", "init_value": -0.7},
            {"type": "flatten"})", 3, 5, 5, 1}}},
      {"add",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 8, "name": "a"}, {"type": "relu", "name": "b"},
            {"type": "linear", "out_features": 8, "name": "c"}, {"type": "add", "inputs": ["a", "b", "c"]})", 2, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": "same", "name": "a"}, {"type": "add", "inputs": ["input", "a"]},
            {"type": "flatten"})", 4, 5, 5, 3},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 1, "name": "a"}, {"type": "tanh", "name": "b"},
            {"type": "sigmoid", "name": "c", "inputs": "a"}, {"type": "gelu", "name": "d", "inputs": "a"},
            {"type": "add", "inputs": ["a", "b", "c", "d"]}, {"type": "flatten"})", 2, 1, 1, 1}}},
      {"concat",
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 5, "name": "a"}, {"type": "relu", "name": "b"},
            {"type": "linear", "out_features": 3, "name": "c"}, {"type": "concat", "inputs": ["a", "b", "c"]})", 2, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 3, "kernel": 3, "padding": 1, "name": "a"}, {"type": "concat", "inputs": ["input", "a"]},
            {"type": "conv2d", "out_channels": 4, "kernel": 1}, {"type": "flatten"})", 5, 4, 4, 3},
        {R"({"type": "conv2d", "out_channels": 2, "kernel": 1, "name": "a"}, {"type": "gelu", "name": "b"},
            {"type": "concat", "inputs": ["a", "b"]}, {"type": "flatten"})", 3, 1, 1, 1}}},
      {"zeropad2d",
       {{R"({"type": "conv2d", "out_channels": 3, "kernel": 1}, {"type": "zeropad2d", "padding": [1, 2]},
            {"type": "conv2d", "out_channels": 4, "kernel": 3}, {"type": "flatten"})", 2, 5, 4, 3},
        {R"({"type": "conv2d", "out_channels": 2, "kernel": 1}, {"type": "zeropad2d", "padding": 3}, {"type": "maxpool2d", "kernel": 2},
            {"type": "flatten"})", 1, 1, 1, 17}}},
      {"globalavgpool",
       {{R"({"type": "conv2d", "out_channels": 7, "kernel": 1}, {"type": "globalavgpool"})", 3, 1, 1, 17},
        {R"({"type": "conv2d", "out_channels": 5, "kernel": 3, "padding": "same"}, {"type": "relu"}, {"type": "globalavgpool"},
            {"type": "flatten"})", 3, 5, 7, 1}}},
      {"fakequant",  // first: no parameter upstream of the straight-through estimator (gradcheck)
       {{R"({"type": "fakequant"}, {"type": "flatten"}, {"type": "linear", "out_features": 7}, {"type": "relu"})", 2, 3, 5, 3},
        {R"({"type": "fakequant"}, {"type": "conv2d", "out_channels": 5, "kernel": 3, "padding": 1}, {"type": "gelu"},
            {"type": "flatten"})", 4, 32, 32, 5},
        {R"({"type": "fakequant"}, {"type": "linear", "out_features": 9})", 6, 1, 1, 4},
        {R"({"type": "maxpool2d", "kernel": 2}, {"type": "fakequant"}, {"type": "flatten"})", 3, 6, 6, 3}}},  // nhwc after the pool
      {"droppath",  // run in train mode: every plan draws the same masks (seed, step, node)
       {{R"({"type": "flatten"}, {"type": "linear", "out_features": 12, "name": "a"}, {"type": "droppath", "p": 0.5, "name": "d"},
            {"type": "add", "inputs": ["a", "d"]})", 2, 3, 3, 17},
        {R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "gelu"}, {"type": "droppath", "p": 0.3},
            {"type": "flatten"})", 3, 4, 4, 3}}},
  };
  return r;
}

const Row* find_row(const std::string& op) {
  for (const Row& r : rows())
    if (r.op == op) return &r;
  return nullptr;
}

// One model to run: the op's example or a row's net, with its batch.
struct Case {
  std::string what;
  Model model;
  int batch;
};

std::vector<Case> cases_of(const nn::OpDesc& d, const Row& row) {
  std::vector<Case> out{{std::string(d.name) + " example", parse_model_json(d.example, "example"), 3}};
  for (size_t i = 0; i < row.nets.size(); ++i) {
    const Net& n = row.nets[i];
    const std::string text = "{\"name\": \"ops-all\", \"input\": [" + std::to_string(n.c) + ", " + std::to_string(n.h) + ", " +
                             std::to_string(n.w) + "], \"classes\": " + std::to_string(kClasses) + ", \"layers\": [" + n.layers +
                             R"(, {"type": "linear", "out_features": )" + std::to_string(kClasses) + "}]}";
    const std::string what = row.op + " net " + std::to_string(i + 1) + " [" + std::to_string(n.c) + ", " +
                             std::to_string(n.h) + ", " + std::to_string(n.w) + "] batch " + std::to_string(n.batch);
    out.push_back({what, parse_model_json(text, what), n.batch});
  }
  return out;
}

// A case's data: the parameters and input (fp32 values, held as double), the labels.
struct Data {
  std::vector<double> params, x;
  std::vector<int32_t> labels;
};

Data data_of(const Case& c) {
  PlanOptions o;
  o.batch = c.batch;
  o.training = false;
  Plan p(c.model, o);
  p.init_params(7);
  Data d;
  const float* w = static_cast<const float*>(std::as_const(p).param_data());
  d.params.assign(w, w + p.param_count());
  // Constant-initialised parameters (norm scales 1, biases 0, layer scales) moved off their start,
  // so that a kernel reading the wrong one shows.
  const auto noise = randn(p.param_count(), 8, 0.2);
  for (const ParamInfo& pi : p.params())
    if (pi.constant || pi.role == ParamRole::bias)
      for (size_t i = pi.offset; i < pi.offset + pi.size; ++i) d.params[i] = double(float(d.params[i] + noise[i]));
  const Model& m = c.model;
  d.x = randn(size_t(c.batch) * m.in_c * m.in_h * m.in_w, 9);
  for (double& v : d.x) v = double(float(v));
  for (int i = 0; i < c.batch; ++i) d.labels.push_back((i * 7 + 3) % m.num_classes);
  return d;
}

// What a plan computed on a case: its outputs, loss and parameter gradients.
struct Result {
  std::vector<double> out, grad, params;  // params: after the step's forward (running statistics move)
  double loss = 0;
};

template <class T>
void put(void* dst, const std::vector<double>& v) {
  T* p = static_cast<T*>(dst);
  for (size_t i = 0; i < v.size(); ++i) p[i] = T(v[i]);
}
template <class T>
std::vector<double> get(const void* src, size_t n) {
  const T* p = static_cast<const T*>(src);
  return std::vector<double>(p, p + n);
}

void load(Plan& p, const Data& d) {
  if (p.dtype() == DType::f64) put<double>(p.param_data(), d.params), put<double>(p.input(), d.x);
  else put<float>(p.param_data(), d.params), put<float>(p.input(), d.x);
  std::copy(d.labels.begin(), d.labels.end(), p.labels());
}

Result step(Plan& p, int n) {
  p.forward(n);
  Result r;
  r.loss = p.loss(n, true);
  p.backward(n);
  const size_t no = size_t(n) * p.model().num_classes;
  const bool f64 = p.dtype() == DType::f64;
  r.out = f64 ? get<double>(p.output(), no) : get<float>(p.output(), no);
  r.grad = f64 ? get<double>(p.grad_data(), p.param_count()) : get<float>(p.grad_data(), p.param_count());
  const void* w = std::as_const(p).param_data();
  r.params = f64 ? get<double>(w, p.param_count()) : get<float>(w, p.param_count());
  return r;
}

Plan make_plan(const Case& c, PlanOptions o, const Data& d) {
  o.batch = c.batch;
  o.seed = 11;  // train mode: droppath's masks come from (seed, step, node), the same in every plan
  Plan p(c.model, o);
  p.init_params(1);
  load(p, d);
  return p;
}

double max_abs(const std::vector<double>& v, size_t begin, size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, std::abs(v[i]));
  return m;
}
double max_diff(const std::vector<double>& a, const std::vector<double>& b, size_t begin, size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The worst error of `got` against `ref` as a share of the tolerance (<= 1 passes), and what it was.
struct Gap {
  double ratio = 0;
  std::string where;
};
void worse(Gap& g, double diff, double scale, double tol, const std::string& where) {
  const double r = diff / (tol * scale);
  if (std::isnan(g.ratio) || r <= g.ratio) return;  // a NaN stays the worst
  std::ostringstream s;
  s << where << ": differs by " << diff << " at scale " << scale;
  g.ratio = r, g.where = s.str();
}
Gap compare(const Result& got, const Result& ref, const std::vector<ParamInfo>& params, double tol) {
  Gap g;
  worse(g, max_diff(got.out, ref.out, 0, ref.out.size()), max_abs(ref.out, 0, ref.out.size()), tol, "outputs");
  worse(g, std::abs(got.loss - ref.loss), std::max(1.0, std::abs(ref.loss)), tol, "loss");
  for (const ParamInfo& p : params) {
    const size_t a = p.offset, b = p.offset + p.size;
    if (!param_trained(p.role)) {  // running statistics: gradient 0; their values after forward's update
      worse(g, max_diff(got.grad, ref.grad, a, b), 1.0, tol, "gradient of " + p.name);
      worse(g, max_diff(got.params, ref.params, a, b), std::max(1.0, max_abs(ref.params, a, b)), tol, "value of " + p.name);
      continue;
    }
    worse(g, max_diff(got.grad, ref.grad, a, b), max_abs(ref.grad, a, b), tol, "gradient of " + p.name);
  }
  return g;
}

// The f64 plan's parameter gradients against central differences of its loss, at
// kGradcheckPoints points of each tensor.
// A straight-through op's own parameters (fakequant's range moves its output, but its backward
// is the estimator: 0 for them) are left out; the rows place such an op where no parameter lies
// upstream of it, so that every other gradient is the derivative.
void gradcheck(Plan& p64, const Case& c, const Data& d, const Result& ref) {
  std::vector<double> all = d.params;
  for (const ParamInfo& pi : p64.params()) {
    if (nn::op_desc(c.model.layers[size_t(pi.layer)].kind).straight_through) continue;
    std::vector<double> t(all.begin() + pi.offset, all.begin() + pi.offset + pi.size);
    const std::vector<double> analytic(ref.grad.begin() + pi.offset, ref.grad.begin() + pi.offset + pi.size);
    auto loss = [&] {
      std::copy(t.begin(), t.end(), all.begin() + pi.offset);
      put<double>(p64.param_data(), all);
      p64.forward(c.batch);
      return p64.loss(c.batch, false);
    };
    expect_gradient(c.what + " " + pi.name, t, analytic, loss, 1e-6, 1e-6, std::max<size_t>(1, pi.size / kGradcheckPoints));
    std::copy(t.begin(), t.end(), all.begin() + pi.offset);
  }
}

// Which layouts ("nchw", "nhwc", "flat") each op's unit read in a plan (a fused unit's ops: its input's).
void note_layouts(const Plan& p, std::map<std::string, std::set<std::string>>& seen) {
  for (const UnitInfo& u : p.units())
    for (const std::string& op : u.ops) seen[op].insert(u.layout_in);
}

bool declares(const std::vector<const char*>& v, const std::string& s) {
  return std::any_of(v.begin(), v.end(), [&](const char* x) { return s == x; });
}

// One fp32 or bf16 configuration of the f32 plans.
struct Config {
  Isa isa;
  Precision precision;
  int threads;
  std::string name() const {
    return std::string(precision == Precision::bf16 ? "bf16 on " : "") + isa_name(isa) + ", " + std::to_string(threads) +
           (threads == 1 ? " thread" : " threads");
  }
};

std::vector<Config> configs(const nn::OpDesc& d) {
  std::vector<Config> v;
  for (const char* dt : d.dtypes) {
    const std::string s = dt;
    if (s != "f32" && s != "bf16") continue;  // f64: the reference, run for every op
    for (Isa isa : isas())
      for (int t : {1, 2, 3}) v.push_back({isa, s == "bf16" ? Precision::bf16 : Precision::fp32, t});
  }
  return v;
}

// The tallies of the whole run; failures are reported one line per combination (the first 40).
struct Tally {
  int ops = 0, models = 0, combinations = 0, failed = 0;
  double worst_fp32 = 0, worst_bf16 = 0, worst_bf16_sets = 0;  // error / tolerance
  std::map<std::string, std::set<std::string>> layouts;          // per layer kind name, the input layouts run
  std::set<std::string> ran_u8;                                  // the ops some int8 plan ran in a u8 unit
  void report(const Gap& g, const std::string& what) {
    ++combinations;
    if (g.ratio <= 1) return;
    if (++failed <= 40) ADD_FAILURE() << what << ": " << g.where << " (" << g.ratio << " x the tolerance)";
  }
};

// f64 at 2 and 3 threads against the reference (1 thread), whose gradients are checked against
// finite differences: 3 combinations.
void run_f64(const Case& c, const Data& data, Plan& p64, const Result& ref, Tally& tally, const std::string& what) {
  for (int t : {2, 3}) {
    PlanOptions o;
    o.dtype = DType::f64, o.threads = t;
    Plan p = make_plan(c, o, data);
    tally.report(compare(step(p, c.batch), ref, p64.params(), kTolF64Threads), what + "f64, " + std::to_string(t) + " threads");
  }
  ++tally.combinations;
  gradcheck(p64, c, data, ref);
}

// fp32 and bf16 on every kernel set and thread count the op declares.
void run_f32(const nn::OpDesc& d, const Case& c, const Data& data, const Plan& p64, const Result& ref, Tally& tally,
             const std::string& what) {
  Result ref_bf16;  // bf16 products on the scalar reference table at 1 thread: configs() runs it first
  for (const Config& k : configs(d)) {
    PlanOptions o;
    o.isa = isa_name(k.isa), o.threads = k.threads, o.precision = k.precision;
    Plan p = make_plan(c, o, data);
    const Result r = step(p, c.batch);
    if (k.precision == Precision::fp32) {
      const Gap g = compare(r, ref, p64.params(), kTolFp32);
      tally.worst_fp32 = std::max(tally.worst_fp32, g.ratio);
      tally.report(g, what + k.name());
      continue;
    }
    if (k.isa == Isa::scalar && k.threads == 1) ref_bf16 = r;
    const Gap g = compare(r, ref, p64.params(), kTolBf16), s = compare(r, ref_bf16, p64.params(), kTolBf16Sets);
    tally.worst_bf16 = std::max(tally.worst_bf16, g.ratio);
    tally.worst_bf16_sets = std::max(tally.worst_bf16_sets, s.ratio);
    const bool sets_worse = std::isnan(s.ratio) || s.ratio > g.ratio;
    tally.report(sets_worse ? Gap{s.ratio, s.where + " (against bf16 on scalar, 1 thread)"} : g, what + k.name());
  }
}

// Channel-last, for an op that declares "nhwc": the case's plan in layout nhwc (the layout pass
// runs each node whose op declares it and whose shape it runs channel-last, with reorders at the
// edges) in f64, and fp32 on every kernel set at 1 and 2 threads, against the nchw f64 reference.
void run_nhwc(const nn::OpDesc& d, const Case& c, const Data& data, const Plan& p64, const Result& ref, Tally& tally,
              const std::string& what) {
  if (!declares(d.layouts, "nhwc")) return;
  PlanOptions o;
  o.layout = "nhwc", o.dtype = DType::f64;
  Plan p = make_plan(c, o, data);
  note_layouts(p, tally.layouts);
  tally.report(compare(step(p, c.batch), ref, p64.params(), kTolF64Threads), what + "nhwc, f64");
  o.dtype = DType::f32;
  for (Isa isa : isas())
    for (int t : {1, 2}) {
      o.isa = isa_name(isa), o.threads = t;
      Plan q = make_plan(c, o, data);
      const Gap g = compare(step(q, c.batch), ref, p64.params(), kTolFp32);
      tally.worst_fp32 = std::max(tally.worst_fp32, g.ratio);
      tally.report(g, what + "nhwc, " + isa_name(isa) + ", " + std::to_string(t) + (t == 1 ? " thread" : " threads"));
    }
}

// Every combination of one case.
void run_case(const nn::OpDesc& d, const Case& c, Tally& tally) {
  SCOPED_TRACE(c.what);
  const Data data = data_of(c);
  PlanOptions o64;
  o64.dtype = DType::f64;
  Plan p64 = make_plan(c, o64, data);
  const Result ref = step(p64, c.batch);
  note_layouts(p64, tally.layouts);
  for (const ParamInfo& p : p64.params()) {  // running statistics are not trained: their gradient is 0
    if (param_trained(p.role)) {
      EXPECT_GT(max_abs(ref.grad, p.offset, p.offset + p.size), 0) << p.name << ": all 0";
    }
  }
  const std::string what = std::string(d.name) + ", " + c.what + ", ";
  run_f64(c, data, p64, ref, tally, what);
  run_f32(d, c, data, p64, ref, tally, what);
  run_nhwc(d, c, data, p64, ref, tally, what);
  ++tally.models;
}

// int8: every row's models quantized (random weights, calibrated on the row's inputs) and run by
// the int8 plan (the ops declaring "u8" in u8 units) on every int8 kernel set this CPU has, at 1
// and 2 threads, against the scalar reference set at 1 thread: bit-exact where every step is int8 (integer sums, the same epilogue
// arithmetic), within fp32 tolerance where an op runs fp32 between a dequantize and a quantize.
// weight_bits 7: avx2 runs its VPMADDUBSW GEMM (gemm_w7), bit-exact too.
void run_int8(const Case& c, Tally& tally, int* exact, int weight_bits) {
  const Data data = data_of(c);
  const std::vector<float> values(data.params.begin(), data.params.end()), x(data.x.begin(), data.x.end());
  QuantOptions qo;
  qo.weight_bits = weight_bits;
  const QuantizedWeights q = quantize_model(c.model, values, x.data(), c.batch, qo);
  auto run = [&](const std::string& isa, int threads) {
    Plan p(q, int8_plan_options(c.batch, threads, isa));
    std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
    p.forward(c.batch);
    size_t D = 1;
    for (int d : p.output_dims()) D *= size_t(d);
    for (const UnitInfo& u : p.units())
      if (u.dtype == "u8") tally.ran_u8.insert(u.ops.begin(), u.ops.end());
    const float* y = static_cast<const float*>(p.output());
    return std::make_pair(std::vector<float>(y, y + c.batch * D), int8_node_paths(q));
  };
  const auto [ref, paths] = run("scalar", 1);
  const bool all_int8 = std::none_of(paths.begin(), paths.end(), [](const std::string& s) { return s == "fp32"; });
  *exact += all_int8;
  double scale = 0;
  for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
  const std::pair<const char*, Int8Isa> sets[] = {
      {"scalar", Int8Isa::scalar}, {"avx2", Int8Isa::avx2}, {"avx_vnni", Int8Isa::avx_vnni}, {"avx512", Int8Isa::avx512_vnni},
      {"amx", Int8Isa::amx_int8}};
  for (const auto& [isa, set] : sets) {
    if (!int8_isa_supported(set)) continue;
    for (int threads : {1, 2}) {
      const std::vector<float> y = run(isa, threads).first;
      double worst = 0;
      for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, double(std::fabs(y[i] - ref[i])));
      const bool ok = all_int8 ? y == ref : worst <= 1e-3 * std::max(scale, 1.0);
      if (!ok) {
        ++tally.failed;
        ADD_FAILURE() << c.what << ": int8 (" << weight_bits << "-bit weights) on " << isa << ", " << threads
                      << " threads: largest difference " << worst
                      << (all_int8 ? " (every step int8: must be bit-exact)" : "");
      }
      ++tally.combinations;
    }
  }
}

TEST(OpsAll, Int8OfEveryOpOnEveryInt8KernelSet) {
  Tally tally;
  int all_int8 = 0, exact = 0;
  for (const nn::OpDesc* d : nn::op_table()) {
    const Row* row = find_row(d->name);
    if (!row) continue;
    for (const Case& c : cases_of(*d, *row)) {
      SCOPED_TRACE(c.what);
      for (int bits : {8, 7}) run_int8(c, tally, &exact, bits);
    }
    ++all_int8;
  }
  EXPECT_EQ(tally.failed, 0);
  EXPECT_GT(exact, 3) << "models whose every step is int8 (the bit-exact comparisons)";
  // The dtype "u8" an op declares is the int8 plan's truth: each op that declares it ran in a u8
  // unit of some row's model, and no op ran in one without declaring it.
  for (const nn::OpDesc* d : nn::op_table())
    EXPECT_EQ(declares(d->dtypes, "u8"), tally.ran_u8.count(d->name) > 0)
        << d->name << (declares(d->dtypes, "u8") ? " declares u8 but no int8 plan ran it" : " ran in int8 without declaring u8");
  std::printf("int8: %d ops, %d combinations, %d models all int8 (bit-exact across sets)\n", all_int8, tally.combinations, exact);
}

TEST(OpsAll, EveryOpHasOneRowAndEveryRowAnOp) {
  std::set<std::string> ops;
  for (const nn::OpDesc* d : nn::op_table()) {
    ops.insert(d->name);
    EXPECT_NE(find_row(d->name), nullptr) << "op \"" << d->name << "\" has no row in rows() (tests/nn/test_ops_all.cpp)";
  }
  std::set<std::string> seen;
  for (const Row& r : rows()) {
    EXPECT_TRUE(ops.count(r.op)) << "row \"" << r.op << "\" names no op of nn::op_table()";
    EXPECT_TRUE(seen.insert(r.op).second) << "a second row of \"" << r.op << "\"";
    EXPECT_FALSE(r.nets.empty()) << r.op << ": a row needs models beyond the op's example (awkward shapes)";
  }
}

// Each row's models parse and use the row's op; its dtypes are ones this test runs.
TEST(OpsAll, EveryRowUsesItsOp) {
  for (const nn::OpDesc* d : nn::op_table()) {
    const Row* row = find_row(d->name);
    if (!row) continue;  // EveryOpHasOneRow says
    for (const char* dt : d->dtypes) EXPECT_TRUE(std::set<std::string>({"f32", "f64", "bf16", "u8"}).count(dt)) << d->name << ": dtype " << dt;
    for (const Case& c : cases_of(*d, *row)) {
      bool uses = false;
      for (const LayerSpec& s : c.model.layers) uses = uses || s.kind == d->kind;
      EXPECT_TRUE(uses) << c.what << " does not use " << d->name;
    }
  }
}

TEST(OpsAll, ForwardAndBackwardOfEveryOpOnEveryKernelSetThreadCountAndDtype) {
  Tally tally;
  for (const nn::OpDesc* d : nn::op_table()) {
    const Row* row = find_row(d->name);
    if (!row) continue;
    ++tally.ops;
    for (const Case& c : cases_of(*d, *row)) run_case(*d, c, tally);
  }
  EXPECT_EQ(tally.failed, 0) << "combinations out of tolerance (the first 40 listed above)";
  for (const nn::OpDesc* d : nn::op_table())
    for (const char* l : d->layouts)
      EXPECT_TRUE(tally.layouts[d->name].count(l)) << d->name << " declares layout " << l << " but no model ran it";
  for (const auto& [op, seen] : tally.layouts) {  // and an op ran channel-last only where it declares it
    const nn::OpDesc* d = nn::find_op(op);
    if (d && seen.count("nhwc")) {
      EXPECT_TRUE(declares(d->layouts, "nhwc")) << op << " ran in layout nhwc, undeclared";
    }
  }
  std::string sets;
  for (Isa isa : isas()) sets += std::string(isa_name(isa)) + ", ";
  const Isa best = isas().back();
  std::printf("test_ops_all: %d ops, %d models, %d combinations (%sbf16 x 1-3 threads x f32/f64; bf16 on %s: %s)\n",
              tally.ops, tally.models, tally.combinations, sets.c_str(), isa_name(best), kernels_for(best).bf16_path);
  std::printf("test_ops_all: worst error / tolerance: fp32 %.3g of %g, bf16 %.3g of %g (against f64), %.3g of %g (against bf16 on scalar)\n",
              tally.worst_fp32, kTolFp32, tally.worst_bf16, kTolBf16, tally.worst_bf16_sets, kTolBf16Sets);
  RecordProperty("ops", tally.ops);
  RecordProperty("models", tally.models);
  RecordProperty("combinations", tally.combinations);
}

}  // namespace
}  // namespace ember::test
