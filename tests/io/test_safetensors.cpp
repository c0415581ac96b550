// The safetensors reader against hand-made files: every malformed header field gives an Error
// naming the file and the field before anything is copied; F64, F16 and BF16 tensors convert to
// f32; weights round-trip byte for byte; the writer's header is what the format specifies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/ember.h"

using namespace ember;
using nlohmann::json;

namespace {

// 8-byte little-endian length, the header text, then `data`.
std::vector<uint8_t> file_of(const std::string& header, const std::vector<uint8_t>& data) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  f += header;
  f.append(reinterpret_cast<const char*>(data.data()), data.size());
  return std::vector<uint8_t>(f.begin(), f.end());
}

// The nearest bf16 of v (ties cannot occur for the values used with it), computed apart from
// ember's rounding: of the two bf16 neighbours, the closer one.
float bf16_round_trip(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  float lo, hi;
  const uint32_t a = u & 0xffff0000u, b = a + 0x10000u;
  std::memcpy(&lo, &a, 4);
  std::memcpy(&hi, &b, 4);
  return std::fabs(double(v) - lo) <= std::fabs(double(hi) - v) ? lo : hi;
}

Model tiny() {  // flatten, then linear: parameters "1.weight" [3, 4] and "1.bias" [3]
  Model m;
  m.name = "tiny";
  m.in_h = 2, m.in_w = 2, m.num_classes = 3;
  m.flatten().linear(3);
  return m;
}

PlanOptions opts() {
  PlanOptions po;
  po.batch = 2;
  return po;
}

// A valid F32 file for tiny(): weight values 1..12, bias 0.5, 1.5, 2.5.
std::string good_header(const std::string& weight_extra = "") {
  return R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48])" + weight_extra +
         R"(}, "1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}})";
}
std::vector<uint8_t> good_data() {
  std::vector<float> v;
  for (int i = 1; i <= 12; ++i) v.push_back(float(i));
  for (float b : {0.5f, 1.5f, 2.5f}) v.push_back(b);
  std::vector<uint8_t> d(v.size() * 4);
  std::memcpy(d.data(), v.data(), d.size());
  return d;
}

std::string load_error(const std::vector<uint8_t>& f) {
  Plan p(tiny(), opts());
  p.init_params(1);
  std::vector<float> before(static_cast<float*>(p.param_data()), static_cast<float*>(p.param_data()) + 15);
  try {
    load_weights_from_memory(p, f.data(), f.size(), "w.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(std::memcmp(before.data(), p.param_data(), 60), 0) << "a failed load changed the weights";
    return e.what();
  }
  return "";
}

struct Bad {
  const char* name;
  std::vector<uint8_t> file;
  std::vector<std::string> needles;
};

TEST(Safetensors, EveryBadFieldIsNamed) {
  const std::vector<uint8_t> d = good_data();
  std::vector<uint8_t> huge_len = file_of(good_header(), d);
  huge_len[7] = 0x7f;
  const std::vector<Bad> cases = {
      {"short file", {1, 2, 3}, {"header length", "at least 8"}},
      {"length beyond file", huge_len, {"header length", "exceeds"}},
      {"invalid json", file_of("{\"1.weight\": ", d), {"header: invalid JSON"}},
      {"not an object", file_of("[1, 2]", d), {"header: expected a JSON object"}},
      {"metadata not strings", file_of(R"({"__metadata__": {"a": 1}})", d), {"__metadata__.a: expected a string"}},
      {"metadata not object", file_of(R"({"__metadata__": 3})", d), {"__metadata__: expected an object"}},
      {"unknown dtype", file_of(R"({"1.weight": {"dtype": "F33", "shape": [3, 4], "data_offsets": [0, 48]}})", d),
       {"tensor '1.weight'.dtype", "F33"}},
      {"negative size", file_of(R"({"1.weight": {"dtype": "F32", "shape": [-3, 4], "data_offsets": [0, 48]}})", d),
       {"tensor '1.weight'.shape", "integers >= 0"}},
      {"overflowing shape",
       file_of(R"({"1.weight": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 48]}})", d),
       {"tensor '1.weight'.shape", "more elements than 2^64"}},
      {"rank 17", file_of(R"({"x": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]}})", d),
       {"tensor 'x'.shape", "at most 16"}},
      {"offsets past data", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [40, 88]}})", d),
       {"tensor '1.weight'.data_offsets", "not a range inside the 60 data bytes"}},
      {"offsets reversed", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [48, 0]}})", d),
       {"tensor '1.weight'.data_offsets"}},
      {"span mismatch", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 44]}})", d),
       {"tensor '1.weight'.data_offsets", "needs 48"}},
      {"overlap", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, "1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [40, 52]}})", d),
       {"data_offsets: overlaps"}},
      {"extra key", file_of(good_header(R"(, "x": 1)"), d), {"tensor '1.weight'", "exactly dtype, shape and data_offsets"}},
      {"offsets not numbers", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": ["0", 48]}})", d),
       {"tensor '1.weight'.data_offsets", "[begin, end]"}},
      {"missing tensor", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}})", d),
       {"tensor '1.bias': missing"}},
      {"wrong shape", file_of(R"({"1.weight": {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]}, "1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}})", d),
       {"tensor '1.weight'.shape", "expected [3,4]", "found [4,3]"}},
      {"integer dtype", file_of(R"({"1.weight": {"dtype": "I32", "shape": [3, 4], "data_offsets": [0, 48]}, "1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}})", d),
       {"tensor '1.weight'.dtype", "found I32"}},
      {"unknown tensor", file_of(R"({"1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, "1.bias": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]}, "9.weight": {"dtype": "F32", "shape": [0], "data_offsets": [60, 60]}})", d),
       {"tensor '9.weight'", "no such parameter"}},
      {"empty name", file_of(R"({"": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})", d), {"empty name"}},
      // Found by fuzz_safetensors: a name with a newline made a two-line message.
      {"newline in name", file_of(R"({"1.w\neight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}})", d),
       {"tensor name \"1.w\\neight\"", "control character"}},
      {"control in metadata key", file_of(R"({"__metadata__": {"a\tb": "x"}})", d),
       {"__metadata__ key \"a\\tb\"", "control character"}},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.name);
    const std::string e = load_error(b.file);
    ASSERT_FALSE(e.empty()) << "loaded";
    EXPECT_EQ(e.rfind("w.safetensors: ", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    for (const std::string& n : b.needles) EXPECT_NE(e.find(n), std::string::npos) << "missing '" << n << "' in: " << e;
  }
}

TEST(Safetensors, ConvertsF64F16AndBF16) {
  // Weights as F64, bias as F16 (0.5, 1.5, -2.5) and BF16 is tested on a second file.
  std::vector<uint8_t> data;
  for (int i = 1; i <= 12; ++i) {
    const double v = i / 4.0;
    uint8_t b[8];
    std::memcpy(b, &v, 8);
    data.insert(data.end(), b, b + 8);
  }
  for (uint16_t h : {uint16_t(0x3800), uint16_t(0x3e00), uint16_t(0xc100)}) data.insert(data.end(), {uint8_t(h), uint8_t(h >> 8)});
  const std::vector<uint8_t> f = file_of(
      R"({"1.weight": {"dtype": "F64", "shape": [3, 4], "data_offsets": [0, 96]}, "1.bias": {"dtype": "F16", "shape": [3], "data_offsets": [96, 102]}})",
      data);
  Plan p(tiny(), opts());
  load_weights_from_memory(p, f.data(), f.size(), "mixed.safetensors");
  const float* w = static_cast<const float*>(p.param_data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(w[p.params()[0].offset + size_t(i)], float((i + 1) / 4.0));
  EXPECT_EQ(w[p.params()[1].offset + 0], 0.5f);
  EXPECT_EQ(w[p.params()[1].offset + 1], 1.5f);
  EXPECT_EQ(w[p.params()[1].offset + 2], -2.5f);
  std::vector<uint8_t> bf;
  for (int i = 0; i < 15; ++i) {
    const float v = float(i) - 3.0f;  // exactly representable in bf16
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bf.insert(bf.end(), {uint8_t(bits >> 16), uint8_t(bits >> 24)});
  }
  const std::vector<uint8_t> g = file_of(
      R"({"1.bias": {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]}, "1.weight": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]}})", bf);
  load_weights_from_memory(p, g.data(), g.size(), "bf16.safetensors");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(w[p.params()[0].offset + size_t(i)], float(i) - 3.0f);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w[p.params()[1].offset + size_t(i)], float(12 + i) - 3.0f);
}

TEST(Safetensors, WriterHeaderFollowsTheFormat) {
  Plan p(tiny(), opts());
  const std::vector<uint8_t> f0 = file_of(good_header(), good_data());
  load_weights_from_memory(p, f0.data(), f0.size(), "good");
  const std::string path = ::testing::TempDir() + "/ember-writer.safetensors";
  save_weights(p, path);
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  ASSERT_NE(fp, nullptr);
  std::vector<uint8_t> f(1 << 16);
  f.resize(std::fread(f.data(), 1, f.size(), fp));
  std::fclose(fp);
  std::remove(path.c_str());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(f[size_t(i)]) << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "the data section starts 8-byte aligned";
  ASSERT_EQ(f.size(), 8 + n + 60);
  const json h = json::parse(std::string(f.begin() + 8, f.begin() + 8 + long(n)));
  EXPECT_EQ(h["1.weight"]["shape"], json({3, 4}));
  EXPECT_EQ(h["1.bias"]["dtype"], "F32");
  for (auto& [k, v] : h["__metadata__"].items()) EXPECT_TRUE(v.is_string()) << k << " must be a string for the safetensors library";
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_TRUE(json::parse(h["__metadata__"]["model"].get<std::string>()).is_object());
  // Tensor bytes are the parameters, in the header's ranges.
  const uint64_t wb = h["1.weight"]["data_offsets"][0].get<uint64_t>();
  EXPECT_EQ(std::memcmp(f.data() + 8 + n + wb, good_data().data(), 48), 0);
}

}  // namespace

// --save-dtype bf16: every tensor BF16, rounded to nearest even (kernels/bf16.h), 2 bytes each;
// loading it back gives exactly the rounded values.
TEST(Safetensors, Bf16WeightsAreRoundedToNearestEvenAndLoadBack) {
  Plan p(tiny(), opts());
  float* w = static_cast<float*>(p.param_data());
  const float values[] = {1.0f, 1.00390625f, 1.01171875f, -2.5e-3f, 3.3e38f, 1e-39f, 0.1f, -0.3f, 7.0f, 1.0039063f,
                          -65504.f, 1e-20f, 0.5f, -1.f, 2.f};
  for (size_t i = 0; i < p.param_count(); ++i) w[i] = values[i % 15];
  const std::string path = ::testing::TempDir() + "/ember-bf16.safetensors";
  save_weights(p, path, WeightDtype::bf16);
  const auto meta = read_weights_metadata(path);
  EXPECT_TRUE(meta.count("model"));
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  ASSERT_NE(fp, nullptr);
  std::vector<uint8_t> f(1 << 16);
  f.resize(std::fread(f.data(), 1, f.size(), fp));
  std::fclose(fp);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(f[size_t(i)]) << (8 * i);
  ASSERT_EQ(f.size(), 8 + n + 2 * p.param_count());
  const json h = json::parse(std::string(f.begin() + 8, f.begin() + 8 + long(n)));
  EXPECT_EQ(h["1.weight"]["dtype"], "BF16");
  EXPECT_EQ(h["1.bias"]["dtype"], "BF16");
  Plan q(tiny(), opts());
  load_weights(q, path);
  std::remove(path.c_str());
  const float* r = static_cast<const float*>(std::as_const(q).param_data());
  // The expected values, rounded by hand: ties to even (1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6),
  // 3.3e38 -> the nearest bf16 (3.2996e38), the fp32 denormal 1e-39 -> 0.
  for (size_t i = 0; i < p.param_count(); ++i) {
    const float v = values[i % 15];
    const float want = v == 1.00390625f ? 1.0f : v == 1.01171875f ? 1.015625f : v == 1e-39f ? 0.f : bf16_round_trip(v);
    EXPECT_EQ(r[i], want) << i << " from " << v;
  }
}
