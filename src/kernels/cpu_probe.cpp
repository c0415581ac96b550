// The one CPU probe (cpu_probe.h): CPUID leaves 1, 7.0 and 7.1, XCR0 through XGETBV, and on Linux
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) where the CPU has AMX tiles. Baseline x86-64
// code: no instruction it tests for runs here.
#include "kernels/cpu_probe.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ember {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

// All zero where the CPU lacks the leaf (__get_cpuid_count checks the highest leaf).
Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

// XCR0, the state components the OS saves; 0 where XGETBV is not enabled (CPUID.1:ECX.OSXSAVE).
unsigned long long xcr0(const Regs& leaf1) {
  if (!bit(leaf1.c, 27)) return 0;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool all_bits(unsigned long long word, unsigned long long mask) { return (word & mask) == mask; }

void read_os_state(CpuProbe& p, const Regs& leaf1) {
  const unsigned long long x = xcr0(leaf1);
  p.os_avx = all_bits(x, 0x6);                        // SSE, YMM
  p.os_avx512 = p.os_avx && all_bits(x, 0xe0);        // opmask, ZMM_Hi256, Hi16_ZMM
  p.os_amx = all_bits(x, (1ull << 17) | (1ull << 18));  // XTILECFG, XTILEDATA
}

// The VEX-encoded sets: usable only where the OS saves the YMM state.
void read_avx(CpuProbe& p, const Regs& leaf1, const Regs& leaf7, const Regs& leaf71) {
  p.sse42 = bit(leaf1.c, 20);
  if (!p.os_avx) return;
  p.avx = bit(leaf1.c, 28);
  p.fma = bit(leaf1.c, 12);
  p.f16c = bit(leaf1.c, 29);
  p.avx2 = bit(leaf7.b, 5);
  p.avx_vnni = bit(leaf71.a, 4);
}

// The EVEX-encoded sets: usable only where the OS saves the opmask and ZMM state.
void read_avx512(CpuProbe& p, const Regs& leaf7, const Regs& leaf71) {
  if (!p.os_avx512) return;
  p.avx512f = bit(leaf7.b, 16);
  p.avx512dq = bit(leaf7.b, 17);
  p.avx512bw = bit(leaf7.b, 30);
  p.avx512vl = bit(leaf7.b, 31);
  p.avx512_vnni = bit(leaf7.c, 11);
  p.avx512_vpopcntdq = bit(leaf7.c, 14);
  p.avx512_fp16 = bit(leaf7.d, 23);
  p.avx512_bf16 = bit(leaf71.a, 5);
}

// Linux (5.16 and later) arms a trap on the first tile instruction until the process asks for
// the tile data state; granted once, it holds for the process. Elsewhere: refused.
bool request_tile_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

void read_amx(CpuProbe& p, const Regs& leaf7) {
  p.amx_bf16 = bit(leaf7.d, 22);
  p.amx_tile = bit(leaf7.d, 24);
  p.amx_int8 = bit(leaf7.d, 25);
  p.amx_permission = p.amx_tile && p.os_amx && request_tile_permission();
}

CpuProbe probe() {
  CpuProbe p;
  const Regs leaf1 = cpuid(1, 0), leaf7 = cpuid(7, 0);
  const Regs leaf71 = leaf7.a >= 1 ? cpuid(7, 1) : Regs{};  // leaf 7's EAX: its highest sub-leaf
  read_os_state(p, leaf1);
  read_avx(p, leaf1, leaf7, leaf71);
  read_avx512(p, leaf7, leaf71);
  read_amx(p, leaf7);
  return p;
}

}  // namespace

const CpuProbe& cpu_probe() {
  static const CpuProbe p = probe();
  return p;
}

}  // namespace ember
