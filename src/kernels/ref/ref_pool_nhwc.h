// Channel-last MaxPool2d (x [N, H, W, C] -> y [N, P, Q, C]): ref.h's maxpool2d_fwd / _bwd in
// channel-last indexing, the same choice of each window's max and the same sums, so the results
// are the NCHW functions' bits. The reference and the fp32 path of a channel-last plan.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/ref/ref.h"

namespace ember::ref {

// argmax [N, P, Q, C]: the h*W+w of each max within its sample (the first in window order; padding
// never wins; a NaN wins and stays).
template <class T>
void maxpool2d_fwd_nhwc(T* y, int32_t* argmax, const T* x, const PoolShape& s) {
  const size_t C = size_t(s.C);
  for (size_t npq = 0; npq < size_t(s.N) * s.P * s.Q; ++npq) {
    const int n = int(npq / (size_t(s.P) * s.Q)), p = int(npq / s.Q % s.P), q = int(npq % s.Q);
    T* yo = y + npq * C;
    int32_t* ao = argmax + npq * C;
    for (size_t c = 0; c < C; ++c) yo[c] = -std::numeric_limits<T>::infinity(), ao[c] = -1;
    for (int r = 0; r < s.R; ++r) {
      const int h = p * s.stride_h - s.pad_h + r;
      if (h < 0 || h >= s.H) continue;
      for (int t = 0; t < s.S; ++t) {
        const int w = q * s.stride_w - s.pad_w + t;
        if (w < 0 || w >= s.W) continue;
        const T* xi = x + ((size_t(n) * s.H + size_t(h)) * s.W + size_t(w)) * C;
        const int32_t at = h * s.W + w;
        for (size_t c = 0; c < C; ++c)
          if (ao[c] < 0 || xi[c] > yo[c] || (std::isnan(xi[c]) && !std::isnan(yo[c]))) yo[c] = xi[c], ao[c] = at;
      }
    }
  }
}

// dx [N, H, W, C] = the scatter of dy through argmax (overwrites dx; each input's sum in (p, q) order).
template <class T>
void maxpool2d_bwd_nhwc(T* dx, const T* dy, const int32_t* argmax, const PoolShape& s) {
  const size_t C = size_t(s.C), HW = size_t(s.H) * s.W, PQ = size_t(s.P) * s.Q;
  for (size_t i = 0; i < size_t(s.N) * HW * C; ++i) dx[i] = 0;
  for (size_t npq = 0; npq < size_t(s.N) * PQ; ++npq) {
    T* dxn = dx + npq / PQ * HW * C;
    for (size_t c = 0; c < C; ++c) {
      const int32_t a = argmax[npq * C + c];
      if (a >= 0) dxn[size_t(a) * C + c] += dy[npq * C + c];
    }
  }
}

}  // namespace ember::ref
