// `ember train`'s run state: flags to and from a checkpoint's configuration (with the rules for
// which flags a resume may change), the training set's CRC, polled SIGINT/SIGTERM, and the run's
// checkpoint directory (save every N steps, keep the newest K, name the last good one on error).
#include "run_state.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <sys/stat.h>

#include <filesystem>
#include <map>

#include "ember/error.h"
#include "ember_support/files.h"
#include "ember_support/json.h"

namespace ember::cli {

using nlohmann::json;

json train_args_json(const TrainArgs& a, uint32_t train_crc, int64_t train_count) {
  const CommonArgs& c = a.common;
  return {{"command", a.command_line}, {"model", c.model}, {"data", c.data},
          {"data_format", c.data_format}, {"image_size", c.image_size}, {"resize", c.resize}, {"label", c.label},
          {"crop", c.crop}, {"pad", c.pad}, {"flip", c.flip}, {"resized_crop", c.resized_crop},
          {"no_augment", c.no_augment}, {"normalize", c.normalize},
          {"batch_size", c.batch_size}, {"threads", c.threads}, {"isa", c.isa}, {"precision", c.precision}, {"layout", c.layout},
          {"limit_test", c.limit_test}, {"epochs", a.epochs}, {"lr", a.lr},
          {"optimizer", a.optimizer}, {"schedule", a.schedule}, {"lr_min", a.lr_min},
          {"t_max", a.t_max}, {"step_size", a.step_size}, {"gamma", a.gamma}, {"l2", a.l2},
          {"weight_decay", a.weight_decay}, {"momentum", a.momentum}, {"seed", a.seed},
          {"no_shuffle", a.no_shuffle}, {"init", a.init}, {"early_stop_tol", a.early_stop_tol},
          {"limit_train", a.limit_train}, {"metrics", a.metrics}, {"save", a.save},
          {"targets", a.targets}, {"test_targets", a.test_targets},
          {"save_dtype", a.save_dtype},
          {"out", a.out}, {"profile", a.profile}, {"quiet", a.quiet},
          {"checkpoint_every", a.checkpoint_every}, {"checkpoint_dir", a.checkpoint_dir},
          {"keep_checkpoints", a.keep_checkpoints}, {"on_nonfinite", a.on_nonfinite},
          {"weights", a.weights}, {"train_crc32", train_crc}, {"train_count", train_count},
          {"deterministic", a.deterministic}, {"grad_blocks", a.grad_blocks}, {"bucket_mb", a.bucket_mb}};
}

namespace {
struct Restorer {
  const json& j;
  const CLI::App& cmd;
  std::string where;  // "FILE: __metadata__.ember_checkpoint.config"
  std::map<std::string, std::string>* taken;  // flag -> where its value came from

  // Takes the checkpoint's value unless the user gave the flag; a flag that may not change
  // must then repeat the checkpoint's value.
  template <class T>
  void operator()(const char* key, const char* flag, T& v, bool may_change) const {
    if (!j.contains(key)) throw Error(where + "." + key + ": missing");
    T saved;
    try {
      saved = j[key].get<T>();
    } catch (const json::exception&) {
      throw Error(where + "." + key + ": unexpected value " + json_brief(j[key]));
    }
    if (cmd.count(flag) == 0) {
      v = saved;
      (*taken)[flag] = where + "." + key;
    } else if (!may_change && !(v == saved)) {
      throw Error(std::string(flag) + ": cannot be changed when resuming (the checkpoint has " +
                  json_brief(json(saved)) + "); start a new run with --weights to change it");
    }
  }
};
}  // namespace

std::map<std::string, std::string> resume_args(TrainArgs& a, const CLI::App& cmd, const CheckpointInfo& info) {
  const json j = parse_json(info.config_json, info.path + ": __metadata__.ember_checkpoint.config");
  if (!j.is_object()) throw Error(info.path + ": __metadata__.ember_checkpoint.config: expected an object");
  std::map<std::string, std::string> taken;
  const Restorer r{j, cmd, info.path + ": __metadata__.ember_checkpoint.config", &taken};
  CommonArgs& c = a.common;
  r("model", "--model", c.model, false);
  r("data", "--data", c.data, true);
  if (j.contains("data_format")) {  // written since image folders and CIFAR came; older runs read IDX
    r("data_format", "--data-format", c.data_format, true);
    r("image_size", "--image-size", c.image_size, false);
    r("label", "--label", c.label, false);
    r("resize", "--resize", c.resize, false);
    r("crop", "--crop", c.crop, false);
    r("pad", "--pad", c.pad, false);
    r("flip", "--flip", c.flip, false);
    r("resized_crop", "--resized-crop", c.resized_crop, false);
    r("no_augment", "--no-augment", c.no_augment, false);
    r("normalize", "--normalize", c.normalize, false);
  }
  r("batch_size", "--batch-size", c.batch_size, false);
  r("threads", "--threads", c.threads, true);
  r("isa", "--isa", c.isa, true);
  if (j.contains("precision")) r("precision", "--precision", c.precision, false);  // absent before bf16: fp32
  if (j.contains("layout")) r("layout", "--layout", c.layout, false);  // absent before issue 41: auto (nchw)
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
  if (j.contains("targets")) {  // written since --targets came; older runs trained on labels
    r("targets", "--targets", a.targets, true);
    r("test_targets", "--test-targets", a.test_targets, true);
  }
  r("checkpoint_every", "--checkpoint-every", a.checkpoint_every, true);
  r("keep_checkpoints", "--keep-checkpoints", a.keep_checkpoints, true);
  r("on_nonfinite", "--on-nonfinite", a.on_nonfinite, true);
  if (j.contains("deterministic")) {  // written since data-parallel training came
    // A deterministic run goes on deterministic (any number of ranks), unless told otherwise.
    r("deterministic", "--deterministic", a.deterministic, true);
    r("grad_blocks", "--grad-blocks", a.grad_blocks, true);
    r("bucket_mb", "--bucket-mb", a.bucket_mb, true);
  }
  // Outputs (--metrics, --save, --save-dtype, --out, --profile, --checkpoint-dir) are never taken from the
  // checkpoint: a resume writes only where its own command line says, and checkpoints go to the
  // directory it resumes from unless --checkpoint-dir is given.
  return taken;
}

std::vector<std::string> metrics_so_far(const CheckpointInfo& info) {
  const json j = parse_json(info.config_json, info.path + ": __metadata__.ember_checkpoint.config");
  std::vector<std::string> lines;
  if (!j.is_object() || !j.contains("metrics_so_far")) return lines;
  const json& m = j["metrics_so_far"];
  const std::string where = info.path + ": __metadata__.ember_checkpoint.config.metrics_so_far";
  if (!m.is_array() || m.size() > size_t(info.state.epoch))
    throw Error(where + ": expected an array of at most " + std::to_string(info.state.epoch) +
                " lines (one per finished epoch)");
  for (const json& line : m) {
    if (!line.is_string() || line.get<std::string>().find('\n') != std::string::npos)
      throw Error(where + ": expected one-line strings, found " + json_brief(line));
    lines.push_back(line.get<std::string>());
  }
  return lines;
}

uint32_t dataset_crc(const Dataset& d) {
  uLong crc = crc32(0L, Z_NULL, 0);
  auto add = [&](const std::vector<uint8_t>& v) {
    for (size_t i = 0; i < v.size(); i += (size_t(1) << 30))
      crc = crc32(crc, v.data() + i, uInt(std::min(v.size() - i, size_t(1) << 30)));
  };
  add(d.images);
  if (d.streamed())  // the files' names stand for their pixels
    for (const std::string& p : d.files->paths) crc = crc32(crc, reinterpret_cast<const Bytef*>(p.data()), uInt(p.size()));
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

Checkpoints::Checkpoints(std::string dir, int64_t every, int keep, json config)
    : dir_(std::move(dir)), config_(std::move(config)), every_(every), keep_(keep) {
  config_["metrics_so_far"] = json::array();
}

namespace {
// One line on stderr naming what a killed writer left and this run removed.
void report_stale_temporaries(const std::string& dir, const std::vector<std::string>& removed) {
  if (removed.empty()) return;
  std::string names;
  for (size_t i = 0; i < removed.size() && i < 3; ++i) names += (i ? ", " : "") + one_line(removed[i]);
  if (removed.size() > 3) names += ", ...";
  std::fprintf(stderr, "ember: --checkpoint-dir %s: removed %zu temporary file%s a killed checkpoint write left (%s)\n",
               quote_path(dir).c_str(), removed.size(), removed.size() == 1 ? "" : "s", names.c_str());
}
}  // namespace

void Checkpoints::lock(const std::string& resumed, bool refuse_foreign) {
  if (lock_.held()) return;
  lock_ = DirLock(dir_, "--checkpoint-dir");
  // A minute old at least: a temporary younger than that may be another process's output being
  // written into this directory right now (write_file_atomic names every output's temporary so).
  report_stale_temporaries(dir_, remove_stale_temporaries(dir_));
  resumed_ = resumed;
  own_.clear();
  std::error_code ec;
  const std::string mine = resumed.empty() ? "" : std::filesystem::weakly_canonical(resumed, ec).string();
  const std::vector<std::string> all = list_checkpoints(dir_);
  size_t upto = 0;  // checkpoints [0, upto) are the resumed run's own: the resumed one and older
  for (size_t i = 0; i < all.size(); ++i)
    if (!mine.empty() && std::filesystem::weakly_canonical(all[i], ec).string() == mine) upto = i + 1;
  for (size_t i = 0; i < all.size(); ++i) {
    struct stat st;
    if (::lstat(all[i].c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw Error("--checkpoint-dir " + quote_path(dir_) + ": " + quote_path(all[i]) +
                  " is not a regular file: move it away (a checkpoint name is reserved for checkpoints)");
    if (i < upto) own_.push_back(all[i]);
    else foreign_ = true;
  }
  if (foreign_ && refuse_foreign)
    throw Error("--checkpoint-dir " + quote_path(dir_) + ": holds checkpoints of another run (newest " +
                quote_path(all.back()) + "): go on with it with --resume " + quote_path(dir_) +
                ", or give another --checkpoint-dir");
}

void Checkpoints::set_config(json config) {
  json metrics = std::move(config_["metrics_so_far"]);
  config_ = std::move(config);
  config_["metrics_so_far"] = std::move(metrics);
}

void Checkpoints::add_metrics(const std::string& line) { config_["metrics_so_far"].push_back(line); }

void Checkpoints::maybe_save(Plan& plan, const TrainState& next, int64_t step) {
  if (every_ > 0 && step % every_ == 0) save(plan, next, step);
}

void Checkpoints::save(Plan& plan, const TrainState& next, int64_t step) {
  const std::string path = checkpoint_path(dir_, step);
  try {
    lock(resumed_, false);  // a save on a signal locks late: another run's files are kept, not refused
    save_checkpoint(plan, next, json_text(config_), path);
  } catch (const Error& e) {
    throw Error("checkpoint at step " + std::to_string(step) + ": " + e.what() + "; the last good checkpoint is " +
                (last_.empty() ? std::string("none (no checkpoint was written yet)") : last_));
  }
  last_ = path;
  if (own_.empty() || own_.back() != path) own_.push_back(path);
  while (own_.size() > size_t(std::max(keep_, 1))) {  // only this run's own, oldest first
    ::unlink(own_.front().c_str());
    own_.erase(own_.begin());
  }
  remove_stale_temporaries(dir_);
}

}  // namespace ember::cli
