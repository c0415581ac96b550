// `ember train`: trains with a progress display, prints per-epoch metrics, and with --out writes
// a run directory (config.json, model.json, metrics.jsonl; with --profile also profile.json,
// profile.folded and trace.json) that `ember report` turns into one HTML page.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ember/bench.h"
#include "ember/error.h"
#include "ember/io.h"
#include "ember/profile.h"
#include "ember/version.h"
#include "progress.h"

namespace ember::cli {

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::out | std::ios::trunc | std::ios::binary);
    if (!f) throw Error(what + ": cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    f << text;
    f.flush();
    if (!f) throw Error(what + ": write to '" + tmp + "' failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(what + ": cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

void make_run_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw Error("--out: cannot create directory '" + dir + "'" + (ec ? ": " + ec.message() : ""));
}

std::string model_summary_json(const Plan& plan) {
  using nlohmann::json;
  json layers = json::array();
  const auto& infos = plan.layers();
  for (size_t i = 0; i < infos.size(); ++i) {
    const LayerInfo& li = infos[i];
    std::string shape_in, shape_out;
    for (int d : li.in_shape) shape_in += (shape_in.empty() ? "" : "x") + std::to_string(d);
    for (int d : li.out_shape) shape_out += (shape_out.empty() ? "" : "x") + std::to_string(d);
    layers.push_back({{"index", i}, {"type", li.kind},
                      {"description", li.kind + " " + shape_in + " -> " + shape_out},
                      {"input_shape", li.in_shape}, {"output_shape", li.out_shape},
                      {"params", li.params}, {"mflops_per_sample", li.flops_fwd / 1e6}});
  }
  const Model& m = plan.model();
  json j = {{"name", m.name},
            {"params", plan.param_count()},
            {"input_shape", {m.in_c, m.in_h, m.in_w}},
            {"classes", m.num_classes},
            {"layers", layers},
            {"units", json::array()},
            {"arena_bytes", plan.arena_bytes()}};
  for (const UnitInfo& u : plan.units()) j["units"].push_back(u.name);
  return j.dump(1) + "\n";
}

std::string config_json(const TrainArgs& a, const Plan& plan, const std::string& data_dir) {
  const BenchMachine mc = measure_machine(plan.isa_name());
  char started[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  nlohmann::json j = {
      {"ember_version", kVersion}, {"command", a.command_line}, {"model", plan.model().name},
      {"data", data_dir},         {"epochs", a.epochs},        {"batch_size", plan.batch()},
      {"optimizer", a.optimizer}, {"lr", a.lr},                {"schedule", a.schedule},
      {"lr_min", a.lr_min},       {"t_max", a.t_max},          {"l2", a.l2},
      {"weight_decay", a.weight_decay}, {"threads", plan.threads()}, {"isa", plan.isa_name()},
      {"seed", a.seed},           {"shuffle", !a.no_shuffle},  {"started", started},
      {"machine", {{"cpu", mc.cpu}, {"hardware_threads", mc.hw_threads},
                   {"fma_peak_gflops_1t", mc.peak_gflops_1t}, {"build", kBuildType},
                   {"compiler", kCompiler}}}};
  return j.dump(1) + "\n";
}

double peak_for(const Plan& plan) {
  return measure_machine(plan.isa_name()).peak_gflops_1t * plan.threads();
}

int run_train(TrainArgs a, const CLI::App& cmd) {
  TrainSetup su = make_train_setup(a, cmd);
  std::ofstream metrics;  // opened before the long work so a bad path fails at once
  if (!a.out.empty()) {
    make_run_dir(a.out);
    if (a.metrics.empty()) a.metrics = a.out + "/metrics.jsonl";
  }
  if (!a.metrics.empty()) {
    metrics.open(a.metrics, std::ios::out | std::ios::trunc);
    if (!metrics)
      throw Error("--metrics: cannot open '" + a.metrics + "' for writing: " + std::strerror(errno));
  }
  Plan plan(su.model, su.plan);
  TrainTest data = load_train_data(a);
  check_dataset_fits(plan, data.train, "training set");
  plan.init_params(a.seed);
  const std::string data_dir = a.common.data.empty() ? kDefaultDataDir : a.common.data;
  if (!a.out.empty()) {
    write_text_file(a.out + "/config.json", config_json(a, plan, data_dir), "--out");
    write_text_file(a.out + "/model.json", model_summary_json(plan), "--out");
  }
  std::unique_ptr<Profiler> prof;
  if (a.profile) {  // a whole run's spans are aggregated; the trace keeps the first ones
    prof = std::make_unique<Profiler>(plan.threads(), int(plan.units().size()), size_t(1) << 14);
    plan.set_profiler(prof.get());
  }

  std::printf("ember train: model %s, %zu parameters, data %s (%lld train / %lld test)\n",
              su.model.name.c_str(), plan.param_count(), data_dir.c_str(),
              (long long)data.train.count, (long long)data.test.count);
  std::printf("  %s lr %g, schedule %s, l2 %g, weight decay %g, batch %d, %d epochs, %d threads, isa %s, seed %llu\n",
              a.optimizer.c_str(), a.lr, a.schedule.c_str(), a.l2, a.weight_decay, su.plan.batch, a.epochs,
              plan.threads(), plan.isa_name(), (unsigned long long)a.seed);
  std::fflush(stdout);
  Progress progress(stdout, isatty(fileno(stdout)) != 0, a.epochs);
  if (!a.quiet) su.cfg.on_step = [&](int e, int64_t done, int64_t total) { progress.step(e, done, total); };
  const TrainResult r = train(plan, data.train, data.test, su.cfg, [&](const EpochMetrics& m) {
    progress.clear();
    if (!a.quiet) {
      std::printf("epoch %3d/%d  lr %.3e  train loss %.4f acc %6.2f%%  test loss %.4f acc %6.2f%%  %7.2f s  %9.0f samples/s\n",
                  m.epoch, a.epochs, m.lr, m.train_loss, 100 * m.train_acc, m.test_loss, 100 * m.test_acc,
                  m.seconds, m.samples_per_s);
      std::fflush(stdout);
    }
    if (metrics.is_open()) {
      char line[512];
      std::snprintf(line, sizeof line,
                    "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %.9g, \"train_acc\": %.9g, "
                    "\"test_loss\": %.9g, \"test_acc\": %.9g, \"seconds\": %.6f, \"samples_per_s\": %.3f}\n",
                    m.epoch, m.lr, m.train_loss, m.train_acc, m.test_loss, m.test_acc, m.seconds,
                    m.samples_per_s);
      metrics << line << std::flush;
      if (!metrics) throw Error("--metrics: write to '" + a.metrics + "' failed");
    }
    return true;
  });
  progress.clear();
  std::printf("final test accuracy %.2f%% (loss %.4f) after %d epochs%s, total %.2f s\n",
              100 * r.last.test_acc, r.last.test_loss, r.epochs_run,
              r.early_stopped ? " (early stop)" : "", r.seconds);
  if (prof) {
    plan.set_profiler(nullptr);
    const ProfileSummary s = summarize_profile(plan, *prof, peak_for(plan));
    std::printf("\n%s", format_profile(s).c_str());
    if (!a.out.empty()) {
      write_text_file(a.out + "/profile.json", profile_json(s), "--out");
      write_text_file(a.out + "/profile.folded", folded_stacks(plan, *prof), "--out");
      write_text_file(a.out + "/trace.json", chrome_trace_json(plan, *prof), "--out");
    }
  }
  if (!a.save.empty()) {
    save_weights(plan, a.save);
    std::printf("weights saved to %s\n", a.save.c_str());
  }
  if (!a.out.empty()) std::printf("run directory %s (ember report %s -o report.html)\n", a.out.c_str(), a.out.c_str());
  return 0;
}

}  // namespace ember::cli
