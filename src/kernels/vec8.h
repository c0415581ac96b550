// The 8-float GCC vector the portable kernels (dw_impl.h, norm_impl.h) are written in, with its
// unaligned load and store; each kernel set's translation unit compiles it with its own flags.
#pragma once
#include <cstring>

namespace ember {
namespace {

typedef float vec8 __attribute__((vector_size(32)));

inline vec8 load8(const float* p) {
  vec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, vec8 v) { std::memcpy(p, &v, sizeof v); }

}  // namespace
}  // namespace ember
