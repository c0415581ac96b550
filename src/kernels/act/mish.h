// Activation "mish": y = x tanh(softplus(x)) (Misra 2019; PyTorch's Mish, softplus = x above 20);
// f'(x) = tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x). The vector form writes tanh(softplus(x)) as
// n / (n + 2), n = e^x (e^x + 2), and 1 - tanh^2 as 4 (n + 1) / (n + 2)^2: one exp.
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct mish {
  static constexpr bool from_output = false;
  template <class T> static T softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }
  template <class T> static T f(T x) { return x * std::tanh(softplus(x)); }
  template <class T> static T grad(T dy, T x) {
    const T t = std::tanh(softplus(x));
    return dy * (t + x * (T(1) - t * t) / (T(1) + std::exp(-x)));
  }
  template <class V> static V fv(V x) {
    const V e = vexp(vmin(x, splat<V>(20.f))), n = e * (e + 2.f);
    return x > 20.f ? x : x * n / (n + 2.f);
  }
  template <class V> static V grad_v(V dy, V x) {
    const V e = vexp(vmin(x, splat<V>(20.f))), n = e * (e + 2.f), d = n + 2.f;
    const V g = n / d + x * (4.f * (n + 1.f) / (d * d)) * (e / (1.f + e));
    return dy * (x > 20.f ? splat<V>(1.f) : g);
  }
};
}  // namespace
}  // namespace ember::act
