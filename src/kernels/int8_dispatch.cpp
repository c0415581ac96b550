// The int8 kernel table (next to the fp32 table in dispatch.cpp): one immutable table per set,
// built on first use; the fp32 set picks its int8 set (avx512 -> the best VNNI the CPU has).
#include "kernels/int8_kernels.h"

#include "kernels/cpu_probe.h"

namespace ember {

const char* int8_isa_name(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::scalar: return "scalar";
    case Int8Isa::avx2: return "avx2";
    case Int8Isa::avx_vnni: return "avx_vnni";
    case Int8Isa::avx512_vnni: return "avx512_vnni";
    case Int8Isa::amx_int8: return "amx_int8";
  }
  return "?";
}

bool int8_isa_supported(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::scalar: return true;
    case Int8Isa::avx2: return isa_supported(Isa::avx2);
    case Int8Isa::avx_vnni: return isa_supported(Isa::avx2) && cpu_probe().avx_vnni;
    case Int8Isa::avx512_vnni:
      // isa_supported(avx512): F, BW, VL and DQ (the file builds with the fp32 set's AVX-512 flags).
      return isa_supported(Isa::avx512) && cpu_probe().avx512_vnni && isa_supported(Isa::avx2);
    case Int8Isa::amx_int8:  // the amx set's checks (permission, tile state kept), then the int8 tiles
      return isa_supported(Isa::amx) && cpu_probe().amx_int8 && int8_isa_supported(Int8Isa::avx512_vnni);
  }
  return false;
}

const Int8Kernels& int8_kernels(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::amx_int8: {
      static const Int8Kernels t = int8_kernels_amx();
      return t;
    }
    case Int8Isa::avx512_vnni: {
      static const Int8Kernels t = int8_kernels_avx512_vnni();
      return t;
    }
    case Int8Isa::avx_vnni: {
      static const Int8Kernels t = int8_kernels_avx_vnni();
      return t;
    }
    case Int8Isa::avx2: {
      static const Int8Kernels t = int8_kernels_avx2();
      return t;
    }
    default: {
      static const Int8Kernels t = int8_kernels_scalar();
      return t;
    }
  }
}

const Int8Kernels& int8_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::amx:
      if (int8_isa_supported(Int8Isa::amx_int8)) return int8_kernels(Int8Isa::amx_int8);
      [[fallthrough]];
    case Isa::avx512:
      if (int8_isa_supported(Int8Isa::avx512_vnni)) return int8_kernels(Int8Isa::avx512_vnni);
      if (int8_isa_supported(Int8Isa::avx_vnni)) return int8_kernels(Int8Isa::avx_vnni);
      return int8_kernels(Int8Isa::avx2);
    case Isa::avx2: return int8_kernels(Int8Isa::avx2);
    default: return int8_kernels(Int8Isa::scalar);
  }
}

}  // namespace ember
