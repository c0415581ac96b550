// Bounded JSON reading for every JSON ember reads (model files, safetensors headers, checkpoint
// metadata, run directories): nesting is counted before the parser builds anything, duplicate
// keys are refused, and values quoted in messages are cut short; and json_text, the one way
// ember writes JSON text (a path that is not UTF-8 can never make it throw).
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
// The JSON text of j (indent as nlohmann's dump: -1 compact, N spaces per level). Strings that
// are not valid UTF-8 (a path's bytes) get U+FFFD for each invalid byte instead of throwing.
std::string json_text(const nlohmann::json& j, int indent = -1);
// A value for an error message: compact, invalid UTF-8 replaced, at most ~60 characters.
std::string json_brief(const nlohmann::json& j);

}  // namespace ember
