// Activation "silu": y = x sigmoid(x) = x / (1 + e^-x) (PyTorch's SiLU, swish);
// f'(x) = s (1 + x (1 - s)), s = sigmoid(x). Formula and vector form.
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct silu {
  static constexpr bool from_output = false;
  template <class T> static T f(T x) { return x / (T(1) + std::exp(-x)); }
  template <class T> static T grad(T dy, T x) {
    const T s = T(1) / (T(1) + std::exp(-x));
    return dy * s * (T(1) + x * (T(1) - s));
  }
  template <class V> static V fv(V x) { return x * vsigmoid(x); }
  template <class V> static V grad_v(V dy, V x) {
    const V s = vsigmoid(x);
    return dy * s * (1.f + x * (1.f - s));
  }
};
}  // namespace
}  // namespace ember::act
