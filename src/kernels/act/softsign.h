// Activation "softsign": y = x / (1 + |x|) (PyTorch's Softsign); f'(x) = 1 / (1 + |x|)^2.
// Formula and vector form.
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct softsign {
  static constexpr bool from_output = false;
  template <class T> static T f(T x) { return x / (T(1) + std::abs(x)); }
  template <class T> static T grad(T dy, T x) {
    const T d = T(1) + std::abs(x);
    return dy * (T(1) / (d * d));
  }
  template <class V> static V fv(V x) { return x / (1.f + vabs(x)); }
  template <class V> static V grad_v(V dy, V x) {
    const V d = 1.f + vabs(x);
    return dy * (1.f / (d * d));
  }
};
}  // namespace
}  // namespace ember::act
