// Activation "tanh": y = tanh(x); dx = dy (1 - y^2), from the output. Formula and vector form
// (vtanh, act_vec.h).
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct tanh {
  static constexpr bool from_output = true;
  template <class T> static T f(T x) { return std::tanh(x); }
  template <class T> static T grad(T dy, T y) { return dy * (T(1) - y * y); }
  template <class V> static V fv(V x) { return vtanh(x); }
  template <class V> static V grad_v(V dy, V y) { return dy * (1.f - y * y); }
};
}  // namespace
}  // namespace ember::act
