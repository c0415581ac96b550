// A training step in gradient blocks (TrainConfig::blocks): this rank's blocks of a batch, one
// forward and backward each, their gradients summed in the fixed binary tree's lower levels, the
// sum across ranks (GradReducer) overlapped with the last block's backward, then the update.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ember/plan.h"
#include "ember/train.h"

namespace ember::train_impl {

// Samples [first, end) of block j of a batch of n split into K blocks.
struct BlockRange {
  int first = 0, end = 0;
};
inline BlockRange block_range(int j, int n, int K) {
  return {int(int64_t(j) * n / K), int(int64_t(j + 1) * n / K)};
}

class BlockStepper {
 public:
  // Checks that K blocks spread evenly over the reducer's ranks (a power of two each, for the
  // tree) and that the plan's batch holds a block of a `batch`-sample batch; throws Error.
  // count_correct: count the arg-max hits (class labels); false with dense targets.
  BlockStepper(Plan& plan, int blocks, int batch, GradReducer* reducer, bool count_correct = true);

  struct Result {
    double loss_sum = 0;     // over the whole batch (all ranks): sum of per-sample losses
    int64_t correct = 0;     // over the whole batch
    int stop_signal = 0;     // what any rank's poll said (SIGTERM before SIGINT), the same on all
    bool finite = true;      // the batch's loss is finite
    int local = 0;           // samples this rank ran
  };
  // Forward, loss and backward of this rank's blocks of a batch of n samples; gather(first, count)
  // puts samples [first, first + count) of the batch into the plan's input. Then the sums across
  // ranks, and stats (loss, correct, stop signal) combined. The update is apply()'s.
  Result run(int n, const std::function<void(int first, int count)>& gather, int local_signal);
  // The update with learning rate lr, bucket by bucket as sums arrive (run() must come first).
  // check_first: look for a non-finite gradient before updating anything (policy skip): then
  // returns the first such parameter and updates nothing. Otherwise returns what the update found
  // (optimizer_step's convention), having updated. skip_update: complete the sums, update nothing.
  int apply(double lr, bool check_first, bool skip_update);

 private:
  void fold(int first, int count);  // the partials' tree onto the last block's gradient
  static void on_final(void* self, int first, int count);

  Plan& plan_;
  int K_, L_, rank_, batch_;
  GradReducer* reducer_;
  std::vector<std::vector<float>> stack_;  // partial sums, bottom (oldest, highest level) first
  std::vector<int> level_;                 // their tree levels
  int local_ = 0;                          // samples this rank ran this step
  bool count_correct_ = true;
  double stats_[4] = {0, 0, 0, 0};         // loss sum, correct, SIGTERM polls, SIGINT polls
};

}  // namespace ember::train_impl
