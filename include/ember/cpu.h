// ember/cpu.h: the kernel sets (instruction sets) ember has, which of them this CPU runs, how each
// does bf16 matrix products and binarized convolutions, and what every kernel-table entry runs on
// each set: the facts `ember info` prints, and the one reader of a kernel-set name from a user.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ember {

struct KernelSet {
  const char* name = "";         // "scalar", "avx2", "avx512"
  bool supported = false;        // this CPU runs it; the fields below are empty (0) when not
  const char* bf16_path = "";    // how bf16 matrix products run (ember info)
  int bf16_rate = 0;             // bf16 products per fp32 FMA: 2 native (AVX512_BF16), 1 emulated
  const char* bit_kernels = "";  // the binarized nets' kernels ("avx512-vpopcntdq", ...)
};

// Every kernel set, best last (scalar, avx2, avx512), supported or not.
std::vector<KernelSet> kernel_sets();
// The best set this CPU supports.
KernelSet best_kernel_set();
// The set a user named: empty gives the best; a name ember or this CPU does not know throws
// ember::Error starting "WHAT: " (the option or variable it came from), naming the best set.
KernelSet resolve_kernel_set(std::string_view name, const std::string& what);

// One kernel-table entry and what it runs on each set, in kernel_sets()' order: the set's own
// code ("avx2", "avx512"), "avx512_bf16", "reference" (the scalar reference), "-" (none: the op
// takes another path) or "?" (a set this CPU lacks).
struct KernelTableRow {
  const char* entry = "";
  const char* by_set[3] = {"", "", ""};
};
std::vector<KernelTableRow> kernel_table();

}  // namespace ember
