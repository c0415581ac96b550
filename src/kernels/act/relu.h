// Activation "relu": y = max(x, 0); dx = dy where y > 0, else 0 (from the output, so the plan runs
// it in place, and the gradient at a zero output is unused: dead_at_zero). One formula, one vector form.
#pragma once
#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct relu {
  static constexpr bool from_output = true, dead_at_zero = true;
  template <class T> static T f(T x) { return x > T(0) ? x : T(0); }
  template <class T> static T grad(T dy, T y) { return y > T(0) ? dy : T(0); }
  template <class V> static V fv(V x) { return x > V{} ? x : V{}; }
  template <class V> static V grad_v(V dy, V y) { return y > V{} ? dy : V{}; }
};
}  // namespace
}  // namespace ember::act
