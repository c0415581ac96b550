// ember_support/report.h (not installed; src/report, ember_report): `ember report`'s SVG charts
// (line, horizontal bar, flame graph), folding of `perf script` output into folded stacks, and the
// self-contained HTML report of a run directory (metrics.jsonl, config.json, ...). docs/report.md.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ember::report {

// ---- Charts: pure functions returning one <svg> element (no external resources). -------------

struct Point {
  double x = 0, y = 0;  // a non-finite y (or x) is skipped
};

struct Series {
  std::string name;  // shown in the legend and written as data-series="name"
  std::vector<Point> points;
};

struct LineChartOptions {
  std::string title, x_title, y_title;
  int width = 720, height = 340;
  bool x_integer = false;       // x ticks on whole numbers only (epochs)
  bool y_include_zero = false;  // stretch the y axis down (or up) to 0
};

// Several named series over shared linear axes with "nice" ticks, titles and a legend. Each
// series is a <polyline data-series="..."> plus a <circle> per point; a series with one point
// shows as its marker. Constant data gets a range around the value; no data: empty axes.
std::string line_chart_svg(const std::vector<Series>& series, const LineChartOptions& options);

struct Bar {
  std::string label;
  double value = 0;   // negative or non-finite values draw no bar; the label still shows
  std::string group;  // optional: bars of one group share a colour; 2+ groups get a legend
};

struct BarChartOptions {
  std::string title, value_title;
  std::string unit;  // appended to the value labels, e.g. "ms"
  int width = 720;
  int bar_height = 18;
};

// Horizontal bars from one baseline, widths proportional to the values (the axis runs from 0 to
// a nice tick at or above the largest value), the value written at each bar's end.
std::string bar_chart_svg(const std::vector<Bar>& bars, const BarChartOptions& options);

// ---- Flame graphs ------------------------------------------------------------------------------

// One line of the folded-stack format (Brendan Gregg's): frames outermost first, and a count.
struct FoldedStack {
  std::vector<std::string> frames;
  double value = 0;
};

// Parses "frame1;frame2;frame3 VALUE" lines (blank lines and '#' comments skipped; the value is
// after the last space, a finite number >= 0). Errors name `source` and the line.
std::vector<FoldedStack> parse_folded(std::string_view text, const std::string& source);

// Writes folded lines ("a;b;c 12\n"), one per stack, in the order given.
std::string format_folded(const std::vector<FoldedStack>& stacks);

struct PerfFoldOptions {
  bool include_comm = true;  // the process name as the outermost frame (as stackcollapse-perf.pl)
};

// Folds `perf script` text: samples separated by blank lines, a header line (comm pid ... time:
// [period] event:) then frames "addr symbol+0xoff (dso)" innermost first (without -g, the one
// frame after the event on the header line). Each sample counts 1; identical
// stacks are merged; the result is sorted by stack. Offsets, argument lists and " [clone ...]"
// suffixes are stripped; a missing symbol becomes "[unknown]" (a run of them, as broken
// frame-pointer chains give, becomes one). Errors name `source` and the line.
std::vector<FoldedStack> fold_perf_script(std::string_view text, const std::string& source,
                                          const PerfFoldOptions& options = {});

// The symbol of one perf frame without its offset, argument list or clone suffix:
// "ns::f<int>(float*, int) const+0x1c" -> "ns::f<int>"; "" or "[unknown]" -> "[unknown]".
std::string tidy_symbol(std::string_view symbol);

struct FlameGraphOptions {
  std::string title = "Flame graph";
  std::string unit = "samples";  // in the tooltips: "name (1,234 samples, 12.34%)"
  int width = 1200;
  int frame_height = 16;
  double min_frame_px = 0.1;     // narrower frames (and their children) are not drawn
};

// A flame graph: identical prefixes merged, siblings sorted by name, widths proportional to the
// values, the root ("all") at the bottom and callees stacked upward. Each frame is a
// <g class="frame"> with a <title> tooltip, a <rect> coloured from a hash of its name and a
// label clipped to the frame's width (omitted when it would not fit 3 characters).
std::string flame_graph_svg(const std::vector<FoldedStack>& stacks, const FlameGraphOptions& options);

// ---- Helpers shared by the charts (public for tests and other renderers) ----------------------

// & < > " ' escaped; control characters other than tab and newline become '?'.
std::string xml_escape(std::string_view text);

// Tick values covering [lo, hi] with a step of 1, 2 or 5 times a power of ten, about `target`
// intervals; the first tick is <= lo and the last >= hi. lo == hi gets a range around the value.
std::vector<double> nice_ticks(double lo, double hi, int target, bool integer_step = false);

// Indices of at most max_count of n items, evenly spread and increasing, the first (0) and the
// last (n - 1) always included (max_count 1 is taken as 2); all of them when n <= max_count.
// Long runs' charts draw these epochs only.
std::vector<size_t> thin_indices(size_t n, size_t max_count);

// ---- The HTML report ---------------------------------------------------------------------------

// Reads a run directory and returns one self-contained HTML page: configuration and machine,
// model summary, loss / accuracy / samples-per-second curves, the epoch table, and the profile
// (per-layer time chart and table, flame graph) when profile.json / profile.folded exist.
// metrics.jsonl and config.json are required; every file is checked and an ember::Error names
// the file, the line and the field at fault. Inputs must be regular files under a size cap
// (metrics.jsonl 64 MiB and at most 100,000 epochs; JSON files 16 MiB; profile.folded 256 MiB).
// Long runs stay small: the charts draw at most 1,000 epochs (thin_indices) and the epoch table
// the first and last 50, each saying so.
std::string render_report_html(const std::string& run_dir);

// Throws the ember::Error render_report_html gives when run_dir is not a directory.
void check_run_dir(const std::string& run_dir);

}  // namespace ember::report
