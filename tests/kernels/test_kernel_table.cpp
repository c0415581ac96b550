// The kernel tables against their lists (kernels/kernel_entries.h): a fast set runs the scalar
// reference, or has no kernel, only in the entries its list names, so an entry a set's constructor
// forgets fails here instead of running the scalar reference unnoticed.
#include <set>
#include <string>

#include <gtest/gtest.h>

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
void expect_gaps(const KernelRow (&rows)[kKernelEntries], int col, const std::set<std::string>& reference,
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
  KernelRow rows[kKernelEntries];
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
  KernelRow rows[kKernelEntries];
  kernel_rows(rows);
  for (const KernelRow& r : rows)
    EXPECT_EQ(std::string(r.by_set[0]) == "-", kBf16Only.count(r.entry) == 1) << r.entry << ": " << r.by_set[0];
}

// The fields that are not kernels: each fast table names its set and its bf16 path.
TEST(KernelTable, FastTablesFillTheirPlainFields) {
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    const Kernels& k = kernels_for(isa);
    EXPECT_EQ(k.isa, isa);
    ASSERT_NE(k.bf16_path, nullptr);
    EXPECT_NE(std::string(k.bf16_path), "");
    EXPECT_EQ(k.bf16_rate, isa == Isa::avx512 && cpu_has_avx512_bf16() ? 2 : 1);
  }
}

}  // namespace
}  // namespace ember
