// Activation "gelu_tanh" (op gelu-tanh): y = 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3),
// k = sqrt(2 / pi) (PyTorch's GELU(approximate='tanh')); f'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k
// (1 + 3 * 0.044715 x^2). The vector form's tanh is 1 - 2 / (e^2u + 1), 1 - t^2 = 4 e / (1 + e)^2.
#pragma once
#include <cmath>
#include <numbers>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct gelu_tanh {
  static constexpr bool from_output = false;
  template <class T> static constexpr T k() { return std::numbers::sqrt2_v<T> * std::numbers::inv_sqrtpi_v<T>; }
  template <class T> static T f(T x) { return T(0.5) * x * (T(1) + std::tanh(k<T>() * (x + T(0.044715) * x * x * x))); }
  template <class T> static T grad(T dy, T x) {
    const T x2 = x * x, t = std::tanh(k<T>() * (x + T(0.044715) * x2 * x));
    const T right = T(0.5) * x * (T(1) - t * t) * k<T>() * (T(1) + T(3) * T(0.044715) * x2);
    return dy * (T(0.5) * (T(1) + t) + right);
  }
  template <class V> static V both(V x, V* d) {
    const V x2 = x * x;
    const V u = vmin(vmax(0.7978845608f * (x + 0.044715f * x2 * x), splat<V>(-43.f)), splat<V>(43.f));
    const V e = vexp(2.f * u), ep1 = e + 1.f;  // e^(2u) stays finite
    const V th = 1.f - 2.f / ep1;
    // 1 - tanh^2 = 4 e / (1 + e)^2, without the cancellation of 1 - th * th near saturation.
    if (d) *d = 0.5f * (1.f + th) + 0.5f * x * (4.f * e / (ep1 * ep1)) * 0.7978845608f * (1.f + 3.f * 0.044715f * x2);
    return 0.5f * x * (1.f + th);
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
