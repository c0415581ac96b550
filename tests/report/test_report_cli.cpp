// Command-line tests of `ember report` and `ember flamegraph` (EMBER_BINARY) on run directories
// written by hand in a temp folder: the page is self-contained and holds every epoch, the model,
// the profile and the charts; bad files give one error line naming the file, line and field.
// Hostile paths: device nodes, FIFOs and deep JSON as inputs or outputs, a full disk, long runs.
// Also scripts/flamegraph.sh (with perf, where perf may sample) and a headless Chromium render.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "report/svg_dom.h"

namespace {

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string with_commas(long long v) {
  std::string d = std::to_string(v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// A run directory as `ember train --out DIR` writes it (docs/report.md), values from formulas.

struct EpochRow {
  int epoch;
  double lr, train_loss, train_acc, test_loss, test_acc, seconds, samples_per_s;
};

double round4(double v) { return std::round(v * 1e4) / 1e4; }

std::vector<EpochRow> make_epochs(int n) {
  std::vector<EpochRow> rows;
  for (int e = 1; e <= n; ++e)
    rows.push_back({e, round4(1e-3 * (0.5 + 0.5 * std::cos(3.14159 * (e - 1) / n))), round4(0.05 + 0.4 * std::exp(-0.4 * e)),
                    round4(0.99 - 0.12 * std::exp(-0.5 * e)), round4(0.08 + 0.3 * std::exp(-0.3 * e)),
                    round4(0.985 - 0.1 * std::exp(-0.45 * e)), 2 + 0.1 * e, double(4700 + 37 * e)});
  return rows;
}

std::string metrics_jsonl(const std::vector<EpochRow>& rows) {
  std::string s;
  for (const EpochRow& r : rows)
    s += "{\"epoch\": " + std::to_string(r.epoch) + ", \"lr\": " + fmt("%.17g", r.lr) + ", \"train_loss\": " +
         fmt("%.17g", r.train_loss) + ", \"train_acc\": " + fmt("%.17g", r.train_acc) + ", \"test_loss\": " +
         fmt("%.17g", r.test_loss) + ", \"test_acc\": " + fmt("%.17g", r.test_acc) + ", \"seconds\": " +
         fmt("%.17g", r.seconds) + ", \"samples_per_s\": " + fmt("%.17g", r.samples_per_s) + "}\n";
  return s;
}

const char* kConfig = R"({"ember_version": "0.1.0", "command": "ember train --out run", "model": "mnist-cnn",
  "data": "/data/mnist", "epochs": 5, "batch_size": 64, "optimizer": "adam", "lr": 0.001, "schedule": "cosine",
  "l2": 0.0001, "weight_decay": 0, "threads": 2, "isa": "avx512", "seed": 1, "started": "2026-11-23T10:00:00Z",
  "extra_key_for_test": [1, 2, 3],
  "machine": {"cpu": "AMD EPYC <9R14> & co", "hardware_threads": 2, "os": "Linux 6.1", "fma_peak_gflops_1t": 225.34714081718857}})";

const char* kModel = R"J({"name": "mnist-cnn", "params": 822570, "input_shape": [1, 28, 28], "layers": [
  {"index": 0, "type": "conv2d", "description": "Conv2d(1->32, 5x5, stride 1, pad 2)", "output_shape": [32, 28, 28], "params": 832},
  {"index": 1, "type": "relu", "description": "ReLU", "output_shape": [32, 28, 28], "params": 0},
  {"index": 2, "type": "maxpool2d", "description": "MaxPool2d(2x2, stride 2)", "output_shape": [32, 14, 14], "params": 0},
  {"index": 3, "type": "conv2d", "description": "Conv2d(32->64, 5x5, stride 1, pad 2)", "output_shape": [64, 14, 14], "params": 51264},
  {"index": 4, "type": "flatten", "description": "Flatten", "output_shape": [3136], "params": 0},
  {"index": 5, "type": "linear", "description": "Linear(3136->256)", "output_shape": [256], "params": 767744},
  {"index": 6, "type": "linear", "description": "Linear(256->10)", "output_shape": [10], "params": 2570}]})J";

const char* kProfile = R"({"model": "mnist-cnn", "batch": 64, "threads": 2, "isa": "avx512", "steps": 15,
  "samples": 960, "step_ms": 3.5, "peak_gflops": 442.0, "busy_pct": [99.5, 19.25], "rows": [
  {"layer": "conv1+relu+pool", "phase": "forward", "calls": 15, "total_ms": 7.5, "ms_per_step": 0.5, "pct_step": 14.3, "gflops": 160.0, "pct_peak": 36.2},
  {"layer": "conv2+relu+pool", "phase": "forward", "calls": 15, "total_ms": 15.0, "ms_per_step": 1.0, "pct_step": 28.6, "gflops": 200.0, "pct_peak": 45.2},
  {"layer": "fc1", "phase": "forward", "calls": 15, "total_ms": 3.0, "ms_per_step": 0.2, "pct_step": 5.7, "gflops": 100.0, "pct_peak": 22.6},
  {"layer": "conv2+relu+pool", "phase": "backward", "calls": 15, "total_ms": 22.5, "ms_per_step": 1.5, "pct_step": 42.9, "gflops": 150.0, "pct_peak": 33.9},
  {"layer": "adam", "phase": "optimizer", "calls": 15, "total_ms": 4.5, "ms_per_step": 0.3, "pct_step": 8.6, "new_column_x": 7}],
  "buffers": [{"name": "activations", "bytes": 1234567}, {"name": "parameters", "bytes": 3290280}]})";

const char* kFolded =
    "step;forward;conv1+relu+pool 7500\nstep;forward;conv2+relu+pool 15000\nstep;forward;fc1 3000\n"
    "step;backward;conv2+relu+pool 22500\nstep;optimizer;adam 4500\nstep;loss<&> 300\n";

// The svg elements of a page, in order.
std::vector<std::string> svgs_in(const std::string& html) {
  std::vector<std::string> out;
  for (size_t p = html.find("<svg "); p != std::string::npos; p = html.find("<svg ", p + 1)) {
    const size_t e = html.find("</svg>", p);
    if (e == std::string::npos) break;
    out.push_back(html.substr(p, e + 6 - p));
  }
  return out;
}

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ember-report-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    run_ = tmp_ / "run";
    fs::create_directories(run_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!tmp_.empty()) fs::remove_all(tmp_, ec);
  }

  void write_run(bool with_model, bool with_profile, int epochs = 5) {
    epochs_ = make_epochs(epochs);
    write_text(run_ / "metrics.jsonl", metrics_jsonl(epochs_));
    write_text(run_ / "config.json", kConfig);
    if (with_model) write_text(run_ / "model.json", kModel);
    if (with_profile) write_text(run_ / "profile.json", kProfile), write_text(run_ / "profile.folded", kFolded);
  }

  // Runs `ember ARGS` (ARGS shell-quoted) with `input` on stdin, under a timeout of `seconds`.
  Result run(const std::string& args, const std::string& env = "", const fs::path& input = "/dev/null",
             int seconds = 60) {
    Result r;
    const fs::path out = tmp_ / "stdout.txt", err = tmp_ / "stderr.txt";
    r.cmd = env + (env.empty() ? "" : " ") + "timeout -k 5 " + std::to_string(seconds) + " " + quote(EMBER_BINARY) +
            " " + args;
    const std::string full = r.cmd + " >" + quote(out) + " 2>" + quote(err) + " <" + quote(input);
    const int st = std::system(full.c_str());
    if (st != -1 && WIFEXITED(st)) r.code = WEXITSTATUS(st);
    else if (st != -1 && WIFSIGNALED(st)) r.code = 128 + WTERMSIG(st);
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }
  Result shell(const std::string& cmd) {  // any command line, stdout and stderr kept apart
    Result r;
    const fs::path out = tmp_ / "sh-stdout.txt", err = tmp_ / "sh-stderr.txt";
    r.cmd = cmd;
    const int st = std::system(("(" + cmd + ") >" + quote(out) + " 2>" + quote(err) + " </dev/null").c_str());
    if (st != -1 && WIFEXITED(st)) r.code = WEXITSTATUS(st);
    else if (st != -1 && WIFSIGNALED(st)) r.code = 128 + WTERMSIG(st);
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }

  fs::path tmp_, run_;
  std::vector<EpochRow> epochs_;
};

// Nothing in the page can reach the network: no URLs, no src/href attributes, no CSS imports.
void expect_self_contained(const std::string& html) {
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("//cdn"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\b(src|href|xlink:href)\s*=)", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(<link\b|@import|url\s*\()", std::regex::icase)));
}

TEST_F(ReportCli, FullRunDirectory) {
  write_run(true, true);
  const fs::path out = tmp_ / "out.html";
  Result r = run("report " + quote(run_) + " -o " + quote(out));
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find(out.string()), std::string::npos) << r.out;
  const std::string html = read_text(out);
  ASSERT_GT(html.size(), 1000u);
  expect_self_contained(html);

  EXPECT_TRUE(std::regex_search(html, std::regex("<title>[^<]*mnist-cnn[^<]*2026-11-23[^<]*</title>"))) << html.substr(0, 600);
  EXPECT_NE(html.find("<h1>ember report: mnist-cnn"), std::string::npos);
  // Every epoch's values, in the page's units (accuracies as %).
  for (const EpochRow& e : epochs_) {
    SCOPED_TRACE("epoch " + std::to_string(e.epoch));
    for (double loss : {e.train_loss, e.test_loss}) EXPECT_NE(html.find(">" + fmt("%.4f", loss) + "<"), std::string::npos);
    for (double acc : {e.train_acc, e.test_acc}) EXPECT_NE(html.find(">" + fmt("%.2f", 100 * acc) + "%<"), std::string::npos);
    EXPECT_NE(html.find(">" + with_commas(llround(e.samples_per_s)) + "<"), std::string::npos);
    EXPECT_NE(html.find(">" + fmt("%.4g", e.lr) + "<"), std::string::npos);
  }
  // Configuration, generically: nested objects and keys the report does not know about.
  for (const char* s : {">machine<", ">cpu<", "AMD EPYC &lt;9R14&gt; &amp; co", ">extra_key_for_test<", "[1, 2, 3]",
                        ">2026-11-23T10:00:00Z<", ">cosine<"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  // The model table.
  for (const char* s : {"Conv2d(1-&gt;32, 5x5, stride 1, pad 2)", "Linear(3136-&gt;256)", "32×28×28", "822,570", "767,744"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  // The profile: header facts, table (with the unknown column), bar chart, buffers, flame graph.
  for (const char* s : {"new_column_x", ">Buffers<", "1.2 MiB", "peak_gflops", "conv2+relu+pool",
                        "busy_pct <b>[99.5, 19.25]</b>", ">225.347<"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  EXPECT_EQ(html.find("rows <b>"), std::string::npos) << "tables are not repeated in the profile's facts line";
  EXPECT_EQ(html.find("no profile"), std::string::npos);
  EXPECT_EQ(html.find("no flame graph"), std::string::npos);
  EXPECT_EQ(html.find("loss<&>"), std::string::npos) << "frame names are escaped";

  const auto svgs = svgs_in(html);
  ASSERT_EQ(svgs.size(), 6u) << "loss, accuracy, throughput, learning rate, per-layer time, flame graph";
  for (const auto& s : svgs) {
    std::unique_ptr<svgdom::Element> root;
    ASSERT_NO_THROW(root = svgdom::parse(s)) << s.substr(0, 300);
    ASSERT_TRUE(root->has_class("chart"));
    if (root->has_class("line-chart")) {
      const auto pl = root->find_all("polyline");
      ASSERT_FALSE(pl.empty());
      for (const auto* p : pl) EXPECT_EQ(count(p->attr("points"), ","), epochs_.size()) << "one point per epoch";
    }
    if (root->has_class("bar-chart")) {
      EXPECT_EQ(root->find_all("g", "bar").size(), 5u);
    }
    if (root->has_class("flame-graph")) {
      EXPECT_EQ(root->attr("data-total"), "52800");
      EXPECT_EQ(root->attr("data-unit"), "µs");
    }
  }
  EXPECT_EQ(count(html, "class=\"chart line-chart\""), 4u);
  EXPECT_EQ(count(html, "class=\"chart bar-chart\""), 1u);
  EXPECT_EQ(count(html, "class=\"chart flame-graph\""), 1u);
}

TEST_F(ReportCli, RequiredFilesOnlyGetNotes) {
  write_run(false, false, 1);
  std::string cfg = kConfig;  // no start time: the date comes from metrics.jsonl's time stamp
  cfg.replace(cfg.find("\"started\""), std::string("\"started\": \"2026-11-23T10:00:00Z\",").size(), "");
  write_text(run_ / "config.json", cfg);
  Result r = run("report " + quote(run_));  // default output: RUN_DIR/report.html
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string html = read_text(run_ / "report.html");
  expect_self_contained(html);
  EXPECT_TRUE(std::regex_search(html, std::regex("<title>ember report: mnist-cnn, 20[0-9]{2}-[0-9]{2}-[0-9]{2}")))
      << html.substr(0, 600);
  for (const char* s : {"no profile: run <code>ember train --out DIR --profile</code>", "no model summary",
                        "no flame graph"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  EXPECT_EQ(svgs_in(html).size(), 4u);
  EXPECT_NE(html.find(">" + fmt("%.2f", 100 * epochs_[0].test_acc) + "%<"), std::string::npos);
}

TEST_F(ReportCli, NullMetricLeavesAGap) {  // NaN losses are written as null by JSON writers
  write_run(false, false, 4);
  std::string m = metrics_jsonl(epochs_);
  const size_t line3 = m.find("{\"epoch\": 3");
  const size_t p = m.find("\"test_loss\": ", line3) + 13;
  m.replace(p, m.find(',', p) - p, "null");
  write_text(run_ / "metrics.jsonl", m);
  Result r = run("report " + quote(run_) + " -o " + quote(tmp_ / "o.html"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string html = read_text(tmp_ / "o.html");
  const auto svgs = svgs_in(html);
  ASSERT_FALSE(svgs.empty());
  auto loss = svgdom::parse(svgs[0]);
  for (const auto* pl : loss->find_all("polyline"))
    EXPECT_EQ(count(pl->attr("points"), ","), pl->attr("data-series") == "test" ? 3u : 4u) << pl->attr("data-series");
  EXPECT_NE(html.find(">—<"), std::string::npos);
}

// Bad run directories: (file to write, its content or "" to remove it, needles in the error).
struct BadCase {
  const char* name;
  const char* file;
  const char* content;  // nullptr: remove the file
  std::vector<std::string> needles;
};

class ReportBad : public ReportCli, public ::testing::WithParamInterface<BadCase> {};

TEST_P(ReportBad, OneLineErrorNamingTheFile) {
  const BadCase& c = GetParam();
  write_run(true, true, 3);
  if (c.content) write_text(run_ / c.file, c.content);
  else fs::remove(run_ / c.file);
  const fs::path out = tmp_ / "bad.html";
  Result r = run("report " + quote(run_) + " -o " + quote(out));
  std::vector<std::string> needles = c.needles;
  needles.push_back((run_ / c.file).string());
  needles.push_back("report: ");
  expect_one_line_error(r, needles);
  EXPECT_FALSE(fs::exists(out)) << "no page is written for a bad run directory";
}

const char* kGood = R"({"epoch": 1, "lr": 0.001, "train_loss": 0.2, "train_acc": 0.94, "test_loss": 0.1, "test_acc": 0.97, "seconds": 2.3, "samples_per_s": 26000})";

std::string lines(std::initializer_list<std::string> l) {
  std::string s;
  for (const auto& x : l) s += x + "\n";
  return s;
}

const std::string kMalformed = lines({kGood, "{\"epoch\": 2, \"lr\": 0.001,"});
const std::string kMissingField = lines({kGood, std::regex_replace(kGood, std::regex("\"epoch\": 1"), "\"epoch\": 2"),
                                         "{\"epoch\": 3, \"lr\": 0.001, \"train_loss\": 0.2, \"train_acc\": 0.94, "
                                         "\"test_loss\": 0.1, \"seconds\": 2.3, \"samples_per_s\": 26000}"});
const std::string kWrongType = std::regex_replace(kGood, std::regex("0\\.97"), "\"high\"");
const std::string kPercent = std::regex_replace(kGood, std::regex("0\\.97"), "97.0");
const std::string kOutOfOrder = lines({kGood, kGood});
const std::string kNotObject = "[1, 2]\n";

INSTANTIATE_TEST_SUITE_P(
    Files, ReportBad,
    ::testing::Values(
        BadCase{"MetricsMissing", "metrics.jsonl", nullptr, {"cannot open", "No such file"}},
        BadCase{"ConfigMissing", "config.json", nullptr, {"cannot open"}},
        BadCase{"MetricsMalformedLine", "metrics.jsonl", kMalformed.c_str(), {"line 2", "invalid JSON"}},
        BadCase{"MetricsMissingField", "metrics.jsonl", kMissingField.c_str(), {"line 3", "field 'test_acc'", "missing"}},
        BadCase{"MetricsWrongType", "metrics.jsonl", kWrongType.c_str(), {"line 1", "field 'test_acc'", "expected a number", "\"high\""}},
        BadCase{"MetricsPercentNotFraction", "metrics.jsonl", kPercent.c_str(), {"line 1", "'test_acc'", "fraction"}},
        BadCase{"MetricsEpochsOutOfOrder", "metrics.jsonl", kOutOfOrder.c_str(), {"line 2", "'epoch'", "increasing"}},
        BadCase{"MetricsNotObject", "metrics.jsonl", kNotObject.c_str(), {"line 1", "expected a JSON object"}},
        BadCase{"MetricsEmpty", "metrics.jsonl", "\n\n", {"no epochs"}},
        BadCase{"ConfigNotObject", "config.json", "[1, 2]", {"expected a JSON object"}},
        BadCase{"ConfigInvalidJson", "config.json", "{\"model\": ", {"invalid JSON"}},
        BadCase{"ConfigModelNotString", "config.json", "{\"model\": 7}", {"field 'model'", "expected a string"}},
        BadCase{"ModelLayersNotArray", "model.json", "{\"name\": \"m\", \"layers\": 3}", {"field 'layers'", "array"}},
        BadCase{"ModelLayerParamsNotNumber", "model.json",
                "{\"layers\": [{\"type\": \"relu\", \"params\": 0}, {\"type\": \"linear\", \"params\": \"many\"}]}",
                {"layers[1]", "field 'params'", "expected a number"}},
        BadCase{"ProfileRowWithoutTotal", "profile.json",
                "{\"rows\": [{\"layer\": \"a\", \"phase\": \"forward\", \"total_ms\": 1},"
                " {\"layer\": \"b\", \"phase\": \"forward\"}]}",
                {"rows[1]", "field 'total_ms'", "missing"}},
        BadCase{"ProfileRowsMissing", "profile.json", "{\"model\": \"m\"}", {"field 'rows'"}},
        BadCase{"FoldedBadCount", "profile.folded", "a;b 10\na;c ten\n", {"line 2", "count"}}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST_F(ReportCli, RunDirMissingOrOutputUnwritable) {
  expect_one_line_error(run("report " + quote(tmp_ / "nosuch")), {(tmp_ / "nosuch").string(), "not a directory"});
  write_run(false, false, 2);
  expect_one_line_error(run("report " + quote(run_) + " -o /nonexistent-dir/r.html"),
                        {"--output", "/nonexistent-dir/r.html"});
  expect_one_line_error(run("report"), {"run_dir"});
}

// ---------------------------------------------------------------------------------------------
// Hostile inputs and outputs: device nodes, FIFOs, dangling symlinks, deep JSON, a full disk and
// runs too long to draw every epoch. Each is refused with one line naming the file, promptly.

bool is_char_device(const fs::path& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

// Files in dir named like ember's temporary files (".ember-XXXXXX").
std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".ember-", 0) == 0) out.push_back(e.path().filename().string());
  return out;
}

// Caps ember's address space so a regression that reads /dev/zero fails fast, not the machine
// (not under sanitizers, which reserve terabytes of address space).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EMBER_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define EMBER_TEST_SANITIZED 1
#endif
#endif
#ifdef EMBER_TEST_SANITIZED
const std::string kMemLimit = "";
#else
const std::string kMemLimit = "ulimit -v 2097152;";
#endif

TEST_F(ReportCli, OutputDeviceIsRefusedUpFront) {
  write_run(false, false, 2);
  for (const char* dev : {"/dev/full", "/dev/null"}) {
    SCOPED_TRACE(dev);
    ASSERT_TRUE(is_char_device(dev));
    expect_one_line_error(run("report " + quote(run_) + " -o " + dev), {"--output", dev, "character device"});
    EXPECT_TRUE(is_char_device(dev)) << dev << " is no longer a character device";
  }
  // Checked before the run is read: the output is named, not the missing metrics.jsonl.
  fs::remove(run_ / "metrics.jsonl");
  Result r = run("report " + quote(run_) + " -o /dev/full");
  expect_one_line_error(r, {"--output", "/dev/full"});
  EXPECT_EQ(r.err.find("metrics.jsonl"), std::string::npos) << r.err;
  EXPECT_TRUE(is_char_device("/dev/full"));
}

TEST_F(ReportCli, OutputFifoDirectoryOrMissingDirectoryIsRefused) {
  write_run(false, false, 2);
  const fs::path fifo = tmp_ / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string report = "report " + quote(run_) + " -o ";
  expect_one_line_error(run(report + quote(fifo), "", "/dev/null", 10), {fifo.string(), "FIFO"});
  expect_one_line_error(run(report + quote(tmp_)), {tmp_.string(), "directory"});
  expect_one_line_error(run(report + quote(tmp_ / "no/such/r.html")), {"no/such", "No such file"});
  EXPECT_TRUE(temp_files(tmp_).empty());
}

TEST_F(ReportCli, OutputSymlinkReplacesItsTargetAndDanglingIsRefused) {
  write_run(false, false, 2);
  const fs::path target = tmp_ / "real.html", link = tmp_ / "link.html";
  write_text(target, "old report\n");
  fs::create_symlink(target, link);
  Result r = run("report " + quote(run_) + " -o " + quote(link));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link)) << "the link stays a link";
  EXPECT_EQ(read_text(target).rfind("<!DOCTYPE html>", 0), 0u) << "the target holds the new report";
  fs::create_symlink(tmp_ / "nowhere.html", tmp_ / "dangling.html");
  expect_one_line_error(run("report " + quote(run_) + " -o " + quote(tmp_ / "dangling.html")),
                        {"dangling.html", "dangling"});
  EXPECT_FALSE(fs::exists(tmp_ / "nowhere.html")) << "nothing is written through a dangling symlink";
}

// A full disk, simulated by a file size limit (dash counts 512-byte blocks, bash 1 KiB): every
// output is written in full or not at all, and the old file survives.
TEST_F(ReportCli, FailedWriteKeepsTheOldFile) {
  write_run(true, true, 50);
  std::string stacks;
  for (int i = 0; i < 300; ++i) stacks += "main;work;frame_" + std::to_string(i) + " " + std::to_string(i + 1) + "\n";
  write_text(tmp_ / "big.folded", stacks);
  const fs::path dir = tmp_ / "out", html = dir / "report.html", svg = dir / "f.svg", folded = dir / "saved.folded";
  fs::create_directories(dir);
  for (const fs::path& p : {html, svg, folded}) write_text(p, "old " + p.filename().string() + "\n");
  const std::string limit = "ulimit -f 2;", big = " --folded " + quote(tmp_ / "big.folded");
  expect_one_line_error(run("report " + quote(run_) + " -o " + quote(html), limit), {html.string(), "too large"});
  expect_one_line_error(run("flamegraph" + big + " -o " + quote(svg), limit), {svg.string(), "too large"});
  expect_one_line_error(run("flamegraph" + big + " -o - --save-folded " + quote(folded), limit), {folded.string()});
  for (const fs::path& p : {html, svg, folded}) EXPECT_EQ(read_text(p), "old " + p.filename().string() + "\n") << p;
  EXPECT_TRUE(temp_files(dir).empty()) << "a temporary file was left behind";
  Result ok = run("report " + quote(run_) + " -o " + quote(html));  // without the limit: replaced
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(read_text(html).rfind("<!DOCTYPE html>", 0), 0u);
}

// Each JSON input nested 100,000 deep: exit 2 with one line naming it (it used to overflow the
// stack while the error message quoted the value).
class ReportDeep : public ReportCli, public ::testing::WithParamInterface<const char*> {};

TEST_P(ReportDeep, NamesTheFileWithoutCrashing) {
  const std::string file = GetParam();
  write_run(true, true, 3);
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  if (file == "metrics.jsonl") deep = metrics_jsonl(epochs_) + deep + "\n";
  write_text(run_ / file, deep);
  Result r = run("report " + quote(run_) + " -o " + quote(tmp_ / "deep.html"));
  expect_one_line_error(r, {(run_ / file).string(), "nesting deeper"});
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(tmp_ / "deep.html"));
}

INSTANTIATE_TEST_SUITE_P(Files, ReportDeep,
                         ::testing::Values("metrics.jsonl", "config.json", "model.json", "profile.json"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           n[n.find('.')] = '_';
                           return n;
                         });

TEST_F(ReportCli, DeviceInputNamesTheFile) {
  for (const char* file : {"config.json", "metrics.jsonl", "profile.json", "profile.folded"}) {
    SCOPED_TRACE(file);
    fs::remove_all(run_);  // write_run would write through the last iteration's symlink
    fs::create_directories(run_);
    write_run(true, true, 3);
    fs::remove(run_ / file);
    fs::create_symlink("/dev/zero", run_ / file);
    Result r = run("report " + quote(run_) + " -o " + quote(tmp_ / "z.html"), kMemLimit, "/dev/null", 20);
    expect_one_line_error(r, {(run_ / file).string(), "character device"});
    EXPECT_EQ(r.code, 2);
  }
}

TEST_F(ReportCli, FifoInputIsRefusedPromptly) {
  for (const char* file : {"metrics.jsonl", "config.json", "profile.folded"}) {
    SCOPED_TRACE(file);
    write_run(true, true, 3);
    fs::remove(run_ / file);
    ASSERT_EQ(::mkfifo((run_ / file).c_str(), 0644), 0);
    const auto t0 = std::chrono::steady_clock::now();
    Result r = run("report " + quote(run_) + " -o " + quote(tmp_ / "f.html"), "", "/dev/null", 10);
    expect_one_line_error(r, {(run_ / file).string(), "FIFO"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "waited for a writer";
    fs::remove(run_ / file);
  }
}

// 100,000 epochs (--epochs' cap): the charts draw at most 2,000 points each and the table the
// first and last 50 rows, each saying so; the page stays small.
TEST_F(ReportCli, LongRunIsThinned) {
  write_run(false, false, 100000);
  const fs::path out = tmp_ / "long.html";
  Result r = run("report " + quote(run_) + " -o " + quote(out));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = read_text(out);
  EXPECT_LT(html.size(), size_t(2) << 20);
  const auto svgs = svgs_in(html);
  ASSERT_EQ(svgs.size(), 4u);
  for (const std::string& svg : svgs) {
    auto root = svgdom::parse(svg);
    size_t points = 0;
    for (const auto* pl : root->find_all("polyline")) points += count(pl->attr("points"), ",");
    EXPECT_LE(points, 2000u);
    EXPECT_GE(points, 1000u);
    EXPECT_NE(root->find_all("text", "chart-title")[0]->text.find("thinned"), std::string::npos);
  }
  EXPECT_EQ(count(html, "<tr><td>"), 100u) << "the first and last 50 epochs";
  EXPECT_NE(html.find("99,900 epochs not shown"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>1</td>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>100,000</td>"), std::string::npos);
}

TEST_F(ReportCli, MoreThan100000EpochsAreRefused) {
  write_run(false, false, 100001);
  Result r = run("report " + quote(run_) + " -o " + quote(tmp_ / "long.html"));
  expect_one_line_error(r, {(run_ / "metrics.jsonl").string(), "line 100001", "100,000 epochs"});
  EXPECT_FALSE(fs::exists(tmp_ / "long.html"));
}

TEST_F(ReportCli, FlamegraphPathsAreChecked) {
  write_text(tmp_ / "ok.folded", kFolded);
  const fs::path fifo = tmp_ / "f.fifo", zero = tmp_ / "zero.txt", svg = tmp_ / "x.svg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", zero);
  const std::string in = "flamegraph --folded " + quote(tmp_ / "ok.folded");
  expect_one_line_error(run(in + " -o /dev/full"), {"--output", "/dev/full", "character device"});
  EXPECT_TRUE(is_char_device("/dev/full"));
  expect_one_line_error(run(in + " -o " + quote(svg) + " --save-folded " + quote(fifo), "", "/dev/null", 10),
                        {"--save-folded", fifo.string(), "FIFO"});
  EXPECT_FALSE(fs::exists(svg)) << "outputs are checked before any is written";
  expect_one_line_error(run("flamegraph --folded " + quote(fifo) + " -o " + quote(svg), "", "/dev/null", 10),
                        {"--folded", fifo.string(), "FIFO"});
  Result r = run("flamegraph --perf-script " + quote(zero) + " -o " + quote(svg), kMemLimit, "/dev/null", 20);
  expect_one_line_error(r, {"--perf-script", zero.string(), "character device"});
  EXPECT_TRUE(temp_files(tmp_).empty());
}

// ---------------------------------------------------------------------------------------------
// ember flamegraph

const char* kPerfSample =
    "ember 100/100 [000] 1.000: 250000 cycles:u: \n"
    "\t  aaaa ember::sgemm(int, float*)+0x10 (/b/ember)\n"
    "\t  bbbb main+0x20 (/b/ember)\n"
    "\n"
    "ember 100/100 [000] 1.001: 250000 cycles:u: \n"
    "\t  aaaa ember::sgemm(int, float*)+0x18 (/b/ember)\n"
    "\t  bbbb main+0x20 (/b/ember)\n"
    "\n"
    "ember 100/101 [001] 1.002: 250000 cycles:u: \n"
    "\t  cccc ember::ThreadPool::worker(int)+0x8 (/b/ember)\n"
    "\t     0 [unknown] ([unknown])\n"
    "\n";

TEST_F(ReportCli, FlamegraphFromFolded) {
  write_text(tmp_ / "p.folded", kFolded);
  const fs::path svg = tmp_ / "f.svg";
  Result r = run("flamegraph --folded " + quote(tmp_ / "p.folded") + " -o " + quote(svg) + " --title 'my <spans>' --unit us");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(svg.string()), std::string::npos);
  auto root = svgdom::parse(read_text(svg));
  EXPECT_EQ(root->attr("data-total"), "52800");
  EXPECT_EQ(root->find_all("text", "chart-title")[0]->text, "my <spans>");
  std::map<std::string, double> widths;
  for (const auto* g : root->find_all("g", "frame"))
    widths[g->attr("data-name") + "@" + g->attr("data-depth")] += g->child("rect")->num("width");
  ASSERT_TRUE(widths.count("all@0") && widths.count("forward@2") && widths.count("backward@2"));
  EXPECT_NEAR(widths["forward@2"] / widths["all@0"], 25500.0 / 52800, 1e-3);
  EXPECT_NEAR(widths["backward@2"] / widths["all@0"], 22500.0 / 52800, 1e-3);
  EXPECT_NE(read_text(svg).find(" µs, "), std::string::npos) << "--unit us shows as µs in tooltips";
}

TEST_F(ReportCli, FlamegraphFromPerfScriptFileAndStdin) {
  write_text(tmp_ / "perf.txt", kPerfSample);
  const fs::path a = tmp_ / "a.svg", b = tmp_ / "b.svg", folded = tmp_ / "saved.folded";
  Result r1 = run("flamegraph --perf-script " + quote(tmp_ / "perf.txt") + " -o " + quote(a) + " --save-folded " + quote(folded));
  ASSERT_EQ(r1.code, 0) << r1.out << r1.err;
  EXPECT_EQ(read_text(folded), "ember;[unknown];ember::ThreadPool::worker 1\nember;main;ember::sgemm 2\n");
  Result r2 = run("flamegraph --perf-script - -o " + quote(b), "", tmp_ / "perf.txt");
  ASSERT_EQ(r2.code, 0) << r2.out << r2.err;
  EXPECT_EQ(read_text(a), read_text(b)) << "file and stdin give the same graph";
  auto root = svgdom::parse(read_text(a));
  EXPECT_EQ(root->attr("data-total"), "3");
  bool found = false;
  for (const auto* g : root->find_all("g", "frame"))
    if (g->attr("data-name") == "ember::sgemm") {
      found = true;
      EXPECT_EQ(g->child("title")->text, "ember::sgemm (2 samples, 66.67%)");
    }
  EXPECT_TRUE(found);
  // To stdout.
  Result r3 = run("flamegraph --perf-script " + quote(tmp_ / "perf.txt") + " -o -");
  ASSERT_EQ(r3.code, 0) << r3.err;
  EXPECT_EQ(r3.out, read_text(a));
}

TEST_F(ReportCli, FlamegraphErrors) {
  write_text(tmp_ / "bad.folded", "a;b 1\nno-count-here\n");
  write_text(tmp_ / "bad.txt", "\tffff main+0x1 (/bin/x)\n");
  write_text(tmp_ / "empty.txt", "# only comments\n");
  const std::string o = " -o " + quote(tmp_ / "x.svg");
  expect_one_line_error(run("flamegraph" + o), {"--perf-script", "--folded"});
  expect_one_line_error(run("flamegraph --folded " + quote(tmp_ / "bad.folded") + o), {"bad.folded", "line 2"});
  expect_one_line_error(run("flamegraph --perf-script " + quote(tmp_ / "bad.txt") + o), {"bad.txt", "line 1"});
  expect_one_line_error(run("flamegraph --perf-script " + quote(tmp_ / "empty.txt") + o), {"empty.txt", "no samples"});
  expect_one_line_error(run("flamegraph --folded " + quote(tmp_ / "none.folded") + o), {"none.folded", "cannot open"});
  expect_one_line_error(run("flamegraph --folded a --perf-script b" + o), {"excludes"});
  expect_one_line_error(run("flamegraph --folded " + quote(tmp_ / "bad.folded")), {"--output"});
  write_text(tmp_ / "ok.folded", "a 1\n");
  expect_one_line_error(run("flamegraph --folded " + quote(tmp_ / "ok.folded") + o + " --width 5"), {"--width"});
}

// ---------------------------------------------------------------------------------------------
// scripts/flamegraph.sh

TEST_F(ReportCli, FlamegraphScriptWithoutPerf) {
  const std::string script = quote(std::string(EMBER_SOURCE_DIR) + "/scripts/flamegraph.sh");
  Result r = shell("EMBER=" + quote(EMBER_BINARY) + " PERF=/nonexistent/perf " + script);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("perf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ember profile --flame"), std::string::npos) << r.err;
}

TEST_F(ReportCli, FlamegraphScriptWithPerf) {
  Result probe = shell("command -v perf && perf record -q -g -o " + quote(tmp_ / "probe.data") + " -- true");
  if (probe.code != 0)
    GTEST_SKIP() << "perf is missing or may not sample here (" << nonempty_lines(probe.err + "\n?").front() << ")";
  const std::string script = quote(std::string(EMBER_SOURCE_DIR) + "/scripts/flamegraph.sh");
  const fs::path svg = tmp_ / "perf-flame.svg";
  Result r = shell("EMBER=" + quote(EMBER_BINARY) + " EMBER_FLAME_CMD=info EMBER_FLAME_OUT=" + quote(svg) + " " + script);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto out = nonempty_lines(r.out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(fs::path(out.back()), fs::canonical(svg)) << "the script prints the SVG's path";
  auto root = svgdom::parse(read_text(svg));
  EXPECT_GT(root->num("data-total"), 0);
  bool ember_root = false;
  for (const auto* g : root->find_all("g", "frame")) ember_root |= g->attr("data-depth") == "1" && g->attr("data-name") == "ember";
  EXPECT_TRUE(ember_root) << "the process name is the outermost frame";
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium: the page renders (a PNG that is not blank) and its script saw the charts.

uint32_t be32(const std::string& b, size_t at) {
  return uint32_t(uint8_t(b[at])) << 24 | uint32_t(uint8_t(b[at + 1])) << 16 | uint32_t(uint8_t(b[at + 2])) << 8 |
         uint32_t(uint8_t(b[at + 3]));
}

struct Png {
  uint32_t width = 0, height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;  // unfiltered, width * height * channels
};

// Reads an 8-bit RGB/RGBA, non-interlaced PNG: signature, chunk CRCs, IHDR, zlib IDAT, filters.
Png decode_png(const std::string& b) {
  Png png;
  const std::string sig = "\x89PNG\r\n\x1a\n";
  if (b.compare(0, 8, sig) != 0) throw std::runtime_error("no PNG signature");
  std::string idat;
  int depth = 0, colour = 0, interlace = 0;
  for (size_t p = 8; p + 12 <= b.size();) {
    const uint32_t len = be32(b, p);
    if (p + 12 + len > b.size()) throw std::runtime_error("truncated chunk");
    const std::string type = b.substr(p + 4, 4);
    const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(b.data() + p + 4), len + 4);
    if (crc != be32(b, p + 8 + len)) throw std::runtime_error("bad CRC in chunk " + type);
    if (type == "IHDR") {
      png.width = be32(b, p + 8), png.height = be32(b, p + 12);
      depth = uint8_t(b[p + 16]), colour = uint8_t(b[p + 17]), interlace = uint8_t(b[p + 20]);
    } else if (type == "IDAT") {
      idat += b.substr(p + 8, len);
    } else if (type == "IEND") {
      break;
    }
    p += 12 + len;
  }
  if (png.width == 0 || png.height == 0) throw std::runtime_error("no IHDR");
  if (depth != 8 || (colour != 2 && colour != 6) || interlace != 0)
    throw std::runtime_error("unsupported PNG format: depth " + std::to_string(depth) + " colour " + std::to_string(colour));
  png.channels = colour == 6 ? 4 : 3;
  const size_t stride = size_t(png.width) * png.channels;
  std::vector<uint8_t> raw((stride + 1) * png.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    throw std::runtime_error("IDAT does not inflate to the image size");
  png.pixels.resize(stride * png.height);
  const int bpp = png.channels;
  for (size_t y = 0; y < png.height; ++y) {
    const uint8_t f = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    uint8_t* row = &png.pixels[y * stride];
    const uint8_t* up = y ? &png.pixels[(y - 1) * stride] : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(bpp) ? row[x - bpp] : 0, u = up ? up[x] : 0, c = up && x >= size_t(bpp) ? up[x - bpp] : 0;
      int v = in[x];
      if (f == 1) v += a;
      else if (f == 2) v += u;
      else if (f == 3) v += (a + u) / 2;
      else if (f == 4) {
        const int pa = std::abs(u - c), pb = std::abs(a - c), pc = std::abs(a + u - 2 * c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? u : c;
      } else if (f != 0) throw std::runtime_error("bad filter type " + std::to_string(f));
      row[x] = uint8_t(v);
    }
  }
  return png;
}

TEST_F(ReportCli, HeadlessChromiumRendersTheCharts) {
  if (shell("command -v chromium").code != 0)
    GTEST_SKIP() << "chromium is not on PATH (scripts/setup.sh installs it): the page was not rendered";
  write_run(true, true);
  const fs::path html = tmp_ / "report.html", png = tmp_ / "shot.png";
  Result r = run("report " + quote(run_) + " -o " + quote(html));
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t n_svgs = svgs_in(read_text(html)).size();
  // Plain --headless: the new headless mode since Chromium 112 (the only one in 132+), still
  // accepted by older ones; each run gets its own profile so parallel tests do not collide.
  const std::string chrome = "timeout -k 5 90 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                             "--hide-scrollbars --user-data-dir=" + quote(tmp_ / "chrome-profile") + " ";
  Result shot = shell(chrome + "--screenshot=" + quote(png) + " --window-size=1200,2400 " + quote("file://" + html.string()));
  ASSERT_EQ(shot.code, 0) << shot.err;
  ASSERT_TRUE(fs::exists(png)) << shot.err;
  Png img;
  ASSERT_NO_THROW(img = decode_png(read_text(png)));
  EXPECT_EQ(img.width, 1200u);
  EXPECT_EQ(img.height, 2400u);
  // Not blank: many pixels differ from the background, and the two series colours of the
  // training curves (near the top of the page: blue #1f77b4 and orange #ff7f0e) are there. The
  // charts below the 2400-pixel window are checked through the DOM instead.
  size_t differ = 0, blue = 0, orange = 0;
  const uint8_t* bg = img.pixels.data();
  auto near = [](const uint8_t* p, int r, int g, int b) {
    return std::abs(p[0] - r) < 16 && std::abs(p[1] - g) < 16 && std::abs(p[2] - b) < 16;
  };
  for (size_t i = 0; i + img.channels <= img.pixels.size(); i += img.channels) {
    const uint8_t* p = &img.pixels[i];
    differ += p[0] != bg[0] || p[1] != bg[1] || p[2] != bg[2];
    blue += near(p, 0x1f, 0x77, 0xb4);
    orange += near(p, 0xff, 0x7f, 0x0e);
  }
  const size_t n = size_t(img.width) * img.height;
  EXPECT_GT(differ, n / 20) << "the screenshot is (nearly) blank";
  EXPECT_GT(blue, 300u) << "no train curve drawn";
  EXPECT_GT(orange, 300u) << "no test curve drawn";

  Result dom = shell(chrome + "--dump-dom " + quote("file://" + html.string()));
  ASSERT_EQ(dom.code, 0) << dom.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom.out, m, std::regex("<body([^>]*)>"))) << dom.out.substr(0, 500);
  const std::string body = m[1];
  EXPECT_NE(body.find("data-charts=\"" + std::to_string(n_svgs) + "\""), std::string::npos) << body;
  EXPECT_NE(body.find("data-charts-visible=\"" + std::to_string(n_svgs) + "\""), std::string::npos) << body;
  EXPECT_EQ(body.find("data-script-error"), std::string::npos) << body;
}

}  // namespace
