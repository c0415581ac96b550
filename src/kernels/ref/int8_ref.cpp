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

// y[P, Q, C] = max over x[2p + i, 2q + j, C], i, j in {0, 1}.
void maxpool2(uint8_t* y, const uint8_t* x, int H, int W, int C) {
  const int P = H / 2, Q = W / 2;
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < Q; ++q)
      for (int c = 0; c < C; ++c) {
        const uint8_t* t = x + ((size_t(2 * p) * W + 2 * q) * C + c);
        const size_t row = size_t(W) * C;
        y[(size_t(p) * Q + q) * C + c] = std::max(std::max(t[0], t[C]), std::max(t[row], t[row + C]));
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
  k.maxpool2 = maxpool2;
  return k;
}

}  // namespace ember
