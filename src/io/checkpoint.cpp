// Checkpoints: a safetensors file holding the weights, the optimizer state ("optimizer.<state>.
// <param>") and, in __metadata__.ember_checkpoint, the optimizer's step count, the loop's state,
// the schedule position, the data order's generator and the caller's configuration.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "fs/json_read.h"
#include "ember/version.h"
#include "io/source.h"

namespace ember {

using json = nlohmann::json;

namespace {
constexpr int kFormatVersion = 1;

// A string from the file, JSON-quoted and escaped so that an error message stays on one line.
std::string shown(const std::string& text) { return json_brief(json(text)); }

std::vector<std::string> state_names(const Plan& plan) {
  std::vector<std::string> v;
  for (int s = 0; s < plan.state_count(); ++s) v.push_back(plan.state_name(s));
  return v;
}

// Reads the metadata's checkpoint fields, checking each one's type and range.
CheckpointInfo parse_info(const SafetensorsHeader& h, const std::string& file) {
  CheckpointInfo c;
  c.path = file;
  auto meta = [&](const char* key) -> const std::string& {
    auto it = h.metadata.find(key);
    if (it == h.metadata.end())
      throw Error(file + ": __metadata__." + key + ": missing (not an ember checkpoint; a weights file loads with load_weights)");
    return it->second;
  };
  c.ember_version = meta("ember_version");
  c.model_json = meta("model");
  const json j = parse_json(meta("ember_checkpoint"), file + ": __metadata__.ember_checkpoint");
  const std::string f = file + ": __metadata__.ember_checkpoint";
  if (!j.is_object()) throw Error(f + ": expected a JSON object");
  auto field = [&](const json& o, const char* key, const std::string& where) -> const json& {
    if (!o.contains(key)) throw Error(where + "." + key + ": missing");
    return o[key];
  };
  auto integer = [&](const json& o, const char* key, const std::string& where, int64_t hi) {
    const json& v = field(o, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > hi)
      throw Error(where + "." + key + ": expected an integer in [0, " + std::to_string(hi) + "], found " + json_brief(v));
    return v.get<int64_t>();
  };
  auto real = [&](const json& o, const char* key, const std::string& where) {
    const json& v = field(o, key, where);
    if (!v.is_number()) throw Error(where + "." + key + ": expected a finite number, found " + json_brief(v));
    return v.get<double>();
  };
  if (integer(j, "version", f, 1000) != kFormatVersion)
    throw Error(f + ".version: expected " + std::to_string(kFormatVersion) + ", found " + json_brief(j["version"]) +
                " (written by ember " + shown(c.ember_version) + ")");
  const json& opt = field(j, "optimizer", f);
  if (!opt.is_string()) throw Error(f + ".optimizer: expected a string, found " + json_brief(opt));
  c.optimizer = opt.get<std::string>();
  c.optimizer_steps = integer(j, "optimizer_steps", f, int64_t(1) << 53);
  const json& st = field(j, "state", f);
  const std::string fs = f + ".state";
  if (!st.is_object()) throw Error(fs + ": expected an object");
  c.state.epoch = int(integer(st, "epoch", fs, 100000));
  c.state.batch = integer(st, "batch", fs, int64_t(1) << 40);
  c.state.loss_sum = real(st, "loss_sum", fs);
  c.state.correct = integer(st, "correct", fs, int64_t(1) << 53);
  c.state.skipped = integer(st, "skipped", fs, int64_t(1) << 40);
  c.state.seconds = real(st, "seconds", fs);
  c.state.prev_train_loss = real(st, "prev_train_loss", fs);
  const json& cfg = field(j, "config", f);
  c.config_json = json_text(cfg);
  return c;
}

// The loop's counters must be possible for a run of this plan's batch size.
void check_counters(const TrainState& s, int64_t batch, const std::string& file) {
  const std::string f = file + ": __metadata__.ember_checkpoint.state";
  int64_t seen = 0;  // samples of the partial epoch, at most (last batch may be short)
  if (__builtin_mul_overflow(s.batch, batch, &seen)) seen = INT64_MAX;
  if (s.correct > seen)
    throw Error(f + ".correct: " + std::to_string(s.correct) + " correct predictions is more than the " +
                std::to_string(seen) + " samples of " + std::to_string(s.batch) + " batches of " + std::to_string(batch));
  if (s.skipped > s.batch)
    throw Error(f + ".skipped: " + std::to_string(s.skipped) + " skipped steps is more than the " +
                std::to_string(s.batch) + " steps taken");
  if (!std::isfinite(s.loss_sum) || s.loss_sum < 0)
    throw Error(f + ".loss_sum: expected a finite number >= 0, found " + std::to_string(s.loss_sum));
  if (!std::isfinite(s.seconds) || s.seconds < 0)
    throw Error(f + ".seconds: expected a finite number >= 0, found " + std::to_string(s.seconds));
}

CheckpointInfo load(Plan& plan, const io::ByteSource& src, int batch) {
  const SafetensorsHeader h = io::read_safetensors_header(src);
  CheckpointInfo c = parse_info(h, src.name());
  check_counters(c.state, batch > 0 ? batch : plan.batch(), src.name());
  const std::vector<std::string> names = state_names(plan);
  // Everything is checked before a byte is copied: the state tensors here, the weights in load_params.
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.name.rfind("optimizer.", 0) != 0) continue;
    bool expected = false;
    for (const std::string& s : names)
      for (const ParamInfo& p : plan.params()) expected = expected || e.name == "optimizer." + s + "." + p.name;
    if (!expected)
      throw Error(src.name() + ": tensor '" + e.name + "': the plan's optimizer (" +
                  std::to_string(names.size()) + " state tensors per parameter) has no such state; "
                  "the checkpoint's optimizer is " + shown(c.optimizer));
  }
  for (const std::string& s : names)
    for (const ParamInfo& p : plan.params()) {
      const std::string name = "optimizer." + s + "." + p.name;
      const SafetensorsEntry* e = h.find(name);
      if (!e) throw Error(src.name() + ": tensor '" + name + "': missing (the checkpoint's optimizer is " + shown(c.optimizer) + ")");
      if (e->dtype != "F32") throw Error(src.name() + ": tensor '" + name + "'.dtype: expected F32, found " + e->dtype);
      if (e->shape != std::vector<int64_t>(p.shape.begin(), p.shape.end()))
        throw Error(src.name() + ": tensor '" + name + "'.shape: expected " + json_text(json(p.shape)) + ", found " + json_text(json(e->shape)));
    }
  io::load_params(plan, src, h, "optimizer.");
  for (int s = 0; s < plan.state_count(); ++s) {
    float* dst = static_cast<float*>(plan.state_data(s));
    for (const ParamInfo& p : plan.params())
    {
      const std::string name = "optimizer." + names[size_t(s)] + "." + p.name;
      io::read_tensor_f32(src, h, *h.find(name), dst + p.offset, p.size);
      io::check_finite(dst + p.offset, p.size, src.name() + ": tensor '" + name + "'");
    }
  }
  plan.set_optimizer_steps(c.optimizer_steps);
  return c;
}
}  // namespace

void save_checkpoint(Plan& plan, const TrainState& st, const std::string& config_json,
                     const std::string& path) {
  std::vector<io::TensorOut> tensors = io::weight_tensors(plan);
  const std::vector<std::string> names = state_names(plan);
  for (int s = 0; s < plan.state_count(); ++s) {
    const float* d = static_cast<const float*>(plan.state_data(s));
    for (const ParamInfo& p : plan.params())
      tensors.push_back({"optimizer." + names[size_t(s)] + "." + p.name,
                         std::vector<int64_t>(p.shape.begin(), p.shape.end()), d + p.offset, p.size});
  }
  json config;
  try {
    config = json::parse(config_json.empty() ? "{}" : config_json);
  } catch (const json::exception& e) {
    throw Error(path + ": checkpoint configuration is not valid JSON: " + e.what());
  }
  static constexpr const char* kOptimizers[] = {"sgd", "momentum", "nesterov", "adam", "adamw"};
  const json ck = {
      {"version", kFormatVersion},
      {"optimizer", kOptimizers[int(plan.options().optimizer.kind)]},
      {"optimizer_steps", plan.optimizer_steps()},
      {"state", {{"epoch", st.epoch}, {"batch", st.batch}, {"loss_sum", st.loss_sum},
                 {"correct", st.correct}, {"skipped", st.skipped}, {"seconds", st.seconds},
                 {"prev_train_loss", st.prev_train_loss}}},
      {"data_order", {{"generator", "pcg32, Fisher-Yates shuffle per epoch from (seed, 0x5eed0000 + epoch)"},
                      {"next_sample", st.batch * plan.batch()}}},
      {"config", config}};
  std::map<std::string, std::string> meta = io::weight_metadata(plan);
  meta["ember_checkpoint"] = json_text(ck);
  io::write_safetensors(path, tensors, meta);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const io::FileSource src(path);
  return parse_info(io::read_safetensors_header(src), path);
}

CheckpointInfo load_checkpoint(Plan& plan, const std::string& path, int batch) {
  const io::FileSource src(path);
  return load(plan, src, batch);
}

CheckpointInfo load_checkpoint_from_memory(Plan& plan, const uint8_t* bytes, size_t n,
                                           const std::string& name) {
  const io::MemorySource src(bytes, n, name);
  return load(plan, src, 0);
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "/ckpt-%010lld.safetensors", (long long)step);
  return dir + name;
}

namespace {
// Calls fn(name) for every entry of dir; a missing directory has none.
template <class F>
void each_entry(const std::string& dir, F&& fn) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) fn(std::string(e->d_name));
  ::closedir(d);
}
bool is_checkpoint_name(const std::string& n) {
  if (n.size() != 27 || n.rfind("ckpt-", 0) != 0 || n.substr(15) != ".safetensors") return false;
  return std::all_of(n.begin() + 5, n.begin() + 15, [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> names;
  each_entry(dir, [&](const std::string& n) {
    if (is_checkpoint_name(n)) names.push_back(n);
  });
  std::sort(names.begin(), names.end());  // fixed-width step numbers sort as numbers
  for (std::string& n : names) n = dir + "/" + n;
  return names;
}

void prune_checkpoints(const std::string& dir, int keep) {
  const std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = 0; i + size_t(std::max(keep, 1)) < all.size(); ++i) ::unlink(all[i].c_str());
  remove_stale_temporaries(dir);
}

namespace {
bool ember_temporary_name(const std::string& n) {
  if (n.rfind(".ckpt-", 0) == 0 && n.find(".safetensors.tmp.") != std::string::npos) return true;  // older versions'
  if (n.size() != 13 || n.rfind(".ember-", 0) != 0) return false;  // mkostemp's ".ember-XXXXXX"
  return std::all_of(n.begin() + 7, n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}
}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir, int min_age_s) {
  // The directory is locked by this run and none of its own saves is under way: a temporary
  // file there is a dead writer's (a save that completes renames its temporary away).
  const time_t now = ::time(nullptr);
  std::vector<std::string> removed;
  each_entry(dir, [&](const std::string& n) {
    if (!ember_temporary_name(n)) return;
    struct stat st;
    const std::string p = dir + "/" + n;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime >= min_age_s && ::unlink(p.c_str()) == 0)
      removed.push_back(n);
  });
  return removed;
}

}  // namespace ember
