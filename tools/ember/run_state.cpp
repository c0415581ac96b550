// `ember train`'s run state: flags to and from a checkpoint's configuration (with the rules for
// which flags a resume may change), the training set's CRC, polled SIGINT/SIGTERM, and the run's
// checkpoint directory (save every N steps, keep the newest K, name the last good one on error).
#include "run_state.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ember/error.h"

namespace ember::cli {

using nlohmann::json;

json train_args_json(const TrainArgs& a, uint32_t train_crc, int64_t train_count) {
  const CommonArgs& c = a.common;
  return {{"command", a.command_line}, {"model", c.model}, {"data", c.data},
          {"batch_size", c.batch_size}, {"threads", c.threads}, {"isa", c.isa},
          {"limit_test", c.limit_test}, {"epochs", a.epochs}, {"lr", a.lr},
          {"optimizer", a.optimizer}, {"schedule", a.schedule}, {"lr_min", a.lr_min},
          {"t_max", a.t_max}, {"step_size", a.step_size}, {"gamma", a.gamma}, {"l2", a.l2},
          {"weight_decay", a.weight_decay}, {"momentum", a.momentum}, {"seed", a.seed},
          {"no_shuffle", a.no_shuffle}, {"init", a.init}, {"early_stop_tol", a.early_stop_tol},
          {"limit_train", a.limit_train}, {"metrics", a.metrics}, {"save", a.save},
          {"out", a.out}, {"profile", a.profile}, {"quiet", a.quiet},
          {"checkpoint_every", a.checkpoint_every}, {"checkpoint_dir", a.checkpoint_dir},
          {"keep_checkpoints", a.keep_checkpoints}, {"on_nonfinite", a.on_nonfinite},
          {"weights", a.weights}, {"train_crc32", train_crc}, {"train_count", train_count}};
}

namespace {
struct Restorer {
  const json& j;
  const CLI::App& cmd;
  std::string where;  // "FILE: __metadata__.ember_checkpoint.config"

  // Takes the checkpoint's value unless the user gave the flag; a flag that may not change
  // must then repeat the checkpoint's value.
  template <class T>
  void operator()(const char* key, const char* flag, T& v, bool may_change) const {
    if (!j.contains(key)) throw Error(where + "." + key + ": missing");
    T saved;
    try {
      saved = j[key].get<T>();
    } catch (const json::exception&) {
      throw Error(where + "." + key + ": unexpected value " + j[key].dump());
    }
    if (cmd.count(flag) == 0) {
      v = saved;
    } else if (!may_change && !(v == saved)) {
      throw Error(std::string(flag) + ": cannot be changed when resuming (the checkpoint has " +
                  json(saved).dump() + "); start a new run with --weights to change it");
    }
  }
};
}  // namespace

void resume_args(TrainArgs& a, const CLI::App& cmd, const CheckpointInfo& info) {
  json j;
  try {
    j = json::parse(info.config_json);
  } catch (const json::exception& e) {
    throw Error(info.path + ": __metadata__.ember_checkpoint.config: invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(info.path + ": __metadata__.ember_checkpoint.config: expected an object");
  const Restorer r{j, cmd, info.path + ": __metadata__.ember_checkpoint.config"};
  CommonArgs& c = a.common;
  r("model", "--model", c.model, false);
  r("data", "--data", c.data, true);
  r("batch_size", "--batch-size", c.batch_size, false);
  r("threads", "--threads", c.threads, true);
  r("isa", "--isa", c.isa, true);
  r("limit_test", "--limit-test", c.limit_test, true);
  r("epochs", "--epochs", a.epochs, true);
  r("lr", "--lr", a.lr, false);
  r("optimizer", "--optimizer", a.optimizer, false);
  r("schedule", "--schedule", a.schedule, false);
  r("lr_min", "--lr-min", a.lr_min, false);
  r("t_max", "--t-max", a.t_max, false);
  r("step_size", "--step-size", a.step_size, false);
  r("gamma", "--gamma", a.gamma, false);
  r("l2", "--l2", a.l2, false);
  r("weight_decay", "--weight-decay", a.weight_decay, false);
  r("momentum", "--momentum", a.momentum, false);
  r("seed", "--seed", a.seed, false);
  r("no_shuffle", "--no-shuffle", a.no_shuffle, false);
  r("init", "--init", a.init, true);  // used only before the first step
  r("early_stop_tol", "--early-stop-tol", a.early_stop_tol, true);
  r("limit_train", "--limit-train", a.limit_train, false);
  r("metrics", "--metrics", a.metrics, true);
  r("save", "--save", a.save, true);
  r("out", "--out", a.out, true);
  r("profile", "--profile", a.profile, true);
  r("quiet", "--quiet", a.quiet, true);
  r("checkpoint_every", "--checkpoint-every", a.checkpoint_every, true);
  r("checkpoint_dir", "--checkpoint-dir", a.checkpoint_dir, true);
  r("keep_checkpoints", "--keep-checkpoints", a.keep_checkpoints, true);
  r("on_nonfinite", "--on-nonfinite", a.on_nonfinite, true);
}

uint32_t dataset_crc(const Dataset& d) {
  uLong crc = crc32(0L, Z_NULL, 0);
  auto add = [&](const std::vector<uint8_t>& v) {
    for (size_t i = 0; i < v.size(); i += (size_t(1) << 30))
      crc = crc32(crc, v.data() + i, uInt(std::min(v.size() - i, size_t(1) << 30)));
  };
  add(d.images);
  add(d.labels);
  return uint32_t(crc);
}

SignalStop::SignalStop() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
}

SignalStop::~SignalStop() {
  while (taken() != 0) {}  // consume what is pending: the run has already stopped for it
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

int SignalStop::taken() {
  sigset_t pending;
  if (sigpending(&pending) != 0) return 0;
  for (int s : {SIGINT, SIGTERM})
    if (sigismember(&pending, s)) {
      const timespec zero{0, 0};
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, s);
      return sigtimedwait(&one, nullptr, &zero) == s ? s : 0;
    }
  return 0;
}

Checkpoints::Checkpoints(std::string dir, int64_t every, int keep, std::string config_json)
    : dir_(std::move(dir)), config_(std::move(config_json)), every_(every), keep_(keep) {}

void Checkpoints::maybe_save(Plan& plan, const TrainState& next, int64_t step) {
  if (every_ > 0 && step % every_ == 0) save(plan, next, step);
}

void Checkpoints::save(Plan& plan, const TrainState& next, int64_t step) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw Error("--checkpoint-dir: cannot create directory '" + dir_ + "'" + (ec ? ": " + ec.message() : ""));
  const std::string path = checkpoint_path(dir_, step);
  try {
    save_checkpoint(plan, next, config_, path);
  } catch (const Error& e) {
    throw Error("checkpoint at step " + std::to_string(step) + ": " + e.what() + "; the last good checkpoint is " +
                (last_.empty() ? std::string("none (no checkpoint was written yet)") : last_));
  }
  last_ = path;
  prune_checkpoints(dir_, keep_);
}

}  // namespace ember::cli
