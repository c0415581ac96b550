// Tests of folded stacks and flame graphs (ember_support/report.h): parsing and errors, folding a small
// `perf script` sample, symbol tidying, and the SVG: widths proportional to the counts, children
// inside their parent's x-range one row up, merged prefixes, tooltips, escaping, narrow frames.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember_support/report.h"
#include "report/svg_dom.h"

namespace {

using ember::report::FoldedStack;
using svgdom::Element;

std::string folded_text(const std::vector<FoldedStack>& s) { return ember::report::format_folded(s); }

// The message of the ember::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Folded, ParsesStacksAndCounts) {
  const auto s = ember::report::parse_folded(
      "# a comment\n\nmain;a;b 30\r\nmain;a;c 10\nmain;d 2.5\n  main;a;b   20  \nsolo 0\n", "test.folded");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].frames, (std::vector<std::string>{"main", "a", "b"}));
  EXPECT_EQ(s[0].value, 30);
  EXPECT_EQ(s[2].value, 2.5);
  EXPECT_EQ(s[3].frames, s[0].frames);
  EXPECT_EQ(s[3].value, 20);
  EXPECT_EQ(s[4].frames, (std::vector<std::string>{"solo"}));
  // Frames may hold spaces; the count is what follows the last one.
  const auto t = ember::report::parse_folded("(anonymous namespace)::f;operator new 7\n", "x");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].frames, (std::vector<std::string>{"(anonymous namespace)::f", "operator new"}));
  EXPECT_EQ(ember::report::parse_folded(folded_text(s), "again").size(), s.size());
  EXPECT_EQ(folded_text(ember::report::parse_folded(folded_text(s), "again")), folded_text(s));
}

TEST(Folded, ErrorsNameTheSourceAndLine) {
  struct Case {
    const char* text;
    const char* needle;
  };
  for (const Case c : {Case{"a;b 1\nnocount\n", "line 2"}, Case{"a;b 1\na;b x\n", "count"},
                       Case{"a;b -3\n", "count"}, Case{"a;b 1e999\n", "count"}, Case{"a;b 1\n\n 5\n", "line 3"},
                       Case{"a;b nan\n", "count"}}) {
    const std::string m = error_of([&] { ember::report::parse_folded(c.text, "prof.folded"); });
    EXPECT_NE(m.find("prof.folded"), std::string::npos) << c.text << " -> " << m;
    EXPECT_NE(m.find(c.needle), std::string::npos) << c.text << " -> " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  }
}

TEST(TidySymbol, StripsOffsetsArgumentsAndClones) {
  const std::pair<const char*, const char*> cases[] = {
      {"main+0x20", "main"},
      {"ember::sgemm_avx512(int, int, float const*, float*) [clone .constprop.0]+0x34", "ember::sgemm_avx512"},
      {"void ember::ops::conv<float>(ember::T const&, (anonymous namespace)::Ctx&)+0x10", "ember::ops::conv<float>"},
      {"(anonymous namespace)::helper(int)", "(anonymous namespace)::helper"},
      {"Foo::operator()(int) const", "Foo::operator()"},
      {"operator new(unsigned long)+0x1c", "operator new"},
      {"std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<int, std::allocator<int> >::push_back"},
      {"std::_Function_handler<void (int), F>::_M_invoke(std::_Any_data const&, int&&)",
       "std::_Function_handler<void (int), F>::_M_invoke"},
      {"start_thread_common.constprop.0+0x5b", "start_thread_common.constprop.0"},
      {"a;b(int)", "a:b"},
      {"", "[unknown]"},
      {"[unknown]", "[unknown]"},
      {"  spaced  ", "spaced"},
  };
  for (auto [in, out] : cases) EXPECT_EQ(ember::report::tidy_symbol(in), out) << in;
}

// A small `perf script` output: perf's header comments, a stack seen twice, a thread with a
// broken frame-pointer chain (several unknown frames), a comm with a space and a missing symbol,
// and a sample without any frames.
const char* kPerfScript =
    "# ========\n"
    "# captured on    : Mon Nov 23 10:00:00 2026\n"
    "# ========\n"
    "#\n"
    "ember 12345/12345 [001] 6290.108779:     250000 cycles:u: \n"
    "\t    55d4c1e2a3b4 ember::sgemm_avx512(int, int, float const*, float*) [clone .constprop.0]+0x34 (/w/build/ember)\n"
    "\t    55d4c1e2a000 void ember::ops::conv<float>(ember::T const&, (anonymous namespace)::Ctx&)+0x10 (/w/build/ember)\n"
    "\t    55d4c1e29000 main+0x20 (/w/build/ember)\n"
    "\t    7f1234567890 __libc_start_main+0xf3 (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    "\n"
    "ember 12345/12345 [001] 6290.109779:     250000 cycles:u: \n"
    "\t    55d4c1e2a3b4 ember::sgemm_avx512(int, int, float const*, float*) [clone .constprop.0]+0x40 (/w/build/ember)\n"
    "\t    55d4c1e2a000 void ember::ops::conv<float>(ember::T const&, (anonymous namespace)::Ctx&)+0x18 (/w/build/ember)\n"
    "\t    55d4c1e29000 main+0x20 (/w/build/ember)\n"
    "\t    7f1234567890 __libc_start_main+0xf3 (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    "\n"
    "ember 12345/12346 [000] 6290.110000:     250000 cycles:u: \n"
    "\t    55d4c1e2a3b4 ember::ThreadPool::worker(int)+0x34 (/w/build/ember)\n"
    "\t               0 [unknown] ([unknown])\n"
    "\t               0 [unknown] ([unknown])\n"
    "\t               0 [unknown] ([unknown])\n"
    "\n"
    "my tool   999 6290.2:          1 cycles:u: \n"
    "\t            7f00 [unknown] (/usr/lib/libfoo.so)\n"
    "\t            7f02 operator new(unsigned long)+0x1 (/usr/lib/libstdc++.so.6)\n"
    "\n"
    "ember 12345/12345 [001] 6290.3: 250000 cycles:u: \n"
    "\n";

TEST(PerfScript, FoldsSamplesOutermostFirst) {
  const auto s = ember::report::fold_perf_script(kPerfScript, "perf.txt");
  const std::string folded = folded_text(s);
  EXPECT_EQ(folded,
            "ember 1\n"
            "ember;[unknown];ember::ThreadPool::worker 1\n"
            "ember;__libc_start_main;main;ember::ops::conv<float>;ember::sgemm_avx512 2\n"
            "my tool;operator new;[unknown] 1\n");
  double total = 0;
  for (const auto& f : s) total += f.value;
  EXPECT_EQ(total, 5) << "one count per sample";

  ember::report::PerfFoldOptions no_comm;
  no_comm.include_comm = false;
  const auto t = ember::report::fold_perf_script(kPerfScript, "perf.txt", no_comm);
  for (const auto& f : t) EXPECT_NE(f.frames.front(), "ember");
}

TEST(PerfScript, SamplesWithoutBlankLinesOrStacks) {
  // `perf record` without -g: one header line per sample, no frames, no blank lines between.
  const auto s = ember::report::fold_perf_script("a 1 1.0: 1 cycles:\na 1 1.1: 1 cycles:\nb 2 1.2: 1 cycles:\n", "p");
  EXPECT_EQ(folded_text(s), "a 2\nb 1\n");
  // Without call chains perf pads the command to 16 columns and prints the sample's own frame
  // after the event on the header line.
  const auto t = ember::report::fold_perf_script(
      "            perf 12345 [000] 12.345678:     250000 cycles:u:      7f1234 main+0x10 (/bin/x)\n"
      "            perf 12345 [000] 12.345679:     250000 cycles:u:      7f1238 main+0x14 (/bin/x)\n"
      "     my tool 1/2 [001] 12.4:     250000 cpu-clock:ppp:      7f00 ns::f(int) const+0x1 (/bin/x)\n",
      "p");
  EXPECT_EQ(folded_text(t), "my tool;ns::f 1\nperf;main 2\n");
}

TEST(PerfScript, ErrorsNameTheSourceAndLine) {
  const std::string a = error_of([] { ember::report::fold_perf_script("\n\t1234 main+0x1 (/bin/x)\n", "in.txt"); });
  EXPECT_NE(a.find("in.txt line 2"), std::string::npos) << a;
  EXPECT_NE(a.find("before any sample header"), std::string::npos) << a;
  const std::string b = error_of([] { ember::report::fold_perf_script("this is not perf output\n", "in.txt"); });
  EXPECT_NE(b.find("in.txt line 1"), std::string::npos) << b;
  EXPECT_NE(b.find("sample header"), std::string::npos) << b;
  EXPECT_TRUE(ember::report::fold_perf_script("", "empty").empty());
}

// ---------------------------------------------------------------------------------------------

struct Frame {
  std::string name;
  int depth;
  double value, x, y, w;
  const Element* el;
};

std::vector<Frame> frames_of(const Element& svg) {
  std::vector<Frame> out;
  for (const Element* g : svg.find_all("g", "frame")) {
    const Element* r = g->child("rect");
    if (!r) {
      ADD_FAILURE() << "frame without a rect";
      continue;
    }
    out.push_back({g->attr("data-name"), int(g->num("data-depth")), g->num("data-value"), r->num("x"), r->num("y"),
                   r->num("width"), g});
  }
  return out;
}

TEST(FlameGraph, WidthsProportionalAndChildrenNested) {
  const auto stacks = ember::report::parse_folded(
      "main;a;b 30\nmain;a;c 10\nmain;d 60\nmain;a;b 20\nmain;a;b;deep 5\nidle 40\nzero;x 0\n", "t");
  double total = 0;
  std::map<std::string, double> by_path;  // expected inclusive value of each merged prefix
  for (const auto& s : stacks) {
    total += s.value;
    std::string path;
    for (const auto& f : s.frames) by_path[path += "/" + f] += s.value;
  }
  ember::report::FlameGraphOptions o;
  o.title = "test flame";
  o.width = 1000;
  const std::string svg = ember::report::flame_graph_svg(stacks, o);
  auto root = svgdom::parse(svg);
  const auto fr = frames_of(*root);
  ASSERT_FALSE(fr.empty());
  const Frame& all = fr[0];
  EXPECT_EQ(all.name, "all");
  EXPECT_EQ(all.depth, 0);
  EXPECT_EQ(all.value, total);
  const double per_unit = all.w / total;

  // Merged prefixes: one frame per distinct path (zero-count stacks draw nothing).
  size_t expected_frames = 1;
  for (const auto& [path, v] : by_path) expected_frames += v > 0;
  EXPECT_EQ(fr.size(), expected_frames);

  for (const Frame& f : fr) {
    SCOPED_TRACE(f.name + " depth " + std::to_string(f.depth));
    EXPECT_NEAR(f.w, f.value * per_unit, 0.011) << "width proportional to the count";
    if (f.depth == 0) continue;
    // Its parent: the frame one level down whose x-range holds it.
    int parents = 0;
    for (const Frame& p : fr)
      if (p.depth == f.depth - 1 && p.x <= f.x + 0.01 && f.x + f.w <= p.x + p.w + 0.01) {
        ++parents;
        EXPECT_LT(f.y, p.y) << "children sit above their parent (flame, not icicle)";
        EXPECT_LE(f.value, p.value);
      }
    EXPECT_EQ(parents, 1);
    // Siblings do not overlap.
    for (const Frame& s : fr)
      if (&s != &f && s.depth == f.depth) {
        EXPECT_TRUE(s.x + s.w <= f.x + 0.01 || f.x + f.w <= s.x + 0.01) << f.name << " overlaps " << s.name;
      }
  }
  // The merged "b" holds 30 + 20 + 5 (its child "deep").
  int bs = 0;
  for (const Frame& f : fr)
    if (f.name == "b") {
      ++bs;
      EXPECT_EQ(f.value, by_path["/main/a/b"]);
      EXPECT_EQ(f.el->child("title")->text, "b (55 samples, " + [&] {
        char p[16];
        std::snprintf(p, sizeof p, "%.2f", 100 * 55 / total);
        return std::string(p);
      }() + "%)");
    }
  EXPECT_EQ(bs, 1);
}

TEST(FlameGraph, EscapesNamesAndClipsLabels) {
  std::vector<FoldedStack> stacks = {{{"main", "std::less<int>::operator()", "a&b \"q\""}, 500},
                                     {{"main", "tiny_function_with_a_long_name"}, 1},
                                     {{"main", "medium_width_function_name_that_is_long"}, 40},
                                     {{"main", "invisible"}, 0.001}};
  ember::report::FlameGraphOptions o;
  o.width = 1200, o.unit = "µs", o.title = "<ember> & spans";
  const std::string svg = ember::report::flame_graph_svg(stacks, o);
  EXPECT_EQ(svg.find("<int>"), std::string::npos);
  EXPECT_EQ(svg.find("<ember>"), std::string::npos);
  auto root = svgdom::parse(svg);
  EXPECT_EQ(root->find_all("text", "chart-title")[0]->text, o.title);
  std::map<std::string, const Frame*> by_name;
  const auto fr = frames_of(*root);
  for (const Frame& f : fr) by_name[f.name] = &f;
  ASSERT_TRUE(by_name.count("std::less<int>::operator()"));
  ASSERT_TRUE(by_name.count("a&b \"q\""));
  EXPECT_NE(by_name["a&b \"q\""]->el->child("title")->text.find(" µs, "), std::string::npos);
  EXPECT_EQ(by_name.count("invisible"), 0u) << "frames under min_frame_px are not drawn";

  for (const Frame& f : fr) {
    const Element* t = f.el->child("text");
    const double fits = (f.w - 6) / (11 * 0.59);
    if (fits < 3) {
      EXPECT_EQ(t, nullptr) << f.name << " is " << f.w << " px wide: no room for a label";
      continue;
    }
    ASSERT_NE(t, nullptr) << f.name;
    EXPECT_LE(double(t->text.size()), fits + 0.5) << "label '" << t->text << "' overflows " << f.w << " px";
    if (t->text != f.name) {
      EXPECT_EQ(t->text.substr(t->text.size() - 2), "..");
      EXPECT_EQ(f.name.rfind(t->text.substr(0, t->text.size() - 2), 0), 0u) << t->text;
    }
  }
  ASSERT_TRUE(by_name.count("tiny_function_with_a_long_name"));
  EXPECT_EQ(by_name["tiny_function_with_a_long_name"]->el->child("text"), nullptr);
  ASSERT_TRUE(by_name.count("medium_width_function_name_that_is_long"));
  const Element* mt = by_name["medium_width_function_name_that_is_long"]->el->child("text");
  ASSERT_NE(mt, nullptr);
  EXPECT_NE(mt->text, "medium_width_function_name_that_is_long") << "clipped to the frame";
}

TEST(FlameGraph, ColoursFollowNames) {
  const std::vector<FoldedStack> a = {{{"main", "alpha", "beta"}, 3}, {{"main", "gamma"}, 2}};
  const std::vector<FoldedStack> b = {{{"other", "gamma"}, 9}, {{"other", "beta"}, 1}};
  std::map<std::string, std::set<std::string>> fills;
  for (const auto& stacks : {a, b}) {
    auto root = svgdom::parse(ember::report::flame_graph_svg(stacks, {}));
    for (const Frame& f : frames_of(*root)) fills[f.name].insert(f.el->child("rect")->attr("fill"));
  }
  for (const auto& [name, set] : fills) EXPECT_EQ(set.size(), 1u) << name << " drawn in several colours";
  EXPECT_NE(*fills["alpha"].begin(), *fills["gamma"].begin());
  // Warm, light enough for black text: red channel high.
  for (const auto& [name, set] : fills) {
    int r = 0, g = 0, bl = 0;
    ASSERT_EQ(std::sscanf(set.begin()->c_str(), "rgb(%d,%d,%d)", &r, &g, &bl), 3) << *set.begin();
    EXPECT_GE(r, 180) << name;
  }
}

TEST(FlameGraph, NoSamples) {
  auto root = svgdom::parse(ember::report::flame_graph_svg({}, {}));
  EXPECT_TRUE(frames_of(*root).empty());
  EXPECT_NE(root->find_all("text", "subtitle")[0]->text.find("no samples"), std::string::npos);
}

}  // namespace
