// ember/cpu.h: the CPU features ember's one probe reads (AMX included), the kernel sets
// (instruction sets) ember has, which of them this CPU runs, how each does bf16 matrix products and
// binarized convolutions, and what every kernel-table entry runs on each set: the facts `ember info`
// prints, and the one reader of a kernel-set name from a user.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// One CPU feature by the name `ember info` prints ("avx2", "avx512bf16", "amx-tile", ...): present
// when the CPU has it and the OS saves its registers; the AMX ones when the CPU has them (AmxSupport
// says whether this process can use them).
struct CpuFeature {
  const char* name = "";
  bool present = false;
};
// Every feature the probe reads, in `ember info`'s order, present or not.
std::vector<CpuFeature> cpu_features();

// AMX: what the CPU has (CPUID), whether the OS enabled the tile state (XCR0 bits 17-18), and whether
// Linux granted this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once where the
// CPU has tiles and the OS state is on).
struct AmxSupport {
  bool tile = false, bf16 = false, int8 = false;
  bool os_state = false;
  bool permission = false;
};
AmxSupport amx_support();

struct KernelSet {
  const char* name = "";         // "scalar", "avx2", "avx512", "amx"
  bool supported = false;        // this CPU runs it; the fields below are empty (0) when not
  const char* bf16_path = "";    // how bf16 matrix products run (ember info)
  int bf16_rate = 0;             // bf16 products per fp32 FMA: 16 AMX tiles, 2 AVX512_BF16, 1 emulated
  const char* bit_kernels = "";  // the binarized nets' kernels ("avx512-vpopcntdq", ...)
};

// Every kernel set, best last (scalar, avx2, avx512, amx), supported or not.
std::vector<KernelSet> kernel_sets();
// The best set this CPU supports.
KernelSet best_kernel_set();
// The set a user named: empty gives the best; a name ember or this CPU does not know throws
// ember::Error starting "WHAT: " (the option or variable it came from), naming the best set.
KernelSet resolve_kernel_set(std::string_view name, const std::string& what);

// One kernel-table entry and what it runs on each set, in kernel_sets()' order: the set's own
// code ("avx2", "avx512"), "avx512_bf16", "amx_bf16", "reference" (the scalar reference), "-" (none: the op
// takes another path) or "?" (a set this CPU lacks).
struct KernelTableRow {
  const char* entry = "";
  const char* by_set[4] = {"", "", "", ""};
};
std::vector<KernelTableRow> kernel_table();

}  // namespace ember
