// The ConvNeXt ops (norm.h): each thread takes a contiguous share of rows or samples and runs a
// kernel on it (f32: the table's LayerNorm kernels; otherwise the scalar reference); a parameter
// gradient is summed per thread into ws, then over threads in order.
#include "ops/norm.h"

#include <type_traits>

#include "kernels/ref/ref_convnext.h"

namespace ember::ops {

namespace {
// How many shares n items take: one when serial, on one thread, or n < 2; else one per thread.
int parts(const Exec& e, int64_t n, bool serial) { return serial || e.pool.size() == 1 || n < 2 ? 1 : e.pool.size(); }
// fn(thread, first, count) over the contiguous per-thread shares of n items: parts(e, n, serial)
// calls, each thread's (a share may be empty), so a caller sums exactly the parts written (a
// batch of 1 on 2 threads once summed a second part no call had cleared).
template <class F>
void shares(const Exec& e, int64_t n, bool serial, F&& fn) {
  if (parts(e, n, serial) == 1) return fn(0, int64_t(0), n);
  e.pool.run([&](int t) {
    const Range r = split_range(n, t, e.pool.size());
    fn(t, r.begin, r.end - r.begin);
  });
}
// out[i] = sum over p < P of part[p * len + i] (p in order); out may be null.
template <class T>
void sum_parts(T* out, const T* part, int P, size_t len) {
  for (size_t i = 0; out && i < len; ++i) {
    T v = part[i];
    for (int p = 1; p < P; ++p) v += part[size_t(p) * len + i];
    out[i] = v;
  }
}
template <class T> constexpr bool kSerial = std::is_same_v<T, double>;
// The kernel table's f32 function, or the reference for f64: a pointer of the reference's type.
template <class T, class K, class R>
R* kernel_or_ref(K* fast, R* reference) {
  if constexpr (std::is_same_v<T, float>) return fast;
  else return reference;
}
}  // namespace

size_t layernorm_workspace(int D, int threads) { return size_t(2) * size_t(D) * size_t(threads); }

template <class T>
void layernorm_fwd(const Exec& e, T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int R, int D, T eps) {
  shares(e, R, kSerial<T>, [&](int, int64_t r0, int64_t n) {
    if (n > 0)
      (*kernel_or_ref<T>(e.k.ln_fwd, ref::layernorm_fwd<T>))(y + r0 * D, mean + r0, rstd + r0, x + r0 * D, gamma, beta, int(n), D, eps);
  });
}
void layernorm_fwd_bf16(const Exec& e, uint16_t* yh, float* mean, float* rstd, const float* x, const float* gamma,
                        const float* beta, int R, int D, float eps, float* rows) {
  shares(e, R, false, [&](int t, int64_t r0, int64_t n) {
    float* row = rows + size_t(t) * D;
    for (int64_t r = r0; r < r0 + n; ++r) {
      e.k.ln_fwd(row, mean + r, rstd + r, x + r * D, gamma, beta, 1, D, eps);
      e.k.cvt_f32_bf16(yh + r * D, row, size_t(D));
    }
  });
}
template <class T>
void layernorm_bwd(const Exec& e, T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean,
                   const T* rstd, const T* gamma, int R, int D, T* ws) {
  const int P = parts(e, R, kSerial<T>);
  T* pg = ws;
  T* pb = ws + size_t(P) * D;
  shares(e, R, kSerial<T>, [&](int t, int64_t r0, int64_t n) {
    T* g = dgamma ? pg + size_t(t) * D : nullptr;
    T* b = dbeta ? pb + size_t(t) * D : nullptr;
    ref::zero_fill(g, size_t(D));
    ref::zero_fill(b, size_t(D));
    if (n > 0)
      (*kernel_or_ref<T>(e.k.ln_bwd, ref::layernorm_bwd<T>))(dx ? dx + r0 * D : nullptr, g, b, dy + r0 * D, x + r0 * D,
                                                     mean + r0, rstd + r0, gamma, int(n), D);
  });
  sum_parts(dgamma, pg, P, size_t(D));
  sum_parts(dbeta, pb, P, size_t(D));
}

template <class T>
void layernorm2d_fwd(const Exec& e, T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int N,
                     int C, int HW, T eps) {
  const size_t S = size_t(C) * HW;
  shares(e, N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    if (n > 0)
      (*kernel_or_ref<T>(e.k.ln2d_fwd, ref::layernorm2d_fwd<T>))(y + n0 * S, mean + n0 * HW, rstd + n0 * HW, x + n0 * S, gamma,
                                                         beta, int(n), C, HW, eps);
  });
}
template <class T>
void layernorm2d_bwd(const Exec& e, T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean,
                     const T* rstd, const T* gamma, int N, int C, int HW, T* ws) {
  const int P = parts(e, N, kSerial<T>);
  const size_t S = size_t(C) * HW;
  T* pg = ws;
  T* pb = ws + size_t(P) * C;
  shares(e, N, kSerial<T>, [&](int t, int64_t n0, int64_t n) {
    T* g = dgamma ? pg + size_t(t) * C : nullptr;
    T* b = dbeta ? pb + size_t(t) * C : nullptr;
    ref::zero_fill(g, size_t(C));
    ref::zero_fill(b, size_t(C));
    if (n > 0)
      (*kernel_or_ref<T>(e.k.ln2d_bwd, ref::layernorm2d_bwd<T>))(dx ? dx + n0 * S : nullptr, g, b, dy + n0 * S, x + n0 * S,
                                                         mean + n0 * HW, rstd + n0 * HW, gamma, int(n), C, HW);
  });
  sum_parts(dgamma, pg, P, size_t(C));
  sum_parts(dbeta, pb, P, size_t(C));
}

template <class T>
void global_avgpool_fwd(const Exec& e, T* y, const T* x, int N, int C, int HW) {
  shares(e, N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    if (n > 0) ref::global_avgpool_fwd<T>(y + n0 * C, x + n0 * C * HW, int(n), C, HW);
  });
}
template <class T>
void global_avgpool_bwd(const Exec& e, T* dx, const T* dy, int N, int C, int HW) {
  shares(e, N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    if (n > 0) ref::global_avgpool_bwd<T>(dx + n0 * C * HW, dy + n0 * C, int(n), C, HW);
  });
}

template <class T>
void sample_scale(const Exec& e, T* y, const T* x, const T* scale, int N, size_t D) {
  shares(e, N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    if (n > 0) ref::sample_scale<T>(y + n0 * D, x + n0 * D, scale + n0, int(n), D);
  });
}
template <class T>
void channel_scale_fwd(const Exec& e, T* y, const T* x, const T* s, int N, int C, int HW) {
  const size_t S = size_t(C) * HW;
  shares(e, N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    if (n > 0) ref::channel_scale_fwd<T>(y + n0 * S, x + n0 * S, s, int(n), C, HW);
  });
}
template <class T>
void channel_scale_bwd(const Exec& e, T* dx, T* ds, const T* dy, const T* x, const T* s, int N, int C, int HW,
                       T* ws) {
  const int P = parts(e, N, kSerial<T>);
  const size_t S = size_t(C) * HW;
  shares(e, N, kSerial<T>, [&](int t, int64_t n0, int64_t n) {
    T* part = ds ? ws + size_t(t) * C : nullptr;
    ref::zero_fill(part, size_t(C));
    if (n > 0) ref::channel_scale_bwd<T>(dx ? dx + n0 * S : nullptr, part, dy + n0 * S, x + n0 * S, s, int(n), C, HW);
  });
  sum_parts(ds, ws, P, size_t(C));
}

template <class T>
void zero_pad_fwd(const Exec& e, T* y, const T* x, const ref::ZeroPad2d& s) {
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.C) * s.Hp() * s.Wp();
  shares(e, s.N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    ref::ZeroPad2d sub = s;
    sub.N = int(n);
    if (n > 0) ref::zero_pad_fwd<T>(y + n0 * out, x + n0 * in, sub);
  });
}
template <class T>
void zero_pad_bwd(const Exec& e, T* dx, const T* dy, const ref::ZeroPad2d& s) {
  const size_t in = size_t(s.C) * s.H * s.W, out = size_t(s.C) * s.Hp() * s.Wp();
  shares(e, s.N, kSerial<T>, [&](int, int64_t n0, int64_t n) {
    ref::ZeroPad2d sub = s;
    sub.N = int(n);
    if (n > 0) ref::zero_pad_bwd<T>(dx + n0 * in, dy + n0 * out, sub);
  });
}

#define EMBER_NORM_OPS(T)                                                                                       \
  template void layernorm_fwd<T>(const Exec&, T*, T*, T*, const T*, const T*, const T*, int, int, T);            \
  template void layernorm_bwd<T>(const Exec&, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, \
                                 int, T*);                                                                      \
  template void layernorm2d_fwd<T>(const Exec&, T*, T*, T*, const T*, const T*, const T*, int, int, int, T);     \
  template void layernorm2d_bwd<T>(const Exec&, T*, T*, T*, const T*, const T*, const T*, const T*, const T*,   \
                                   int, int, int, T*);                                                          \
  template void global_avgpool_fwd<T>(const Exec&, T*, const T*, int, int, int);                                \
  template void global_avgpool_bwd<T>(const Exec&, T*, const T*, int, int, int);                                \
  template void sample_scale<T>(const Exec&, T*, const T*, const T*, int, size_t);                              \
  template void channel_scale_fwd<T>(const Exec&, T*, const T*, const T*, int, int, int);                       \
  template void channel_scale_bwd<T>(const Exec&, T*, T*, const T*, const T*, const T*, int, int, int, T*);     \
  template void zero_pad_fwd<T>(const Exec&, T*, const T*, const ref::ZeroPad2d&);                              \
  template void zero_pad_bwd<T>(const Exec&, T*, const T*, const ref::ZeroPad2d&);
EMBER_NORM_OPS(float)
EMBER_NORM_OPS(double)
#undef EMBER_NORM_OPS

}  // namespace ember::ops
