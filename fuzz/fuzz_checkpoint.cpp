// libFuzzer target for the checkpoint reader: the bytes loaded as a checkpoint of a fixed tiny
// model with Adam (two state tensors per parameter) and with SGD (none). Every input must load,
// with a state inside its documented ranges, or give a one-line ember::Error naming the source.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ember/error.h"
#include "ember/io.h"
#include "fuzz_model_tiny.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (ember::OptimizerKind opt : {ember::OptimizerKind::Adam, ember::OptimizerKind::SGD}) {
    try {
      const ember::CheckpointInfo c =
          ember::load_checkpoint_from_memory(fuzz_tiny_plan(opt), data, size, "fuzz.ckpt");
      if (c.state.epoch < 0 || c.state.batch < 0 || c.optimizer_steps < 0) __builtin_trap();
    } catch (const ember::Error& e) {
      const std::string_view msg = e.what();
      if (msg.rfind("fuzz.ckpt: ", 0) != 0 || msg.find('\n') != std::string_view::npos) __builtin_trap();
    }
  }
  return 0;
}
