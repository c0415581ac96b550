// `ember train`: trains with a progress display, prints per-epoch metrics, and with --out writes
// a run directory (config.json, model.json, metrics.jsonl; with --profile also profile.json,
// profile.folded and trace.json) that `ember report` turns into one HTML page.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ember/dist.h"
#include "ember_support/bench.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember_support/json.h"
#include "ember/io.h"
#include "ember/npy.h"
#include "ember/onnx.h"
#include "ember/profile.h"
#include "ember/version.h"
#include "progress.h"
#include "rank_check.h"
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
    throw Error("--out: cannot create directory " + quote_path(dir) + (ec ? ": " + ec.message() : ""));
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
  return json_text(j, 1) + "\n";
}

std::string config_json(const TrainArgs& a, const Plan& plan, const std::string& data_dir) {
  const BenchMachine mc = measure_machine(plan.isa_name());
  char started[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  nlohmann::json j = {
      {"ember_version", kVersion}, {"command", a.command_line}, {"model", plan.model().name},
      {"data", data_dir},         {"epochs", a.epochs},        {"batch_size", a.common.batch_size},
      {"optimizer", a.optimizer}, {"lr", a.lr},                {"schedule", a.schedule},
      {"lr_min", a.lr_min},       {"t_max", a.t_max},          {"l2", a.l2},
      {"weight_decay", a.weight_decay}, {"threads", plan.threads()}, {"isa", plan.isa_name()},
      {"seed", a.seed},           {"shuffle", !a.no_shuffle},  {"started", started},
      {"machine", {{"cpu", mc.cpu}, {"hardware_threads", mc.hw_threads},
                   {"fma_peak_gflops_1t", mc.peak_gflops_1t}, {"build", kBuildType},
                   {"compiler", kCompiler}}}};
  return json_text(j, 1) + "\n";
}

double peak_for(const Plan& plan) {
  return measure_machine(plan.isa_name()).peak_gflops_1t * plan.threads();
}

namespace {
// --resume: a checkpoint file, or the newest readable checkpoint in a directory (a newer one
// that cannot be read, e.g. a 0-byte file from a full disk, is skipped with a note).
CheckpointInfo resolve_resume_file(const std::string& arg) {
  struct stat st;
  if (::stat(arg.c_str(), &st) != 0)
    throw Error("--resume " + quote_path(arg) + ": " + (errno == ENOENT ? "no such file or directory" : std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return read_checkpoint_info(arg);
  const std::vector<std::string> all = list_checkpoints(arg);
  if (all.empty()) throw Error("--resume: no checkpoint (ckpt-*.safetensors) in directory " + quote_path(arg));
  std::string skipped;
  for (size_t i = all.size(); i-- > 0;) {
    try {
      CheckpointInfo info = read_checkpoint_info(all[i]);
      if (!skipped.empty())
        std::printf("note: skipped unreadable newer checkpoint(s): %s; resuming from %s\n", skipped.c_str(),
                    one_line(all[i]).c_str());
      return info;
    } catch (const Error& e) {
      skipped += (skipped.empty() ? "" : "; ") + one_line(e.what());
      if (i == 0) throw Error("--resume: no readable checkpoint in " + quote_path(arg) + ": " + skipped);
    }
  }
  throw Error("--resume: no readable checkpoint in " + quote_path(arg));
}
// The library's hint for a weights file given as a checkpoint names load_weights: --weights here.
CheckpointInfo resolve_resume(const std::string& arg) {
  return naming_flags({{"load_weights", "--weights"}}, [&] { return resolve_resume_file(arg); });
}

// A metric for JSON: null when NaN or Inf (no accuracy without class scores; not evaluated).
std::string json_number(double v, const char* format) {
  if (!std::isfinite(v)) return "null";
  char t[64];
  std::snprintf(t, sizeof t, format, v);
  return t;
}

std::string metrics_line(const EpochMetrics& m) {
  char line[640];
  const std::string bf16 = m.bf16_flushed < 0 ? "" : ", \"bf16_flushed_grads\": " + std::to_string(m.bf16_flushed) +
                                                     ", \"bf16_grads_checked\": " + std::to_string(m.bf16_checked);
  std::snprintf(line, sizeof line,
                "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %s, \"train_acc\": %s, "
                "\"test_loss\": %s, \"test_acc\": %s, \"seconds\": %.6f, \"samples_per_s\": %.3f%s%s}",
                m.epoch, m.lr, json_number(m.train_loss, "%.9g").c_str(), json_number(m.train_acc, "%.9g").c_str(),
                json_number(m.test_loss, "%.9g").c_str(), json_number(m.test_acc, "%.9g").c_str(), m.seconds,
                m.samples_per_s, m.skipped ? (", \"skipped_steps\": " + std::to_string(m.skipped)).c_str() : "",
                bf16.c_str());
  return line;
}


// A run directory: a directory, or absent with its nearest existing ancestor a writable
// directory (it is created with its missing parents).
void check_out_dir(const std::string& dir) {
  std::filesystem::path p(dir);
  for (;;) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        throw Error("--out " + quote_path(dir) + ": " + quote_path(p.string()) + " exists and is not a directory");
      if (p.string() != dir && ::access(p.c_str(), W_OK | X_OK) != 0)
        throw Error("--out " + quote_path(dir) + ": cannot create it in " + quote_path(p.string()) + ": " + std::strerror(errno));
      return;
    }
    if (errno != ENOENT) throw Error("--out " + quote_path(dir) + ": " + std::strerror(errno));
    if (!p.has_parent_path() || p.parent_path() == p) return;  // a relative path: its root is the working directory
    p = p.parent_path();
  }
}

// Every output path of the run, checked before any work: where it is, what is there, that no
// two are the same file and that none is one of the run's inputs. Symlinked outputs are replaced
// by their targets' paths. Files inside a run directory still to be made are checked by name.
void check_outputs(TrainArgs& a, const std::string& resume_path) {
  std::error_code ec;
  const bool new_out = !a.out.empty() && !std::filesystem::exists(a.out, ec);
  const std::string out_key = a.out.empty() ? "" : std::filesystem::weakly_canonical(a.out, ec).string();
  auto check = [&](std::string& path, const std::string& flag) {
    const std::string parent = std::filesystem::weakly_canonical(path, ec).parent_path().string();
    if (new_out && parent == out_key) return;  // in the run directory, made once all is checked
    path = check_output(path, flag);
  };
  std::vector<NamedPath> outs;
  if (!a.out.empty()) {
    check_out_dir(a.out);
    for (const char* f : {"config.json", "model.json", "metrics.jsonl", "profile.json", "profile.folded", "trace.json"}) {
      std::string p = a.out + "/" + f;
      if (std::string(f) == "metrics.jsonl" && !a.metrics.empty()) continue;  // --metrics replaces it
      struct stat st;
      if (::lstat(p.c_str(), &st) == 0) check(p, "--out");
      outs.push_back({"--out", p});
    }
  }
  if (!a.metrics.empty()) check(a.metrics, "--metrics");
  if (!a.save.empty()) check(a.save, "--save");
  if (a.save_dtype != "fp32" && a.save_dtype != "bf16")
    throw Error("--save-dtype: expected fp32 or bf16, found '" + one_line(a.save_dtype.substr(0, 40)) + "'");
  if (!a.show_batch.empty()) check(a.show_batch, "--show-batch");
  outs.push_back({"--show-batch", a.show_batch});
  outs.push_back({"--metrics", a.metrics});
  outs.push_back({"--save", a.save});
  if (!a.out.empty()) outs.push_back({"--out", a.out, 0, true, true});
  // Checkpoints are written there when asked for, or on a signal into a directory named.
  if (!a.checkpoint_dir.empty() || a.checkpoint_every > 0)
    outs.push_back({"--checkpoint-dir", !a.checkpoint_dir.empty() ? a.checkpoint_dir
                                        : a.out.empty()          ? std::string("checkpoints")
                                                                 : a.out + "/checkpoints", 0, true, true});
  std::vector<NamedPath> ins = run_inputs(a.common, a.weights, resume_path);
  ins.push_back({"--targets", a.targets});
  ins.push_back({"--test-targets", a.test_targets});
  check_distinct(outs, ins);
}

// One flag's .npy targets for the samples of split d: the file holds the whole split (its first
// dimension the split's sample count, every row checked); with a --limit-* in force the run keeps
// the rows of its first d.count samples.
Targets read_targets(const char* flag, const std::string& path, const std::vector<int>& out, const Dataset& d) {
  try {
    Targets t = targets_of(read_npy(path), out, d.total > 0 ? d.total : d.count, path);
    if (t.count > d.count) {
      NpyArray& v = t.values;
      v.shape[0] = t.count = d.count;
      v.f32.resize(v.is_f64 ? 0 : t.per * size_t(d.count)), v.f64.resize(v.is_f64 ? t.per * size_t(d.count) : 0);
    }
    return t;
  } catch (const Error& e) {
    throw Error(std::string(flag) + ": " + e.what());
  }
}

// --targets and --test-targets, checked against the model's loss and output and the data's counts.
struct RunTargets {
  std::optional<Targets> train, test;
};
RunTargets load_run_targets(const TrainArgs& a, const Model& model, const TrainTest& data) {
  RunTargets t;
  if (a.targets.empty()) {
    if (!a.test_targets.empty()) throw Error("--test-targets: needs --targets (the training set's targets)");
    return t;
  }
  if (!loss_takes_targets(model.loss))
    throw Error("--targets: model " + one_line(model.name) + " has the loss " + loss_kind_name(model.loss) +
                ", which takes class labels; dense targets need the loss mse or l1 (\"loss\" in a model description)");
  const std::vector<int> out = model_output_dims(model);
  t.train = read_targets("--targets", a.targets, out, data.train);
  if (!a.test_targets.empty()) t.test = read_targets("--test-targets", a.test_targets, out, data.test);
  return t;
}

// An epoch's line: accuracies only where there are class labels, the test set's only if evaluated.
void print_epoch(const EpochMetrics& m, int epochs) {
  auto part = [](const char* what, double loss, double acc) {
    char t[96];
    if (std::isnan(loss)) return std::string();
    if (std::isnan(acc)) std::snprintf(t, sizeof t, "  %s loss %.4f", what, loss);
    else std::snprintf(t, sizeof t, "  %s loss %.4f acc %6.2f%%", what, loss, 100 * acc);
    return std::string(t);
  };
  std::printf("epoch %3d/%d  lr %.3e%s%s  %7.2f s  %9.0f samples/s%s\n", m.epoch, epochs, m.lr,
              part("train", m.train_loss, m.train_acc).c_str(), part("test", m.test_loss, m.test_acc).c_str(), m.seconds,
              m.samples_per_s, m.skipped ? ("  (" + std::to_string(m.skipped) + " steps skipped: NaN/Inf)").c_str() : "");
}

// --save at the end: if the named file cannot be written after all, the weights go to a new file
// beside it (or in the temporary directory), created exclusively (never through a planted
// link), and the error names both.
void save_final_weights(Plan& plan, const std::string& path, WeightDtype dtype) {
  try {
    save_weights(plan, path, dtype);
    std::printf("weights saved to %s\n", one_line(path).c_str());
    return;
  } catch (const Error& e) {
    const size_t slash = path.find_last_of('/');
    const char* tmp = std::getenv("TMPDIR");
    for (const std::string& dir : {slash == std::string::npos ? std::string(".") : path.substr(0, slash ? slash : 1),
                                   std::string(tmp && *tmp ? tmp : "/tmp")}) {
      std::string name = dir + "/ember-weights-XXXXXX.safetensors";
      const int fd = ::mkostemps(name.data(), 12, O_CLOEXEC);  // O_EXCL: our own new file
      if (fd < 0) continue;
      ::close(fd);
      try {
        save_weights(plan, name, dtype);
      } catch (const Error&) {
        ::unlink(name.c_str());
        continue;
      }
      throw Error("--save: " + std::string(e.what()) + "; the weights were saved to " + quote_path(name) + " instead");
    }
    throw Error("--save: " + std::string(e.what()) + "; no fallback file could be written either: the weights are lost");
  }
}

// The metrics file: written only once the first epoch of this run has finished (so a run that
// fails before leaves an old file as it was): the lines of epochs already done (a resume's) and
// that epoch's, atomically; then one line appended per epoch.
class MetricsFile {
 public:
  MetricsFile(std::string path, const std::vector<std::string>& kept) : path_(std::move(path)) {
    for (const std::string& l : kept) kept_ += l + "\n";
  }
  ~MetricsFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void append(const std::string& line) {
    if (path_.empty()) return;
    const std::string l = line + "\n";
    if (fd_ < 0) {
      write_text_file(path_, kept_ + l, "--metrics");
      fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      struct stat st;
      if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
        throw Error("--metrics " + quote_path(path_) + ": cannot open for appending: " + std::strerror(errno));
      return;
    }
    if (::write(fd_, l.data(), l.size()) != ssize_t(l.size()))
      throw Error("--metrics " + quote_path(path_) + ": write failed: " + std::strerror(errno));
  }
  // A run that trained no epoch (a resume at its end) still records the epochs done.
  void finish() {
    if (!path_.empty() && fd_ < 0 && !kept_.empty()) write_text_file(path_, kept_, "--metrics");
  }

 private:
  std::string path_, kept_;
  int fd_ = -1;
};

// What a resumed run starts from: the checkpoint's header, its model and its configuration.
struct Resumed {
  CheckpointInfo info;
  Model model;
  nlohmann::json config;
  std::map<std::string, std::string> taken;  // flag -> checkpoint field, for error messages
};

Resumed read_resume(TrainArgs& a, const CLI::App& cmd) {
  if (!a.weights.empty()) throw Error("--weights: cannot be combined with --resume (a checkpoint holds its own weights)");
  for (const char* f : {"--qat", "--qat-freeze-after", "--qat-weight-bits", "--qat-calib-samples"})
    if (cmd.count(f)) throw Error(std::string(f) + ": cannot be combined with --resume (the checkpoint's model holds its QAT settings)");
  Resumed r;
  r.info = resolve_resume(a.resume);
  r.taken = resume_args(a, cmd, r.info);
  r.model = parse_model_json(r.info.model_json, r.info.path + ": __metadata__.model");
  r.config = parse_json(r.info.config_json, r.info.path + ": __metadata__.ember_checkpoint.config");
  if (a.checkpoint_dir.empty()) {  // checkpoints go on in the directory resumed from
    const size_t slash = r.info.path.find_last_of('/');
    a.checkpoint_dir = slash == std::string::npos ? "." : r.info.path.substr(0, slash ? slash : 1);
  }
  return r;
}

// The checkpoint's position must lie inside an epoch of this training set.
void check_position(const CheckpointInfo& info, int64_t count, int batch) {
  const int64_t batches = (count + batch - 1) / batch;
  if (info.state.batch > batches)
    throw Error(info.path + ": __metadata__.ember_checkpoint.state.batch: " + std::to_string(info.state.batch) +
                " is beyond the " + std::to_string(batches) + " batches of an epoch of this training set");
}

void check_same_data(const Resumed& r, const Dataset& train, uint32_t crc, const std::string& data_dir) {
  const nlohmann::json& c = r.config;
  if (c.value("train_crc32", uint64_t(0)) != crc || c.value("train_count", int64_t(-1)) != train.count)
    throw Error("--data: the training set in " + quote_path(data_dir) + " (" + std::to_string(train.count) +
                " images, CRC-32 " + std::to_string(crc) + ") is not the one checkpoint " + quote_path(r.info.path) +
                " was trained on (" + json_brief(c.value("train_count", nlohmann::json())) + " images, CRC-32 " +
                json_brief(c.value("train_crc32", nlohmann::json())) + ")");
}
}  // namespace

// The command that goes on from DIR, with this run's outputs (a resume writes only those it names).
std::string resume_hint(const TrainArgs& a, const std::string& dir) {
  auto sh = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const bool plain = dir.find_first_of(" '\"\\$`\n\t;&|<>()*?") == std::string::npos;
  std::string h = "ember train --resume " + (plain ? dir : sh(dir));
  if (!a.metrics.empty()) h += " --metrics " + sh(a.metrics);
  if (!a.save.empty()) h += " --save " + sh(a.save);
  if (!a.save.empty() && a.save_dtype == "bf16") h += " --save-dtype bf16";
  if (!a.out.empty()) h += " --out " + sh(a.out);
  if (a.profile) h += " --profile";
  return one_line(h);
}

namespace {
// Data-parallel settings from the world and the flags (before the plan is built): threads per
// rank, who writes, and the gradient blocks.
struct Parallel {
  int ranks = 1;
  bool writer = true;        // rank 0: prints and writes every output
  bool deterministic = false;
  int blocks = 0;            // TrainConfig::blocks
};

// restored: flags a resume took from its checkpoint (--deterministic among them, or not).
Parallel parallel_setup(const dist::World& world, TrainArgs& a, const CLI::App& cmd,
                        const std::map<std::string, std::string>& restored) {
  Parallel p;
  p.ranks = world.size(), p.writer = world.rank() == 0;
  const bool given = cmd.get_option("--deterministic")->count() > 0 || restored.count("--deterministic") > 0;
  p.deterministic = given && a.deterministic;  // opt-in: it cost 23 % on the seed CNN at 2 ranks (docs/distributed.md)
  if (p.ranks > 1 && cmd.count("--threads") == 0)  // the node's cores shared among its ranks
    a.common.threads = std::max(1, default_threads() / std::max(1, world.local_size()));
  if (!p.deterministic) {
    if (cmd.count("--grad-blocks") > 0) throw Error("--grad-blocks: needs --deterministic");
    p.blocks = p.ranks > 1 ? p.ranks : 0;
  } else {
    if ((p.ranks & (p.ranks - 1)) != 0)
      throw Error("--deterministic: needs a power-of-two number of ranks (the fixed summation tree), found " +
                  std::to_string(p.ranks) + " (use --no-deterministic)");
    int k = 4;
    while (k < p.ranks) k *= 2;
    p.blocks = a.grad_blocks > 0 ? a.grad_blocks : k;
  }
  a.deterministic = p.deterministic;  // as run: what a checkpoint records
  if (p.deterministic) a.grad_blocks = p.blocks;
  if (!p.writer) {  // only rank 0 prints and writes
    a.out.clear(), a.metrics.clear(), a.save.clear(), a.show_batch.clear();
    a.quiet = true, a.profile = false;
  }
  return p;
}

}  // namespace

int run_train_on(const dist::World& world, TrainArgs a, const CLI::App& cmd) {
  const bool resuming = !a.resume.empty();
  Resumed resumed;
  if (resuming) resumed = read_resume(a, cmd);
  const Parallel par = parallel_setup(world, a, cmd, resumed.taken);
  const Label label = [&](const char* flag) {
    const auto it = resumed.taken.find(flag);
    return it == resumed.taken.end() ? std::string(flag) : it->second;
  };
  TrainSetup su = resuming ? make_train_setup(a, [](const char*) { return true; }, &resumed.model, label)
                           : make_train_setup(a, cmd);
  check_outputs(a, resuming ? resumed.info.path : std::string());
  const TrainArgs as_given = a;  // the output flags as typed, for the resume hint
  const std::string ckdir = !a.checkpoint_dir.empty() ? a.checkpoint_dir
                            : a.out.empty()           ? std::string("checkpoints")
                                                      : a.out + "/checkpoints";
  Checkpoints ckpts(ckdir, a.checkpoint_every, a.keep_checkpoints, nlohmann::json::object());

  TrainTest data = load_train_data(a);
  if (!resuming) su.plan.batch = a.common.batch_size = clamp_batch(a.common.batch_size, data.train.count, "training set");
  if (par.blocks > 0) {  // the plan holds one block of the (global) batch
    su.cfg.batch = a.common.batch_size, su.cfg.blocks = par.blocks;
    su.plan.batch = (a.common.batch_size + par.blocks - 1) / par.blocks;
  }
  bool augmenting = false;
  const Augment aug = augment_of(a.common, su.model, data.train.channels, &augmenting);
  // --model FILE.onnx: the graph starts from the file's weights (unless --weights says otherwise).
  const bool onnx_weights = !resuming && a.weights.empty() && is_onnx_path(a.common.model);
  // A weights file without its model's description (PyTorch's) starts a model built for the data, as without --weights.
  const bool fixed = resuming || onnx_weights || (!a.weights.empty() && weights_fix_model(a.weights));
  fit_model_to_data(su.model, data.train, augmenting ? &aug : nullptr, fixed, resuming ? "" : a.weights);
  if (augmenting) su.cfg.augment = &aug;
  if (data.train.streamed()) su.cfg.loader_threads = a.common.threads;  // decoding is the loader's work
  const RunTargets targets = load_run_targets(a, su.model, data);
  su.cfg.targets = targets.train ? &*targets.train : nullptr;
  su.cfg.test_targets = targets.test ? &*targets.test : nullptr;
  const uint32_t crc = dataset_crc(data.train);
  const std::string data_dir = a.common.data.empty() ? kDefaultDataDir : a.common.data;
  if (resuming) {
    check_same_data(resumed, data.train, crc, data_dir);
    check_position(resumed.info, data.train.count, a.common.batch_size);
    check_weights_fit(su.model, resumed.info.path);  // before a plan of a (maybe edited) model is built
  } else if (!a.weights.empty()) {
    check_weights_fit(su.model, a.weights);
  }
  for (const char* f : {"--qat-freeze-after", "--qat-weight-bits", "--qat-calib-samples"})
    if (cmd.count(f) && !a.qat) throw Error(std::string(f) + ": only with --qat");
  QuantizedWeights qat_start;  // --qat: the calibration its ranges start from
  if (a.qat)
    su.model = qat_model(a, cmd.count("--qat-freeze-after") > 0, su.model, data.train,
                         int64_t(a.epochs) * ((data.train.count + a.common.batch_size - 1) / a.common.batch_size), &qat_start);
  // Each rank (and each gradient block) would observe only its share of the batch: the ranges
  // would differ between ranks and the run would not be the one-process run.
  if (su.model.qat.on() && (par.ranks > 1 || par.blocks > 0))
    throw Error("--qat: not with data-parallel training or --deterministic gradient blocks yet (each would observe "
                "only its share of the batch); train it in one process");
  Plan plan(su.model, su.plan);
  if (plan.bf16_emulated()) note_emulated_bf16(plan.isa_name());
  set_normalisation(plan, aug);
  check_dataset_fits(plan, data.train, "training set", su.cfg.augment, su.cfg.targets);
  if (!a.show_batch.empty()) write_batch_grid(a.show_batch, data.train, aug, a.common.batch_size, a.seed, !a.no_shuffle);
  std::vector<std::string> kept_metrics;
  if (resuming) {
    load_checkpoint(plan, resumed.info.path, a.common.batch_size);
    su.cfg.start = resumed.info.state;
    kept_metrics = metrics_so_far(resumed.info);
    ckpts.set_last(resumed.info.path);
  } else {
    plan.init_params(a.seed);
    if (a.qat) load_qat_start(plan, a.weights, qat_start);
    else if (!a.weights.empty()) load_weights(plan, a.weights);
    if (onnx_weights) load_onnx_weights(plan, import_model_file(a.common.model));
  }
  ckpts.set_config(train_args_json(a, crc, data.train.count));
  for (const std::string& l : kept_metrics) ckpts.add_metrics(l);

  // Every rank must run the same settings on the same data from the same weights (rank_check.h).
  if (par.ranks > 1)
    check_ranks_agree(world, agreement_fields({a, su, plan, data, crc, su.cfg.augment, par.deterministic, par.blocks}),
                      a.comm_timeout);
  // Every input is read and checked: from here signals are polled (a stop writes nothing half),
  // and the outputs may be written.
  SignalStop signals;
  if (par.writer && (resuming || a.checkpoint_every > 0)) ckpts.lock(resuming ? resumed.info.path : "", !resuming);
  if (!a.out.empty()) {
    make_run_dir(a.out);
    if (a.metrics.empty()) a.metrics = a.out + "/metrics.jsonl";
    write_text_file(a.out + "/config.json", config_json(a, plan, data_dir), "--out");
    write_text_file(a.out + "/model.json", model_summary_json(plan), "--out");
  }
  if (const int sig = signals.taken()) {
    std::fprintf(stderr, "ember: %s before training started%s\n", sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)",
                 a.out.empty() ? ": nothing written" : (": wrote only " + one_line(a.out) + "/config.json and model.json").c_str());
    return 128 + sig;
  }
  MetricsFile metrics(a.metrics, kept_metrics);
  std::unique_ptr<Profiler> prof;
  if (a.profile) {  // a whole run's spans are aggregated; the trace keeps the first ones
    // Data-parallel: one more track, the communication's.
    prof = std::make_unique<Profiler>(plan.threads() + (par.ranks > 1), int(plan.units().size()), size_t(1) << 14);
    plan.set_profiler(prof.get());
  }
  std::unique_ptr<GradReducer> reducer;
  if (par.ranks > 1) {
    dist::ReducerOptions ro;
    ro.bucket_bytes = size_t(a.bucket_mb * double(1 << 20));
    ro.deterministic = par.deterministic, ro.timeout_s = a.comm_timeout;
    ro.profiler = prof.get(), ro.track = plan.threads();
    // Sharded updates unless policy skip must see every summed gradient before any update.
    ro.shard_update = a.on_nonfinite == "stop";
    reducer = dist::make_reducer(world, plan, ro);
    su.cfg.reducer = reducer.get();
  }

  if (par.writer) {
  std::printf("ember train: model %s, %zu parameters, data %s (%lld train / %lld test)\n",
              su.model.name.c_str(), plan.param_count(), one_line(data_dir).c_str(),
              (long long)data.train.count, (long long)data.test.count);
  std::printf("  %s lr %g, schedule %s, l2 %g, weight decay %g, batch %d, %d epochs, %d threads, isa %s, precision %s, seed %llu\n",
              a.optimizer.c_str(), a.lr, a.schedule.c_str(), a.l2, a.weight_decay, a.common.batch_size, a.epochs,
              plan.threads(), plan.isa_name(), precision_name(plan.precision()), (unsigned long long)a.seed);
  if (par.ranks > 1 || par.deterministic) {
    char bucket[64];
    std::snprintf(bucket, sizeof bucket, ", buckets of %g MiB", a.bucket_mb);
    std::printf("  data-parallel: %d ranks x %d threads, %s%s\n", par.ranks, plan.threads(),
                par.deterministic ? ("deterministic: gradients of " + std::to_string(par.blocks) +
                                     " fixed blocks of the batch summed in a fixed tree").c_str()
                                  : "each rank's share of the batch in one pass, summed across ranks",
                par.ranks > 1 ? bucket : "");
  }
  }
  const int64_t batches = (data.train.count + a.common.batch_size - 1) / a.common.batch_size;
  if (resuming && par.writer) {
    std::printf("  resumed from %s: epoch %d, batch %lld of %lld, optimizer step %lld\n", one_line(resumed.info.path).c_str(),
                resumed.info.state.epoch + 1, (long long)resumed.info.state.batch, (long long)batches,
                (long long)plan.optimizer_steps());
    const nlohmann::json& c = resumed.config;
    if (c.value("threads", 0) != plan.threads() || c.value("isa", std::string()) != a.common.isa)
      std::printf("  note: threads or --isa differ from the checkpoint's run: results will not be bit-identical to it\n");
  }
  std::fflush(stdout);
  Progress progress(stdout, isatty(fileno(stdout)) != 0, a.epochs);
  if (!a.quiet) su.cfg.on_step = [&](int e, int64_t done, int64_t total) { progress.step(e, done, total); };
  int stop_signal = 0;
  // Sharded updates leave each rank's optimizer state current in its own shares only: every rank
  // fills in the others' before rank 0 writes a checkpoint.
  auto sync_state = [&] {
    if (reducer && reducer->sharded())
      for (int s = 0; s < plan.state_count(); ++s) reducer->sync_state(static_cast<float*>(plan.state_data(s)));
  };
  su.cfg.poll_stop = [&] { return signals.taken(); };
  su.cfg.after_step = [&](const TrainState& next, int sig) {
    const int64_t step = next.epoch * batches + next.batch;
    if ((a.checkpoint_every > 0 && step % a.checkpoint_every == 0) || sig != 0) sync_state();
    if (par.writer) ckpts.maybe_save(plan, next, step);
    if ((stop_signal = sig) == 0) return true;
    if (!par.writer || ckpts.last() == checkpoint_path(ckpts.dir(), step)) return false;
    try {
      ckpts.save(plan, next, step);
    } catch (const Error& e) {
      progress.clear();
      throw Error(std::string(stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)") +
                  " at step " + std::to_string(step) + ", and the checkpoint could not be written: " + e.what());
    }
    return false;
  };
  TrainResult r;
  try {
    r = train(plan, data.train, data.test, su.cfg, [&](const EpochMetrics& m) {
      progress.clear();
      if (!a.quiet) {
        print_epoch(m, a.epochs);
        if (m.bf16_flushed > 0)  // a user should see it: bf16 would then need loss scaling
          std::printf("  bf16: %lld of %lld sampled gradient values flushed to zero (below 2^-126)\n",
                      (long long)m.bf16_flushed, (long long)m.bf16_checked);
        std::fflush(stdout);
      }
      const std::string line = metrics_line(m);
      metrics.append(line);
      ckpts.add_metrics(line);
      return true;
    });
  } catch (const std::bad_alloc&) {
    progress.clear();
    throw Error("model " + one_line(su.model.name) + ": out of memory while training (batch " +
                std::to_string(a.common.batch_size) + " of [" + std::to_string(data.train.channels) + ", " +
                std::to_string(data.train.rows) + ", " + std::to_string(data.train.cols) + "], beside the plan's " +
                mib(plan.arena_bytes()) + " and the data set's images)");
  } catch (const NonfiniteError& e) {
    progress.clear();
    throw Error(std::string(e.what()) +
                (ckpts.last().empty() ? std::string(" (no checkpoint was written: use --checkpoint-every N)")
                                      : "; last good checkpoint " + ckpts.last() +
                                            " (resume with --resume and a lower --lr, or --on-nonfinite skip)"));
  }
  progress.clear();
  if (r.stopped && !par.writer) {  // rank 0 writes the checkpoint; the job ends when it has
    world.barrier(a.comm_timeout, "after the stop");
    return 128 + stop_signal;
  }
  if (r.stopped) {
    world.barrier(a.comm_timeout, "after the stop");
    std::fflush(stdout);
    std::fprintf(stderr, "ember: %s at step %lld (epoch %d, batch %lld of %lld): checkpoint %s\n"
                 "resume with: %s\n",
                 stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)",
                 (long long)(r.state.epoch * batches + r.state.batch), r.state.epoch + 1,
                 (long long)r.state.batch, (long long)batches, one_line(ckpts.last()).c_str(),
                 resume_hint(as_given, ckpts.foreign() ? ckpts.last() : ckpts.dir()).c_str());
    return 128 + stop_signal;
  }
  metrics.finish();
  if (a.checkpoint_every > 0 && r.epochs_run > 0) sync_state();  // for the checkpoint at the end
  if (!par.writer) return 0;
  if (r.epochs_run == 0)
    std::printf("nothing to train: the run is at the end of epoch %d of %d (raise --epochs to train on)\n",
                su.cfg.start.epoch, a.epochs);
  else if (!std::isnan(r.last.test_acc))
    std::printf("final test accuracy %.2f%% (loss %.4f) after %d epochs%s, total %.2f s\n",
                100 * r.last.test_acc, r.last.test_loss, r.epochs_run,
                r.early_stopped ? " (early stop)" : "", r.seconds);
  else  // dense targets: the test loss if there were test targets, else the training loss
    std::printf("final %s loss %.4f after %d epochs%s, total %.2f s\n", std::isnan(r.last.test_loss) ? "train" : "test",
                std::isnan(r.last.test_loss) ? r.last.train_loss : r.last.test_loss, r.epochs_run,
                r.early_stopped ? " (early stop)" : "", r.seconds);
  if (a.checkpoint_every > 0 && r.epochs_run > 0) {  // the end, unless the last step just saved it
    const int64_t step = r.state.epoch * batches;
    if (ckpts.last() != checkpoint_path(ckpts.dir(), step)) ckpts.save(plan, r.state, step);
    std::printf("checkpoint %s\n", one_line(ckpts.last()).c_str());
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
  if (!a.save.empty()) save_final_weights(plan, a.save, a.save_dtype == "bf16" ? WeightDtype::bf16 : WeightDtype::f32);
  if (!a.out.empty())
    std::printf("run directory %s (ember report %s -o report.html)\n", one_line(a.out).c_str(), one_line(a.out).c_str());
  return 0;
}

namespace {
// run_train_on, the fields its library errors name (the reducer's, the world's, TrainConfig's
// gradient blocks) given as the flags that set them.
int run_train_named(const dist::World& world, TrainArgs a, const CLI::App& cmd) {
  return naming_flags({{"deterministic", "--deterministic"}, {"timeout_s", "--comm-timeout"}, {"blocks", "--grad-blocks"}},
                      [&] { return run_train_on(world, std::move(a), cmd); });
}
}  // namespace

int run_train(TrainArgs a, const CLI::App& cmd) {
  dist::World world;
  if (!world.mpi() || world.size() < 2) return run_train_named(world, std::move(a), cmd);
  try {
    return run_train_named(world, std::move(a), cmd);
  } catch (const std::exception& e) {
    // One rank's error ends the whole job. The other ranks usually meet the same error: rank 0
    // says it, the others wait a moment to be ended by its abort before they say theirs.
    std::fflush(stdout);
    if (world.rank() != 0) ::usleep(1500000);
    std::fprintf(stderr, "ember: error: %s%s\n", world.rank() == 0 ? "" : ("rank " + std::to_string(world.rank()) + ": ").c_str(),
                 one_line(e.what()).substr(0, 2000).c_str());
    std::fflush(stderr);
    world.abort(2);
  }
}

}  // namespace ember::cli
