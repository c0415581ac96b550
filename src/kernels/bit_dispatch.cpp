// The bit-kernel table (next to the fp32 table in dispatch.cpp): one immutable table per ISA,
// built on first use; AVX-512 bit kernels only where the CPU has VPOPCNTDQ, else the AVX2 ones.
#include "kernels/bit_kernels.h"

#include "kernels/cpu_probe.h"

namespace ember {

bool bit_vpopcntdq_supported() { return isa_supported(Isa::avx512) && cpu_probe().avx512_vpopcntdq; }

const BitKernels& bit_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::amx:
    case Isa::avx512:
      if (bit_vpopcntdq_supported()) {
        static const BitKernels t = bit_kernels_avx512();
        return t;
      }
      [[fallthrough]];  // AVX-512 without VPOPCNTDQ: the AVX2 kernels
    case Isa::avx2: {
      static const BitKernels t = bit_kernels_avx2();
      return t;
    }
    default: {
      static const BitKernels t = bit_kernels_scalar();
      return t;
    }
  }
}

}  // namespace ember
