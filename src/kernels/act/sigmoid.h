// Activation "sigmoid": y = 1 / (1 + e^-x) (e^x / (1 + e^x) below 0: no overflow); dx = dy y (1 - y),
// from the output. Formula and vector form (vsigmoid, act_vec.h).
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct sigmoid {
  static constexpr bool from_output = true;
  template <class T> static T f(T x) {
    return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
  }
  template <class T> static T grad(T dy, T y) { return dy * y * (T(1) - y); }
  template <class V> static V fv(V x) { return vsigmoid(x); }
  template <class V> static V grad_v(V dy, V y) { return dy * y * (1.f - y); }
};
}  // namespace
}  // namespace ember::act
