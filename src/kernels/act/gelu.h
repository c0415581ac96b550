// Activation "gelu": y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (PyTorch's GELU(), approximate
// 'none'); f'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi). The vector form's erf is
// Abramowitz-Stegun 7.1.26 (absolute error 1.5e-7), sharing its exp(-x^2/2) with the Gaussian.
#pragma once
#include <cmath>
#include <numbers>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct gelu {
  static constexpr bool from_output = false;
  template <class T> static T f(T x) { return x * T(0.5) * (T(1) + std::erf(x * (T(1) / std::numbers::sqrt2_v<T>))); }
  template <class T> static T grad(T dy, T x) {
    const T r2 = T(1) / std::numbers::sqrt2_v<T>, alpha = std::numbers::inv_sqrtpi_v<T> * r2;
    const T cdf = T(0.5) * (T(1) + std::erf(x * r2)), pdf = alpha * std::exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
  // y (and, with d, the derivative) from the shared terms.
  template <class V> static V both(V x, V* d) {
    const V z = x * 0.70710678f, az = vabs(z);
    const V t = 1.f / (1.f + 0.3275911f * az);
    V poly = splat<V>(1.061405429f) * t - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    const V e = vexp(-(z * z));  // exp(-x^2 / 2)
    const V erf_abs = 1.f - poly * t * e;
    const V cdf = 0.5f * (1.f + (z < V{} ? -erf_abs : erf_abs));
    if (d) *d = cdf + x * e * 0.39894228f;  // phi(x) = exp(-x^2/2) / sqrt(2 pi)
    return x * cdf;
  }
  template <class V> static V fv(V x) { return both<V>(x, nullptr); }
  template <class V> static V grad_v(V dy, V x) {
    V d;
    both(x, &d);
    return dy * d;
  }
};
}  // namespace
}  // namespace ember::act
