// What the CLI and the Python module use instead of private src/ headers, against what it wraps:
// the public epoch order (the pcg32 Fisher-Yates it replaces) and kernel sets (kernels.h), and
// ember_support's bench inputs and JSON helpers (the CLI's support, not installed); and the public
// headers include only public headers and name no private type of the kernels or the core.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <string>

#include "core/rng.h"
#include "ember/cpu.h"
#include "ember/error.h"
#include "ember/train.h"
#include "ember_support/bench.h"
#include "ember_support/json.h"
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
  const Isa isas[4] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx};
  ASSERT_EQ(sets.size(), 4u);
  for (int i = 0; i < 4; ++i) {
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
    EXPECT_EQ(std::string(e.what()), "--isa: expected scalar, avx2, avx512 or amx, found 'sse9'");
  }
}

TEST(KernelTable, IsTheKernelRows) {
  KernelRow rows[kKernelRows];
  kernel_rows(rows);
  const std::vector<KernelTableRow> table = kernel_table();
  ASSERT_EQ(table.size(), size_t(kKernelRows));
  for (int i = 0; i < kKernelRows; ++i) {
    EXPECT_STREQ(table[size_t(i)].entry, rows[i].entry);
    for (int s = 0; s < 4; ++s) EXPECT_STREQ(table[size_t(i)].by_set[s], rows[i].by_set[s]);
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

// ember/bitnet.h once declared DeltaEngine and the head refit over ThreadPool and BitKernels
// (issue 56): those live in src/bitnet/engine.h now. Comments may name private types; code may not.
TEST(PublicHeaders, IncludeOnlyPublicHeadersAndNameNoPrivateType) {
  namespace fs = std::filesystem;
  const std::regex private_type(R"(\b(ThreadPool|BitKernels|Int8Kernels|Kernels|Arena|Pcg32|Isa|Int8Isa)\b)");
  const std::regex quoted_include(R"re(^\s*#\s*include\s*"([^"]*)")re");
  int headers = 0;
  for (const auto& e : fs::directory_iterator(fs::path(EMBER_SOURCE_DIR) / "include" / "ember")) {
    if (e.path().extension() != ".h") continue;
    ++headers;
    std::ifstream in(e.path());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      const std::string code = line.substr(0, line.find("//"));
      const std::string where = e.path().filename().string() + ":" + std::to_string(n) + ": " + line;
      std::smatch m;
      if (std::regex_search(code, m, quoted_include))
        EXPECT_EQ(m[1].str().rfind("ember/", 0), 0u) << where;
      EXPECT_FALSE(std::regex_search(code, private_type)) << where;
    }
  }
  EXPECT_GT(headers, 10);
  for (const char* moved : {"files.h", "json.h", "bench.h", "report.h"})
    EXPECT_FALSE(fs::exists(fs::path(EMBER_SOURCE_DIR) / "include" / "ember" / moved)) << moved << ": ember_support's";
}

}  // namespace
}  // namespace ember
