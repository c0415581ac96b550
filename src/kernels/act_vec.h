// The one activation mechanism, kernel side: an activation is a header in src/kernels/act/ (its
// scalar formula, the reference for float and double, and optionally a vector form); this file
// holds the vector math those forms use and the loops that run a formula over n elements. The
// scalar table and f64 run the formula; each fast set (fast_impl.h) runs the vector form at its
// width (8 lanes on avx2, 16 on avx512), and the reference where an activation has none.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::act {
// TU-local (each kernel set's file compiles its own copy with its own flags: no shared instance).
namespace {

typedef float vf8 __attribute__((vector_size(32)));
typedef float vf16 __attribute__((vector_size(64)));
template <class V>
using vint = decltype(V{} < V{});  // the same lanes' int32 mask / bits type

template <class V>
inline V splat(float v) { return v - V{}; }
template <class V>
inline V vmin(V a, V b) { return a < b ? a : b; }
template <class V>
inline V vmax(V a, V b) { return a > b ? a : b; }
template <class V>
inline V vabs(V a) { return a < V{} ? -a : a; }

// e^x for x in [-87, 88] (clamped there): a degree-5 polynomial on [-ln2/2, ln2/2] scaled by 2^n
// (relative error ~2e-7).
template <class V>
inline V vexp(V x) {
  using I = vint<V>;
  x = vmin(vmax(x, splat<V>(-87.f)), splat<V>(88.f));
  const V magic = splat<V>(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
  const V t = x * 1.44269504f + magic;
  const V n = t - magic;
  I ni;
  std::memcpy(&ni, &t, sizeof ni);
  ni -= 0x4B400000;                                               // the integer n itself
  const V r = (x - n * 0.693145752f) - n * 1.42860677e-6f;        // x - n ln2, in two parts
  V p = splat<V>(1.f / 120) * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const I bits = (ni + 127) << 23;
  V scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// 1 / (1 + e^-x) without overflow: e^-|x| mirrored (relative error ~3e-7).
template <class V>
inline V vsigmoid(V x) {
  const V e = vexp(-vabs(x)), s = 1.f / (1.f + e);
  return x < V{} ? e * s : s;
}

// tanh(x): an odd Taylor polynomial below |x| = 0.3, 1 - 2 / (e^2|x| + 1) above (relative error ~3e-7).
template <class V>
inline V vtanh(V x) {
  const V a = vabs(x), x2 = x * x;
  V p = splat<V>(62.f / 2835) * x2 - 17.f / 315;
  p = (p * x2 + 2.f / 15) * x2 - 1.f / 3;
  const V small = x + x * x2 * p;
  const V big = 1.f - 2.f / (vexp(2.f * vmin(a, splat<V>(9.f))) + 1.f);  // tanh(9) = 1 in fp32
  return a < 0.3f ? small : (x < V{} ? -big : big);
}

// Whether activation F has a vector form: fv(x) and grad_v(dy, v) for a vector type.
template <class F>
concept HasVector = requires(vf8 v) {
  { F::fv(v) };
  { F::grad_v(v, v) };
};
template <class F>
concept DeadAtZero = requires { requires F::dead_at_zero; };

// y = f(x) over n elements (y may be x): the scalar formula (the reference).
template <class F, class T>
void fwd_ref(T* y, const T* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = F::f(x[i]);
}
// dx = dy f'(.) from v (x, or y where F::from_output), n elements (dx may be dy).
template <class F, class T>
void bwd_ref(T* dx, const T* dy, const T* v, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = F::grad(dy[i], v[i]);
}

// The vector form over n elements, V's lanes at a time; the tail through one zero-padded vector,
// so every element gets the same bits wherever a span starts.
template <class F, class V>
void fwd_vec(float* y, const float* x, size_t n) {
  constexpr size_t W = sizeof(V) / sizeof(float);
  size_t i = 0;
  for (; i + W <= n; i += W) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    v = F::fv(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i < n) {
    V v{};
    std::memcpy(&v, x + i, (n - i) * sizeof(float));
    v = F::fv(v);
    std::memcpy(y + i, &v, (n - i) * sizeof(float));
  }
}
template <class F, class V>
void bwd_vec(float* dx, const float* dy, const float* v, size_t n) {
  constexpr size_t W = sizeof(V) / sizeof(float);
  size_t i = 0;
  for (; i + W <= n; i += W) {
    V g, a;
    std::memcpy(&g, dy + i, sizeof g);
    std::memcpy(&a, v + i, sizeof a);
    g = F::grad_v(g, a);
    std::memcpy(dx + i, &g, sizeof g);
  }
  if (i < n) {
    V g{}, a{};
    std::memcpy(&g, dy + i, (n - i) * sizeof(float));
    std::memcpy(&a, v + i, (n - i) * sizeof(float));
    g = F::grad_v(g, a);
    std::memcpy(dx + i, &g, (n - i) * sizeof(float));
  }
}

}  // namespace
}  // namespace ember::act
