// libFuzzer target for the JSON model reader (ember::parse_model_json) and shape inference: the
// parsed model is compiled into a Plan for batch 1 and, when small, runs one training step, so
// shapes the reader accepts must also be shapes the kernels handle. Any input must give a
// Model/Plan or an ember::Error with a one-line message; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ember/error.h"
#include "ember/model.h"
#include "ember/plan.h"

namespace {
constexpr size_t kArenaCap = size_t{256} << 20;  // keep each input's plan well under -rss_limit_mb
constexpr double kStepFlops = 2e7;               // run a step only for small models (speed)

void check_message(const std::string_view msg) {
  if (msg.empty() || msg.find('\n') != std::string_view::npos) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ember::Model model;
  try {
    model = ember::parse_model_json(text, "fuzz.json");
  } catch (const ember::Error& e) {
    check_message(e.what());
    if (std::string_view(e.what()).rfind("fuzz.json: ", 0) != 0) __builtin_trap();
    return 0;
  }
  // What the reader accepted must survive a round trip through model_to_json.
  const ember::Model again = ember::parse_model_json(ember::model_to_json(model), "round-trip.json");
  if (again.layers.size() != model.layers.size() || again.in_c != model.in_c ||
      again.in_h != model.in_h || again.in_w != model.in_w || again.num_classes != model.num_classes)
    __builtin_trap();
  try {
    ember::PlanOptions o;
    o.batch = 1;
    o.threads = 1;
    o.max_arena_bytes = kArenaCap;
    ember::Plan plan(model, o);
    if (plan.arena_bytes() > kArenaCap) __builtin_trap();
    if (plan.flops_per_sample(true) <= kStepFlops) {
      plan.init_params(1);
      plan.labels()[0] = 0;
      plan.forward(1);
      plan.loss(1, true);
      plan.backward(1);
      plan.optimizer_step(1e-3);
    }
  } catch (const ember::Error& e) {
    check_message(e.what());
  }
  return 0;
}
