// ember's own seeded generator: PCG32 (O'Neill's pcg32_random_r, XSH-RR), with streams so each
// parameter tensor and each epoch's shuffle draws from an independent, reproducible sequence.
#pragma once
#include <cmath>
#include <cstdint>

namespace ember {

class Pcg32 {
 public:
  Pcg32(uint64_t seed, uint64_t stream) : inc_((stream << 1u) | 1u) {
    next_u32();
    state_ += seed;
    next_u32();
  }
  uint32_t next_u32() {
    const uint64_t old = state_;
    state_ = old * 6364136223846793005ULL + inc_;
    const uint32_t xorshifted = uint32_t(((old >> 18u) ^ old) >> 27u);
    const uint32_t rot = uint32_t(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
  }
  // Uniform in [0, bound) without modulo bias (Lemire's method with rejection).
  uint32_t below(uint32_t bound) {
    uint64_t m = uint64_t(next_u32()) * bound;
    if (uint32_t(m) < bound) {
      const uint32_t t = uint32_t(-bound) % bound;
      while (uint32_t(m) < t) m = uint64_t(next_u32()) * bound;
    }
    return uint32_t(m >> 32);
  }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform() {
    const uint64_t hi = next_u32() >> 5, lo = next_u32() >> 6;
    return double(hi * 67108864ULL + lo) * (1.0 / 9007199254740992.0);
  }
  // Standard normal by Box-Muller (one value per call; simple and reproducible).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_ = 0, inc_;
};

}  // namespace ember
