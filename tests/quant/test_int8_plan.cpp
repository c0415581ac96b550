// The int8 plan against references: mnist-cnn against a double-precision fake-quantized
// reference written out here (quantize, dequantize, products in double), and models with fp32
// nodes (LayerNorm, GELU, residual adds) against the fp32 plan of the dequantized weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ember/quant.h"
#include "quant/int8_ops.h"
#include "quant/quant_math.h"

namespace ember {
namespace {

std::vector<float> random_values(const Model& m, uint64_t seed) {
  PlanOptions o;
  o.batch = 1, o.training = false;
  Plan p(m, o);
  p.init_params(seed);
  const float* v = static_cast<const float*>(std::as_const(p).param_data());
  return {v, v + p.param_count()};
}

std::vector<float> random_inputs(const Model& m, int n, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(size_t(n) * m.in_c * m.in_h * m.in_w);
  for (float& v : x) v = u(rng);
  return x;
}

// fp32 plan outputs of the dequantized weights.
std::vector<float> fp32_outputs(const QuantizedWeights& q, const std::vector<float>& x, int n) {
  PlanOptions o;
  o.batch = n, o.training = false, o.threads = 1;
  Plan p(q.model, o);
  std::copy(q.values.begin(), q.values.end(), static_cast<float*>(p.param_data()));
  std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
  p.forward(n);
  const float* y = static_cast<const float*>(p.output());
  size_t D = 1;
  for (int d : p.output_dims()) D *= size_t(d);
  return {y, y + size_t(n) * D};
}

std::vector<float> int8_outputs(const QuantizedWeights& q, const std::vector<float>& x, int n, int threads,
                                const std::string& isa = "") {
  Plan p(q, int8_plan_options(n, threads, isa));
  std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
  p.forward(n);
  size_t D = 1;
  for (int d : p.output_dims()) D *= size_t(d);
  const float* y = static_cast<const float*>(p.output());
  return {y, y + size_t(n) * D};
}

double fq(double v, QParams q) { return quant::dequantize_value(quant::quantize_value(float(v), q), q); }

// mnist-cnn in double: conv 5x5 pad 2 -> ReLU -> max-pool 2 -> flatten -> linear -> ReLU -> linear,
// every int8 tensor fake-quantized as the int8 plan stores it (ReLU's output after the conv, the
// pool and flatten keeping its QParams; the first Linear's ReLU output), weights dequantized. A
// tensor without an activation entry is not rounded (the int8 plan keeps it fp32).
std::vector<double> mnist_reference(const QuantizedWeights& q, const std::vector<float>& x, int n) {
  const auto fqa = [&](double v, const char* t) {
    const auto a = q.acts.find(t);
    return a == q.acts.end() ? v : fq(v, a->second);
  };
  const auto p = [&](const std::string& name) {
    for (const ParamInfo& i : q.params)
      if (i.name == name) return q.values.data() + i.offset;
    return static_cast<const float*>(nullptr);
  };
  const float *w0 = p("0.weight"), *b0 = p("0.bias"), *w4 = p("4.weight"), *b4 = p("4.bias"), *w6 = p("6.weight"),
              *b6 = p("6.bias");
  std::vector<double> out;
  for (int s = 0; s < n; ++s) {
    std::vector<double> in(784), a(32 * 784), pooled(32 * 196), h(128);
    for (int i = 0; i < 784; ++i) in[size_t(i)] = fqa(x[size_t(s) * 784 + i], "input");
    for (int k = 0; k < 32; ++k)
      for (int y = 0; y < 28; ++y)
        for (int xx = 0; xx < 28; ++xx) {
          double acc = b0[k];
          for (int r = 0; r < 5; ++r)
            for (int c = 0; c < 5; ++c) {
              const int iy = y + r - 2, ix = xx + c - 2;
              if (iy >= 0 && iy < 28 && ix >= 0 && ix < 28) acc += in[size_t(iy) * 28 + ix] * w0[k * 25 + r * 5 + c];
            }
          a[(size_t(k) * 28 + y) * 28 + xx] = fqa(std::max(acc, 0.0), "1");
        }
    for (int k = 0; k < 32; ++k)
      for (int y = 0; y < 14; ++y)
        for (int xx = 0; xx < 14; ++xx) {
          const double* c = &a[(size_t(k) * 28 + 2 * y) * 28 + 2 * xx];
          pooled[(size_t(k) * 14 + y) * 14 + xx] = std::max({c[0], c[1], c[28], c[29]});
        }
    for (int k = 0; k < 128; ++k) {
      double acc = b4[k];
      for (int j = 0; j < 6272; ++j) acc += pooled[size_t(j)] * w4[size_t(k) * 6272 + j];
      h[size_t(k)] = fqa(std::max(acc, 0.0), "5");
    }
    for (int k = 0; k < 10; ++k) {
      double acc = b6[k];
      for (int j = 0; j < 128; ++j) acc += h[size_t(j)] * w6[k * 128 + j];
      out.push_back(acc);
    }
  }
  return out;
}

// Random weights, with norm scales, shifts and BatchNorm's running statistics drawn too (the init
// leaves them 1, 0, 0 and 1, which would hide a fold that ignores them).
std::vector<float> random_params(const Model& m, uint64_t seed) {
  std::vector<float> v = random_values(m, seed);
  std::mt19937 rng{uint32_t(seed) + 1};
  std::uniform_real_distribution<float> u(0.5f, 1.5f), s(-0.3f, 0.3f);
  for (const ParamInfo& p : model_params(m)) {
    const bool var = p.name.ends_with("running_var"), mean = p.name.ends_with("running_mean");
    if (p.role != ParamRole::norm_scale && p.role != ParamRole::norm_shift && !var && !mean) continue;
    for (size_t i = 0; i < p.size; ++i) v[p.offset + i] = p.role == ParamRole::norm_scale || var ? u(rng) : s(rng);
  }
  return v;
}

QuantizedWeights quantized(const Model& m, int calib, CalibMethod method = CalibMethod::minmax) {
  const std::vector<float> x = random_inputs(m, calib, 7);
  QuantOptions o;
  o.method = method;
  return quantize_model(m, random_params(m, 3), x.data(), calib, o);
}

TEST(Int8Plan, MnistCnnMatchesDoubleFakeQuantReference) {
  const Model m = builtin_model("mnist-cnn");
  const QuantizedWeights q = quantized(m, 64);
  const int n = 8;
  const std::vector<float> x = random_inputs(m, n, 11);
  const std::vector<double> ref = mnist_reference(q, x, n);
  for (int threads : {1, 2}) {
    const std::vector<float> y = int8_outputs(q, x, n, threads);
    ASSERT_EQ(y.size(), ref.size());
    double scale = 0, worst = 0;
    for (size_t i = 0; i < y.size(); ++i) scale = std::max(scale, std::fabs(ref[i])), worst = std::max(worst, std::fabs(y[i] - ref[i]));
    // The int8 plan rounds in float where the reference rounds in double: a tie may land one
    // step apart (one u8 step of fc1's output moves a logit by at most 128 * |w| * step).
    EXPECT_LE(worst, 0.02 * scale) << "threads " << threads;
  }
}

// A QDQ file may quantize only some tensors: without an entry for the first Linear's output, that
// Linear writes fp32 and the last one runs fp32, and the plan still matches the reference.
TEST(Int8Plan, TensorsWithoutActivationEntriesStayFp32) {
  const Model m = builtin_model("mnist-cnn");
  QuantizedWeights q = quantized(m, 64);
  q.acts.erase("5");
  const int n = 4;
  const std::vector<float> x = random_inputs(m, n, 12);
  const std::vector<double> ref = mnist_reference(q, x, n);
  const std::vector<float> y = int8_outputs(q, x, n, 1);
  double scale = 0, worst = 0;
  for (size_t i = 0; i < y.size(); ++i) scale = std::max(scale, std::fabs(ref[i])), worst = std::max(worst, std::fabs(y[i] - ref[i]));
  EXPECT_LE(worst, 0.02 * scale);
  const std::vector<std::string> paths = int8_node_paths(q);
  EXPECT_EQ(paths.at(4), "int8");
  EXPECT_EQ(paths.at(6), "fp32");
  q.acts.erase("input");  // the conv cannot quantize its input now; the Linear after flatten still can
  const std::vector<std::string> later = int8_node_paths(q);
  for (int i : {0, 1, 2, 3, 6}) EXPECT_EQ(later.at(size_t(i)), "fp32") << i;
  EXPECT_EQ(later.at(4), "int8");
}

// A max-pool of any window (ResNet's 3x3/2, padding 1) runs exactly on u8 and `ember quantize`
// gives its output the input's pair; a file whose pair there is its own (calibrated when ember ran
// such pools in fp32) still loads and runs that pool fp32, as before, to the same values.
TEST(Int8Plan, AnyMaxPoolRunsOnU8AndAFileWithItsOwnPoolPairRunsItFp32) {
  const Model m = parse_model_json(R"({"input": [3, 12, 12], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "relu"},
      {"type": "maxpool2d", "kernel": 3, "stride": 2, "padding": 1}, {"type": "flatten"},
      {"type": "linear", "out_features": 5}]})", "pool");
  const QuantizedWeights q = quantized(m, 16);
  ASSERT_EQ(q.acts.at("2").scale, q.acts.at("1").scale);
  ASSERT_EQ(q.acts.at("2").zero_point, q.acts.at("1").zero_point);
  EXPECT_EQ(int8_node_paths(q).at(2), "int8");
  const int n = 3;
  const std::vector<float> x = random_inputs(m, n, 21);
  const std::vector<float> exact = int8_outputs(q, x, n, 1, "scalar");
  EXPECT_EQ(int8_outputs(q, x, n, 2), exact);
  QuantizedWeights own = q;
  own.acts.at("2").scale *= 1.25f;
  EXPECT_EQ(int8_node_paths(own).at(2), "fp32");
  // The fp32 pool of the dequantized values, quantized again at the Linear with its input's pair
  // (the flatten's, kept from the ReLU): the u8 pool's values, as max commutes with the quantization.
  EXPECT_EQ(int8_outputs(own, x, n, 1), exact);
  // Without a ReLU before it, and calibrated by percentile or with a stride above the window,
  // the pool's own range differs from its input's: `ember quantize` still makes it u8.
  const Model m2 = parse_model_json(R"({"input": [3, 12, 12], "classes": 5, "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1},
      {"type": "maxpool2d", "kernel": 2, "stride": 3}, {"type": "flatten"},
      {"type": "linear", "out_features": 5}]})", "pool2");
  for (CalibMethod method : {CalibMethod::minmax, CalibMethod::percentile}) {
    const QuantizedWeights q2 = quantized(m2, 16, method);
    EXPECT_EQ(q2.acts.at("1").scale, q2.acts.at("0").scale);
    EXPECT_EQ(int8_node_paths(q2).at(1), "int8");
  }
}

// im2col (the fast runs of small channel counts, the window edges, strides, any starting pixel),
// direct and through padded rows, against the plain per-tap definition.
TEST(Int8Plan, Im2colMatchesThePerTapDefinition) {
  struct Shape { int N, H, W, C, R, S, sh, sw, ph, pw; };
  for (const Shape& t : {Shape{2, 28, 28, 1, 5, 5, 1, 1, 2, 2}, Shape{1, 7, 9, 3, 3, 3, 2, 2, 1, 1}, Shape{2, 5, 6, 2, 3, 5, 1, 2, 0, 2},
                         Shape{1, 6, 5, 17, 3, 2, 1, 1, 1, 0}, Shape{3, 4, 4, 5, 4, 4, 4, 4, 0, 0}, Shape{1, 3, 11, 9, 1, 7, 1, 3, 0, 3},
                         Shape{2, 9, 1, 1, 3, 1, 1, 1, 1, 0}, Shape{1, 5, 6, 2, 3, 1, 2, 1, 1, 0}}) {
    quant::GemmOp op;
    op.N = t.N, op.H = t.H, op.W = t.W, op.C = t.C, op.R = t.R, op.S = t.S, op.stride_h = t.sh, op.stride_w = t.sw;
    op.pad_h = t.ph, op.pad_w = t.pw, op.x_zp = 77;
    op.P = (t.H + 2 * t.ph - t.R) / t.sh + 1, op.Q = (t.W + 2 * t.pw - t.S) / t.sw + 1;
    std::vector<uint8_t> x(size_t(t.N) * t.H * t.W * t.C);
    for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t(i * 2654435761u >> 24);
    const int J = t.R * t.S * t.C;
    op.J = (J + 3) / 4 * 4;  // as pack_gemm sets it for an im2col op: zeros past J
    const int64_t M = int64_t(t.N) * op.P * op.Q;
    for (int64_t m0 : {int64_t(0), M / 3 + 1}) {
      const int rows = int(M - m0);
      std::vector<uint8_t> col(size_t(rows) * op.J, 1), want(col.size(), 0), padded(col.size(), 1);
      quant::im2col_rows(op, col.data(), x.data(), m0, rows);
      // The padded path (what pack_gemm picks for few channels with padding), in chunks of 7 rows.
      std::vector<uint8_t> pad(size_t(t.H + 2 * t.ph) * (t.W + 2 * t.pw) * t.C + 16, 3);
      for (int i = 0; i < rows; i += 7) quant::im2col_rows(op, padded.data() + size_t(i) * op.J, x.data(), m0 + i, std::min(7, rows - i), pad.data());
      for (int i = 0; i < rows; ++i) {
        const int64_t m = m0 + i, n = m / (op.P * op.Q);
        const int p = int(m % (op.P * op.Q)) / op.Q, q = int(m % (op.P * op.Q)) % op.Q;
        for (int r = 0; r < t.R; ++r)
          for (int s = 0; s < t.S; ++s)
            for (int c = 0; c < t.C; ++c) {
              const int h = p * t.sh - t.ph + r, w = q * t.sw - t.pw + s;
              const bool in = h >= 0 && h < t.H && w >= 0 && w < t.W;
              want[size_t(i) * op.J + (r * t.S + s) * t.C + c] = in ? x[((size_t(n) * t.H + h) * t.W + w) * t.C + c] : 77;
            }
      }
      EXPECT_EQ(col, want) << "C " << t.C << " R " << t.R << " S " << t.S << " from " << m0;
      EXPECT_EQ(padded, want) << "padded path: C " << t.C << " R " << t.R << " S " << t.S << " from " << m0;
    }
  }
}

// 7-bit weights (QuantOptions::weight_bits, `ember quantize --weight-bits 7`): every weight in
// [-63, 63]; the plan (avx2: the VPMADDUBSW GEMM) matches the reference and the scalar set bit for bit.
TEST(Int8Plan, SevenBitWeightsMatchTheReferenceOnEverySet) {
  const Model m = builtin_model("mnist-cnn");
  const std::vector<float> calib = random_inputs(m, 64, 7);
  QuantOptions o;
  o.weight_bits = 7;
  const QuantizedWeights q = quantize_model(m, random_params(m, 3), calib.data(), 64, o);
  EXPECT_EQ(q.calib.weight_bits, 7);
  for (const QuantLayer& l : q.layers) {
    const auto [lo, hi] = std::minmax_element(l.w.begin(), l.w.end());
    EXPECT_GE(*lo, -63) << l.prefix;
    EXPECT_LE(*hi, 63) << l.prefix;
    EXPECT_TRUE(*lo == -63 || *hi == 63) << l.prefix << ": the largest weight takes the top step";
  }
  const int n = 4;
  const std::vector<float> x = random_inputs(m, n, 13);
  const std::vector<double> ref = mnist_reference(q, x, n);
  const std::vector<float> scalar = int8_outputs(q, x, n, 1, "scalar");
  double scale = 0, worst = 0;
  for (size_t i = 0; i < scalar.size(); ++i) scale = std::max(scale, std::fabs(ref[i])), worst = std::max(worst, std::fabs(scalar[i] - ref[i]));
  EXPECT_LE(worst, 0.02 * scale);
  for (const char* isa : {"avx2", "avx512"})
    if (isa_supported(std::string(isa) == "avx2" ? Isa::avx2 : Isa::avx512)) EXPECT_EQ(int8_outputs(q, x, n, 2, isa), scalar) << isa;
  QuantOptions bad;
  bad.weight_bits = 6;
  EXPECT_THROW(quantize_model(m, random_params(m, 3), calib.data(), 64, bad), Error);
}

// The fp32 parameters a quantized file keeps are rounded to binary16 where that loses nothing
// that matters: a norm's scale and shift even with values below 2^-14 (absolute error at most
// 2^-25 on values that act on normalised activations), a layer scale only when every value is a
// normal half (1e-6 stays fp32: its relative precision matters).
TEST(Int8Plan, NormParametersRoundToHalfAndSmallLayerScalesStayFp32) {
  const Model m = parse_model_json(R"({"input": [2, 6, 6], "classes": 3, "layers": [
      {"type": "conv2d", "name": "c", "out_channels": 4, "kernel": 3}, {"type": "layernorm2d", "name": "n"},
      {"type": "layerscale", "name": "s"}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})", "half");
  std::vector<float> v = random_params(m, 4);
  const std::vector<ParamInfo> ps = model_params(m);
  auto at = [&](const std::string& name) -> const ParamInfo& {
    return *std::find_if(ps.begin(), ps.end(), [&](const ParamInfo& p) { return p.name == name; });
  };
  const float tiny[4] = {1e-6f, -3.3e-7f, 2e-9f, 0.731f};
  std::copy(tiny, tiny + 4, v.begin() + long(at("n.bias").offset));
  std::copy(tiny, tiny + 4, v.begin() + long(at("n.weight").offset));
  std::fill_n(v.begin() + long(at("s.layer_scale").offset), 4, 1e-6f);
  const std::vector<float> x = random_inputs(m, 8, 2);
  const QuantizedWeights q = quantize_model(m, v, x.data(), 8, {});
  for (const char* name : {"n.bias", "n.weight"}) {
    const ParamInfo& p = at(name);
    EXPECT_TRUE(quant::exact_in_half(q.values.data() + p.offset, p.size)) << name;
    for (size_t i = 0; i < p.size; ++i)
      EXPECT_LE(std::fabs(q.values[p.offset + i] - v[p.offset + i]), std::max(0x1p-25f, std::fabs(v[p.offset + i]) * 0x1p-11f)) << name;
  }
  const ParamInfo& ls = at("s.layer_scale");
  for (size_t i = 0; i < ls.size; ++i) EXPECT_EQ(q.values[ls.offset + i], 1e-6f);
}

// Calibration is an inference plan run with observer nodes: its minmax QParams of the input and
// of the model's output are those of the ranges an fp32 plan computes over the same samples, the
// last (partial) batch included: its last sample alone holds the input's largest value.
TEST(Int8Plan, CalibrationSeesEveryTensorOfEverySampleAsTheFp32PlanComputesIt) {
  const Model m = builtin_model("mnist-cnn");
  const int n = 40;  // calibration runs batches of 32: one whole, one of 8
  std::vector<float> x = random_inputs(m, n, 5);
  const size_t D = size_t(m.in_c) * m.in_h * m.in_w;
  x[(n - 1) * D + D / 2] = 7.5f;
  const std::vector<float> values = random_params(m, 3);
  const QuantizedWeights q = quantize_model(m, values, x.data(), n, {});
  const QParams in = quant::qparams_for_range(0.0, 7.5);
  EXPECT_EQ(q.acts.at("input").scale, in.scale);
  EXPECT_EQ(q.acts.at("input").zero_point, in.zero_point);
  QuantizedWeights plain = q;
  plain.values = values;
  const std::vector<float> y = fp32_outputs(plain, x, n);
  const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
  const QParams out = quant::qparams_for_range(*lo, *hi), got = q.acts.at("6");  // the last Linear's output
  EXPECT_NEAR(got.scale, out.scale, 1e-5 * out.scale);
  EXPECT_NEAR(got.zero_point, out.zero_point, 1);
  EXPECT_EQ(q.acts.size(), 8u);  // the input and each of the 7 layers' outputs
}

TEST(Int8Plan, SameBitsForAnyThreadCount) {
  const Model m = builtin_model("mnist-cnn");
  const QuantizedWeights q = quantized(m, 32);
  const std::vector<float> x = random_inputs(m, 5, 12);
  EXPECT_EQ(int8_outputs(q, x, 5, 1), int8_outputs(q, x, 5, 3));
}

// Argmax agreement and a relative error bound against the fp32 plan of the dequantized weights.
void expect_close_to_fp32(const QuantizedWeights& q, int n, double tol) {
  const std::vector<float> x = random_inputs(q.model, n, 21);
  const std::vector<float> ref = fp32_outputs(q, x, n), y = int8_outputs(q, x, n, 2);
  ASSERT_EQ(y.size(), ref.size());
  double scale = 0, err = 0;
  for (size_t i = 0; i < y.size(); ++i) scale += ref[i] * double(ref[i]), err += (y[i] - ref[i]) * double(y[i] - ref[i]);
  const double rel = std::sqrt(err / std::max(scale, 1e-30));
  EXPECT_LE(rel, tol) << q.model.name;
  std::printf("%s: relative error %.4f against the fp32 plan of the dequantized weights\n", q.model.name.c_str(), rel);
}

TEST(Int8Plan, MnistCnnCloseToFp32) { expect_close_to_fp32(quantized(builtin_model("mnist-cnn"), 64), 16, 0.02); }

// LayerNorm and GELU in fp32 between int8 convolutions, grouped 7x7 (depthwise, multiplier 4),
// residual adds fused into the 1x1 convolutions.
TEST(Int8Plan, ConvnextSeedCloseToFp32) { expect_close_to_fp32(quantized(builtin_model("convnext-seed"), 16), 4, 0.1); }
TEST(Int8Plan, ConvnextFashionCloseToFp32) { expect_close_to_fp32(quantized(builtin_model("convnext-fashion"), 16), 4, 0.12); }
// BatchNorm2d folded into the requantization, strided 3x3 and 1x1 downsampling, the residual and ReLU fused.
TEST(Int8Plan, Resnet18CloseToFp32) { expect_close_to_fp32(quantized(builtin_model("resnet18"), 16), 4, 0.05); }

}  // namespace
}  // namespace ember
