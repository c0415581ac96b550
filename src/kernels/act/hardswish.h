// Activation "hardswish": y = x min(max(x + 3, 0), 6) / 6 (PyTorch's Hardswish); its backward as
// PyTorch's hardswish_backward, kinks included: 0 below -3, x/3 + 1/2 on [-3, 3], 1 above.
#pragma once
#include <algorithm>

#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct hardswish {
  static constexpr bool from_output = false;
  template <class T> static T f(T x) { return x * std::min(std::max(x + T(3), T(0)), T(6)) / T(6); }
  template <class T> static T grad(T dy, T x) {
    return x < T(-3) ? T(0) : x <= T(3) ? dy * (x / T(3) + T(0.5)) : dy;
  }
  template <class V> static V fv(V x) { return x * vmin(vmax(x + 3.f, V{}), splat<V>(6.f)) / 6.f; }
  template <class V> static V grad_v(V dy, V x) {
    return x < -3.f ? V{} : (x <= 3.f ? dy * (x / 3.f + 0.5f) : dy);
  }
};
}  // namespace
}  // namespace ember::act
