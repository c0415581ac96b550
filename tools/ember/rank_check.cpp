// Data-parallel agreement (rank_check.h): each setting a rank runs with hashed under the flag that
// sets it (FNV-1a over an exact text of the value; CRC-32 for the data and the weights), and the
// ranks' lists compared against rank 0's before step 1.
#include "rank_check.h"

#include <zlib.h>

#include <cstdio>
#include <utility>

#include "ember/error.h"
#include "run_state.h"

namespace ember::cli {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string exact(double v) {  // every bit of a double, as text
  char buf[48];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

uint32_t crc_of(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  for (size_t i = 0; i < bytes; i += size_t(1) << 30)
    crc = uint32_t(crc32(crc, p + i, uInt(std::min(bytes - i, size_t(1) << 30))));
  return crc;
}

// The fields of the data: its flags, then its contents (count and CRC-32 of images and labels).
void data_fields(const RankRun& r, std::vector<AgreedField>& f) {
  const CommonArgs& c = r.args.common;
  f.push_back({"--data-format", fnv1a(c.data_format)});
  f.push_back({"--image-size", fnv1a(std::to_string(c.image_size))});
  f.push_back({"--resize", fnv1a(c.resize)});
  f.push_back({"--label", fnv1a(c.label)});
  f.push_back({"--limit-train", fnv1a(std::to_string(r.args.limit_train))});
  f.push_back({"--limit-test", fnv1a(std::to_string(c.limit_test))});
  const Dataset &train = r.data.train, &test = r.data.test;
  f.push_back({"--data", fnv1a(std::to_string(train.count) + " " + std::to_string(r.train_crc))});
  f.push_back({"--data", fnv1a(std::to_string(test.count) + " " + std::to_string(dataset_crc(test)))});
}

void augment_fields(const RankRun& r, std::vector<AgreedField>& f) {
  const Augment none, &a = r.augment ? *r.augment : none;
  std::string norm;
  for (double v : a.mean) norm += exact(v) + ",";
  for (double v : a.std) norm += exact(v) + ";";
  f.push_back({"--no-augment", fnv1a(std::to_string(r.args.common.no_augment))});
  f.push_back({"--crop", fnv1a(std::to_string(a.crop))});
  f.push_back({"--pad", fnv1a(std::to_string(a.pad))});
  f.push_back({"--flip", fnv1a(std::to_string(a.flip))});
  f.push_back({"--resized-crop", fnv1a(std::to_string(a.resized_crop))});
  f.push_back({"--normalize", fnv1a(norm)});
}

// The plan's weights, and (for --resume) its optimizer state and where the loop starts.
void start_fields(const RankRun& r, std::vector<AgreedField>& f) {
  const Plan& plan = r.plan;
  const TrainState& s = r.setup.cfg.start;
  uint32_t state = 0;
  for (int i = 0; i < r.plan.state_count(); ++i) state = crc_of(state, r.plan.state_data(i), plan.param_count() * sizeof(float));
  f.push_back({"--resume", fnv1a(std::to_string(s.epoch) + " " + std::to_string(s.batch) + " " + exact(s.loss_sum) + " " +
                                 std::to_string(s.correct) + " " + std::to_string(s.skipped) + " " +
                                 exact(s.prev_train_loss) + " " + std::to_string(plan.optimizer_steps()) + " " +
                                 std::to_string(state))});
  f.push_back({"--weights", crc_of(0, plan.param_data(), plan.param_count() * sizeof(float))});
}

}  // namespace

std::vector<AgreedField> agreement_fields(const RankRun& r) {
  std::vector<AgreedField> f;
  data_fields(r, f);
  augment_fields(r, f);
  const TrainArgs& a = r.args;
  const PlanOptions& po = r.setup.plan;
  const TrainConfig& cfg = r.setup.cfg;
  const Schedule& s = cfg.schedule;
  const auto num = [](auto v) { return fnv1a(std::to_string(v)); };
  const auto real = [](double v) { return fnv1a(exact(v)); };
  f.push_back({"--init", fnv1a(a.init)});
  f.push_back({"--model", fnv1a(model_to_json(r.plan.model()))});
  f.push_back({"--precision", num(int(po.precision))});
  f.push_back({"--batch-size", num(a.common.batch_size)});
  f.push_back({"--deterministic", num(r.deterministic)});
  f.push_back({"--grad-blocks", num(r.blocks)});
  f.push_back({"--bucket-mb", real(a.bucket_mb)});
  f.push_back({"--optimizer", num(int(po.optimizer.kind))});
  f.push_back({"--lr", real(s.lr)});
  f.push_back({"--schedule", num(int(s.kind))});
  f.push_back({"--lr-min", real(s.lr_min)});
  f.push_back({"--t-max", num(s.t_max)});
  f.push_back({"--step-size", num(s.step_size)});
  f.push_back({"--gamma", real(s.gamma)});
  f.push_back({"--l2", real(po.optimizer.l2)});
  f.push_back({"--weight-decay", real(po.optimizer.weight_decay)});
  f.push_back({"--momentum", real(po.optimizer.momentum)});
  f.push_back({"--epochs", num(cfg.epochs)});
  f.push_back({"--seed", num(cfg.seed)});
  f.push_back({"--no-shuffle", num(!cfg.shuffle)});
  f.push_back({"--early-stop-tol", real(cfg.early_stop_tol)});
  f.push_back({"--on-nonfinite", num(int(cfg.on_nonfinite))});
  f.push_back({"--checkpoint-every", num(a.checkpoint_every)});
  start_fields(r, f);
  return f;
}

void check_ranks_agree(const dist::World& world, const std::vector<AgreedField>& fields, double timeout_s) {
  std::vector<uint64_t> hashes;
  std::string names;  // the list itself must be the same (one ember build on every node)
  for (const AgreedField& x : fields) hashes.push_back(x.hash), names += x.flag + " ";
  hashes.insert(hashes.begin(), fnv1a(names));
  const dist::World::Difference d = world.first_difference(hashes, timeout_s);
  if (d.index < 0) return;
  const std::string what = d.index == 0 ? std::string("list of compared settings (another ember build?)")
                                        : fields[size_t(d.index - 1)].flag;
  throw Error("data-parallel training: rank " + std::to_string(d.rank) + "'s " + what +
              " differs from rank 0's: every rank must run the same flags on the same data (compared before step 1)");
}

}  // namespace ember::cli
