// Scalar reference bit kernels (kept forever): the plain loops every fast bit kernel is tested
// against. Shapes as in kernels/bit_kernels.h: x [P, K] words, w/mask [O, K], counts c[P].
#include <cstring>

#include "kernels/bit_kernels.h"

namespace ember {
namespace {

int popcount64(uint64_t v) { return __builtin_popcountll(v); }

void conv_ref(int32_t* out, int ldo, const uint64_t* x, int P, const uint64_t* w, const uint64_t* mask,
              int O, int K) {
  for (int o = 0; o < O; ++o)
    for (int p = 0; p < P; ++p) {
      const uint64_t* xp = x + int64_t(p) * K;
      const uint64_t* wo = w + int64_t(o) * K;
      int32_t s = 0;
      if (mask) {
        const uint64_t* mo = mask + int64_t(o) * K;
        for (int k = 0; k < K; ++k) s += popcount64((wo[k] ^ xp[k]) & mo[k]);
      } else {
        for (int k = 0; k < K; ++k) s += popcount64(wo[k] ^ xp[k]);
      }
      out[int64_t(o) * ldo + p] = s;
    }
}

void threshold_ref(uint64_t* out, const int32_t* c, int P, int32_t t) {
  const int Pw = (P + 63) / 64;
  std::memset(out, 0, sizeof(uint64_t) * 5 * Pw);
  for (int p = 0; p < P; ++p) {
    const uint64_t bit = uint64_t(1) << (p % 64);
    if (c[p] > t) out[p / 64] |= bit;
    for (int r = 1; r <= 4; ++r)
      if (c[p] == t + r - 2) out[r * Pw + p / 64] |= bit;
  }
}

void column_flips_ref(uint64_t* out, const uint64_t* x, int K, const int32_t* pix, int n1, int n2,
                      const FlipQuery& q) {
  for (int r = 0; r < q.nout; ++r) std::memset(out + int64_t(r) * K, 0, sizeof(uint64_t) * K);
  for (int i = 0; i < K * 64; ++i) {
    int v1 = 0, v2 = 0;
    for (int j = 0; j < n1 + n2; ++j) {
      const int b = int(x[int64_t(pix[j]) * K + i / 64] >> (i % 64) & 1);
      if (j < n1) v1 += b;
      v2 += b;
    }
    for (int r = 0; r < q.nout; ++r) {
      const int v = q.which[r] == 1 ? v1 : v2;
      if (v >= q.lo[r] && v <= q.hi[r]) out[int64_t(r) * K + i / 64] |= uint64_t(1) << (i % 64);
    }
  }
}

}  // namespace

BitKernels bit_kernels_scalar() {
  return BitKernels{Isa::scalar, "scalar", conv_ref, threshold_ref, column_flips_ref};
}

}  // namespace ember
