// The library knows nothing of the CLI: no string in src/ names a command-line flag ("--lr").
// Library errors name the option's field and its value; the CLI (tools/ember) maps fields to the
// flags that set them. Reads the source tree (EMBER_SOURCE_DIR) and the library's own errors.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ember/bitnet.h"
#include "ember/error.h"

namespace {

namespace fs = std::filesystem;

struct Literal {
  int line;
  std::string text;
};

// The string literals of C++ source, comments skipped ("..." with escapes, R"d(...)d", not '"').
std::vector<Literal> string_literals(const std::string& src) {
  std::vector<Literal> out;
  int line = 1;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (c == '\n') ++line;
    else if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      while (i < src.size() && src[i] != '\n') ++i;
      ++line;
    } else if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
      const size_t end = src.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? src.size() : end + 2;
      for (size_t k = i; k < stop; ++k) line += src[k] == '\n';
      i = stop - 1;
    } else if (c == '\'') {  // a character literal: '"' is not a string
      for (++i; i < src.size() && src[i] != '\''; ++i)
        if (src[i] == '\\') ++i;
    } else if (c == 'R' && i + 1 < src.size() && src[i + 1] == '"' && (i == 0 || !std::isalnum(static_cast<unsigned char>(src[i - 1])))) {
      const size_t open = src.find('(', i + 2);
      if (open == std::string::npos) break;
      std::string close(1, ')');
      close.append(src, i + 2, open - i - 2).push_back('"');
      const size_t end = src.find(close, open);
      const size_t stop = end == std::string::npos ? src.size() : end;
      out.push_back({line, src.substr(open + 1, stop - open - 1)});
      for (size_t k = i; k < stop; ++k) line += src[k] == '\n';
      i = stop + close.size() - 1;
    } else if (c == '"') {
      std::string s;
      for (++i; i < src.size() && src[i] != '"' && src[i] != '\n'; ++i) {
        if (src[i] == '\\' && i + 1 < src.size()) s += src[i++];
        s += src[i];
      }
      out.push_back({line, s});
    }
  }
  return out;
}

// A literal naming a flag: "--x..." at its start or after a blank or punctuation (not "a--b"),
// or "--" alone (a flag being assembled). An HTML command sample (the report's help notes show a
// whole `<code>ember train ...</code>` line) is documentation, not a setting's name.
bool names_flag(const std::string& s) {
  static const std::regex flag("(^|[^A-Za-z0-9_-])--[a-z]");
  if (s == "--") return true;
  if (s.find("<code>ember ") != std::string::npos) return false;
  return std::regex_search(s, flag);
}

std::vector<std::string> flags_in(const std::string& src) {
  std::vector<std::string> found;
  for (const Literal& l : string_literals(src))
    if (names_flag(l.text)) found.push_back(std::to_string(l.line) + ": \"" + l.text + "\"");
  return found;
}

TEST(LibraryErrors, TheScannerFindsFlagsInStringsOnly) {
  EXPECT_EQ(flags_in("throw Error(\"--lr: expected a number\");").size(), 1u);
  EXPECT_EQ(flags_in("throw Error(\"x: \" + v + \" (use --no-deterministic)\");").size(), 1u);
  EXPECT_EQ(flags_in("std::string f = std::string(\"--\") + field;").size(), 1u);
  EXPECT_EQ(flags_in("auto s = R\"(a --flag)\";").size(), 1u);
  EXPECT_EQ(flags_in("// --lr in a comment\n/* --lr */ --depth; char q = '\"'; int x;").size(), 0u);
  EXPECT_EQ(flags_in("throw Error(\"lr: expected a number, found -1 (a--b, x -- y)\");").size(), 0u);
  const std::vector<std::string> two = flags_in("int a;\n\nf(\"ok\");\ng(\"--threads\");\n");
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].substr(0, 2), "4:") << two[0];
}

TEST(LibraryErrors, NoSourceFileUnderSrcNamesACommandLineFlag) {
  const fs::path src = fs::path(EMBER_SOURCE_DIR) / "src";
  ASSERT_TRUE(fs::is_directory(src)) << src;
  int files = 0;
  std::string report;
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cc" && ext != ".hpp" && ext != ".inc")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    ++files;
    for (const std::string& f : flags_in(ss.str())) report += "  " + fs::relative(e.path(), src).string() + ":" + f + "\n";
  }
  EXPECT_GT(files, 50) << "too few sources under " << src;
  EXPECT_TRUE(report.empty()) << "library strings that name a CLI flag (name the field, e.g. \"batch_size\", and "
                                 "let tools/ember map it to its flag):\n"
                              << report;
}

TEST(LibraryErrors, BitnetTrainingNamesTheFieldAndItsValue) {
  ember::bitnet::TrainOptions o;
  o.batch = 0;
  try {
    ember::bitnet::train(o, ember::TrainTest{}, nullptr);
    ADD_FAILURE() << "batch 0 accepted";
  } catch (const ember::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("batch: ", 0), 0u) << m;
    EXPECT_NE(m.find("found 0"), std::string::npos) << m;
    EXPECT_EQ(m.find("--"), std::string::npos) << m;
  }
  o = ember::bitnet::TrainOptions{};
  o.blur_radii = {9};
  try {
    ember::bitnet::train(o, ember::TrainTest{}, nullptr);
    ADD_FAILURE() << "blur radius 9 accepted";
  } catch (const ember::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("blur_radii: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("found 9"), std::string::npos) << e.what();
  }
}

}  // namespace
