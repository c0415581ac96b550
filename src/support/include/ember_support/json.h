// ember_support/json.h (not installed; src/fs, in libember): JSON as ember reads and writes it (model
// files, checkpoint metadata, run directories): bounded parsing (nesting counted first, duplicate
// keys refused) and UTF-8-safe text. Needs nlohmann_json (header-only, 3.10+); no public header does.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ember {

inline constexpr int kJsonMaxDepth = 64;

// Parses `text`; throws Error "WHERE: invalid JSON: ..." (or "...: nesting deeper than N levels
// at byte K", or "...: duplicate key \"k\"") without recursing on untrusted depth.
nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth = kJsonMaxDepth);
// The JSON text of j (indent as nlohmann's dump: -1 compact, N spaces per level). Strings that
// are not valid UTF-8 (a path's bytes) get U+FFFD for each invalid byte instead of throwing.
std::string json_text(const nlohmann::json& j, int indent = -1);
// A value for an error message: compact, invalid UTF-8 replaced, at most ~60 characters.
std::string json_brief(const nlohmann::json& j);

}  // namespace ember
