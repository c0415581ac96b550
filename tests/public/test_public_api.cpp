// The public functions the CLI and the Python module use instead of private headers: the epoch
// order (against the pcg32 Fisher-Yates it replaces), the kernel sets (against kernels.h), the
// bench inputs and the JSON helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "core/rng.h"
#include "ember/bench.h"
#include "ember/cpu.h"
#include "ember/error.h"
#include "ember/json.h"
#include "ember/train.h"
#include "kernels/bit_kernels.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

TEST(EpochOrder, IsTheFisherYatesShuffleOfTheEpochsStream) {
  for (int epoch : {0, 1, 7}) {
    std::vector<int64_t> want(1000);
    std::iota(want.begin(), want.end(), int64_t(0));
    Pcg32 rng(42, 0x5eed0000ULL + uint64_t(epoch));
    for (int64_t i = 999; i > 0; --i) std::swap(want[size_t(i)], want[rng.below(uint32_t(i + 1))]);
    EXPECT_EQ(epoch_order(1000, 42, epoch), want) << "epoch " << epoch;
  }
  EXPECT_NE(epoch_order(1000, 42, 0), epoch_order(1000, 42, 1));
  EXPECT_NE(epoch_order(1000, 42, 0), epoch_order(1000, 43, 0));
}

TEST(EpochOrder, WithoutShuffleIsTheIdentity) {
  std::vector<int64_t> ident(17);
  std::iota(ident.begin(), ident.end(), int64_t(0));
  EXPECT_EQ(epoch_order(17, 5, 3, false), ident);
  EXPECT_TRUE(epoch_order(0, 5, 0).empty());
  EXPECT_EQ(epoch_order(1, 5, 0), std::vector<int64_t>{0});
}

TEST(KernelSets, MatchTheKernelTables) {
  const std::vector<KernelSet> sets = kernel_sets();
  const Isa isas[3] = {Isa::scalar, Isa::avx2, Isa::avx512};
  ASSERT_EQ(sets.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_STREQ(sets[size_t(i)].name, isa_name(isas[i]));
    EXPECT_EQ(sets[size_t(i)].supported, isa_supported(isas[i]));
    if (!sets[size_t(i)].supported) continue;
    EXPECT_STREQ(sets[size_t(i)].bf16_path, kernels_for(isas[i]).bf16_path);
    EXPECT_EQ(sets[size_t(i)].bf16_rate, kernels_for(isas[i]).bf16_rate);
    EXPECT_STREQ(sets[size_t(i)].bit_kernels, bit_kernels_for(isas[i]).name);
  }
  EXPECT_TRUE(sets[0].supported);
  EXPECT_STREQ(best_kernel_set().name, isa_name(best_isa()));
  EXPECT_STREQ(resolve_kernel_set("", "isa").name, isa_name(best_isa()));
  EXPECT_STREQ(resolve_kernel_set("scalar", "isa").name, "scalar");
}

TEST(KernelSets, ABadNameNamesWhereItCameFrom) {
  try {
    resolve_kernel_set("sse9", "--isa");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--isa: expected scalar, avx2 or avx512, found 'sse9'");
  }
}

TEST(KernelTable, IsTheKernelRows) {
  KernelRow rows[kKernelEntries];
  kernel_rows(rows);
  const std::vector<KernelTableRow> table = kernel_table();
  ASSERT_EQ(table.size(), size_t(kKernelEntries));
  for (int i = 0; i < kKernelEntries; ++i) {
    EXPECT_STREQ(table[size_t(i)].entry, rows[i].entry);
    for (int s = 0; s < 3; ++s) EXPECT_STREQ(table[size_t(i)].by_set[s], rows[i].by_set[s]);
  }
}

TEST(FillUniform, IsPcg32UniformInMinusOneToOne) {
  std::vector<float> x(256);
  fill_uniform(x.data(), x.size(), 12345, 1);
  Pcg32 rng(12345, 1);
  for (float v : x) {
    EXPECT_EQ(v, float(rng.uniform() * 2 - 1));
    EXPECT_GE(v, -1.f);
    EXPECT_LT(v, 1.f);
  }
}

TEST(Json, ParsesBoundedAndWritesText) {
  EXPECT_EQ(json_text(parse_json(R"({"a": [1, 2]})", "t.json")), R"({"a":[1,2]})");
  EXPECT_THROW(parse_json(R"({"a": 1, "a": 2})", "t.json"), Error);
  EXPECT_THROW(parse_json(std::string(100, '['), "t.json"), Error);
  const std::string brief = json_brief(std::string(500, 'x'));
  EXPECT_LT(brief.size(), 100u);
  EXPECT_NE(brief.find("(502 characters)"), std::string::npos) << brief;
}

}  // namespace
}  // namespace ember
