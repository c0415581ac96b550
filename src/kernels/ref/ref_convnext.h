// Scalar reference kernels for the ConvNeXt ops (issue 22), matching PyTorch: LayerNorm,
// LayerNorm2d, global average pool, layer scale, add, concat, zero padding, drop path. As ref.h: templates on T (float, double), raw pointers, no allocation.
// Letters: N batch, C channels, HW = H*W positions, D features; n = elements of a pointwise op.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>

namespace ember::ref {

// The activations (GELU, GELU-tanh, HardSwish, SiLU, FastSwish) are formulas in src/kernels/act/.

// ---- Layer normalisation. One row = D values `stride` apart; biased variance, as PyTorch. ----

// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps); gamma/beta may be null.
template <class T>
void ln_row_fwd(T* y, T* mean, T* rstd, const T* x, size_t stride, const T* gamma, const T* beta, int D,
                T eps) {
  T m = 0, v = 0;
  for (int d = 0; d < D; ++d) m += x[d * stride];
  m /= T(D);
  for (int d = 0; d < D; ++d) v += (x[d * stride] - m) * (x[d * stride] - m);
  const T r = T(1) / std::sqrt(v / T(D) + eps);
  for (int d = 0; d < D; ++d) {
    const T xh = (x[d * stride] - m) * r;
    y[d * stride] = (gamma ? xh * gamma[d] : xh) + (beta ? beta[d] : T(0));
  }
  *mean = m;
  *rstd = r;
}
// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * gamma; dgamma += dy xhat, dbeta += dy
// (dx, dgamma, dbeta may each be null).
template <class T>
void ln_row_bwd(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, size_t stride, T mean, T rstd,
                const T* gamma, int D) {
  T sg = 0, sgx = 0;
  for (int d = 0; d < D; ++d) {
    const T xh = (x[d * stride] - mean) * rstd, g = gamma ? dy[d * stride] * gamma[d] : dy[d * stride];
    sg += g;
    sgx += g * xh;
    if (dgamma) dgamma[d] += dy[d * stride] * xh;
    if (dbeta) dbeta[d] += dy[d * stride];
  }
  for (int d = 0; dx && d < D; ++d) {
    const T xh = (x[d * stride] - mean) * rstd, g = gamma ? dy[d * stride] * gamma[d] : dy[d * stride];
    dx[d * stride] = rstd * (g - sg / T(D) - xh * sgx / T(D));
  }
}
template <class T> void zero_fill(T* p, size_t n) {
  for (size_t i = 0; p && i < n; ++i) p[i] = T(0);
}

// LayerNorm over the trailing D: x, y [N, D]; gamma, beta [D] (null: no affine); saves mean,
// rstd [N] (caller's buffers) for backward.
template <class T>
void layernorm_fwd(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int N, int D, T eps) {
  for (int n = 0; n < N; ++n)
    ln_row_fwd(y + (size_t)n * D, mean + n, rstd + n, x + (size_t)n * D, 1, gamma, beta, D, eps);
}
// dx [N, D]; dgamma, dbeta [D] OVERWRITTEN (not accumulated); any of the three may be null.
template <class T>
void layernorm_bwd(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                   const T* gamma, int N, int D) {
  zero_fill(dgamma, D);
  zero_fill(dbeta, D);
  for (int n = 0; n < N; ++n) {
    const size_t o = (size_t)n * D;
    ln_row_bwd(dx ? dx + o : nullptr, dgamma, dbeta, dy + o, x + o, 1, mean[n], rstd[n], gamma, D);
  }
}

// LayerNorm2d (torchvision's ConvNeXt): x, y [N, C, HW], normalised over C at each (n, position);
// gamma, beta [C] (null: no affine); saves mean, rstd [N, HW].
template <class T>
void layernorm2d_fwd(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int N, int C,
                     int HW, T eps) {
  for (int n = 0; n < N; ++n)
    for (int p = 0; p < HW; ++p) {
      const size_t o = (size_t)n * C * HW + p, s = (size_t)n * HW + p;
      ln_row_fwd(y + o, mean + s, rstd + s, x + o, (size_t)HW, gamma, beta, C, eps);
    }
}
// dx [N, C, HW]; dgamma, dbeta [C] OVERWRITTEN; any of the three may be null.
template <class T>
void layernorm2d_bwd(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                     const T* gamma, int N, int C, int HW) {
  zero_fill(dgamma, C);
  zero_fill(dbeta, C);
  for (int n = 0; n < N; ++n)
    for (int p = 0; p < HW; ++p) {
      const size_t o = (size_t)n * C * HW + p, s = (size_t)n * HW + p;
      ln_row_bwd(dx ? dx + o : nullptr, dgamma, dbeta, dy + o, x + o, (size_t)HW, mean[s], rstd[s], gamma, C);
    }
}

// ---- Shape and scaling ops. ----

// Global average pool: y[N, C] = mean over HW of x[N, C, HW].
template <class T> void global_avgpool_fwd(T* y, const T* x, int N, int C, int HW) {
  for (size_t nc = 0; nc < (size_t)N * C; ++nc) {
    T acc = 0;
    for (int p = 0; p < HW; ++p) acc += x[nc * HW + p];
    y[nc] = acc / T(HW);
  }
}
// dx[N, C, HW] = dy[N, C] / HW at every position.
template <class T> void global_avgpool_bwd(T* dx, const T* dy, int N, int C, int HW) {
  for (size_t nc = 0; nc < (size_t)N * C; ++nc)
    for (int p = 0; p < HW; ++p) dx[nc * HW + p] = dy[nc] / T(HW);
}

// Stochastic depth (torchvision's StochasticDepth, mode "row"): sample i is dropped when its
// uniform draw is below p, else scaled by 1 / (1 - p). The draw is a hash of (noise, i): the plan
// derives noise from its seed, the optimizer step and the unit, so masks do not depend on the
// thread count and a resumed run draws the same ones. scale[N] is kept for backward.
inline double drop_path_uniform(uint64_t noise, int i) {  // splitmix64 of the pair, 53 bits
  uint64_t z = noise + 0x9E3779B97F4A7C15ull * (uint64_t(i) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
template <class T> void drop_path_scales(T* scale, uint64_t noise, int N, double p) {
  const T keep = T(1) / T(1 - p);
  for (int i = 0; i < N; ++i) scale[i] = drop_path_uniform(noise, i) < p ? T(0) : keep;
}
// y[N, D] = x * scale[n] (backward: dx = dy * scale[n], the same call). y may be x.
template <class T> void sample_scale(T* y, const T* x, const T* scale, int N, size_t D) {
  for (int i = 0; i < N; ++i)
    for (size_t k = 0; k < D; ++k) y[size_t(i) * D + k] = x[size_t(i) * D + k] * scale[i];
}

// Layer scale: y[N, C, HW] = x * s[C].
template <class T> void channel_scale_fwd(T* y, const T* x, const T* s, int N, int C, int HW) {
  for (size_t nc = 0; nc < (size_t)N * C; ++nc)
    for (int p = 0; p < HW; ++p) y[nc * HW + p] = x[nc * HW + p] * s[nc % C];
}
// dx = dy * s[C]; ds[C] = sum over N, HW of dy * x, OVERWRITTEN; dx or ds may be null.
template <class T>
void channel_scale_bwd(T* dx, T* ds, const T* dy, const T* x, const T* s, int N, int C, int HW) {
  zero_fill(ds, C);
  for (size_t nc = 0; nc < (size_t)N * C; ++nc)
    for (int p = 0; p < HW; ++p) {
      if (dx) dx[nc * HW + p] = dy[nc * HW + p] * s[nc % C];
      if (ds) ds[nc % C] += dy[nc * HW + p] * x[nc * HW + p];
    }
}

// Residual add over n elements: y = a + b; backward da = db = dy (either may be null).
template <class T> void add_fwd(T* y, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
template <class T> void add_bwd(T* da, T* db, const T* dy, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (da) da[i] = dy[i];
    if (db) db[i] = dy[i];
  }
}

// The n-ary forms the graph's add and concat nodes run. y = xs[0] + xs[1] + ... (summed in that
// order) over n elements; acc: dst = dst + src (a tensor read by several nodes sums their
// gradients).
template <class T> void add_n_fwd(T* y, const T* const* xs, int nin, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T v = xs[0][i];
    for (int j = 1; j < nin; ++j) v += xs[j][i];
    y[i] = v;
  }
}
template <class T> void accumulate(T* dst, const T* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}
// Concat of nin inputs along the per-sample axis: sample n of y is sample n of xs[0] (sizes[0]
// elements), then of xs[1], ... for N samples. Backward splits dy back (a null dxs[j] is skipped).
template <class T> void concat_n_fwd(T* y, const T* const* xs, const size_t* sizes, int nin, int N) {
  size_t row = 0;
  for (int j = 0; j < nin; ++j) row += sizes[j];
  for (int n = 0; n < N; ++n)
    for (int j = 0, o = 0; j < nin; o += int(sizes[j]), ++j)
      for (size_t i = 0; i < sizes[j]; ++i) y[n * row + size_t(o) + i] = xs[j][n * sizes[j] + i];
}
template <class T> void concat_n_bwd(T* const* dxs, const T* dy, const size_t* sizes, int nin, int N) {
  size_t row = 0;
  for (int j = 0; j < nin; ++j) row += sizes[j];
  for (int n = 0; n < N; ++n)
    for (int j = 0, o = 0; j < nin; o += int(sizes[j]), ++j)
      for (size_t i = 0; dxs[j] && i < sizes[j]; ++i) dxs[j][n * sizes[j] + i] = dy[n * row + size_t(o) + i];
}

// Channel concat: a [N, C1, HW], b [N, C2, HW] -> y [N, C1 + C2, HW] (torch.cat dim=1).
template <class T> void concat_channels_fwd(T* y, const T* a, const T* b, int N, int C1, int C2, int HW) {
  const size_t na = (size_t)C1 * HW, nb = (size_t)C2 * HW;
  for (int n = 0; n < N; ++n) {
    for (size_t i = 0; i < na; ++i) y[n * (na + nb) + i] = a[n * na + i];
    for (size_t i = 0; i < nb; ++i) y[n * (na + nb) + na + i] = b[n * nb + i];
  }
}
// Its backward splits dy [N, C1 + C2, HW] into da [N, C1, HW] and db [N, C2, HW] (either may be null).
template <class T> void concat_channels_bwd(T* da, T* db, const T* dy, int N, int C1, int C2, int HW) {
  const size_t na = (size_t)C1 * HW, nb = (size_t)C2 * HW;
  for (int n = 0; n < N; ++n) {
    for (size_t i = 0; da && i < na; ++i) da[n * na + i] = dy[n * (na + nb) + i];
    for (size_t i = 0; db && i < nb; ++i) db[n * nb + i] = dy[n * (na + nb) + na + i];
  }
}

// Zero padding: x [N, C, H, W] -> y [N, C, H + top + bottom, W + left + right], pads >= 0
// (F.pad(x, (left, right, top, bottom))).
struct ZeroPad2d {
  int N, C, H, W, top, bottom, left, right;
  int Hp() const { return H + top + bottom; }
  int Wp() const { return W + left + right; }
};
template <class T> void zero_pad_fwd(T* y, const T* x, const ZeroPad2d& s) {
  const int Hp = s.Hp(), Wp = s.Wp();
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int h = 0; h < Hp; ++h)
      for (int w = 0; w < Wp; ++w) {
        const int hi = h - s.top, wi = w - s.left;
        const bool in = hi >= 0 && hi < s.H && wi >= 0 && wi < s.W;
        y[(nc * Hp + h) * Wp + w] = in ? x[(nc * s.H + hi) * s.W + wi] : T(0);
      }
}
// Its backward crops: dx [N, C, H, W] = the interior of dy [N, C, Hp, Wp].
template <class T> void zero_pad_bwd(T* dx, const T* dy, const ZeroPad2d& s) {
  const int Hp = s.Hp(), Wp = s.Wp();
  for (size_t nc = 0; nc < (size_t)s.N * s.C; ++nc)
    for (int h = 0; h < s.H; ++h)
      for (int w = 0; w < s.W; ++w)
        dx[(nc * s.H + h) * s.W + w] = dy[(nc * Hp + h + s.top) * Wp + w + s.left];
}

// Drop path (torchvision.ops.stochastic_depth, mode='row', training): x, y [N, D] with D the
// elements of one sample; y = x * (mask[n] / keep), keep = 1 - torchvision's p; keep == 0 gives 0.
template <class T> T drop_path_scale(uint8_t m, double keep) {
  return m && keep > 0 ? T(1) / T(keep) : T(0);
}
template <class T> void drop_path_fwd(T* y, const T* x, const uint8_t* mask, double keep, int N, size_t D) {
  for (int n = 0; n < N; ++n)
    for (size_t i = 0; i < D; ++i) y[n * D + i] = x[n * D + i] * drop_path_scale<T>(mask[n], keep);
}
// dx = dy * (mask[n] / keep), the same scaling.
template <class T> void drop_path_bwd(T* dx, const T* dy, const uint8_t* mask, double keep, int N, size_t D) {
  drop_path_fwd(dx, dy, mask, keep, N, D);
}

}  // namespace ember::ref
