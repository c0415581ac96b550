// Activation "fastswish" (the ConvNeXt study's), a = 3.2308: y = x (x + a) / (a + 3) on [-3, 3],
// x above 3, -1 / x^2 below -3 (continuous to ~1e-5 at -3, not smooth at either kink); its own
// backward: 2 / x^3 below -3, (2x + a) / (a + 3) on [-3, 3], 1 above. Formula and vector form.
#pragma once
#include "kernels/act_vec.h"

namespace ember::act {
namespace {
struct fastswish {
  static constexpr bool from_output = false;
  static constexpr double a = 3.2308;
  template <class T> static T f(T x) {
    return x < T(-3) ? T(-1) / (x * x) : x <= T(3) ? x * (x + T(a)) / (T(a) + T(3)) : x;
  }
  template <class T> static T grad(T dy, T x) {
    const T d = x < T(-3) ? T(2) / (x * x * x) : x <= T(3) ? (T(2) * x + T(a)) / (T(a) + T(3)) : T(1);
    return dy * d;
  }
  template <class V> static V fv(V x) {
    const V mid = x * (x + float(a)) / (float(a) + 3.f), low = -1.f / (x * x);
    return x < -3.f ? low : (x <= 3.f ? mid : x);
  }
  template <class V> static V grad_v(V dy, V x) {
    const V low = 2.f / (x * x * x), mid = (2.f * x + float(a)) / (float(a) + 3.f);
    return dy * (x < -3.f ? low : (x <= 3.f ? mid : splat<V>(1.f)));
  }
};
}  // namespace
}  // namespace ember::act
