// The quantized weight file (ember/quant.h, src/quant/qfile.cpp): a round trip is exact; every
// defect a hostile or damaged file can hold (bad or uncarriable scales, pairs the plan would ignore,
// lying shapes, mixed layers, missing or extra tensors, bad metadata, a huge model) is refused in one
// Error naming the tensor or field before anything large is allocated; what loads exports and imports back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <unistd.h>

#include "ember/error.h"
#include "ember/onnx_quant.h"
#include "ember/quant.h"

namespace ember {
namespace {
using json = nlohmann::json;

QuantizedWeights mnist_quantized() {
  const Model m = builtin_model("mnist-cnn");
  PlanOptions o;
  o.batch = 1, o.training = false;
  Plan p(m, o);
  p.init_params(5);
  const float* v = static_cast<const float*>(std::as_const(p).param_data());
  std::vector<float> values(v, v + p.param_count()), x(16 * 784);
  std::mt19937 rng{3};
  std::uniform_real_distribution<float> u(0, 1);
  for (float& f : x) f = u(rng);
  return quantize_model(m, values, x.data(), 16, QuantOptions{});
}

// A safetensors file as its header (JSON) and data bytes, edited and written back.
struct File {
  json header;
  std::string data;
  static File read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string b = ss.str();
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    return {json::parse(b.substr(8, n)), b.substr(8 + n)};
  }
  void write(const std::string& path) const {
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    const uint64_t n = h.size();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << h << data;
  }
  template <class T> void set(const std::string& tensor, size_t index, T v) {
    const size_t at = header[tensor]["data_offsets"][0].get<size_t>() + index * sizeof(T);
    std::memcpy(data.data() + at, &v, sizeof(T));
  }
};

class QuantizedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/q_" + std::to_string(::getpid()) + ".safetensors";
    bad_ = path_ + ".bad";
    save_quantized(q_, path_);
  }
  void TearDown() override {
    std::remove(path_.c_str());
    std::remove(bad_.c_str());
  }
  // The edited file is refused naming `what`.
  template <class Edit> void expect_refused(Edit edit, const std::string& what) {
    File f = File::read(path_);
    edit(f);
    f.write(bad_);
    try {
      load_quantized(bad_);
      ADD_FAILURE() << "accepted; expected an error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
  }
  static inline const QuantizedWeights q_ = mnist_quantized();
  std::string path_, bad_;
};

TEST_F(QuantizedFile, RoundTripIsExact) {
  const QuantizedWeights r = load_quantized(path_);
  ASSERT_EQ(r.layers.size(), q_.layers.size());
  for (size_t i = 0; i < r.layers.size(); ++i) {
    EXPECT_EQ(r.layers[i].w, q_.layers[i].w);
    EXPECT_EQ(r.layers[i].w_scale, q_.layers[i].w_scale);
    EXPECT_EQ(r.layers[i].bias, q_.layers[i].bias);
  }
  ASSERT_EQ(r.acts.size(), q_.acts.size());
  for (const auto& [name, a] : q_.acts) {
    EXPECT_EQ(r.acts.at(name).scale, a.scale) << name;
    EXPECT_EQ(r.acts.at(name).zero_point, a.zero_point) << name;
  }
  EXPECT_EQ(r.values, q_.values);
  EXPECT_EQ(r.calib.samples, 16);
  EXPECT_TRUE(is_quantized_file(path_));
}

TEST_F(QuantizedFile, BadWeightScales) {
  for (float v : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    expect_refused([&](File& f) { f.set<float>("0.weight_scale", 3, v); }, "0.weight_scale");
}

TEST_F(QuantizedFile, BadActivationScales) {
  expect_refused([](File& f) { f.set<float>("input.scale", 0, 0.0f); }, "input.scale");
  expect_refused([](File& f) { f.set<float>("4.output_scale", 0, std::nan("")); }, "4.output_scale");
}

TEST_F(QuantizedFile, NonZeroWeightZeroPoint) {
  expect_refused([](File& f) { f.set<int8_t>("4.weight_zero_point", 7, int8_t(3)); }, "4.weight_zero_point");
}

TEST_F(QuantizedFile, WrongDtypes) {
  // A zero point as I32 (4 bytes where the data holds 1: the header no longer fits the data).
  expect_refused([](File& f) { f.header["input.zero_point"]["dtype"] = "I32"; }, "input.zero_point");
  expect_refused([](File& f) { f.header["0.weight"]["dtype"] = "U8"; }, "0.weight");
  // An I32 bias beside an fp32 weight, and an F32 bias beside an I8 weight: mixed in one layer.
  expect_refused([](File& f) { f.header["6.bias"]["dtype"] = "F32"; }, "6.bias");
}

TEST_F(QuantizedFile, LyingShapes) {
  expect_refused([](File& f) { f.header["0.weight"]["shape"] = {32, 1, 5, 4}; }, "0.weight");
  expect_refused([](File& f) { f.header["0.weight_scale"]["shape"] = {31}; }, "0.weight_scale");
}

TEST_F(QuantizedFile, MissingAndExtraTensors) {
  expect_refused([](File& f) { f.header.erase("5.output_scale"); }, "5.output_scale");
  expect_refused([](File& f) { f.header.erase("0.bias"); }, "0.bias");
  expect_refused([](File& f) { f.header["stray"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}}; }, "stray");
}

// A tensor's activation entry is optional (a QDQ import quantizes only some tensors; the int8 plan
// keeps the others fp32), but not half of one, nor the input's of a quantized layer.
TEST_F(QuantizedFile, ActivationEntriesAreOptionalExceptAQuantizedLayersInput) {
  expect_refused([](File& f) { f.header.erase("5.output_zero_point"); }, "5.output_zero_point");
  expect_refused([](File& f) { f.header.erase("5.output_scale"), f.header.erase("5.output_zero_point"); },
                 "5.output_scale': is missing: quantized layer 6 reads that tensor");
  File f = File::read(path_);
  f.header.erase("6.output_scale"), f.header.erase("6.output_zero_point");  // the model's output
  f.write(bad_);
  const QuantizedWeights r = load_quantized(bad_);
  EXPECT_EQ(r.acts.count("6"), 0u);
  EXPECT_EQ(r.acts.size(), q_.acts.size() - 1);
  Plan plan(r, int8_plan_options(2, 1));  // runs: the last linear layer writes fp32
  std::fill(static_cast<float*>(plan.input()), static_cast<float*>(plan.input()) + 2 * 784, 0.5f);
  plan.forward(2);
  EXPECT_TRUE(std::isfinite(static_cast<const float*>(plan.output())[0]));
}

TEST_F(QuantizedFile, BadMetadata) {
  expect_refused([](File& f) { f.header["__metadata__"].erase("ember_quant"); }, "ember_quant");
  expect_refused([](File& f) { f.header["__metadata__"]["ember_quant"] = "{not json"; }, "ember_quant");
  expect_refused([](File& f) { f.header["__metadata__"]["ember_quant"] = R"({"calib": "bogus"})"; }, "calib");
}

// A model in the metadata far larger than the file: refused from the header alone, before any
// allocation of the model's size (6.3 billion weights: by the model's own limits; 627 million: the
// file's tensors do not match it).
TEST_F(QuantizedFile, HugeModelInMetadataIsRefusedBeforeAllocating) {
  for (const auto& [out, what] : {std::pair<int, const char*>{1000000, "layers[4]"}, {100000, "4.weight"}})
    expect_refused(
        [out = out](File& f) {
          json m = json::parse(f.header["__metadata__"]["model"].get<std::string>());
          for (json& l : m["layers"])
            if (l["type"] == "linear" && l["out_features"] == 128) l["out_features"] = out;
          f.header["__metadata__"]["model"] = m.dump();
        },
        what);
}

// Scales the int8 arithmetic cannot carry, though finite and > 0: a weight scale whose bias unit
// (the input's scale times it) underflows, whose weights times it or whose fp32 outputs overflow
// float, and an activation scale that is subnormal (1 / s overflows) or whose u8 values dequantize
// to inf.
TEST_F(QuantizedFile, ScalesTheInt8ArithmeticCannotCarryAreRefused) {
  for (float v : {1e-45f, 1e-39f, 3e38f})
    expect_refused([&](File& f) { for (size_t k = 0; k < 32; ++k) f.set<float>("0.weight_scale", k, v); }, "0.weight_scale");
  for (float v : {3e38f, 1e-40f}) expect_refused([&](File& f) { f.set<float>("input.scale", 0, v); }, "input.scale");
  expect_refused([](File& f) { f.set<float>("5.output_scale", 0, 1e-39f); }, "5.output_scale");
  // The logits (layer 6 writes fp32): a weight scale whose largest output overflows float.
  expect_refused([](File& f) { f.set<float>("6.weight_scale", 3, 1e35f); }, "6.weight_scale");
}

// The scale whose every element is v.
void set_all(File& f, const std::string& tensor, float v) {
  const size_t n = f.header[tensor]["shape"].empty() ? 1 : f.header[tensor]["shape"][0].get<size_t>();
  for (size_t i = 0; i < n; ++i) f.set<float>(tensor, i, v);
}
float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
uint32_t to_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// The smallest (up false) or largest (up true) value every element of `tensor` may take and the
// file still load, by bisection over the float's bits from its value in `path`.
float extreme_accepted(const std::string& path, const std::string& tensor, bool up) {
  const File base = File::read(path);
  const std::string tmp = path + ".bisect";
  auto accepted = [&](uint32_t bits) {
    File f = base;
    set_all(f, tensor, from_bits(bits));
    f.write(tmp);
    try {
      load_quantized(tmp);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  float v0;
  std::memcpy(&v0, base.data.data() + base.header[tensor]["data_offsets"][0].get<size_t>(), 4);
  uint32_t good = to_bits(v0), bad = up ? to_bits(std::numeric_limits<float>::max()) + 1 : 0;  // inf, 0
  while ((up ? bad - good : good - bad) > 1) {
    const uint32_t mid = up ? good + (bad - good) / 2 : bad + (good - bad) / 2;
    (accepted(mid) ? good : bad) = mid;
  }
  std::remove(tmp.c_str());
  return from_bits(good);
}

// The most extreme scales the reader accepts (a weight scale, and an activation scale that is a
// layer's output and the next one's input) export, and the QDQ file imports back with the same
// scales and the same int8 outputs: export never writes what ember's own import refuses.
TEST_F(QuantizedFile, TheMostExtremeAcceptedScalesExportAndImportBack) {
  for (const char* tensor : {"0.weight_scale", "4.weight_scale", "5.output_scale"})
    for (bool up : {false, true}) {
      const float v = extreme_accepted(path_, tensor, up);
      SCOPED_TRACE(std::string(tensor) + (up ? " largest " : " smallest ") + std::to_string(v));
      File f = File::read(path_);
      set_all(f, tensor, v);
      f.write(bad_);
      const QuantizedWeights q = load_quantized(bad_);
      try {
        const std::string bytes = onnx_export_quantized_bytes(qdq_export_view(q));
        const QuantizedWeights back = import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "q.onnx");
        ASSERT_EQ(back.layers.size(), q.layers.size());
        for (size_t i = 0; i < q.layers.size(); ++i) EXPECT_EQ(back.layers[i].w_scale, q.layers[i].w_scale) << i;
        Plan a(q, int8_plan_options(2, 1)), b(back, int8_plan_options(2, 1));
        for (int i = 0; i < 2 * 784; ++i) static_cast<float*>(a.input())[i] = static_cast<float*>(b.input())[i] = float(i % 29) / 28.0f;
        a.forward(2), b.forward(2);
        EXPECT_EQ(std::memcmp(static_cast<const float*>(a.output()), static_cast<const float*>(b.output()), 2 * 10 * sizeof(float)), 0) << "the imported export computes otherwise";
      } catch (const Error& e) {
        ADD_FAILURE() << "a file that loads does not export and import back: " << e.what();
      }
    }
}

// The output of an exact u8 op (ReLU, 2x2 max-pool, flatten on u8) keeps its input's QParams in
// the int8 plan: a file whose own pair for it differs (it would have no effect) is refused.
TEST_F(QuantizedFile, AnExactU8OpsOutputMustKeepItsInputsQParams) {
  expect_refused([](File& f) { f.set<float>("2.output_scale", 0, 1e30f); }, "2.output_scale");   // max-pool
  expect_refused([](File& f) { f.set<float>("2.output_scale", 0, 1e-30f); }, "2.output_scale");
  expect_refused([](File& f) { f.set<uint8_t>("3.output_zero_point", 0, uint8_t(255)); }, "3.output_zero_point");  // flatten
  // The ReLU's (the conv's fused output) changed alone: the max-pool's no longer matches it.
  expect_refused([](File& f) { f.set<float>("1.output_scale", 0, 1e30f); }, "1.output_scale");
}

// The pair of a tensor the plan fuses away (a conv's output before its ReLU) is calibration's
// record, unused by the plan and the export (docs/int8.md): it loads and changes nothing.
TEST_F(QuantizedFile, AFusedAwayTensorsPairIsUnused) {
  File f = File::read(path_);
  f.set<uint8_t>("0.output_zero_point", 0, uint8_t(255));
  f.set<float>("0.output_scale", 0, 1e30f);
  f.write(bad_);
  Plan a(load_quantized(path_), int8_plan_options(1, 1)), b(load_quantized(bad_), int8_plan_options(1, 1));
  for (int i = 0; i < 784; ++i) static_cast<float*>(a.input())[i] = static_cast<float*>(b.input())[i] = float(i % 17) / 16.0f;
  a.forward(1), b.forward(1);
  EXPECT_EQ(std::memcmp(static_cast<const float*>(a.output()), static_cast<const float*>(b.output()), 10 * sizeof(float)), 0);
  EXPECT_EQ(qdq_export_view(load_quantized(bad_)).q.acts.count("0"), 0u);
}

// __metadata__.ember_quant.weight_bits is 7 or 8, and 7 only over weights in [-63, 63] (what
// `ember quantize --weight-bits 7` writes).
TEST_F(QuantizedFile, WeightBitsMustBeSevenOrEightAndHoldTheWeights) {
  auto bits = [](const std::string& v) {
    return [v](File& f) {
      json c = json::parse(f.header["__metadata__"]["ember_quant"].get<std::string>());
      c["weight_bits"] = json::parse(v);
      f.header["__metadata__"]["ember_quant"] = c.dump();
    };
  };
  expect_refused(bits("7"), "weight_bits");
  expect_refused(bits("7"), "0.weight");
  expect_refused(bits("3"), "weight_bits");
  expect_refused(bits("\"8\""), "weight_bits");
  QuantOptions o;
  o.weight_bits = 7;
  const Model m = builtin_model("mnist-cnn");
  const std::vector<float> x(4 * 784, 0.5f);
  save_quantized(quantize_model(m, q_.values, x.data(), 4, o), bad_);
  EXPECT_EQ(load_quantized(bad_).calib.weight_bits, 7);
}

}  // namespace
}  // namespace ember
