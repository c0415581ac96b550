// The one CPU probe (CPUID, XGETBV, and on Linux the AMX tile permission), run once per process:
// every kernel table's dispatch (kernels.h, int8_kernels.h, bit_kernels.h, the bf16 entries) and
// `ember info` (through ember/cpu.h) read it, so they can never disagree about what this CPU runs.
#pragma once

namespace ember {

// What this CPU and OS support. Each instruction-set flag but the AMX ones means "the CPU has it
// (CPUID) and the OS saves its registers (XCR0)", as __builtin_cpu_supports reads it. The AMX flags
// are CPUID alone: tiles also need os_amx and, on Linux, amx_permission (see amx_usable).
struct CpuProbe {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx_vnni = false, avx512_bf16 = false, avx512_vpopcntdq = false;
  bool avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false;          // XCR0: SSE and YMM state (bits 1-2)
  bool os_avx512 = false;       // XCR0: opmask and ZMM state (bits 5-7)
  bool os_amx = false;          // XCR0: tile config and tile data state (bits 17-18)
  bool amx_permission = false;  // Linux granted this process the tile data (ARCH_REQ_XCOMP_PERM)
};

// The probe, computed on first call (thread-safe), immutable after. Where the CPU has AMX tiles
// and the OS enabled their state, the first call asks Linux for the tile permission, which then
// holds for the whole process (the AMX kernels need it anyway).
const CpuProbe& cpu_probe();

// Whether tile instructions can run in this process: CPU, OS state and permission.
inline bool amx_usable(const CpuProbe& p) { return p.amx_tile && p.os_amx && p.amx_permission; }

}  // namespace ember
