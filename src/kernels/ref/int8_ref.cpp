// The scalar int8 kernels: plain loops in int32/int64 arithmetic, the definition every SIMD set
// (src/kernels/x86/int8_*.cpp) must match bit for bit. The packed B of this set is w[N, K] as given.
// Shapes and the epilogue as in kernels/int8_kernels.h.
#include <algorithm>
#include <cstring>

#include "kernels/int8_kernels.h"
#include "kernels/int8_scalar.h"

namespace ember {
namespace {

size_t packed_bytes(int N, int K) { return size_t(N) * size_t(K); }

void pack(void* packed, const int8_t* w, int N, int K) {
  if (N > 0 && K > 0) std::memcpy(packed, w, size_t(N) * K);
}

// C[M, n0:n1] = epilogue(A[M, K] * w[N, K]^T).
void gemm(int M, int n0, int n1, int, int K, const uint8_t* A, int lda, const void* Bp, const Int8Epilogue& ep,
          void* C, int ldc) {
  const int8_t* w = static_cast<const int8_t*>(Bp);
  for (int m = 0; m < M; ++m)
    for (int n = n0; n < n1; ++n) {
      int64_t acc = 0;
      const uint8_t* a = A + size_t(m) * lda;
      const int8_t* b = w + size_t(n) * K;
      for (int k = 0; k < K; ++k) acc += int64_t(a[k]) * int64_t(b[k]);
      epilogue_one(int32_t(acc), m, n, ep, C, ldc);
    }
}

void dw(const uint8_t* x, int32_t x_zp, const int8_t* w, const Int8DwShape& s, const Int8Epilogue& ep, void* y,
        int p0, int p1) {
  const Int8Epilogue e = dw_epilogue(ep, s);
  for (int p = p0; p < p1; ++p)
    for (int q = 0; q < s.Q; ++q)
      for (int k = 0; k < s.K; ++k) epilogue_one(dw_sum_one(x, x_zp, w, s, p, q, k), p * s.Q + q, k, e, y, s.K);
}

void quantize(uint8_t* q, const float* x, size_t n, float inv_scale, int32_t zp) {
  for (size_t i = 0; i < n; ++i) q[i] = requant_u8(x[i] * inv_scale, zp, 0, 255);
}

void dequantize(float* x, const uint8_t* q, size_t n, float scale, int32_t zp) {
  for (size_t i = 0; i < n; ++i) x[i] = float(int32_t(q[i]) - zp) * scale;
}

// y[P, Q, C] = max over the taps of each window inside x[H, W, C] (0 where none is).
void maxpool(uint8_t* y, const uint8_t* x, const Int8PoolShape& s, int p0, int p1) {
  for (int p = p0; p < p1; ++p)
    for (int q = 0; q < s.Q; ++q)
      for (int c = 0; c < s.C; ++c) {
        uint8_t m = 0;
        for (int r = 0; r < s.R; ++r) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; ++t) {
            const int w = q * s.stride_w - s.pad_w + t;
            if (w >= 0 && w < s.W) m = std::max(m, x[(size_t(h) * s.W + w) * s.C + c]);
          }
        }
        y[(size_t(p) * s.Q + q) * s.C + c] = m;
      }
}

}  // namespace

Int8Kernels int8_kernels_scalar() {
  Int8Kernels k{};
  k.isa = Int8Isa::scalar;
  k.name = "scalar";
  k.packed_b_bytes = packed_bytes;
  k.pack_b = pack;
  k.gemm = gemm;
  k.dw = dw;
  k.quantize = quantize;
  k.dequantize = dequantize;
  k.maxpool = maxpool;
  return k;
}

}  // namespace ember
