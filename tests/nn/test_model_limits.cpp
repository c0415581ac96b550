// Regression tests for what fuzzing the model reader and shape inference found (fuzz/fuzz_model.cpp,
// docs/fuzzing.md): every bad or oversized description gives one ember::Error line naming the
// source and the field, never another exception, undefined behaviour or a huge allocation.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "ember/ember.h"

namespace ember::test {
namespace {

// Runs f, which must throw ember::Error; returns the message (one line).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-ember exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an ember::Error, nothing was thrown";
  return "";
}

void expect_parts(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
}

std::string with_layers(const std::string& input, const std::string& layers) {
  return R"({"input": )" + input + R"(, "layers": [)" + layers + "]}";
}

Plan plan_of(const std::string& json) {
  PlanOptions o;
  o.batch = 1;
  return Plan(parse_model_json(json, "m.json"), o);
}

TEST(ModelLimits, NonStringNameIsAnEmberError) {
  expect_parts(error_of([] { parse_model_json(R"({"name": 7, "layers": [{"type": "relu"}]})", "m.json"); }),
               {"m.json: name", "expected a string", "found 7"});
}

TEST(ModelLimits, NumberOutOfDoubleRangeIsAnEmberError) {
  // nlohmann reports 1e400 as out_of_range, not parse_error; found by fuzz_model.
  expect_parts(error_of([] { parse_model_json(R"({"input": [1e400, 28, 28], "layers": []})", "m.json"); }),
               {"m.json: invalid JSON", "1e400"});
}

TEST(ModelLimits, DeepNestingIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_parts(error_of([&] { parse_model_json(deep, "m.json"); }), {"m.json: invalid JSON", "nesting deeper than 32"});
  const std::string in_layer = with_layers("[1, 4, 4]", R"({"type": "relu", "x": )" + std::string(40, '[') +
                                                            std::string(40, ']') + "}");
  expect_parts(error_of([&] { parse_model_json(in_layer, "m.json"); }), {"m.json: invalid JSON", "nesting"});
}

TEST(ModelLimits, LayerCountIsCapped) {
  std::string layers = R"({"type": "relu"})";
  for (int i = 1; i < 4097; ++i) layers += R"(, {"type": "relu"})";
  expect_parts(error_of([&] { parse_model_json(with_layers("[1, 2, 2]", layers), "m.json"); }),
               {"m.json: layers", "at most 4096", "found 4097"});
}

TEST(ModelLimits, HugeIntegersAreOutOfRangeNotWrapped) {
  expect_parts(error_of([] { parse_model_json(with_layers("[18446744073709551615, 2, 2]", R"({"type": "relu"})"), "m.json"); }),
               {"m.json: input[0]", "[1, 65536]", "found 18446744073709551615"});
}

TEST(ModelLimits, MessagesQuoteStringsOnOneLine) {
  // A newline inside the JSON string must not break the one-line message.
  expect_parts(error_of([] { parse_model_json(with_layers("[1, 2, 2]", R"({"type": "re\nlu"})"), "m.json"); }),
               {"m.json: layers[0].type", R"("re\nlu")"});
  expect_parts(error_of([] { parse_model_json(with_layers("[1, 2, 2]", R"({"type": "relu", "a\nb": 1})"), "m.json"); }),
               {"m.json: layers[0].", "unknown key"});
  const std::string long_value = "\"" + std::string(5000, 'x') + "\"";
  const std::string msg = error_of([&] { parse_model_json(with_layers("[1, 2, 2]", R"({"type": "relu"})").replace(1, 0, R"("loss": )" + long_value + ", "), "m.json"); });
  expect_parts(msg, {"m.json: loss", "characters)"});
  EXPECT_LT(msg.size(), 400u) << msg;
}

TEST(ModelLimits, ConvFanInBeyondIntIsAShapeError) {
  // fan-in 65536 x 4096 x 4096 overflowed int (UBSan) before the arena limit was reached.
  const std::string m = with_layers("[65536, 2, 1]", R"({"type": "conv2d", "out_channels": 1048576, "kernel": 4096, "padding": 2048},
                                                         {"type": "flatten"}, {"type": "linear", "out_features": 10})");
  expect_parts(error_of([&] { plan_of(m); }), {"m.json: layers[0] (conv2d)", "2147483647", "too large"});
  // One in-channel, a 4096 x 4096 kernel: fan-out 1048576 x 4096 x 4096 would overflow int.
  const std::string f = with_layers("[1, 4096, 4096]", R"({"type": "conv2d", "out_channels": 1048576, "kernel": 4096},
                                                          {"type": "flatten"}, {"type": "linear", "out_features": 10})");
  expect_parts(error_of([&] { plan_of(f); }), {"m.json: layers[0] (conv2d)", "fan-out", "2147483647"});
}

TEST(ModelLimits, InputTooLargeForTheBatch) {
  const std::string m = with_layers("[65536, 65536, 65536]", R"({"type": "flatten"}, {"type": "linear", "out_features": 10})");
  expect_parts(error_of([&] { plan_of(m); }), {"m.json: input", "[65536, 65536, 65536]", "too large"});
}

TEST(ModelLimits, ArenaLimitIsAnOption) {
  const Model m = parse_model_json(with_layers("[1, 28, 28]", R"({"type": "flatten"}, {"type": "linear", "out_features": 4096},
                                                                 {"type": "linear", "out_features": 10})"), "m.json");
  PlanOptions o;
  o.batch = 1;
  o.max_arena_bytes = size_t(16) << 20;  // the model needs ~ 20 MiB with Adam state
  expect_parts(error_of([&] { Plan p(m, o); }), {"m.json", "more than the 16 MiB limit", "1.weight"});
  o.max_arena_bytes = size_t(64) << 20;
  EXPECT_NO_THROW(Plan(m, o));
}

TEST(ModelLimits, FuzzRegressionSeedsGiveModelsOrErrors) {
  // Every committed seed of the model corpus: a Plan, or an ember::Error, nothing else.
  for (const char* name : {"regress-number-overflow-1e400", "huge-kernel.json", "huge-input.json",
                           "name-not-string", "deep-nesting", "every-key.json", "fused.json"}) {
    SCOPED_TRACE(name);
    std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/fuzz/corpus/model/" + name, std::ios::binary);
    ASSERT_TRUE(f.good());
    const std::string text((std::istreambuf_iterator<char>(f)), {});
    try {
      PlanOptions o;
      o.batch = 1;
      Plan p(parse_model_json(text, name), o);
      EXPECT_GT(p.param_count(), 0u);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ember::test
