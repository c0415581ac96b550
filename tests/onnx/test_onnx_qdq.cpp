// QDQ ONNX both ways (include/ember/onnx_quant.h): hand-made int8 models of mnist-cnn and a
// residual net exported and imported back bit for bit, run by ONNX Runtime (through node, as
// tests/python/test_onnx.py does), integer-op files imported, and hostile files refused in a line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "cli/onnx_wire.h"
#include "ember/error.h"
#include "ember/onnx_quant.h"
#include "ember/plan.h"
#include "ort_node.h"

using namespace ember;
namespace fs = std::filesystem;
using ember::test::ort_node_modules;
using ember::test::run_ort;

namespace {

std::vector<ParamInfo> params_of(const Model& m) {
  std::vector<ParamInfo> ps = model_params(m);
  size_t off = 0;
  for (ParamInfo& p : ps) p.offset = off, off += p.size;
  return ps;
}
const ParamInfo* find_param(const std::vector<ParamInfo>& ps, const std::string& name) {
  for (const ParamInfo& p : ps)
    if (p.name == name) return &p;
  return nullptr;
}
std::string prefix_of(const Model& m, size_t i) { return m.layers[i].name.empty() ? std::to_string(i) : m.layers[i].name; }

// fp32 outputs of `m` with these values (by parameter name, as `params` places them) on x [n, C, H, W].
std::vector<float> run_fp32(const Model& m, const std::vector<ParamInfo>& params, const std::vector<float>& values,
                            const std::vector<float>& x, int n) {
  PlanOptions o;
  o.batch = n, o.training = false;
  Plan p(m, o);
  float* dst = static_cast<float*>(p.param_data());
  for (const ParamInfo& pi : p.params()) {
    const ParamInfo& src = *find_param(params, pi.name);
    std::copy(values.begin() + long(src.offset), values.begin() + long(src.offset + src.size), dst + pi.offset);
  }
  std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
  p.forward(n);
  size_t per = 1;
  for (int d : p.output_dims()) per *= size_t(d);
  const float* y = static_cast<const float*>(p.output());
  return {y, y + per * size_t(n)};
}

// The u8 QParams of the range [lo, hi] (0 inside it).
QParams range_params(float lo, float hi) {
  lo = std::min(lo, 0.f), hi = std::max(hi, 0.f);
  QParams p;
  p.scale = std::max(hi - lo, 1e-6f) / 255.f;
  p.zero_point = int32_t(std::clamp(std::lround(-lo / p.scale), 0L, 255L));
  return p;
}

// A QuantizedWeights for m: random int8 weights (scales ~ 1/sqrt(fan in) / 127), random int32
// biases, activations calibrated layer by layer on x (the model cut after each layer, run fp32).
QuantizedWeights make_quantized(const Model& m, const std::vector<float>& x, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeights q;
  q.model = m;
  q.params = params_of(m);
  q.values.assign(q.params.empty() ? 0 : q.params.back().offset + q.params.back().size, 0.f);
  auto mm = std::minmax_element(x.begin(), x.end());
  q.acts["input"] = range_params(*mm.first, *mm.second);
  std::string last = "input";
  std::map<std::string, std::string> out_of{{"", "input"}};
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& s = m.layers[i];
    const std::string pre = prefix_of(m, i);
    if (s.kind == LayerKind::Conv2d || s.kind == LayerKind::Linear) {
      const ParamInfo& pw = *find_param(q.params, pre + ".weight");
      QuantLayer l;
      l.prefix = pre, l.shape = pw.shape, l.has_bias = s.bias;
      const size_t K = size_t(pw.shape[0]), per = pw.size / K;
      const int wmax = test::ort_exact_weight_max();
      std::uniform_int_distribution<int> wq(-wmax, wmax), bq(-2000, 2000);
      std::uniform_real_distribution<float> sc(0.5f, 1.5f);
      for (size_t k = 0; k < K; ++k) l.w_scale.push_back(sc(rng) * 1.7f / std::sqrt(float(per)) / float(wmax));
      for (size_t j = 0; j < pw.size; ++j) l.w.push_back(int8_t(wq(rng))), q.values[pw.offset + j] = float(l.w.back()) * l.w_scale[j / per];
      const std::string in = s.inputs.empty() ? last : s.inputs[0];
      const float in_scale = q.acts.at(in).scale;
      for (size_t k = 0; k < K; ++k) l.bias.push_back(s.bias ? bq(rng) : 0);
      if (s.bias) {
        const ParamInfo& pb = *find_param(q.params, pre + ".bias");
        for (size_t k = 0; k < K; ++k) q.values[pb.offset + k] = float(l.bias[k]) * (in_scale * l.w_scale[k]);
      }
      q.layers.push_back(std::move(l));
    }
    Model cut = m;
    cut.layers.resize(i + 1);
    cut.loss = LossKind::MSE;
    const std::vector<float> y = run_fp32(cut, q.params, q.values, x, n);
    auto r = std::minmax_element(y.begin(), y.end());
    q.acts[pre] = range_params(*r.first, *r.second);
    last = pre;
  }
  return q;
}

std::vector<float> random_images(int n, int c, int h, int w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> x(size_t(n) * c * h * w);
  for (float& v : x) v = u(rng);
  return x;
}

Model residual_model() {
  Model m;
  m.name = "residual";
  m.in_c = 3, m.in_h = 8, m.in_w = 8, m.num_classes = 5;
  m.conv2d(8, 3, 1, 1).named("stem").relu().named("a");
  m.conv2d(8, 3, 1, 1).relu().conv2d(8, 3, 1, 1).named("b");
  m.add({"a", "b"}).named("sum").relu().maxpool2d(2).flatten().linear(5);
  return m;
}

void expect_same(const QuantizedWeights& a, const QuantizedWeights& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const QuantLayer &x = a.layers[i], &y = b.layers[i];
    EXPECT_EQ(x.prefix, y.prefix);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.w, y.w) << x.prefix;
    EXPECT_EQ(x.w_scale, y.w_scale) << x.prefix;  // bit-identical floats
    EXPECT_EQ(x.has_bias, y.has_bias) << x.prefix;
    EXPECT_EQ(x.bias, y.bias) << x.prefix;
  }
  ASSERT_EQ(a.acts.size(), b.acts.size());
  for (const auto& [k, p] : a.acts) {
    ASSERT_TRUE(b.acts.count(k)) << k;
    EXPECT_EQ(p.scale, b.acts.at(k).scale) << k;
    EXPECT_EQ(p.zero_point, b.acts.at(k).zero_point) << k;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_EQ(a.params[i].name, b.params[i].name);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(model_to_json(a.model), model_to_json(b.model));
}

QuantizedWeights round_trip(const QuantizedWeights& q) {
  const std::string bytes = onnx_export_quantized_bytes(q);
  return import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "q.onnx");
}

TEST(OnnxQdq, MnistCnnExportsAndImportsBackBitForBit) {
  const Model m = builtin_model("mnist-cnn");
  const QuantizedWeights q = make_quantized(m, random_images(8, 1, 28, 28, 1), 8, 7);
  EXPECT_EQ(q.acts.size(), m.layers.size() + 1);
  expect_same(q, round_trip(q));
}

TEST(OnnxQdq, AResidualAddExportsAndImportsBackBitForBit) {
  const Model m = residual_model();
  const QuantizedWeights q = make_quantized(m, random_images(8, 3, 8, 8, 2), 8, 9);
  expect_same(q, round_trip(q));
}

TEST(OnnxQdq, PlainImportReadsAQdqFileAsItsDequantizedModel) {
  const Model m = builtin_model("mnist-cnn");
  const QuantizedWeights q = make_quantized(m, random_images(4, 1, 28, 28, 3), 4, 11);
  const std::string bytes = onnx_export_quantized_bytes(q);
  const OnnxImport imp = import_onnx_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "q.onnx");
  ASSERT_EQ(imp.model.layers.size(), m.layers.size());
  const std::vector<ParamInfo> theirs = model_params(imp.model);
  ASSERT_EQ(theirs.size(), q.params.size());
  for (size_t k = 0; k < theirs.size(); ++k) {
    const std::vector<float>& v = imp.weights.at(theirs[k].name);
    EXPECT_TRUE(std::equal(v.begin(), v.end(), q.values.begin() + long(q.params[k].offset))) << theirs[k].name;
  }
}

// ORT runs the QDQ export with int8 kernels (u8 activations requantized after every node); ember
// runs the same weights fp32 with no activation rounding. With activations calibrated on these
// very inputs (no clipping), each layer adds at most half a step (range / 510) of rounding per
// value; over mnist-cnn's 7 layers that stays within a few percent of the logits' range, so we
// check |ORT - ember| <= 5 % of max |ember| and top-1 agreement on >= 95 % of random inputs.
void check_ort_agrees(const Model& m, int c, int h, int w, uint32_t seed) {
  const std::string nm = ort_node_modules();
  if (nm.empty()) GTEST_SKIP() << "ONNX Runtime not available (set EMBER_ORT_NODE_MODULES)";
  const int n = 64;
  const std::vector<float> x = random_images(n, c, h, w, seed);
  const QuantizedWeights q = make_quantized(m, x, n, seed + 1);
  const fs::path dir = fs::temp_directory_path() / ("ember_qdq_" + std::to_string(::getpid()) + "_" + m.name);
  fs::create_directories(dir);
  export_onnx_quantized(q, (dir / "q.onnx").string());
  const std::vector<float> got = run_ort(nm, (dir / "q.onnx").string(), x, "64," + std::to_string(c) + "," + std::to_string(h) + "," + std::to_string(w), dir);
  const std::vector<float> want = run_fp32(m, q.params, q.values, x, n);
  fs::remove_all(dir);
  ASSERT_EQ(got.size(), want.size());
  const size_t k = want.size() / n;
  float top = 0, err = 0;
  for (size_t j = 0; j < want.size(); ++j) top = std::max(top, std::fabs(want[j])), err = std::max(err, std::fabs(got[j] - want[j]));
  int agree = 0;
  for (int s = 0; s < n; ++s) {
    auto a = got.begin() + long(s * k), b = want.begin() + long(s * k);
    agree += std::max_element(a, a + long(k)) - a == std::max_element(b, b + long(k)) - b;
  }
  std::printf("%s: ORT vs ember fp32: max error %.4g of max |logit| %.4g; top-1 agreement %d/%d\n", m.name.c_str(), err, top, agree, n);
  EXPECT_LE(err, 0.05f * top);
  EXPECT_GE(agree, int(0.95 * n));
}

TEST(OnnxQdq, OnnxRuntimeRunsTheMnistCnnExport) { check_ort_agrees(builtin_model("mnist-cnn"), 1, 28, 28, 21); }
TEST(OnnxQdq, OnnxRuntimeRunsTheResidualExport) { check_ort_agrees(residual_model(), 3, 8, 8, 31); }

}  // namespace
