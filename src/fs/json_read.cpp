// Bounded JSON reading (see json_read.h): an iterative depth pre-scan, then nlohmann's parser
// with a callback that keeps one key set per open object to refuse duplicate keys.
#include "fs/json_read.h"

#include <set>
#include <vector>

#include "ember/error.h"
#include "ember_support/files.h"

namespace ember {

size_t json_too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_brief(const nlohmann::json& j) {
  constexpr size_t kShown = 60;
  std::string s = json_text(j);
  s = s.size() <= kShown ? s : s.substr(0, kShown) + "... (" + std::to_string(s.size()) + " characters)";
  return one_line(s);
}

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth) {
  using json = nlohmann::json;
  const size_t at = json_too_deep(text, max_depth);
  if (at != std::string_view::npos)
    throw Error(where + ": invalid JSON: nesting deeper than " + std::to_string(max_depth) + " levels at byte " +
                std::to_string(at));
  std::vector<std::set<std::string>> keys;  // one set per object being parsed
  std::string duplicate;
  json j;
  try {
    j = json::parse(text.begin(), text.end(), [&](int, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) keys.emplace_back();
      else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      else if (ev == json::parse_event_t::key && !keys.empty() &&
               !keys.back().insert(parsed.get<std::string>()).second) {
        duplicate = parsed.get<std::string>();
        throw Error("duplicate key");
      }
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    std::string msg = one_line(e.what());  // "last read: '...'" may quote megabytes of the file
    if (msg.size() > 200) msg = msg.substr(0, 200) + "... (cut)";
    throw Error(where + ": invalid JSON: " + msg);
  } catch (const Error&) {
    throw Error(where + ": invalid JSON: duplicate key " + json_brief(json(duplicate)) +
                " in one object (refused: which one was meant is unclear)");
  }
  return j;
}

}  // namespace ember
