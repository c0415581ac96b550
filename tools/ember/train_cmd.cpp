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
#include "run_state.h"

namespace ember::cli {

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  try {
    write_file_atomic(path, {text});
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
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
    auto join = [](const std::vector<int>& dims) {
      std::string t;
      for (int d : dims) t.append(t.empty() ? "" : "x").append(std::to_string(d));
      return t;
    };
    shape_in = join(li.in_shape);
    shape_out = join(li.out_shape);
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

namespace {
// --resume: a checkpoint file, or the newest checkpoint in a directory.
std::string resolve_resume(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_directory(arg, ec)) {
    const std::vector<std::string> all = list_checkpoints(arg);
    if (all.empty()) throw Error("--resume: no checkpoint (ckpt-*.safetensors) in directory '" + arg + "'");
    return all.back();
  }
  if (!std::filesystem::exists(arg, ec)) throw Error("--resume: no such file or directory '" + arg + "'");
  return arg;
}

// A resumed run's metrics file keeps the epochs the checkpoint had finished; later lines came
// from after it and are written again.
void keep_metrics_epochs(const std::string& path, int epochs_done) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() &&
        j["epoch"].get<int>() <= epochs_done)
      kept += line + "\n";
  }
  write_text_file(path, kept, "--metrics");
}

std::string metrics_line(const EpochMetrics& m) {
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %.9g, \"train_acc\": %.9g, "
                "\"test_loss\": %.9g, \"test_acc\": %.9g, \"seconds\": %.6f, \"samples_per_s\": %.3f%s}\n",
                m.epoch, m.lr, m.train_loss, m.train_acc, m.test_loss, m.test_acc, m.seconds,
                m.samples_per_s, m.skipped ? (", \"skipped_steps\": " + std::to_string(m.skipped)).c_str() : "");
  return line;
}
}  // namespace

int run_train(TrainArgs a, const CLI::App& cmd) {
  SignalStop signals;  // before the plan starts its pool threads, which inherit the mask
  const bool resuming = !a.resume.empty();
  CheckpointInfo resumed;
  Model resumed_model;
  nlohmann::json resumed_config;
  if (resuming) {
    if (!a.weights.empty()) throw Error("--weights: cannot be combined with --resume (a checkpoint holds its own weights)");
    resumed = read_checkpoint_info(resolve_resume(a.resume));
    resume_args(a, cmd, resumed);
    resumed_model = parse_model_json(resumed.model_json, resumed.path + ": __metadata__.model");
    resumed_config = nlohmann::json::parse(resumed.config_json);  // checked by resume_args
  }
  TrainSetup su = resuming ? make_train_setup(a, [](const char*) { return true; }, &resumed_model)
                           : make_train_setup(a, cmd);
  std::ofstream metrics;  // opened before the long work so a bad path fails at once
  if (!a.out.empty()) {
    make_run_dir(a.out);
    if (a.metrics.empty()) a.metrics = a.out + "/metrics.jsonl";
  }
  if (!a.metrics.empty()) {
    if (resuming) keep_metrics_epochs(a.metrics, resumed.state.epoch);
    metrics.open(a.metrics, std::ios::out | (resuming ? std::ios::app : std::ios::trunc));
    if (!metrics)
      throw Error("--metrics: cannot open '" + a.metrics + "' for writing: " + std::strerror(errno));
  }
  Plan plan(su.model, su.plan);
  TrainTest data = load_train_data(a);
  check_dataset_fits(plan, data.train, "training set");
  const uint32_t crc = dataset_crc(data.train);
  const std::string data_dir = a.common.data.empty() ? kDefaultDataDir : a.common.data;
  if (resuming) {
    const nlohmann::json& c = resumed_config;
    if (c.value("train_crc32", uint64_t(0)) != crc || c.value("train_count", int64_t(-1)) != data.train.count)
      throw Error("--data: the training set in " + data_dir + " (" + std::to_string(data.train.count) +
                  " images, CRC-32 " + std::to_string(crc) + ") is not the one checkpoint " + resumed.path +
                  " was trained on (" + c.value("train_count", nlohmann::json()).dump() + " images, CRC-32 " +
                  c.value("train_crc32", nlohmann::json()).dump() + ")");
    load_checkpoint(plan, resumed.path);
    su.cfg.start = resumed.state;
  } else {
    plan.init_params(a.seed);
    if (!a.weights.empty()) load_weights(plan, a.weights);
  }
  const std::string ckdir = !a.checkpoint_dir.empty() ? a.checkpoint_dir
                            : a.out.empty()           ? std::string("checkpoints")
                                                      : a.out + "/checkpoints";
  Checkpoints ckpts(ckdir, a.checkpoint_every, a.keep_checkpoints, train_args_json(a, crc, data.train.count).dump());
  if (resuming) ckpts.set_last(resumed.path);
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
  const int64_t batches = (data.train.count + plan.batch() - 1) / plan.batch();
  if (resuming) {
    std::printf("  resumed from %s: epoch %d, batch %lld of %lld, optimizer step %lld\n", resumed.path.c_str(),
                resumed.state.epoch + 1, (long long)resumed.state.batch, (long long)batches,
                (long long)plan.optimizer_steps());
    const nlohmann::json& c = resumed_config;
    if (c.value("threads", 0) != plan.threads() || c.value("isa", std::string()) != a.common.isa)
      std::printf("  note: threads or --isa differ from the checkpoint's run: results will not be bit-identical to it\n");
  }
  std::fflush(stdout);
  Progress progress(stdout, isatty(fileno(stdout)) != 0, a.epochs);
  if (!a.quiet) su.cfg.on_step = [&](int e, int64_t done, int64_t total) { progress.step(e, done, total); };
  int stop_signal = 0;
  su.cfg.after_step = [&](const TrainState& next) {
    const int64_t step = next.epoch * batches + next.batch;
    ckpts.maybe_save(plan, next, step);
    if ((stop_signal = signals.taken()) == 0) return true;
    if (ckpts.last() != checkpoint_path(ckpts.dir(), step)) ckpts.save(plan, next, step);
    return false;
  };
  TrainResult r;
  try {
    r = train(plan, data.train, data.test, su.cfg, [&](const EpochMetrics& m) {
      progress.clear();
      if (!a.quiet) {
        std::printf("epoch %3d/%d  lr %.3e  train loss %.4f acc %6.2f%%  test loss %.4f acc %6.2f%%  %7.2f s  %9.0f samples/s%s\n",
                    m.epoch, a.epochs, m.lr, m.train_loss, 100 * m.train_acc, m.test_loss, 100 * m.test_acc,
                    m.seconds, m.samples_per_s,
                    m.skipped ? ("  (" + std::to_string(m.skipped) + " steps skipped: NaN/Inf)").c_str() : "");
        std::fflush(stdout);
      }
      if (metrics.is_open()) {
        metrics << metrics_line(m) << std::flush;
        if (!metrics) throw Error("--metrics: write to '" + a.metrics + "' failed");
      }
      return true;
    });
  } catch (const NonfiniteError& e) {
    progress.clear();
    throw Error(std::string(e.what()) +
                (ckpts.last().empty() ? std::string(" (no checkpoint was written: use --checkpoint-every N)")
                                      : "; last good checkpoint " + ckpts.last() +
                                            " (resume with --resume and a lower --lr, or --on-nonfinite skip)"));
  }
  progress.clear();
  if (r.stopped) {
    std::fflush(stdout);
    std::fprintf(stderr, "ember: %s at step %lld (epoch %d, batch %lld of %lld): checkpoint %s\n"
                 "resume with: ember train --resume %s\n",
                 stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)",
                 (long long)(r.state.epoch * batches + r.state.batch), r.state.epoch + 1,
                 (long long)r.state.batch, (long long)batches, ckpts.last().c_str(), ckpts.dir().c_str());
    return 128 + stop_signal;
  }
  if (r.epochs_run == 0)
    std::printf("nothing to train: the run is at the end of epoch %d of %d (raise --epochs to train on)\n",
                su.cfg.start.epoch, a.epochs);
  else
    std::printf("final test accuracy %.2f%% (loss %.4f) after %d epochs%s, total %.2f s\n",
                100 * r.last.test_acc, r.last.test_loss, r.epochs_run,
                r.early_stopped ? " (early stop)" : "", r.seconds);
  if (a.checkpoint_every > 0 && r.epochs_run > 0) {  // the end, unless the last step just saved it
    const int64_t step = r.state.epoch * batches;
    if (ckpts.last() != checkpoint_path(ckpts.dir(), step)) ckpts.save(plan, r.state, step);
    std::printf("checkpoint %s\n", ckpts.last().c_str());
  }
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
