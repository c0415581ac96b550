// Data-parallel agreement: what every rank of a job must hold the same before step 1 (the data,
// the model, the optimizer, the schedule, the starting weights and every flag that changes the
// arithmetic or the ranks' collective calls), compared as (flag, hash) pairs; the first that
// differs stops the job with one line naming its flag and the rank.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"
#include "ember/dist.h"

namespace ember::cli {

struct AgreedField {
  std::string flag;  // what the error names: "--lr", "--data", ...
  uint64_t hash = 0;
};

// What this rank is about to run, as the setup left it (recipe and checkpoint values applied, the
// model fitted to the data): `augment` the run's (null: none), `blocks` TrainConfig::blocks.
struct RankRun {
  const TrainArgs& args;
  const TrainSetup& setup;
  Plan& plan;
  const TrainTest& data;
  uint32_t train_crc = 0;
  const Augment* augment = nullptr;
  bool deterministic = false;
  int blocks = 0;
};

// The fields, in the order a difference is reported: the data's flags and contents first (so
// that --limit-train is named rather than the data it selects), then augmentation, model,
// batching, optimizer, schedule, the loop's flags, where a resume starts, and the weights.
std::vector<AgreedField> agreement_fields(const RankRun& run);

// Compares the fields across the world's ranks (at most timeout_s): throws Error "data-parallel
// training: rank R's FLAG differs from rank 0's ..." naming the first field that differs.
void check_ranks_agree(const dist::World& world, const std::vector<AgreedField>& fields, double timeout_s);

}  // namespace ember::cli
