// The QDQ export of BatchNorm2d models (qdq_export_view, what `ember export` writes): each
// BatchNorm2d the int8 plan folds into a Conv2d's requantization leaves as one Conv carrying it, so
// that the file, imported back into ember or run by ONNX Runtime, computes what ember's plan does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "ember/error.h"
#include "ember/onnx_quant.h"
#include "ember/plan.h"
#include "ort_node.h"

namespace ember {
namespace {

Model& bn(Model& m, const std::string& name) {
  LayerSpec s;
  s.kind = LayerKind::BatchNorm2d;
  s.name = name;
  m.layers.push_back(s);
  return m;
}
Model& conv(Model& m, int out, int k, int stride, int pad) {
  m.conv2d(out, k, stride, pad);
  m.layers.back().bias = false;  // as torchvision's ResNets: the BN's shift is the bias
  return m;
}

// A small ResNet: conv-bn-relu, a residual block (conv-bn-relu with a non-affine BN, conv-bn, add,
// relu), a strided 1x1 conv with a bias -bn-relu, max-pool, linear. Input [N, 3, 8, 8]. Layers:
// 0 conv, 1 bn0, 2 a, 3 conv, 4 bn1, 5 relu, 6 conv, 7 b (BN), 8 add, 9 relu, 10 conv, 11 bn3,
// 12 relu, 13 max-pool, 14 flatten, 15 linear.
Model bn_model() {
  Model m;
  m.name = "bn-resnet";
  m.in_c = 3, m.in_h = 8, m.in_w = 8, m.num_classes = 5;
  bn(conv(m, 8, 3, 1, 1), "bn0").relu().named("a");
  bn(conv(m, 8, 3, 1, 1), "bn1").relu();
  m.layers[4].bias = false;  // affine false: running statistics only
  bn(conv(m, 8, 3, 1, 1), "bn2").named("b");
  m.add({"a", "b"}).relu();
  bn(conv(m, 16, 1, 2, 0), "bn3").relu().maxpool2d(2).flatten().linear(5);
  m.layers[10].bias = true;
  return m;
}

// Initialised weights with BatchNorm statistics and layer biases drawn, and gammas of both signs (a
// negative a_k is folded by negating the channel's int8 weights).
std::vector<float> bn_params(const Model& m, uint32_t seed) {
  PlanOptions o;
  o.batch = 1, o.training = false;
  Plan p(m, o);
  p.init_params(seed);
  float* v = static_cast<float*>(p.param_data());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f), shift(-0.3f, 0.3f);
  for (const ParamInfo& pi : p.params()) {
    const bool gamma = pi.role == ParamRole::norm_scale, var = pi.name.ends_with("running_var");
    const bool shifts = pi.role == ParamRole::norm_shift || pi.role == ParamRole::bias || pi.name.ends_with("running_mean");
    if (!gamma && !var && !shifts) continue;
    for (size_t i = 0; i < pi.size; ++i)
      v[pi.offset + i] = gamma ? (i % 3 == 1 ? -mag(rng) : mag(rng)) : var ? mag(rng) : shift(rng);
  }
  return {v, v + p.param_count()};
}

std::vector<float> images(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> x(size_t(n) * 3 * 8 * 8);
  for (float& v : x) v = u(rng);
  return x;
}

QuantizedWeights quantized_bn_model(int calib) {
  const Model m = bn_model();
  const std::vector<float> x = images(calib, 5);
  QuantOptions o;
  o.weight_bits = test::ort_exact_weight_max() == 127 ? 8 : 7;  // exact in ORT's int8 GEMM (ort_node.h)
  return quantize_model(m, bn_params(m, 3), x.data(), calib, o);
}

std::vector<float> int8_outputs(const QuantizedWeights& q, const std::vector<float>& x, int n) {
  Plan p(q, int8_plan_options(n, 1));
  std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
  p.forward(n);
  const float* y = static_cast<const float*>(p.output());
  return {y, y + size_t(n) * size_t(q.model.num_classes)};
}

QuantizedWeights import_bytes(const std::string& b) {
  return import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "q.onnx");
}
int batchnorms(const Model& m) {
  return int(std::count_if(m.layers.begin(), m.layers.end(), [](const LayerSpec& s) { return s.kind == LayerKind::BatchNorm2d; }));
}

// max |a - b| / max |b|, and on how many of the n samples the arg-max agrees.
std::pair<float, int> compare(const std::vector<float>& a, const std::vector<float>& b, int n) {
  float top = 0, err = 0;
  for (size_t j = 0; j < b.size(); ++j) top = std::max(top, std::fabs(b[j])), err = std::max(err, std::fabs(a[j] - b[j]));
  const long k = long(b.size()) / n;
  int agree = 0;
  for (long s = 0; s < n; ++s)
    agree += std::max_element(a.begin() + s * k, a.begin() + (s + 1) * k) - a.begin() ==
             std::max_element(b.begin() + s * k, b.begin() + (s + 1) * k) - b.begin();
  return {err / top, agree};
}

TEST(OnnxQdqBn, TheExportFoldsEveryBatchNormAndComputesWhatTheInt8PlanDoes) {
  const QuantizedWeights q = quantized_bn_model(32);
  const QdqExport v = qdq_export_view(q);
  EXPECT_EQ(v.folded_bn, (std::map<std::string, std::string>{{"0", "bn0"}, {"3", "bn1"}, {"6", "b"}, {"10", "bn3"}}));
  const QuantizedWeights back = import_bytes(onnx_export_quantized_bytes(v));
  EXPECT_EQ(batchnorms(back.model), 0);
  EXPECT_EQ(batchnorms(import_bytes(onnx_export_quantized_bytes(q)).model), 4);  // q as given: BN nodes
  // The imported file's plan (Conv with int8 weights times sign a, scales s_w |a|, the plan's
  // int32 bias) against the original plan (BN folded into the requantization): the same integer
  // sums; only the float requantization scale may round differently (an ulp), so the logits agree
  // to float noise unless a value lands on a rounding tie.
  const int n = 64;
  const std::vector<float> x = images(n, 9);
  const auto [err, agree] = compare(int8_outputs(back, x, n), int8_outputs(q, x, n), n);
  std::printf("imported QDQ export vs int8 plan: max error %.3g of max |logit|, top-1 %d/%d\n", double(err), agree, n);
  EXPECT_LE(err, 1e-3f);
  EXPECT_EQ(agree, n);
}

// The fp32 plan of q's dequantized weights: the logits [n, 5] of images x.
std::vector<float> fp32_outputs(const QuantizedWeights& q, const std::vector<float>& x, int n) {
  PlanOptions o;
  o.batch = n, o.training = false, o.threads = 1;
  Plan p(q.model, o);
  std::copy(q.values.begin(), q.values.end(), static_cast<float*>(p.param_data()));
  std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
  p.forward(n);
  const float* y = static_cast<const float*>(p.output());
  return {y, y + size_t(n) * 5};
}

// The int8 plan folds both kinds of BN (affine and not) and a conv's own bias with them: it stays
// within int8 noise of the fp32 plan of the dequantized weights.
TEST(OnnxQdqBn, TheInt8PlanOfTheBatchNormModelIsCloseToFp32) {
  const QuantizedWeights q = quantized_bn_model(64);
  const int n = 64;
  const std::vector<float> x = images(n, 17);
  const auto [err, agree] = compare(int8_outputs(q, x, n), fp32_outputs(q, x, n), n);
  std::printf("int8 plan vs fp32: max error %.3g of max |logit|, top-1 %d/%d\n", double(err), agree, n);
  EXPECT_LE(err, 0.05f);
  EXPECT_GE(agree, 58);
}

// A BatchNorm2d whose shift cannot ride in its conv's int32 bias (channel 2 of bn0: gamma 1e-7,
// 1.19e-7 once ember quantize rounds it to binary16, beta 2, so c / a is about 1.7e7, about 1e12
// units of s_in s_w, beyond int32): the int8 plan runs it fp32 after the conv rather than
// saturate the bias, and the export keeps it a node.
TEST(OnnxQdqBn, ABatchNormShiftBeyondInt32RunsFp32) {
  const Model m = bn_model();
  std::vector<float> v = bn_params(m, 3);
  for (const ParamInfo& p : model_params(m)) {
    if (p.name == "bn0.weight") v[p.offset + 2] = 1e-7f;
    if (p.name == "bn0.bias") v[p.offset + 2] = 2.0f;
  }
  const int n = 64;
  const std::vector<float> calib = images(32, 5), x = images(n, 29);
  const QuantizedWeights q = quantize_model(m, v, calib.data(), 32, {});
  EXPECT_EQ(int8_node_paths(q)[1], "fp32");
  const auto [err, agree] = compare(int8_outputs(q, x, n), fp32_outputs(q, x, n), n);
  std::printf("int8 plan vs fp32, a BN shift beyond int32: max error %.3g of max |logit|, top-1 %d/%d\n", double(err), agree, n);
  EXPECT_LE(err, 0.05f);
  EXPECT_GE(agree, 58);
  const QdqExport e = qdq_export_view(q);
  EXPECT_EQ(e.folded_bn.count("0"), 0u);
  const auto [err2, agree2] = compare(int8_outputs(import_bytes(onnx_export_quantized_bytes(e)), x, n), int8_outputs(q, x, n), n);
  EXPECT_LE(err2, 1e-3f);
  EXPECT_EQ(agree2, n);
}

// A tensor whose file QParams the plan does not use (a flatten's: it keeps its input's): the
// Linear reading it has its bias in the file's units, which the export converts to the plan's.
TEST(OnnxQdqBn, ABiasInAnotherScalesUnitsIsExportedInThePlans) {
  QuantizedWeights q = quantized_bn_model(32);
  q.acts.at("14").scale *= 1.37f;
  const QdqExport v = qdq_export_view(q);
  EXPECT_EQ(v.q.acts.at("14").scale, q.acts.at("13").scale);
  const int n = 64;
  const std::vector<float> x = images(n, 19);
  const auto [err, agree] = compare(int8_outputs(import_bytes(onnx_export_quantized_bytes(v)), x, n), int8_outputs(q, x, n), n);
  EXPECT_LE(err, 1e-3f);
  EXPECT_EQ(agree, n);
}

// Its conv is written unfolded (Conv with its own bias in the plan's units, then BatchNormalization):
// the shift then adds in fp32 where the plan rounds it into the int32 bias, so close, not equal.
TEST(OnnxQdqBn, AMinus128WeightWithANegativeGammaKeepsItsBatchNorm) {
  QuantizedWeights q = quantized_bn_model(16);
  const size_t per = q.layers[2].w.size() / q.layers[2].w_scale.size();
  q.layers[2].w[1 * per] = -128;  // channel 1 of conv "6": gamma < 0 (bn_params), so no negation
  const QdqExport v = qdq_export_view(q);
  EXPECT_EQ(v.folded_bn.count("6"), 0u);
  EXPECT_EQ(v.folded_bn.size(), 3u);
  const QuantizedWeights back = import_bytes(onnx_export_quantized_bytes(v));
  EXPECT_EQ(batchnorms(back.model), 1);
  EXPECT_EQ(back.layer("6")->w[per], -128);
  const int n = 64;
  const std::vector<float> x = images(n, 23);
  const auto [err, agree] = compare(int8_outputs(back, x, n), int8_outputs(q, x, n), n);
  EXPECT_LE(err, 0.02f);
  EXPECT_GE(agree, 60);
}

// A hostile model: finite scales whose product (a bias's unit, its DQ scale) overflows is refused
// naming the layer's scale tensor (the quantized file's reader refuses such a file alike), not
// written as inf (a zero bias would dequantize to NaN).
TEST(OnnxQdqBn, ABiasScaleThatOverflowsIsRefusedNamingTheLayer) {
  QuantizedWeights q = quantized_bn_model(16);
  q.acts.at("9").scale = 1e31f;  // the input of conv "10", the one with a bias
  for (QuantLayer& l : q.layers)
    if (l.prefix == "10") l.w_scale.assign(l.w_scale.size(), 1e8f);  // its bias unit: 1e31 * 1e8 = inf
  try {
    onnx_export_quantized_bytes(qdq_export_view(q));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor '10.weight_scale': the bias unit of 10.bias"), std::string::npos) << e.what();
  }
}

// ONNX Runtime on the export against ember's int8 plan: its Conv (DQ'd int8 weights, int32 bias)
// carries the BN as ember's requantization does, so the two round alike; what ORT runs in fp32
// on dequantized values (the residual add) differs from ember's integer sums by float noise.
TEST(OnnxQdqBn, OnnxRuntimeComputesWhatTheInt8PlanDoes) {
  const std::string nm = test::ort_node_modules();
  if (nm.empty()) GTEST_SKIP() << "ONNX Runtime not available (set EMBER_ORT_NODE_MODULES)";
  const QuantizedWeights q = quantized_bn_model(32);
  const int n = 64;
  const std::vector<float> x = images(n, 13);
  const auto dir = std::filesystem::temp_directory_path() / ("ember_qdq_bn_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  export_onnx_quantized(qdq_export_view(q), (dir / "q.onnx").string());
  const std::vector<float> got = test::run_ort(nm, (dir / "q.onnx").string(), x, "64,3,8,8", dir);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(got.size(), size_t(n) * 5);
  const auto [err, agree] = compare(got, int8_outputs(q, x, n), n);
  std::printf("ORT on the QDQ export vs ember int8: max error %.3g of max |logit|, top-1 %d/%d\n", double(err), agree, n);
  EXPECT_LE(err, 1e-3f);
  EXPECT_EQ(agree, n);
}

// fuzz_quantized's finding (issue 55's 600 s run): a quantized file whose BatchNorm2d running
// variance is negative loaded, and its export was then refused by ember's own ONNX import (which
// refuses a negative variance, L6). The reader refuses it, naming the tensor.
TEST(OnnxQdqBn, ANegativeRunningVarianceIsRefusedByTheReader) {
  QuantizedWeights q = quantized_bn_model(16);
  std::string var;  // the first BatchNorm2d's running variance
  for (const ParamInfo& p : q.params)
    if (var.empty() && p.name.ends_with("running_var")) var = p.name, q.values[p.offset + 1] = -0.07f;
  ASSERT_FALSE(var.empty());
  const std::string path = ::testing::TempDir() + "/negvar_" + std::to_string(::getpid()) + ".safetensors";
  try {
    save_quantized(q, path);
    load_quantized(path);
    ADD_FAILURE() << "a negative running variance loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'" + var + "' [1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a variance is >= 0"), std::string::npos) << msg;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ember
