// Quantization-aware training (docs/int8.md): fakequant against the int8 round trip, its
// straight-through backward, the observer and its freeze; a QAT plan against the same network
// written out by hand, its master update; quantize_model keeping the learnt ranges (the int8 plan
// agreeing with the QAT plan); the JSON "qat" object and its bad forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "ember/quant.h"
#include "kernels/ref/ref_fake_quant.h"
#include "quant/quant_math.h"

namespace ember {
namespace {

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

const ParamInfo& param(const Plan& p, const std::string& name) {
  for (const ParamInfo& q : p.params())
    if (q.name == name) return q;
  throw Error("no parameter " + name);
}

float* values(Plan& p, const std::string& name) { return static_cast<float*>(p.param_data()) + param(p, name).offset; }
const float* cvalues(const Plan& p, const std::string& name) {
  return static_cast<const float*>(p.param_data()) + param(p, name).offset;
}

// An inference plan of one fakequant layer over [D] with range [lo, hi] equals the int8 path's
// quantize_value then dequantize_value, value for value (NaN and both clips included).
TEST(Qat, FakeQuantIsTheInt8RoundTrip) {
  const Model m = parse_model_json(R"({"input": [40000, 1, 1], "classes": 2, "layers": [{"type": "fakequant"}]})", "fq");
  for (int threads : {1, 2}) {
    PlanOptions o;
    o.batch = 1, o.training = false, o.threads = threads;  // 40000 values: the threaded path
    Plan p(m, o);
    float* r = values(p, "0.range");
    r[0] = -1.5f, r[1] = 2.25f;
    *values(p, "0.observed") = 1;
    std::vector<float> x = uniform(40000, -3, 4, 5);
    x[7] = std::nanf("");
    std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
    p.forward(1);
    const float* y = static_cast<const float*>(p.output());
    const QParams q = quant::qparams_for_range(-1.5, 2.25);
    int clipped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = quant::dequantize_value(quant::quantize_value(x[i], q), q);
      ASSERT_EQ(y[i], want) << "at " << i << ": x " << x[i];
      clipped += x[i] < -1.5f || x[i] > 2.25f;
    }
    EXPECT_GT(clipped, 1000);
    // Never observed: the values pass unchanged.
    *values(p, "0.observed") = 0;
    p.forward(1);
    for (size_t i = 0; i < x.size(); ++i)
      if (!std::isnan(x[i])) ASSERT_EQ(static_cast<const float*>(p.output())[i], x[i]);
  }
}

// dx = dy inside the representable range [-zp s, (255 - zp) s], 0 outside (clipped values).
TEST(Qat, StraightThroughBackwardPassesInsideTheRangeOnly) {
  const QParams q = quant::qparams_for_range(-1.0, 3.0);  // s = 4/255, zp 64
  const double lo = -q.zero_point * double(q.scale), hi = (255 - q.zero_point) * double(q.scale);
  const std::vector<double> x = {-5, lo - 1e-3, lo, -0.3, 0, 1.7, hi, hi + 1e-3, 9};
  std::vector<double> dy(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dy[i] = 1.0 + double(i);
  ref::fake_quant_bwd<double>(dx.data(), dy.data(), x.data(), x.size(), q.scale, q.zero_point);
  for (size_t i = 0; i < x.size(); ++i) {
    const bool inside = x[i] >= lo - 1e-12 && x[i] <= hi + 1e-12;
    EXPECT_EQ(dx[i], inside ? dy[i] : 0.0) << "x " << x[i] << " range [" << lo << ", " << hi << "]";
  }
}

// The observer: the first training batch sets the range, later ones move it 1 % of the way, and a
// QAT model's observers stop after qat.freeze_after optimizer steps.
TEST(Qat, ObserverMovesByAverageAndFreezes) {
  Model m = parse_model_json(R"({"input": [6, 1, 1], "classes": 3, "layers": [{"type": "linear", "out_features": 3}],
                                 "qat": {"tensors": ["input"], "freeze_after": 2}})", "obs");
  PlanOptions o;
  o.batch = 4, o.optimizer.kind = OptimizerKind::SGD;
  Plan p(m, o);
  p.init_params(3);
  const double batch_range[4][2] = {{-1, 2}, {-3, 5}, {-0.5, 8}, {-9, 9}};
  double lo = 0, hi = 0;
  for (int s = 0; s < 4; ++s) {
    std::vector<float> x = uniform(24, float(batch_range[s][0]) / 2, float(batch_range[s][1]) / 2, uint32_t(s));
    x[3] = float(batch_range[s][0]), x[17] = float(batch_range[s][1]);
    std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
    std::fill(p.labels(), p.labels() + 4, 1);
    p.forward(4);
    p.loss(4, true);
    p.backward(4);
    p.optimizer_step(0.01);
    if (s < 2) ref::observe_range(&lo, &hi, batch_range[s][0], batch_range[s][1], s == 0);  // steps 0, 1 observe
    const float* r = cvalues(p, "input.fake_quant.range");
    EXPECT_FLOAT_EQ(r[0], float(lo)) << "step " << s;
    EXPECT_FLOAT_EQ(r[1], float(hi)) << "step " << s;
    EXPECT_EQ(*cvalues(p, "input.fake_quant.observed"), float(std::min(s + 1, 2)));
  }
  EXPECT_NE(lo, -1.0);  // the second batch moved it
}

// A QAT plan (qat: the input and the ReLU's output) against the same network written out with
// fakequant layers and weights fake-quantized per channel: the same outputs, loss and gradients;
// then one SGD step moves the masters by the gradient taken at the fake-quantized weights.
TEST(Qat, PlanEqualsTheHandWrittenFakeQuantizedNetwork) {
  const std::string body = R"({"type": "conv2d", "name": "c", "out_channels": 5, "kernel": 3, "padding": 1}, {"type": "relu", "name": "r"},)";
  const std::string tail = R"({"type": "flatten"}, {"type": "linear", "name": "l", "out_features": 4}])";
  Model qat = parse_model_json(R"({"input": [2, 6, 7], "classes": 4, "layers": [)" + body + tail +
                                   R"(, "qat": {"tensors": ["input", "r"], "weight_bits": 7}})", "qat");
  const Model hand = parse_model_json(R"({"input": [2, 6, 7], "classes": 4, "layers": [{"type": "fakequant", "name": "fi"}, )" + body +
                                          R"({"type": "fakequant", "name": "fr"}, )" + tail + "}", "hand");
  PlanOptions o;
  o.batch = 3, o.optimizer.kind = OptimizerKind::SGD, o.threads = 2;
  Plan a(qat, o), b(hand, o);
  a.init_params(9);
  const float ranges[2][2] = {{-0.7f, 1.1f}, {0.0f, 1.6f}};
  for (int k = 0; k < 2; ++k) {
    const std::string t = k == 0 ? "input" : "r", h = k == 0 ? "fi" : "fr";
    std::copy(ranges[k], ranges[k] + 2, values(a, t + ".fake_quant.range"));
    std::copy(ranges[k], ranges[k] + 2, values(b, h + ".range"));
    *values(a, t + ".fake_quant.observed") = *values(b, h + ".observed") = 1;
  }
  for (const char* w : {"c.weight", "l.weight"}) {  // b: a's masters fake-quantized, 7 bits
    const ParamInfo& pi = param(a, w);
    const size_t per = pi.size / size_t(pi.shape[0]);
    for (int k = 0; k < pi.shape[0]; ++k) ref::fake_quant_channel<float>(values(b, w) + k * per, cvalues(a, w) + k * per, per, 7);
  }
  for (const char* v : {"c.bias", "l.bias"}) std::copy(cvalues(a, v), cvalues(a, v) + param(a, v).size, values(b, v));
  const std::vector<float> x = uniform(3 * 2 * 6 * 7, -1, 1.3f, 4);
  double loss[2];
  Plan* plans[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    Plan& p = *plans[i];
    p.set_train_mode(false);  // the ranges stay as set
    std::copy(x.begin(), x.end(), static_cast<float*>(p.input()));
    std::fill(p.labels(), p.labels() + 3, 2);
    p.forward(3);
    loss[i] = p.loss(3, true);
    p.backward(3);
  }
  EXPECT_EQ(loss[0], loss[1]);
  const float* ya = static_cast<const float*>(a.output());
  const float* yb = static_cast<const float*>(b.output());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ya[i], yb[i]) << "output " << i;
  const float* ga = static_cast<const float*>(a.grad_data());
  const float* gb = static_cast<const float*>(b.grad_data());
  std::map<std::string, std::vector<float>> before;
  for (const char* w : {"c.weight", "c.bias", "l.weight", "l.bias"}) {
    const ParamInfo &pa = param(a, w), &pb = param(b, w);
    for (size_t i = 0; i < pa.size; ++i) ASSERT_EQ(ga[pa.offset + i], gb[pb.offset + i]) << w << " gradient at " << i;
    before[w].assign(cvalues(a, w), cvalues(a, w) + pa.size);
  }
  a.optimizer_step(0.5);
  for (const auto& [w, v] : before) {  // plain SGD (l2 0): master - lr * the gradient at the fake-quantized weight
    const ParamInfo& pa = param(a, w);
    double moved = 0;
    for (size_t i = 0; i < pa.size; ++i) {
      const float want = v[i] - 0.5f * ga[pa.offset + i];
      ASSERT_NEAR(cvalues(a, w)[i], want, 1e-6) << w << " master at " << i;
      moved = std::max(moved, double(std::fabs(cvalues(a, w)[i] - v[i])));
    }
    EXPECT_GT(moved, 0) << w;
  }
}

// quantize_model of a QAT model: the fakequant nodes go, the learnt ranges become the QParams of
// their tensors, and the int8 plan's outputs are those of the QAT plan in eval mode (the
// fake-quantized reference) up to the int8 path's own roundings (int32 biases, requantization).
TEST(Qat, QuantizeKeepsTheLearntRangesAndInt8AgreesWithTheQatPlan) {
  Model m = parse_model_json(R"({"input": [1, 12, 12], "classes": 10, "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "linear", "out_features": 10}]})", "m");
  PlanOptions fo;
  fo.batch = 1, fo.training = false;
  Plan f(m, fo);
  f.init_params(2);
  const float* fv = static_cast<const float*>(std::as_const(f).param_data());
  const int n = 64;
  const std::vector<float> x = uniform(size_t(n) * 144, 0, 1, 8);
  const QuantizedWeights cal = quantize_model(m, std::vector<float>(fv, fv + f.param_count()), x.data(), n, {});
  m.qat.tensors = int8_qat_tensors(cal);
  EXPECT_EQ(m.qat.tensors, (std::vector<std::string>{"input", "1", "5"}));  // not the max-pool's, flatten's: they keep the ReLU's
  PlanOptions qo;
  qo.batch = n, qo.training = false;
  Plan qp(m, qo);
  float* qv = static_cast<float*>(qp.param_data());
  for (const ParamInfo& p : f.params()) std::copy(fv + p.offset, fv + p.offset + p.size, qv + param(qp, p.name).offset);
  for (const std::string& t : m.qat.tensors) {  // learnt ranges: a bit inside the calibrated ones
    const QParams c = cal.acts.at(t);
    values(qp, t + ".fake_quant.range")[0] = -0.8f * float(c.zero_point) * c.scale;
    values(qp, t + ".fake_quant.range")[1] = 0.8f * float(255 - c.zero_point) * c.scale;
    *values(qp, t + ".fake_quant.observed") = 1;
  }
  std::copy(x.begin(), x.end(), static_cast<float*>(qp.input()));
  qp.forward(n);
  const std::vector<float> all(qv, qv + qp.param_count());
  const QuantizedWeights q = quantize_model(m, all, x.data(), n, {});
  EXPECT_FALSE(q.model.qat.on());
  EXPECT_EQ(q.calib.qat_ranges, 3);
  for (const ParamInfo& p : q.params) EXPECT_EQ(p.name.find("fake_quant"), std::string::npos) << p.name;
  for (const std::string& t : m.qat.tensors) {
    const float* r = cvalues(qp, t + ".fake_quant.range");
    const QParams want = quant::qparams_for_range(r[0], r[1]);
    EXPECT_EQ(q.acts.at(t).scale, want.scale) << t;
    EXPECT_EQ(q.acts.at(t).zero_point, want.zero_point) << t;
  }
  Plan ip(q, int8_plan_options(n, 1, "scalar"));
  std::copy(x.begin(), x.end(), static_cast<float*>(ip.input()));
  ip.forward(n);
  const float* y8 = static_cast<const float*>(ip.output());
  const float* yq = static_cast<const float*>(qp.output());
  double scale = 0, worst = 0;
  int agree = 0;
  for (int i = 0; i < n * 10; ++i) scale = std::max(scale, double(std::fabs(yq[i]))), worst = std::max(worst, double(std::fabs(y8[i] - yq[i])));
  for (int s = 0; s < n; ++s)
    agree += std::max_element(y8 + s * 10, y8 + s * 10 + 10) - y8 - s * 10 == std::max_element(yq + s * 10, yq + s * 10 + 10) - yq - s * 10;
  EXPECT_LT(worst, 0.02 * scale) << "int8 against the QAT plan";
  EXPECT_GE(agree, n - 2);
  // Another weight width than the model was trained with is refused; so is a range that is not
  // finite or not ordered, naming its tensor.
  QuantOptions seven;
  seven.weight_bits = 7;
  EXPECT_THROW(quantize_model(m, all, x.data(), n, seven), Error);
  for (const float bad : {std::nanf(""), -1e30f * 1e30f}) {
    std::vector<float> broken = all;
    broken[param(qp, "5.fake_quant.range").offset + 1] = bad;
    try {
      quantize_model(m, broken, x.data(), n, {});
      ADD_FAILURE() << "a range with " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("5.fake_quant.range"), std::string::npos) << e.what();
    }
  }
}

TEST(Qat, JsonRoundTripAndBadForms) {
  const std::string layers = R"("layers": [{"type": "conv2d", "name": "c", "out_channels": 2, "kernel": 3}, {"type": "flatten"},
                                {"type": "linear", "out_features": 10}])";
  const Model m = parse_model_json("{" + layers + R"(, "qat": {"tensors": ["input", "c"], "weight_bits": 7, "freeze_after": 5}})", "m");
  EXPECT_EQ(m.qat.tensors, (std::vector<std::string>{"input", "c"}));
  const Model back = parse_model_json(model_to_json(m), "back");
  EXPECT_EQ(back.qat.tensors, m.qat.tensors);
  EXPECT_EQ(back.qat.weight_bits, 7);
  EXPECT_EQ(back.qat.freeze_after, 5);
  EXPECT_EQ(model_to_json(parse_model_json("{" + layers + "}", "plain")).find("qat"), std::string::npos);
  const std::vector<ParamInfo> ps = model_params(m);
  EXPECT_TRUE(std::any_of(ps.begin(), ps.end(), [](const ParamInfo& p) { return p.name == "c.fake_quant.range"; }));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"tensors": ["nope"]})", "qat.tensors[0] \"nope\": names no layer"},
      {R"({"tensors": ["c", "c"]})", "listed twice"},
      {R"({"tensors": []})", "qat.tensors"},
      {R"({"tensors": [3]})", "qat.tensors[0]"},
      {R"({"tensors": ["c"], "weight_bits": 9})", "qat.weight_bits"},
      {R"({"tensors": ["c"], "freeze_after": -2})", "qat.freeze_after"},
      {R"({"tensors": ["c"], "bits": 8})", "qat.bits"},
      {R"([1])", "qat"}};
  for (const auto& [qat, want] : bad) {
    try {
      parse_model_json("{" + layers + ", \"qat\": " + qat + "}", "bad.json");
      ADD_FAILURE() << qat << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  PlanOptions o;
  o.precision = Precision::bf16;
  EXPECT_THROW(Plan(m, o), Error);
}

}  // namespace
}  // namespace ember
