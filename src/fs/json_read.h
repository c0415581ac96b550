// Bounded JSON reading for every JSON ember reads (model files, safetensors headers, checkpoint
// metadata, run directories): nesting is counted before the parser builds anything, duplicate
// keys are refused, and values quoted in messages are cut short.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ember {

inline constexpr int kJsonMaxDepth = 64;

// Parses `text`; throws Error "WHERE: invalid JSON: ..." (or "...: nesting deeper than N levels
// at byte K", or "...: duplicate key \"k\"") without recursing on untrusted depth.
nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth = kJsonMaxDepth);
// The depth check alone: the byte offset of the first bracket past max_depth, or npos.
size_t json_too_deep(std::string_view text, int max_depth);
// A value for an error message: compact, invalid UTF-8 replaced, at most ~60 characters.
std::string json_brief(const nlohmann::json& j);

}  // namespace ember
