// Bounded JSON reading for every JSON ember reads (model files, safetensors headers, checkpoint
// metadata, run directories): the functions of ember_support/json.h (parse_json, json_text,
// json_brief) and the depth pre-scan they share with the fuzzers.
#pragma once
#include <cstddef>
#include <string_view>

#include "ember_support/json.h"

namespace ember {

// The depth check alone: the byte offset of the first bracket past max_depth, or npos.
size_t json_too_deep(std::string_view text, int max_depth);

}  // namespace ember
