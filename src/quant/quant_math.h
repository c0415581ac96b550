// The arithmetic of ember's int8 scheme (docs/int8.md) shared by calibration, the quantized file,
// the int8 plan and the tests: u8 activation QParams from a range, int32 biases, and the
// per-tensor observers of calibration (range, then a histogram for percentile and mse).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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
