// `ember bench`: runs the end-to-end workloads (ember_support/bench.h) and prints, per workload, time,
// samples/s, GFLOP/s and % of the FMA peak measured at start; --json prints one JSON document.
#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "ember_support/bench.h"
#include "ember/cpu.h"
#include "ember/data.h"
#include "ember/error.h"
#include "ember/io.h"
#include "ember/onnx.h"
#include "ember/plan.h"
#include "ember_support/json.h"
#include "ember/version.h"

namespace ember::cli {

void add_bench_flags(CLI::App* cmd, BenchArgs& a) {
  cmd->add_option("--threads", a.threads, "Threads for every workload (default: each workload's own, 1 or all)")
      ->capture_default_str();
  cmd->add_option("--batch-size", a.batch_size, "Batch size for every workload (default: each workload's own)")
      ->capture_default_str();
  cmd->add_option("--isa", a.isa, "Kernel set: scalar, avx2, avx512 or amx (default: the best the CPU has)");
  cmd->add_option("--precision", a.precisions,
                  "fp32, bf16 or fp32,bf16: the model workloads' precision; with both, each runs in fp32 then bf16 "
                  "(side by side); the GEMM rows name theirs (sgemm-*, sbgemm-*)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--layout", a.layout, "auto, nchw or nhwc: the model workloads' activation layout (int8 rows run the int8 plan's own: u8 channel-last)")->capture_default_str();
  cmd->add_option("--samples", a.samples, "Training samples timed per training workload")->capture_default_str();
  cmd->add_option("--warmup-samples", a.warmup_samples,
                  "cnn-train, mlp-train: samples trained untimed first, so that the timed ones start from a trained "
                  "state (-1, the default: one epoch of the data set; 0: from a fresh initialisation)")
      ->capture_default_str();
  cmd->add_option("--denormals", a.denormals, "flush or keep: every plan's denormal mode (as train's --denormals)")
      ->capture_default_str();
  cmd->add_option("--workloads", a.workloads, "Comma-separated workloads to run (default: all; see --list)")
      ->delimiter(',');
  cmd->add_option("--data", a.data, "MNIST-format directory to train on (default: Fashion-MNIST)");
  cmd->add_option("--data-folder", a.data_folder, "Image folder for the data-* workloads (default: 2,500 generated 64x64 JPEGs)");
  cmd->add_option("--model", a.model,
                  "Time only this model's forward pass (a built-in name, FILE.json, or FILE.onnx with its weights) at "
                  "--batch-size (default: 1 and 64): workloads model-infer-bB; with --weights, a row per file of the model");
  cmd->add_flag("--json", a.json, "Print one JSON document instead of the table");
  cmd->add_option("--weights", a.weights,
                  "Weight files (fp32, or quantized by `ember quantize`) the inference workloads of their model run with, "
                  "one row each, side by side (int8 rows: precision int8)")
      ->delimiter(',');
  cmd->add_flag("--list", a.list, "List the workloads and exit");
}

namespace {

// Milliseconds per forward pass of `model` at `batch` on random inputs: an inference plan (frozen),
// the ONNX file's weights, a weight file's (`weights`) or random ones, 3 untimed passes, then the best of 3 rounds' means
// (each round at least 3 passes and `seconds` / 3), as bench/onnxruntime_infer.js times its side.
double time_model(const Model& model, const OnnxImport* onnx, int batch, int threads, const std::string& isa,
                  Precision prec, double seconds, double* flops, const std::string& layout, Denormals dn,
                  const std::string& weights) {
  PlanOptions po;
  po.batch = batch, po.threads = threads, po.isa = isa, po.training = false, po.precision = prec, po.layout = layout;
  po.denormals = dn;
  Plan plan(model, po);
  if (onnx) load_onnx_weights(plan, *onnx);
  else if (!weights.empty()) load_weights(plan, weights);
  else plan.init_params(1);
  plan.freeze();
  *flops = plan.flops_per_sample(false);
  fill_uniform(static_cast<float*>(plan.input()), size_t(batch) * model.in_c * model.in_h * model.in_w, 12345, 1);
  for (int i = 0; i < 3; ++i) plan.forward(batch);
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    int64_t reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    while (reps < 3 || s < seconds / 3) {
      plan.forward(batch);
      ++reps;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    best = std::min(best, s / double(reps) * 1e3);
  }
  return best;
}

// Prints the table (or collects --json rows) for either kind of run.
class Reporter {
 public:
  Reporter(const BenchArgs& a, const BenchMachine& m, const std::string& data) : a_(a), m_(m), data_(data) {
    if (a.json) return;
    std::printf("ember %s bench on %s (%d hardware threads), kernels %s, data %s\n", kVersion, m.cpu.c_str(),
                m.hw_threads, m.isa.c_str(), data.c_str());
    std::printf("FMA peak (measured): %.1f GFLOP/s on 1 thread, %.1f on %d\n", m.peak_gflops_1t, m.peak_gflops,
                m.hw_threads);
    if (m.amx_peak_gflops_1t > 0)  // bf16 rows' % peak is of it
      std::printf("AMX peak (measured, TDPBF16PS): %.1f GFLOP/s on 1 thread, %.1f on %d\n", m.amx_peak_gflops_1t,
                  m.amx_peak_gflops, m.hw_threads);
    std::printf("\n");
    std::printf("%-14s %5s %7s %6s %12s %-10s %12s %9s %7s\n", "workload", "prec", "threads", "batch", "value", "unit",
                "samples/s", "GFLOP/s", "% peak");
    std::fflush(stdout);
  }
  void row(const BenchResult& r) {
    if (a_.json) {
      rows_.push_back({{"name", r.name}, {"what", r.what}, {"threads", r.threads}, {"batch", r.batch},
                       {"value", r.value}, {"unit", r.unit}, {"samples_per_s", r.samples_per_s},
                       {"gflops", r.gflops}, {"peak_pct", r.peak_pct}, {"precision", r.precision}, {"weights", r.weights}});
      return;
    }
    auto num = [](double v, const char* fmt) {
      char b[32];
      if (v <= 0) return std::string("-");
      std::snprintf(b, sizeof b, fmt, v);
      return std::string(b);
    };
    std::printf("%-14s %5s %7d %6s %12s %-10s %12s %9s %7s\n", r.name.c_str(), r.precision.c_str(), r.threads,
                r.batch ? std::to_string(r.batch).c_str() : "-", num(r.value, "%.4g").c_str(), r.unit.c_str(),
                num(r.samples_per_s, "%.0f").c_str(), num(r.gflops, "%.1f").c_str(),
                num(r.peak_pct, "%.1f").c_str());
    if (!r.weights.empty()) std::printf("%-14s   weights %s\n", "", one_line(r.weights).c_str());
    std::fflush(stdout);
  }
  void finish() {
    if (!a_.json) return;
    nlohmann::json doc;
    doc["ember_version"] = kVersion;
    doc["machine"] = {{"cpu", m_.cpu}, {"hw_threads", m_.hw_threads}, {"isa", m_.isa},
                      {"peak_gflops_1t", m_.peak_gflops_1t}, {"peak_gflops", m_.peak_gflops},
                      {"amx_peak_gflops_1t", m_.amx_peak_gflops_1t}, {"amx_peak_gflops", m_.amx_peak_gflops}};
    doc["data"] = data_;
    doc["workloads"] = rows_;
    std::printf("%s\n", json_text(doc, 2).c_str());
  }

 private:
  const BenchArgs& a_;
  const BenchMachine& m_;
  std::string data_;
  nlohmann::json rows_ = nlohmann::json::array();
};

// A --weights file of `ember bench --model M`: its path, whether it is quantized (an int8 row, run
// with fp32 rows only, as the workloads' int8 rows are), and the model its metadata holds (M, as
// fitted when the file was saved: the rows time that model, with those weights).
struct ModelWeights {
  std::string path;
  bool quantized = false;
  Model model;
};

// Each --weights file, checked before anything is measured; none given: one entry with no path
// (random weights, or the ONNX file's own).
std::vector<ModelWeights> model_weight_files(const BenchArgs& a, const Model& model, bool onnx,
                                             const std::vector<Precision>& precisions) {
  if (a.weights.empty()) return {{"", false, model}};
  if (onnx) throw Error("--weights: the ONNX --model " + quote_path(a.model) + " holds its own weights");
  const bool fp32 = std::find(precisions.begin(), precisions.end(), Precision::fp32) != precisions.end();
  std::vector<ModelWeights> out;
  for (const std::string& w : a.weights) {
    const auto meta = read_weights_metadata(w);
    const auto it = meta.find("model");
    if (it == meta.end()) throw Error("--weights: " + quote_path(w) + " names no model (no __metadata__.model)");
    const auto names = builtin_model_names();  // PyTorch-written files may name a built-in model
    const Model held = std::find(names.begin(), names.end(), it->second) != names.end()
                           ? builtin_model(it->second)
                           : parse_model_json(it->second, w + ": __metadata__.model");
    if (held.name != model.name)
      throw Error("--weights: " + quote_path(w) + " holds model '" + one_line(held.name) + "', not --model " + one_line(model.name));
    const bool quantized = meta.count("ember_quant") > 0;
    if (quantized && !fp32)
      throw Error("--weights: " + quote_path(w) + " is quantized: its int8 row runs with --precision fp32 (given: " +
                  precision_name(precisions.front()) + " only)");
    out.push_back({w, quantized, held});
  }
  return out;
}

// `ember bench --model M`: the forward pass of M (an ONNX file with its weights) at each batch.
// note: says what the flags' run means on this CPU (emulated bf16), once its files are checked.
int run_model_bench(const BenchArgs& a, const BenchOptions& o, const std::function<void()>& note) {
  std::optional<OnnxImport> onnx;
  Model model;
  if (is_onnx_path(a.model)) {
    onnx = import_model_file(a.model);
    model = onnx->model;
  } else {
    model = model_flag(a.model);
  }
  const std::vector<ModelWeights> files = model_weight_files(a, model, onnx.has_value(), o.precisions);
  note();
  const BenchMachine m = naming_flags({{"isa", "--isa"}}, [&] { return measure_machine(a.isa); });
  Reporter rep(a, m, "random");
  const std::vector<int> batches = o.batch ? std::vector<int>{o.batch} : std::vector<int>{1, 64};
  const int rate = resolve_kernel_set(m.isa, "--isa").bf16_rate;
  for (int b : batches) {
    for (const auto& [file, quantized, held] : files) {
      for (Precision prec : o.precisions) {
        if (quantized && prec != Precision::fp32) continue;  // a quantized file: one int8 row, beside fp32's
        BenchResult r;
        r.precision = quantized ? "int8" : precision_name(prec);
        r.name = "model-infer-b" + std::to_string(b);
        r.what = model.name + " forward pass of random inputs, milliseconds per batch";
        r.threads = o.threads ? o.threads : m.hw_threads, r.batch = b;
        r.weights = file;
        double fps = 0;
        r.value = naming_flags({{"isa", "--isa"}}, [&] {
          return quantized ? time_int8(file, nullptr, b, r.threads, a.isa, &fps, 2.0, o.denormals)
                           : time_model(held, onnx ? &*onnx : nullptr, b, r.threads, a.isa, prec, 2.0, &fps, a.layout, o.denormals, file);
        });
        r.unit = "ms", r.samples_per_s = b / (r.value / 1e3), r.gflops = fps * r.samples_per_s / 1e9;
        const double fma = r.threads == 1 ? m.peak_gflops_1t : m.peak_gflops;
        const double amx = r.threads == 1 ? m.amx_peak_gflops_1t : m.amx_peak_gflops;
        r.peak_pct = 100 * r.gflops / (prec != Precision::bf16 || quantized ? fma : amx > 0 ? amx : rate * fma);
        rep.row(r);
      }
    }
  }
  rep.finish();
  return 0;
}

}  // namespace

int run_bench(const BenchArgs& a) {
  if (a.list) {
    for (const auto& n : bench_workloads()) std::printf("%s\n", n.c_str());
    for (const auto& n : convnext_workloads()) std::printf("%s (only when named)\n", n.c_str());
    for (const auto& n : data_workloads()) std::printf("%s (only when named)\n", n.c_str());
    return 0;
  }
  BenchOptions o;
  o.threads = a.threads, o.batch = a.batch_size, o.isa = a.isa, o.layout = a.layout, o.samples = a.samples, o.only = a.workloads;
  o.data_folder = a.data_folder;
  o.weights = a.weights;
  o.warmup_samples = a.warmup_samples;
  o.denormals = parse_denormals(a.denormals, "--denormals");
  o.precisions.clear();
  for (const std::string& p : a.precisions) {
    const Precision prec = parse_precision(p, "--precision");
    if (std::find(o.precisions.begin(), o.precisions.end(), prec) == o.precisions.end()) o.precisions.push_back(prec);
  }
  if (o.threads < 0 || o.threads > 256) throw Error("--threads: expected 0..256, found " + std::to_string(o.threads));
  if (o.batch < 0 || o.batch > 65536) throw Error("--batch-size: expected 0..65536, found " + std::to_string(o.batch));
  if (o.samples < 1 || o.samples > 100000000) throw Error("--samples: expected 1..100000000, found " + std::to_string(o.samples));
  if (o.warmup_samples < -1 || o.warmup_samples > 100000000)
    throw Error("--warmup-samples: expected -1 (one epoch) or 0..100000000, found " + std::to_string(o.warmup_samples));
  const bool bf16 = std::find(o.precisions.begin(), o.precisions.end(), Precision::bf16) != o.precisions.end();
  const KernelSet isa = resolve_kernel_set(a.isa, "--isa");
  const auto note = [&] { if (bf16 && isa.bf16_rate < 2) note_emulated_bf16(isa.name); };
  if (!a.model.empty()) return run_model_bench(a, o, note);
  note();
  auto known = bench_workloads();
  for (const auto& n : convnext_workloads()) known.push_back(n);
  for (const auto& n : data_workloads()) known.push_back(n);
  for (const auto& w : o.only)
    if (std::find(known.begin(), known.end(), w) == known.end())
      throw Error("--workloads: unknown workload '" + w + "' (ember bench --list shows them)");
  // The data set is read only for the mnist-cnn and MLP workloads (the ConvNeXt ones make random
  // inputs): a ConvNeXt-only run's peak RSS is the plan's, not the plan's plus 47 MB of images.
  auto own_inputs = convnext_workloads();
  for (const auto& n : data_workloads()) own_inputs.push_back(n);
  bool needs_data = o.only.empty();
  for (const auto& w : o.only) needs_data = needs_data || std::find(own_inputs.begin(), own_inputs.end(), w) == own_inputs.end();
  const std::string dir = a.data.empty() ? kDefaultDataDir : a.data;
  const TrainTest data = needs_data ? load_mnist_dir(dir) : TrainTest{};
  const BenchMachine m = naming_flags({{"isa", "--isa"}}, [&] { return measure_machine(a.isa); });
  Reporter rep(a, m, needs_data ? dir : "random");
  naming_flags({{"data_folder", "--data-folder"}}, [&] { ember::run_bench(o, m, data.train, [&](const BenchResult& r) { rep.row(r); }); });
  rep.finish();
  return 0;
}

}  // namespace ember::cli
