// The floating-point mode ember's kernels run in: x86's MXCSR flush-to-zero (a result below
// 2^-126 becomes a zero of its sign) and denormals-are-zero (such an operand reads as zero), or
// exact IEEE arithmetic. Intel cores take a microcode assist of ~100 cycles per denormal operand
// or result (AMD's barely slow down), so a trained network whose small values drift below 2^-126
// runs many times slower without them. FpModeScope sets the mode on the calling thread for a
// scope and gives the caller its own MXCSR back on exit: a library leaves its host's state alone.
#pragma once
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ember {

#if defined(__x86_64__) || defined(__i386__)
constexpr uint32_t kMxcsrFtz = 1u << 15, kMxcsrDaz = 1u << 6;
inline uint32_t fp_control() { return _mm_getcsr(); }
inline void set_fp_control(uint32_t csr) { _mm_setcsr(csr); }
// The control word with FTZ and DAZ both on (flush) or both off (keep); rounding, masks kept.
inline uint32_t fp_control_for(uint32_t csr, bool flush) {
  return flush ? (csr | kMxcsrFtz | kMxcsrDaz) : (csr & ~(kMxcsrFtz | kMxcsrDaz));
}
#else  // other CPUs: the mode is not set (their kernels are the scalar reference, IEEE)
constexpr uint32_t kMxcsrFtz = 0, kMxcsrDaz = 0;
inline uint32_t fp_control() { return 0; }
inline void set_fp_control(uint32_t) {}
inline uint32_t fp_control_for(uint32_t csr, bool) { return csr; }
#endif

// Whether the calling thread flushes (FTZ and DAZ both set).
inline bool fp_flushes() {
  const uint32_t both = kMxcsrFtz | kMxcsrDaz;
  return both != 0 && (fp_control() & both) == both;
}

// Sets the mode on this thread until the scope ends, then restores the caller's control word.
// Costs one MXCSR read when the mode is already right (nested scopes, back-to-back calls).
class FpModeScope {
 public:
  explicit FpModeScope(bool flush) : saved_(fp_control()) {
    const uint32_t want = fp_control_for(saved_, flush);
    changed_ = want != saved_;
    if (changed_) set_fp_control(want);
  }
  ~FpModeScope() {
    if (changed_) set_fp_control(saved_);
  }
  FpModeScope(const FpModeScope&) = delete;
  FpModeScope& operator=(const FpModeScope&) = delete;

 private:
  uint32_t saved_;
  bool changed_;
};

// For threads ember owns (the pool's workers, the data loader's): the mode for their lifetime.
inline void set_thread_fp_mode(bool flush) { set_fp_control(fp_control_for(fp_control(), flush)); }

}  // namespace ember
