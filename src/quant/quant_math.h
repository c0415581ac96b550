// The arithmetic of ember's int8 scheme (docs/int8.md) shared by calibration, the quantized file,
// the int8 plan, the QDQ export and the tests: u8 activation QParams from a range, int32 biases,
// the scale checks (one set for the reader, the plan and the export), and the per-tensor
// observers of calibration (range, then a histogram for percentile and mse).
#pragma once
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/quant.h"
#include "kernels/half.h"

namespace ember::quant {

// u8 QParams covering [lo, hi] widened to hold 0 exactly (zero padding, ReLU's zeros).
inline QParams qparams_for_range(double lo, double hi) {
  lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  QParams q;
  if (!(hi - lo > 1e-30) || !std::isfinite(hi - lo)) return q;  // all zero (or unusable): scale 1, zp 0
  q.scale = float((hi - lo) / 255.0);
  if (!(q.scale > 0)) q.scale = 1e-30f;
  q.zero_point = int32_t(std::clamp(std::nearbyint(-lo / double(q.scale)), 0.0, 255.0));
  return q;
}

// A bias b in units of scale (in_scale * w_scale), rounded, saturated to int32.
inline int32_t quantize_bias(float b, double scale) {
  const double v = std::nearbyint(double(b) / scale);
  return int32_t(std::clamp(v, -2147483647.0, 2147483647.0));
}

// x -> u8 under q (the kernels' rule: clamp in float, round half to even).
inline uint8_t quantize_value(float x, QParams q) {
  float v = x * (1.0f / q.scale);
  const float lo = float(-q.zero_point), hi = float(255 - q.zero_point);
  v = v >= lo ? v : lo;
  v = v <= hi ? v : hi;
  return uint8_t(int32_t(std::nearbyint(v)) + q.zero_point);
}
inline float dequantize_value(uint8_t u, QParams q) { return float(int32_t(u) - q.zero_point) * q.scale; }

// Whether every value survives the round trip through binary16 unchanged.
inline bool exact_in_half(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!(half_to_float(float_to_half(v[i])) == v[i])) return false;
  return true;
}

// ---- Scales the int8 arithmetic can carry (docs/int8.md, "Scales"). The quantized file's reader,
// the int8 plan and the QDQ export run these same checks, so that a file that loads also runs,
// exports, and imports back (the QDQ import dequantizes in float: q * s, b * s_in s_w).

// The file's (and the QDQ export's) names of tensor act's QParams ("input" or a node's prefix).
inline std::string act_scale_name(const std::string& act) { return act == "input" ? "input.scale" : act + ".output_scale"; }
inline std::string act_zp_name(const std::string& act) { return act == "input" ? "input.zero_point" : act + ".output_zero_point"; }

inline std::string scale_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// v (computed in double) as the float scale the arithmetic multiplies by where it is a normal
// float > 0, in [FLT_MIN, FLT_MAX] (not 0, subnormal, infinite or NaN: 1 / s stays finite), else 0.
inline float normal_scale(double v) { return v >= double(FLT_MIN) && v <= double(FLT_MAX) ? float(v) : 0.0f; }

// What is wrong with a tensor of a quantized model: its name and a phrase (tensor empty: nothing).
struct Problem {
  std::string tensor, what;
  explicit operator bool() const { return !tensor.empty(); }
};

// An activation's u8 QParams (tensors scale_t, zp_t): the scale normal, the zero point in 0..255,
// and every u8 value's dequantized (q - z) s finite.
inline Problem qparams_problem(const QParams& p, const std::string& scale_t, const std::string& zp_t) {
  if (p.zero_point < 0 || p.zero_point > 255) return {zp_t, "zero point " + std::to_string(p.zero_point) + " is outside 0..255"};
  if (!normal_scale(p.scale)) return {scale_t, "the scale " + scale_text(p.scale) + " is not a normal float > 0"};
  const float far = float(std::max(p.zero_point, 255 - p.zero_point));
  if (!std::isfinite(far * p.scale))
    return {scale_t, "the scale " + scale_text(p.scale) + " times the u8 step count " + scale_text(far) +
                         " (zero point " + std::to_string(p.zero_point) + ") overflows float"};
  return {};
}

// A quantized layer l read with input scale s_in (tensor in_t; unused without a bias), per output
// channel: the weight scale normal and its largest |weight| times it finite (the dequantized
// weights); with a bias, the bias unit s_in s_w[k] (float, as the export writes the bias's
// DequantizeLinear scale and the import reads it) normal and every bias times it finite.
inline Problem layer_problem(const QuantLayer& l, float s_in, const std::string& in_t) {
  const std::string ws = l.prefix + ".weight_scale";
  const size_t K = l.w_scale.size(), per = K ? l.w.size() / K : 0;
  for (size_t k = 0; k < K; ++k) {
    const float s = l.w_scale[k];
    const std::string at = std::string("[").append(std::to_string(k)).append("] ");
    if (!normal_scale(s)) return {ws, at + scale_text(s) + " is not a normal float > 0"};
    int m = 0;
    for (size_t j = 0; j < per; ++j) m = std::max(m, std::abs(int(l.w[k * per + j])));
    if (!std::isfinite(float(m) * s))
      return {ws, at + scale_text(s) + " times the channel's weight " + std::to_string(m) + " overflows float"};
    if (!l.has_bias || k >= l.bias.size()) continue;
    const float u = s_in * s;
    if (!normal_scale(u))
      return {normal_scale(s_in) ? ws : in_t, "the bias unit of " + l.prefix + ".bias" + at + "(" + in_t + " * " + ws + at +
                                                  "= " + scale_text(s_in) + " * " + scale_text(s) + ") is not a normal float > 0"};
    if (!std::isfinite(float(l.bias[k]) * u))
      return {l.prefix + ".bias", at + std::to_string(l.bias[k]) + " times its unit " + scale_text(u) + " overflows float"};
  }
  return {};
}

// One tensor's calibration statistics.
class Observer {
 public:
  static constexpr int kBins = 2048;
  void range(const float* x, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(x[i])) lo_ = std::min(lo_, x[i]), hi_ = std::max(hi_, x[i]);
  }
  void start_histogram() { hist_.assign(kBins, 0.0); }
  void histogram(const float* x, size_t n) {
    if (!(hi_ > lo_)) return;
    const double w = (double(hi_) - lo_) / kBins;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) continue;
      const int b = std::clamp(int((double(x[i]) - lo_) / w), 0, kBins - 1);
      hist_[size_t(b)] += 1;
    }
  }
  QParams qparams(CalibMethod m, double percentile) const {
    if (!(hi_ >= lo_)) return QParams{};  // nothing seen
    if (m == CalibMethod::minmax || hist_.empty() || !(hi_ > lo_)) return qparams_for_range(lo_, hi_);
    if (m == CalibMethod::percentile) return percentile_range(percentile);
    return mse_range();
  }
  float lo() const { return lo_; }
  float hi() const { return hi_; }

 private:
  double edge(int b) const { return lo_ + (double(hi_) - lo_) * b / kBins; }
  QParams percentile_range(double p) const {
    double total = 0;
    for (double c : hist_) total += c;
    const double cut = total * (1.0 - p / 100.0) / 2.0;  // clipped from each tail
    int a = 0, b = kBins - 1;
    for (double s = 0; a < kBins - 1 && s + hist_[size_t(a)] <= cut; ++a) s += hist_[size_t(a)];
    for (double s = 0; b > a && s + hist_[size_t(b)] <= cut; --b) s += hist_[size_t(b)];
    return qparams_for_range(edge(a), edge(b + 1));
  }
  // The clipping range [lo f, hi f] (f from 1/128 to 1) of least expected squared error over the
  // histogram's bin centres.
  QParams mse_range() const {
    QParams best = qparams_for_range(lo_, hi_);
    double best_err = -1;
    for (int i = 128; i >= 1; --i) {
      const double f = i / 128.0;
      const QParams q = qparams_for_range(lo_ * f, hi_ * f);
      double err = 0;
      for (int b = 0; b < kBins; ++b) {
        if (hist_[size_t(b)] == 0) continue;
        const float v = float((edge(b) + edge(b + 1)) / 2);
        const double d = double(dequantize_value(quantize_value(v, q), q)) - v;
        err += hist_[size_t(b)] * d * d;
      }
      if (best_err < 0 || err < best_err) best_err = err, best = q;
    }
    return best;
  }
  float lo_ = std::numeric_limits<float>::infinity(), hi_ = -std::numeric_limits<float>::infinity();
  std::vector<double> hist_;
};

}  // namespace ember::quant
