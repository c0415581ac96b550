// The one kernel table: CPU feature detection and the immutable per-ISA tables.
// Every other part of ember reaches fast code only through kernels_for(isa).
#include "kernels/kernels.h"

namespace ember {
namespace ref {
void im2col_f32(float* col, const float* x, int Cg, const ConvShape& s);
void col2im_f32(float* dx, const float* col, int Cg, const ConvShape& s);
void relu_fwd_f32(float* y, const float* x, size_t n);
void relu_bwd_f32(float* dx, const float* dy, const float* y, size_t n);
void bias_rows_f32(float* y, const float* b, int rows, int cols);
void bias_channels_f32(float* y, const float* b, int N, int K, int PQ);
}  // namespace ref

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

bool parse_isa(std::string_view t, Isa* out) {
  if (t == "scalar") *out = Isa::scalar;
  else if (t == "avx2") *out = Isa::avx2;
  else if (t == "avx512") *out = Isa::avx512;
  else return false;
  return true;
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

namespace {
constexpr Kernels kScalar{Isa::scalar,      sgemm_ref,          ref::im2col_f32,
                          ref::col2im_f32,  ref::relu_fwd_f32,  ref::relu_bwd_f32,
                          ref::bias_rows_f32, ref::bias_channels_f32};
constexpr Kernels kAvx2{Isa::avx2,          sgemm_avx2,         ref::im2col_f32,
                        ref::col2im_f32,    ref::relu_fwd_f32,  ref::relu_bwd_f32,
                        ref::bias_rows_f32, ref::bias_channels_f32};
constexpr Kernels kAvx512{Isa::avx512,        sgemm_avx512,       ref::im2col_f32,
                          ref::col2im_f32,    ref::relu_fwd_f32,  ref::relu_bwd_f32,
                          ref::bias_rows_f32, ref::bias_channels_f32};
}  // namespace

const Kernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::avx2: return kAvx2;
    case Isa::avx512: return kAvx512;
    default: return kScalar;
  }
}

}  // namespace ember
