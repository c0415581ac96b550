// Fake quantization for quantization-aware training (docs/int8.md, QAT): a tensor's u8 round trip
// per tensor and its straight-through backward, the moving-average range observer, and int8
// weights per output channel. The arithmetic is the int8 path's (quant/quant_math.h's
// quantize_value, calibrate.cpp's weights), so a QAT model and its quantized file agree.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace ember::ref {

// y[i] = (clamp(round(x[i] / scale), -zp, 255 - zp)) * scale over n values: the u8 round trip
// (round half to even, as the kernels). T float clamps and rounds in float, as the int8 path does.
template <class T>
void fake_quant_fwd(T* y, const T* x, size_t n, float scale, int zero_point) {
  const T inv = T(1) / T(scale), lo = T(-zero_point), hi = T(255 - zero_point);
  for (size_t i = 0; i < n; ++i) {
    T v = x[i] * inv;
    v = v >= lo ? v : lo;  // NaN goes to lo, as quantize_value
    v = v <= hi ? v : hi;
    y[i] = T(std::nearbyint(v)) * T(scale);
  }
}

// The straight-through estimator: dx = dy where x lies inside the representable range (before
// clamping), 0 where it was clipped.
template <class T>
void fake_quant_bwd(T* dx, const T* dy, const T* x, size_t n, float scale, int zero_point) {
  const T inv = T(1) / T(scale), lo = T(-zero_point), hi = T(255 - zero_point);
  for (size_t i = 0; i < n; ++i) {
    const T v = x[i] * inv;
    dx[i] = v >= lo && v <= hi ? dy[i] : T(0);
  }
}

// The observer: the first batch sets [lo, hi]; later ones move it by `c` of the way to theirs
// (PyTorch's MovingAverageMinMaxObserver, averaging constant 0.01).
inline void observe_range(double* lo, double* hi, double batch_lo, double batch_hi, bool first, double c = 0.01) {
  if (first) {
    *lo = batch_lo, *hi = batch_hi;
    return;
  }
  *lo += c * (batch_lo - *lo);
  *hi += c * (batch_hi - *hi);
}

// One output channel's weights w[n] -> their int8 values q (into q8 when not null) and q times the
// channel's scale (into out, which may be w; symmetric, max |w| / qmax; qmax 127, or 63 for 7-bit
// weights); returns the scale. The one rounding of weights: calibrate.cpp's quantization and QAT's
// fake quantization (T double in f64 plans) both call it.
template <class T>
T fake_quant_channel(T* out, const T* w, size_t n, int bits, int8_t* q8 = nullptr) {
  const T qmax = T((1 << (bits - 1)) - 1);
  T m = 0;
  for (size_t j = 0; j < n; ++j) m = std::max(m, T(std::fabs(w[j])));
  const T s = m > 0 ? m / qmax : T(1);
  for (size_t j = 0; j < n; ++j) {
    const int q = int(std::clamp(T(std::nearbyint(w[j] / s)), -qmax, qmax));
    if (q8) q8[j] = int8_t(q);
    out[j] = T(q) * s;
  }
  return s;
}

}  // namespace ember::ref
