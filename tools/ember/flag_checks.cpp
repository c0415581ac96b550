// The CLI's flag validators (CLI11 checks): integers in a range, seeds, counts >= 0, each
// refusing in one line that names what it expected and what it found.
#include <charconv>
#include <string>

#include "commands.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace ember::cli {

// For flags whose -1 default means "the recipe's" or "automatic": a negative value given on the
// command line is refused, not taken as that default.
CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& s) {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc() && end == s.data() + s.size() && v < 0) return "expected an integer >= 0, found " + s;
        return std::string();
      },
      "N >= 0");
}

CLI::Validator integer_check(int64_t lo, int64_t hi, const std::string& what) {
  const std::string range = what.empty() ? "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" : what;
  return CLI::Validator(
      [=](std::string& s) {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        const bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size() && v >= lo && v <= hi;
        return ok ? std::string() : "expected " + range + ", found '" + clip_text(s) + "'";
      },
      "N");
}

CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& v) {  // CLI11 would wrap -1 to 2^64 - 1, and saturate 10^23
        uint64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool ok = !v.empty() && v[0] != '-' && v[0] != '+' && ec == std::errc() && end == v.data() + v.size();
        return ok ? std::string() : "expected an integer in [0, 18446744073709551615], found '" + clip_text(v) + "'";
      },
      "N >= 0");
}

}  // namespace ember::cli
