// Pooling and pointwise activations: scalar reference kernels (f64) or the kernel table (f32: the
// activations, the nchw max-pool forward),
// split across the pool by samples (pools) or by element ranges (activations).
#include <cstring>
#include <type_traits>

#include "kernels/ref/ref_convnext.h"
#include "kernels/ref/ref_pool_nhwc.h"

#include "ops/ops.h"

namespace ember::ops {

namespace {
// Runs fn(sub_shape, first_sample) over each thread's contiguous share of the N samples.
template <class F>
void over_samples(const Exec& e, const ref::PoolShape& s, bool serial, F&& fn) {
  if (serial || e.pool.size() == 1) {
    fn(s, int64_t(0));
    return;
  }
  e.pool.run([&](int t) {
    const Range r = split_range(s.N, t, e.pool.size());
    if (r.end <= r.begin) return;
    ref::PoolShape sub = s;
    sub.N = int(r.end - r.begin);
    fn(sub, r.begin);
  });
}
template <class F>
void over_elements(const Exec& e, size_t n, bool serial, F&& fn) {
  if (serial || e.pool.size() == 1 || n < 16384) {
    fn(size_t(0), n);
    return;
  }
  e.pool.run([&](int t) {
    const Range r = split_range_aligned((int64_t)n, t, e.pool.size(), 16);
    if (r.end > r.begin) fn(size_t(r.begin), size_t(r.end - r.begin));
  });
}
}  // namespace

template <class T>
void maxpool2d_fwd(const Exec& e, T* y, int32_t* argmax, const T* x, const ref::PoolShape& s, bool nhwc) {
  const size_t in = (size_t)s.C * s.H * s.W, out = (size_t)s.C * s.P * s.Q;
  over_samples(e, s, std::is_same_v<T, double>, [&](const ref::PoolShape& sub, int64_t n0) {
    if constexpr (std::is_same_v<T, float>)  // nchw: the kernel table's (vectorized along q on avx2 / avx512)
      if (!nhwc) return e.k.maxpool_fwd(y + n0 * out, argmax + n0 * out, x + n0 * in, sub);
    (nhwc ? ref::maxpool2d_fwd_nhwc<T> : ref::maxpool2d_fwd<T>)(y + n0 * out, argmax + n0 * out, x + n0 * in, sub);
  });
}
template <class T>
void maxpool2d_bwd(const Exec& e, T* dx, const T* dy, const int32_t* argmax, const ref::PoolShape& s, bool nhwc) {
  const size_t in = (size_t)s.C * s.H * s.W, out = (size_t)s.C * s.P * s.Q;
  over_samples(e, s, std::is_same_v<T, double>, [&](const ref::PoolShape& sub, int64_t n0) {
    (nhwc ? ref::maxpool2d_bwd_nhwc<T> : ref::maxpool2d_bwd<T>)(dx + n0 * in, dy + n0 * out, argmax + n0 * out, sub);
  });
}
template <class T>
void avgpool2d_fwd(const Exec& e, T* y, const T* x, const ref::PoolShape& s) {
  const size_t in = (size_t)s.C * s.H * s.W, out = (size_t)s.C * s.P * s.Q;
  over_samples(e, s, std::is_same_v<T, double>, [&](const ref::PoolShape& sub, int64_t n0) {
    ref::avgpool2d_fwd<T>(y + n0 * out, x + n0 * in, sub);
  });
}
template <class T>
void avgpool2d_bwd(const Exec& e, T* dx, const T* dy, const ref::PoolShape& s) {
  const size_t in = (size_t)s.C * s.H * s.W, out = (size_t)s.C * s.P * s.Q;
  over_samples(e, s, std::is_same_v<T, double>, [&](const ref::PoolShape& sub, int64_t n0) {
    ref::avgpool2d_bwd<T>(dx + n0 * in, dy + n0 * out, sub);
  });
}

template <class T>
void act_fwd_span(const Exec& e, Act a, T* y, const T* x, size_t n) {
  if constexpr (std::is_same_v<T, float>) e.k.act_fwd[int(a)](y, x, n);
  else act_info(a).fwd64(y, x, n);
}
template <class T>
void act_bwd_span(const Exec& e, Act a, T* dx, const T* dy, const T* v, size_t n) {
  if constexpr (std::is_same_v<T, float>) e.k.act_bwd[int(a)](dx, dy, v, n);
  else act_info(a).bwd64(dx, dy, v, n);
}
template <class T>
void act_fwd(const Exec& e, Act a, T* y, const T* x, size_t n) {
  over_elements(e, n, std::is_same_v<T, double>,
                [&](size_t o, size_t len) { act_fwd_span<T>(e, a, y + o, x + o, len); });
}
template <class T>
void act_bwd(const Exec& e, Act a, T* dx, const T* dy, const T* y, size_t n) {
  over_elements(e, n, std::is_same_v<T, double>,
                [&](size_t o, size_t len) { act_bwd_span<T>(e, a, dx + o, dy + o, y + o, len); });
}

template <class T>
void post_ops_span(const Exec& e, T* y, ConvPost<T> post, size_t n) {
  if (post.residual) ref::accumulate<T>(y, post.residual, n);
  if (post.act) act_fwd_span<T>(e, *post.act, y, y, n);
}
template <class T>
void post_ops_fwd(const Exec& e, T* y, ConvPost<T> post, size_t n) {
  if (!post.any()) return;
  over_elements(e, n, std::is_same_v<T, double>, [&](size_t o, size_t len) {
    post_ops_span<T>(e, y + o, {post.residual ? post.residual + o : nullptr, post.act}, len);
  });
}

template <class T>
void add_fwd(const Exec& e, T* y, const T* const* xs, int nin, size_t n) {
  over_elements(e, n, false, [&](size_t o, size_t len) {
    const T* part[kMaxGraphInputs];
    for (int j = 0; j < nin; ++j) part[j] = xs[j] + o;
    ref::add_n_fwd<T>(y + o, part, nin, len);
  });
}
template <class T>
void copy_or_add(const Exec& e, T* dst, const T* src, size_t n, bool add) {
  over_elements(e, n, false, [&](size_t o, size_t len) {
    if (add) ref::accumulate<T>(dst + o, src + o, len);
    else std::memcpy(dst + o, src + o, len * sizeof(T));
  });
}
// Concat and its backward, split by samples.
template <class F>
void over_rows(const Exec& e, int N, F&& fn) {
  if (e.pool.size() == 1 || N < 2) return fn(0, N);
  e.pool.run([&](int t) {
    const Range r = split_range(N, t, e.pool.size());
    if (r.end > r.begin) fn(int(r.begin), int(r.end - r.begin));
  });
}
template <class T>
void concat_fwd(const Exec& e, T* y, const T* const* xs, const size_t* sizes, int nin, int N) {
  size_t row = 0;
  for (int j = 0; j < nin; ++j) row += sizes[j];
  over_rows(e, N, [&](int n0, int count) {
    const T* part[kMaxGraphInputs];
    for (int j = 0; j < nin; ++j) part[j] = xs[j] + size_t(n0) * sizes[j];
    ref::concat_n_fwd<T>(y + size_t(n0) * row, part, sizes, nin, count);
  });
}
template <class T>
void concat_bwd(const Exec& e, T* const* dxs, const T* dy, const size_t* sizes, int nin, int N) {
  size_t row = 0;
  for (int j = 0; j < nin; ++j) row += sizes[j];
  over_rows(e, N, [&](int n0, int count) {
    T* part[kMaxGraphInputs];
    for (int j = 0; j < nin; ++j) part[j] = dxs[j] ? dxs[j] + size_t(n0) * sizes[j] : nullptr;
    ref::concat_n_bwd<T>(part, dy + size_t(n0) * row, sizes, nin, count);
  });
}

#define EMBER_POOL_ACT(T)                                                                        \
  template void maxpool2d_fwd<T>(const Exec&, T*, int32_t*, const T*, const ref::PoolShape&, bool);    \
  template void maxpool2d_bwd<T>(const Exec&, T*, const T*, const int32_t*, const ref::PoolShape&, bool); \
  template void avgpool2d_fwd<T>(const Exec&, T*, const T*, const ref::PoolShape&);              \
  template void avgpool2d_bwd<T>(const Exec&, T*, const T*, const ref::PoolShape&);              \
  template void act_fwd<T>(const Exec&, Act, T*, const T*, size_t);                              \
  template void act_fwd_span<T>(const Exec&, Act, T*, const T*, size_t);                         \
  template void act_bwd_span<T>(const Exec&, Act, T*, const T*, const T*, size_t);               \
  template void act_bwd<T>(const Exec&, Act, T*, const T*, const T*, size_t);                    \
  template void add_fwd<T>(const Exec&, T*, const T* const*, int, size_t);                        \
  template void post_ops_fwd<T>(const Exec&, T*, ConvPost<T>, size_t);                           \
  template void post_ops_span<T>(const Exec&, T*, ConvPost<T>, size_t);                          \
  template void copy_or_add<T>(const Exec&, T*, const T*, size_t, bool);                           \
  template void concat_fwd<T>(const Exec&, T*, const T* const*, const size_t*, int, int);         \
  template void concat_bwd<T>(const Exec&, T* const*, const T*, const size_t*, int, int);
EMBER_POOL_ACT(float)
EMBER_POOL_ACT(double)
#undef EMBER_POOL_ACT

}  // namespace ember::ops
