// Scalar reference of the channel-last depthwise convolution (Kernels::dw_nhwc_fwd / dw_nhwc_bwd,
// kernels.h): one sample, x [H, W, G], y and dy [P, Q, G*M], w [G*M, R, S]; output channel k
// reads input channel k / M. The fast tables' kernels (x86/dw_nhwc_impl.h) are tested against it.
#include "kernels/ref/ref.h"

#include <cstring>

namespace ember::ref {

namespace {
// f(p, q, h, w, r, s) for every tap of the output (p, q) that reads an input pixel (h, w).
template <class F>
void each_tap(const DwShape& d, F&& f) {
  for (int p = 0; p < d.P; ++p)
    for (int q = 0; q < d.Q; ++q)
      for (int r = 0; r < d.R; ++r) {
        const int h = p - d.pad_h + r;
        if (h < 0 || h >= d.H) continue;
        for (int s = 0; s < d.S; ++s) {
          const int w = q - d.pad_w + s;
          if (w >= 0 && w < d.W) f(p, q, h, w, r, s);
        }
      }
}
}  // namespace

void dw_nhwc_fwd_f32(float* y, const float* x, const float* w, const float* b, const DwShape& d, float*) {
  const int K = d.G * d.M, RS = d.R * d.S;
  for (size_t i = 0; i < size_t(d.P) * d.Q; ++i)
    for (int k = 0; k < K; ++k) y[i * K + k] = b ? b[k] : 0.f;
  each_tap(d, [&](int p, int q, int h, int ww, int r, int s) {
    float* yp = y + (size_t(p) * d.Q + q) * K;
    const float* xp = x + (size_t(h) * d.W + ww) * d.G;
    for (int k = 0; k < K; ++k) yp[k] += xp[k / d.M] * w[size_t(k) * RS + r * d.S + s];
  });
}

void dw_nhwc_bwd_f32(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     const DwShape& d, float*) {
  const int K = d.G * d.M, RS = d.R * d.S;
  if (dx) std::memset(dx, 0, size_t(d.H) * d.W * d.G * sizeof(float));
  each_tap(d, [&](int p, int q, int h, int ww, int r, int s) {
    const float* dyp = dy + (size_t(p) * d.Q + q) * K;
    const float* xp = x + (size_t(h) * d.W + ww) * d.G;
    float* dxp = dx ? dx + (size_t(h) * d.W + ww) * d.G : nullptr;
    for (int k = 0; k < K; ++k) {
      const size_t wi = size_t(k) * RS + r * d.S + s;
      dw[wi] += dyp[k] * xp[k / d.M];
      if (dxp) dxp[k / d.M] += dyp[k] * w[wi];
    }
  });
  for (size_t i = 0; db && i < size_t(d.P) * d.Q; ++i)
    for (int k = 0; k < K; ++k) db[k] += dy[i * K + k];
}

}  // namespace ember::ref
