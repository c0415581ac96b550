// The kernel tables against their lists (kernels/kernel_entries.h): a fast set runs the scalar
// reference, or has no kernel, only in the entries its list names, so an entry a set's constructor
// forgets fails here instead of running the scalar reference unnoticed. And the one CPU probe
// (kernels/cpu_probe.h): consistent, what every table's choice reads, and as the compiler sees it.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "ember/cpu.h"
#include "kernels/bit_kernels.h"
#include "kernels/cpu_probe.h"
#include "kernels/int8_kernels.h"
#include "kernels/kernel_entries.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

#define EMBER_NAME(name) #name,
const std::set<std::string> kAvx2Reference = {EMBER_AVX2_REFERENCE_ENTRIES(EMBER_NAME)};
const std::set<std::string> kAvx512Reference = {EMBER_AVX512_REFERENCE_ENTRIES(EMBER_NAME)};
const std::set<std::string> kBf16Only = {EMBER_BF16_ONLY_ENTRIES(EMBER_NAME)};
#undef EMBER_NAME

// Set `col` of the rows (1: avx2, 2: avx512): "reference" exactly in `reference`, "-" (null)
// exactly in `none`; the lists are not stale either way.
void expect_gaps(const KernelRow (&rows)[kKernelRows], int col, const std::set<std::string>& reference,
                 const std::set<std::string>& none) {
  for (const KernelRow& r : rows) {
    const std::string got = r.by_set[col], entry = r.entry;
    SCOPED_TRACE(entry + " on " + (col == 1 ? "avx2" : "avx512"));
    EXPECT_EQ(got == "reference", reference.count(entry) == 1)
        << got << ": the scalar reference runs where the set's list does not name it, or the reverse";
    EXPECT_EQ(got == "-", none.count(entry) == 1) << got << ": null where no list names it, or the reverse";
  }
}

TEST(KernelTable, FastSetsLeaveOnlyListedEntriesToTheReference) {
  KernelRow rows[kKernelRows];
  kernel_rows(rows);
  const bool bf16 = cpu_has_avx512_bf16();
  int checked = 0;
  if (isa_supported(Isa::avx2)) {
    expect_gaps(rows, 1, kAvx2Reference, kBf16Only);
    ++checked;
  }
  if (isa_supported(Isa::avx512)) {
    expect_gaps(rows, 2, kAvx512Reference, bf16 ? std::set<std::string>{} : kBf16Only);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no fast kernel set on this CPU";
}

// The scalar table is the reference itself: null only in the VDPBF16PS-only entries.
TEST(KernelTable, ScalarTableIsCompleteButTheBf16OnlyEntries) {
  KernelRow rows[kKernelRows];
  kernel_rows(rows);
  for (const KernelRow& r : rows)
    EXPECT_EQ(std::string(r.by_set[0]) == "-", kBf16Only.count(r.entry) == 1) << r.entry << ": " << r.by_set[0];
}

// The fields that are not kernels: each fast table names its set and its bf16 path.
TEST(KernelTable, FastTablesFillTheirPlainFields) {
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    const Kernels& k = kernels_for(isa);
    EXPECT_EQ(k.isa, isa);
    ASSERT_NE(k.bf16_path, nullptr);
    EXPECT_NE(std::string(k.bf16_path), "");
    EXPECT_EQ(k.bf16_rate, isa == Isa::amx ? 16 : isa == Isa::avx512 && cpu_has_avx512_bf16() ? 2 : 1);
  }
}

// What one feature needs: AVX-512 extensions need AVX-512F and the OS's ZMM state, AMX's need the tiles.
TEST(CpuProbe, FeaturesImplyWhatTheyNeed) {
  const CpuProbe& p = cpu_probe();
  for (bool ext : {p.avx512bw, p.avx512vl, p.avx512dq, p.avx512_vnni, p.avx512_bf16, p.avx512_vpopcntdq,
                   p.avx512_fp16})
    EXPECT_TRUE(!ext || p.avx512f);
  for (bool vex : {p.avx, p.avx2, p.fma, p.f16c, p.avx_vnni}) EXPECT_TRUE(!vex || p.os_avx);
  EXPECT_TRUE(!p.avx2 || p.avx);
  EXPECT_TRUE(!p.avx512f || p.os_avx512);
  EXPECT_TRUE(!p.os_avx512 || p.os_avx);
  EXPECT_TRUE(!(p.amx_bf16 || p.amx_int8) || p.amx_tile);
  EXPECT_TRUE(!p.amx_permission || (p.amx_tile && p.os_amx));
  EXPECT_EQ(amx_usable(p), p.amx_permission);
}

// Every table's choice is the probe's: the fp32 sets, the bf16 path, the bit kernels, the int8 sets.
TEST(CpuProbe, EveryTableChoosesFromTheProbe) {
  const CpuProbe& p = cpu_probe();
  EXPECT_EQ(isa_supported(Isa::avx2), p.avx2 && p.fma);
  EXPECT_EQ(isa_supported(Isa::avx512), p.avx512f && p.avx512bw && p.avx512vl && p.avx512dq);
  EXPECT_EQ(cpu_has_avx512_bf16(), isa_supported(Isa::avx512) && p.avx512_bf16);
  EXPECT_EQ(bit_vpopcntdq_supported(), isa_supported(Isa::avx512) && p.avx512_vpopcntdq);
  EXPECT_EQ(int8_isa_supported(Int8Isa::avx_vnni), isa_supported(Isa::avx2) && p.avx_vnni);
  EXPECT_EQ(int8_isa_supported(Int8Isa::avx512_vnni),
            isa_supported(Isa::avx512) && isa_supported(Isa::avx2) && p.avx512_vnni);
  const Isa best = best_isa();
  EXPECT_TRUE(isa_supported(best));
  EXPECT_EQ(kernels_for(best).isa, best);
  EXPECT_TRUE(int8_isa_supported(int8_kernels_for(best).isa)) << int8_kernels_for(best).name;
  EXPECT_TRUE(best != Isa::avx512 || (p.avx2 && p.fma)) << "the avx512 files build with -mavx2 -mfma";
}

// The probe against the compiler's own (GCC and clang gate on XCR0 as the probe does). Clang 14
// knows fewer names: f16c, avxvnni, avx512fp16 and the AMX ones are GCC's alone.
TEST(CpuProbe, AgreesWithTheCompilerBuiltins) {
  const CpuProbe& p = cpu_probe();
  __builtin_cpu_init();
  EXPECT_EQ(p.sse42, bool(__builtin_cpu_supports("sse4.2")));
  EXPECT_EQ(p.avx, bool(__builtin_cpu_supports("avx")));
  EXPECT_EQ(p.avx2, bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(p.fma, bool(__builtin_cpu_supports("fma")));
  EXPECT_EQ(p.avx512f, bool(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(p.avx512bw, bool(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(p.avx512vl, bool(__builtin_cpu_supports("avx512vl")));
  EXPECT_EQ(p.avx512dq, bool(__builtin_cpu_supports("avx512dq")));
  EXPECT_EQ(p.avx512_vnni, bool(__builtin_cpu_supports("avx512vnni")));
  EXPECT_EQ(p.avx512_bf16, bool(__builtin_cpu_supports("avx512bf16")));
  EXPECT_EQ(p.avx512_vpopcntdq, bool(__builtin_cpu_supports("avx512vpopcntdq")));
#if !defined(__clang__) && __GNUC__ >= 12
  EXPECT_EQ(p.f16c, bool(__builtin_cpu_supports("f16c")));
  EXPECT_EQ(p.avx_vnni, bool(__builtin_cpu_supports("avxvnni")));
  EXPECT_EQ(p.avx512_fp16, bool(__builtin_cpu_supports("avx512fp16")));
  EXPECT_EQ(p.amx_tile && p.os_amx, bool(__builtin_cpu_supports("amx-tile")));
  EXPECT_EQ(p.amx_bf16 && p.os_amx, bool(__builtin_cpu_supports("amx-bf16")));
  EXPECT_EQ(p.amx_int8 && p.os_amx, bool(__builtin_cpu_supports("amx-int8")));
#endif
}

// The public view (ember/cpu.h, what `ember info` prints) is the probe's, name by name.
TEST(CpuProbe, ThePublicViewReadsTheProbe) {
  const CpuProbe& p = cpu_probe();
  std::set<std::string> present, names;
  for (const CpuFeature& f : cpu_features()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " listed twice";
    if (f.present) present.insert(f.name);
  }
  for (const char* n : {"avx2", "avx512f", "avx512bf16", "avx512fp16", "amx-tile", "amx-bf16", "amx-int8"})
    EXPECT_EQ(names.count(n), 1u) << n;
  EXPECT_EQ(present.count("avx512bf16") == 1, p.avx512_bf16);
  EXPECT_EQ(present.count("avx512fp16") == 1, p.avx512_fp16);
  EXPECT_EQ(present.count("amx-tile") == 1, p.amx_tile);
  const AmxSupport amx = amx_support();
  EXPECT_EQ(amx.tile, p.amx_tile);
  EXPECT_EQ(amx.bf16, p.amx_bf16);
  EXPECT_EQ(amx.int8, p.amx_int8);
  EXPECT_EQ(amx.os_state, p.os_amx);
  EXPECT_EQ(amx.permission, p.amx_permission);
}

}  // namespace
}  // namespace ember
