// Activation "elu": y = x above 0, e^x - 1 at and below (PyTorch's ELU(), alpha 1);
// f'(x) = 1 above 0, e^x at and below (PyTorch's elu_backward). Formula and vector form.
#pragma once
#include <cmath>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct elu {
  static constexpr bool from_output = false;
  template <class T> static T f(T x) { return x > T(0) ? x : std::expm1(x); }
  template <class T> static T grad(T dy, T x) { return x > T(0) ? dy : dy * std::exp(x); }
  template <class V> static V fv(V x) { return x > V{} ? x : vexp(x) - 1.f; }
  template <class V> static V grad_v(V dy, V x) { return x > V{} ? dy : dy * vexp(x); }
};
}  // namespace
}  // namespace ember::act
