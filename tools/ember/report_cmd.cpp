// `ember report RUN_DIR -o FILE.html` and `ember flamegraph (--perf-script|--folded) FILE|- -o
// FILE.svg`: thin wrappers over ember_support/report.h that read the inputs (regular files under a size
// cap, or stdin), check the output paths before any work and replace them atomically; every
// failure is an ember::Error naming the flag or the file.
#include "report_cmd.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ember/error.h"
#include "ember_support/files.h"
#include "ember_support/report.h"

namespace ember::cli {

namespace {

constexpr uint64_t kPerfScriptMaxBytes = uint64_t(1) << 30;  // perf script text is verbose
constexpr uint64_t kFoldedMaxBytes = uint64_t(256) << 20;

std::string read_stdin(uint64_t max_bytes, const std::string& flag) {
  std::string text;
  char buf[1 << 16];
  while (const size_t n = std::fread(buf, 1, sizeof buf, stdin)) {
    if (text.size() + n > max_bytes)
      throw Error(flag + " -: standard input is more than " + std::to_string(max_bytes) + " bytes (the limit)");
    text.append(buf, n);
  }
  if (std::ferror(stdin)) throw Error(flag + " -: reading standard input failed: " + std::strerror(errno));
  return text;
}

std::string read_in(const std::string& path, uint64_t max_bytes, const std::string& flag) {
  return path == "-" ? read_stdin(max_bytes, flag) : ember::read_input(path, max_bytes, flag);
}

// Refuses an output path that cannot be replaced by a regular file, before any work is done.
void check_out(const std::string& path, const std::string& flag) {
  if (path != "-") ember::check_output(path, flag);
}

void write_output(const std::string& path, const std::string& flag, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw Error(flag + " -: writing to standard output failed: " + std::strerror(errno));
    return;
  }
  try {
    ember::write_file_atomic(path, {text});
  } catch (const Error& e) {  // "'path': write failed: ..." or "output 'path': ..."
    const std::string m = e.what();
    throw Error(flag + (m.rfind("output ", 0) == 0 ? m.substr(6) : " " + m));
  }
}

}  // namespace

void add_report_flags(CLI::App* cmd, ReportArgs& a) {
  cmd->add_option("run_dir", a.run_dir, "Run directory written by `ember train --out DIR`")->required();
  cmd->add_option("-o,--output", a.output, "HTML file to write (default: RUN_DIR/report.html; - for stdout)");
}

int run_report(const ReportArgs& a) {
  const std::string out =
      a.output.empty() ? (std::filesystem::path(a.run_dir) / "report.html").string() : a.output;
  if (a.output.empty()) report::check_run_dir(a.run_dir);  // named as such, not as the output's directory
  check_out(out, "--output");
  std::vector<NamedPath> inputs;  // the run directory's files: the page must not replace one
  for (const char* f : {"metrics.jsonl", "config.json", "model.json", "profile.json", "profile.folded", "trace.json"})
    inputs.push_back({"run directory", (std::filesystem::path(a.run_dir) / f).string()});
  if (out != "-") check_distinct({{"--output", out}}, inputs);
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

namespace {

void check_flamegraph_args(const FlamegraphArgs& a) {
  if (a.perf_script.empty() && a.folded.empty())
    throw Error("flamegraph: give --perf-script FILE|- or --folded FILE|-");
  if (a.width < 200 || a.width > 20000)
    throw Error("--width: expected an integer in [200, 20000], found " + std::to_string(a.width));
  check_out(a.output, "--output");
  if (!a.save_folded.empty()) check_out(a.save_folded, "--save-folded");
  const std::string in = a.perf_script.empty() ? a.folded : a.perf_script;
  auto file = [](const std::string& p) { return p == "-" ? std::string() : p; };
  check_distinct({{"--output", file(a.output)}, {"--save-folded", file(a.save_folded)}},
                 {{a.perf_script.empty() ? "--folded" : "--perf-script", file(in)}});
}

}  // namespace

int run_flamegraph(const FlamegraphArgs& a) {
  check_flamegraph_args(a);
  const bool perf = !a.perf_script.empty();
  const std::string in = perf ? a.perf_script : a.folded;
  const std::string source = "flamegraph: " + std::string(perf ? "--perf-script " : "--folded ") +
                             (in == "-" ? std::string("<stdin>") : quote_path(in));
  const std::string text =
      read_in(in, perf ? kPerfScriptMaxBytes : kFoldedMaxBytes, perf ? "--perf-script" : "--folded");
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
