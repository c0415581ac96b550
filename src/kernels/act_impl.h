// GELU (erf) and GELU (tanh) over n elements in 8-wide GCC vector extensions, compiled with each
// fast kernel set's flags (kernels.h: PointwiseFn, PointwiseBwdFn). exp is a degree-5 polynomial
// on [-ln2/2, ln2/2] scaled by 2^n (relative error ~2e-7); erf is Abramowitz-Stegun 7.1.26 (absolute
// error 1.5e-7), sharing GELU's exp(-x^2/2) with the backward's Gaussian. TU-local.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/ref/ref_convnext.h"

namespace ember {
namespace {

typedef float act_v8 __attribute__((vector_size(32)));
typedef int32_t act_i8 __attribute__((vector_size(32)));

inline act_v8 act_splat(float v) { return v - (act_v8){}; }
inline act_v8 act_min(act_v8 a, act_v8 b) { return a < b ? a : b; }
inline act_v8 act_max(act_v8 a, act_v8 b) { return a > b ? a : b; }

// e^x for x in [-87, 88] (clamped there).
inline act_v8 act_exp(act_v8 x) {
  x = act_min(act_max(x, act_splat(-87.f)), act_splat(88.f));
  const act_v8 magic = act_splat(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
  const act_v8 t = x * 1.44269504f + magic;
  const act_v8 n = t - magic;
  act_i8 ni;
  std::memcpy(&ni, &t, sizeof ni);
  ni -= 0x4B400000;                                // the integer n itself
  const act_v8 r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // x - n ln2, in two parts
  act_v8 p = act_splat(1.f / 120) * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const act_i8 bits = (ni + 127) << 23;
  act_v8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// y = 0.5 x (1 + erf(x / sqrt 2)), and with grad the derivative d = 0.5 (1 + erf) + x phi(x).
inline void act_gelu8(act_v8 x, act_v8* y, act_v8* d) {
  const act_v8 z = x * 0.70710678f;
  const act_v8 az = z < 0 ? -z : z;
  const act_v8 t = 1.f / (1.f + 0.3275911f * az);
  act_v8 poly = act_splat(1.061405429f) * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const act_v8 e = act_exp(-(z * z));            // exp(-x^2 / 2)
  const act_v8 erf_abs = 1.f - poly * t * e;
  const act_v8 erf = z < 0 ? -erf_abs : erf_abs;
  const act_v8 cdf = 0.5f * (1.f + erf);
  *y = x * cdf;
  if (d) *d = cdf + x * e * 0.39894228f;        // phi(x) = exp(-x^2/2) / sqrt(2 pi)
}

// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); d its derivative.
inline void act_gelu_tanh8(act_v8 x, act_v8* y, act_v8* d) {
  const act_v8 x2 = x * x;
  act_v8 u = 0.7978845608f * (x + 0.044715f * x2 * x);
  u = act_min(act_max(u, act_splat(-43.f)), act_splat(43.f));  // e^(2u) stays finite
  const act_v8 e = act_exp(2.f * u), ep1 = e + 1.f;
  const act_v8 th = 1.f - 2.f / ep1;
  *y = 0.5f * x * (1.f + th);
  // 1 - tanh^2 = 4 e / (1 + e)^2, without the cancellation of 1 - th * th near saturation.
  if (d) *d = 0.5f * (1.f + th) + 0.5f * x * (4.f * e / (ep1 * ep1)) * 0.7978845608f * (1.f + 3.f * 0.044715f * x2);
}

template <void (*F)(act_v8, act_v8*, act_v8*), void (*Ref)(float*, const float*, size_t)>
void act_fwd_loop(float* y, const float* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    act_v8 xv, yv;
    std::memcpy(&xv, x + i, sizeof xv);
    F(xv, &yv, nullptr);
    std::memcpy(y + i, &yv, sizeof yv);
  }
  if (i < n) Ref(y + i, x + i, n - i);  // the tail on the scalar reference
}
template <void (*F)(act_v8, act_v8*, act_v8*), void (*Ref)(float*, const float*, const float*, size_t)>
void act_bwd_loop(float* dx, const float* dy, const float* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    act_v8 xv, gv, yv, dv;
    std::memcpy(&xv, x + i, sizeof xv);
    std::memcpy(&gv, dy + i, sizeof gv);
    F(xv, &yv, &dv);
    dv *= gv;
    std::memcpy(dx + i, &dv, sizeof dv);
  }
  if (i < n) Ref(dx + i, dy + i, x + i, n - i);
}

void gelu_fwd_v8(float* y, const float* x, size_t n) { act_fwd_loop<act_gelu8, ref::gelu_fwd<float>>(y, x, n); }
void gelu_bwd_v8(float* dx, const float* dy, const float* x, size_t n) {
  act_bwd_loop<act_gelu8, ref::gelu_bwd<float>>(dx, dy, x, n);
}
void gelu_tanh_fwd_v8(float* y, const float* x, size_t n) {
  act_fwd_loop<act_gelu_tanh8, ref::gelu_tanh_fwd<float>>(y, x, n);
}
void gelu_tanh_bwd_v8(float* dx, const float* dy, const float* x, size_t n) {
  act_bwd_loop<act_gelu_tanh8, ref::gelu_tanh_bwd<float>>(dx, dy, x, n);
}

}  // namespace
}  // namespace ember
