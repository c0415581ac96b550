// The public view of the CPU probe and the kernel tables (ember/cpu.h): thin wrappers over
// cpu_probe.h, kernels.h and bit_kernels.h, so that the CLI and the Python module need no private header.
#include "ember/cpu.h"

#include "kernels/bit_kernels.h"
#include "kernels/cpu_probe.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

KernelSet describe(Isa isa) {
  KernelSet s;
  s.name = isa_name(isa);
  s.supported = isa_supported(isa);
  if (!s.supported) return s;  // its tables are never built
  s.bf16_path = kernels_for(isa).bf16_path;
  s.bf16_rate = kernels_for(isa).bf16_rate;
  s.bit_kernels = bit_kernels_for(isa).name;
  return s;
}

}  // namespace

std::vector<CpuFeature> cpu_features() {
  const CpuProbe& p = cpu_probe();
  return {{"sse4.2", p.sse42},          {"avx", p.avx},
          {"avx2", p.avx2},             {"fma", p.fma},
          {"f16c", p.f16c},             {"avxvnni", p.avx_vnni},
          {"avx512f", p.avx512f},       {"avx512bw", p.avx512bw},
          {"avx512vl", p.avx512vl},     {"avx512dq", p.avx512dq},
          {"avx512vnni", p.avx512_vnni}, {"avx512bf16", p.avx512_bf16},
          {"avx512vpopcntdq", p.avx512_vpopcntdq}, {"avx512fp16", p.avx512_fp16},
          {"amx-tile", p.amx_tile},     {"amx-bf16", p.amx_bf16},
          {"amx-int8", p.amx_int8}};
}

AmxSupport amx_support() {
  const CpuProbe& p = cpu_probe();
  AmxSupport a;
  a.tile = p.amx_tile;
  a.bf16 = p.amx_bf16;
  a.int8 = p.amx_int8;
  a.os_state = p.os_amx;
  a.permission = p.amx_permission;
  return a;
}

std::vector<KernelSet> kernel_sets() {
  return {describe(Isa::scalar), describe(Isa::avx2), describe(Isa::avx512), describe(Isa::amx)};
}

KernelSet best_kernel_set() { return describe(best_isa()); }

KernelSet resolve_kernel_set(std::string_view name, const std::string& what) {
  return describe(resolve_isa(name, what));
}

static_assert(kKernelSets == sizeof(KernelTableRow::by_set) / sizeof(char*), "ember/cpu.h names every kernel set");

std::vector<KernelTableRow> kernel_table() {
  KernelRow rows[kKernelRows];
  kernel_rows(rows);
  std::vector<KernelTableRow> out(kKernelRows);
  for (int i = 0; i < kKernelRows; ++i) {
    out[size_t(i)].entry = rows[i].entry;
    for (int s = 0; s < kKernelSets; ++s) out[size_t(i)].by_set[s] = rows[i].by_set[s];
  }
  return out;
}

}  // namespace ember
