// `ember report RUN_DIR -o FILE.html` and `ember flamegraph (--perf-script|--folded) FILE|- -o
// FILE.svg`: thin wrappers over ember/report.h that read the inputs, check the flags and write
// the outputs; every failure is an ember::Error naming the flag or the file.
#include "report_cmd.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "ember/error.h"
#include "ember/report.h"

namespace ember::cli {

namespace {

std::string read_input(const std::string& path, const std::string& flag) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(flag + " " + path + ": is a directory, expected a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_output(const std::string& path, const std::string& flag, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(flag + " " + path + ": cannot write: " + std::strerror(errno));
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) throw Error(flag + " " + path + ": write failed: " + std::strerror(errno));
}

}  // namespace

void add_report_flags(CLI::App* cmd, ReportArgs& a) {
  cmd->add_option("run_dir", a.run_dir, "Run directory written by `ember train --out DIR`")->required();
  cmd->add_option("-o,--output", a.output, "HTML file to write (default: RUN_DIR/report.html)");
}

int run_report(const ReportArgs& a) {
  const std::string out =
      a.output.empty() ? (std::filesystem::path(a.run_dir) / "report.html").string() : a.output;
  const std::string html = report::render_report_html(a.run_dir);
  write_output(out, "--output", html);
  if (out != "-") std::printf("wrote %s (%.1f KiB)\n", out.c_str(), html.size() / 1024.0);
  return 0;
}

void add_flamegraph_flags(CLI::App* cmd, FlamegraphArgs& a) {
  auto* perf = cmd->add_option("--perf-script", a.perf_script,
                               "`perf script` output to fold and draw (FILE, or - for stdin)");
  auto* folded = cmd->add_option("--folded", a.folded, "Folded stacks 'a;b;c COUNT' to draw (FILE, or - for stdin)");
  perf->excludes(folded);
  folded->excludes(perf);
  cmd->add_option("-o,--output", a.output, "SVG file to write (- for stdout)")->required();
  cmd->add_option("--title", a.title, "Title above the graph (default: says what the input was)");
  cmd->add_option("--unit", a.unit, "Unit of the counts, shown in the tooltips (us for ember's profile.folded)")
      ->capture_default_str();
  cmd->add_option("--width", a.width, "Width in pixels")->capture_default_str();
  cmd->add_option("--save-folded", a.save_folded, "Also write the folded stacks to this file");
}

int run_flamegraph(const FlamegraphArgs& a) {
  if (a.perf_script.empty() && a.folded.empty())
    throw Error("flamegraph: give --perf-script FILE|- or --folded FILE|-");
  if (a.width < 200 || a.width > 20000)
    throw Error("--width: expected an integer in [200, 20000], found " + std::to_string(a.width));
  const bool perf = !a.perf_script.empty();
  const std::string in = perf ? a.perf_script : a.folded;
  const std::string source = "flamegraph: " + std::string(perf ? "--perf-script " : "--folded ") +
                             (in == "-" ? std::string("<stdin>") : in);
  const std::string text = read_input(in, perf ? "--perf-script" : "--folded");
  const std::vector<report::FoldedStack> stacks =
      perf ? report::fold_perf_script(text, source) : report::parse_folded(text, source);
  double total = 0;
  for (const auto& s : stacks) total += s.value;
  if (stacks.empty() || total <= 0)
    throw Error(source + ": no samples" +
                (perf ? std::string(" (expected the text of `perf script` after `perf record -g`)") : std::string()));
  if (!a.save_folded.empty()) write_output(a.save_folded, "--save-folded", report::format_folded(stacks));
  report::FlameGraphOptions o;
  o.title = !a.title.empty() ? a.title : perf ? "CPU flame graph (perf)" : "Flame graph";
  o.unit = a.unit.empty() ? "samples" : a.unit == "us" ? "µs" : a.unit;
  o.width = a.width;
  write_output(a.output, "--output", report::flame_graph_svg(stacks, o));
  if (a.output != "-")
    std::printf("wrote %s (%zu stacks, %g %s)\n", a.output.c_str(), stacks.size(), total, o.unit.c_str());
  return 0;
}

}  // namespace ember::cli
