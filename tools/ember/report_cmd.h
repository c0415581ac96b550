// `ember report` (the HTML report of a run directory) and `ember flamegraph` (an SVG flame graph
// from perf script output or folded stacks): their flags and entry points.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace ember::cli {

struct ReportArgs {
  std::string run_dir;
  std::string output;  // empty: RUN_DIR/report.html; "-": stdout
};

struct FlamegraphArgs {
  std::string perf_script;  // FILE or "-" (stdin)
  std::string folded;       // FILE or "-" (stdin)
  std::string output;       // FILE or "-" (stdout)
  std::string title;
  std::string unit = "samples";  // in the tooltips ("µs" for ember's profile.folded)
  std::string save_folded;  // also write the folded stacks here
  int width = 1200;
};

void add_report_flags(CLI::App* cmd, ReportArgs& a);
int run_report(const ReportArgs& a);
void add_flamegraph_flags(CLI::App* cmd, FlamegraphArgs& a);
int run_flamegraph(const FlamegraphArgs& a);

}  // namespace ember::cli
