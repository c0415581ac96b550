// Training: learning-rate schedules stepped per epoch, the training loop over a data set with
// per-epoch metrics (loss, accuracy, time, samples/s), evaluation, and early stopping.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/loader.h"
#include "ember/error.h"
#include "ember/npy.h"
#include "ember/plan.h"

namespace ember {

enum class ScheduleKind { Constant, Step, Exp, Cosine };

// Dense targets for the MSE and L1 losses (`ember train --targets FILE.npy`): `per` values for
// each of `count` samples, sample i's at [i * per, (i + 1) * per) of the array, as read.
struct Targets {
  NpyArray values;
  int64_t count = 0;
  size_t per = 0;
};
// The targets an array read from `name` holds for `count` samples of a model whose per-sample
// output is `output_dims`: its shape must be [count, *output_dims] or [count, output size]
// ([count] too when that size is 1), every value finite. Throws Error "NAME: shape: ..." (or
// "NAME: value [i]: ...") naming what it expected and found.
Targets targets_of(NpyArray values, const std::vector<int>& output_dims, int64_t count, const std::string& name);
// Copies the targets of samples index[0 .. n) into plan.targets() (rows 0 .. n), converted to the
// plan's dtype. Indices must be < t.count (checked by the caller).
void gather_targets(Plan& plan, const Targets& t, const int64_t* index, int n);

// Data-parallel training's communication, as the training loop drives it (src/dist implements
// it over MPI; a test may fake it). N processes ("ranks") each run their share of every batch;
// their gradients are summed in buckets while backward runs; every rank applies the same update.
class GradReducer {
 public:
  virtual ~GradReducer() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // A step's gradients, in the plan's gradient block: params()[first, first + count) are final
  // (called in backward order, at least once for every parameter); each bucket whose parameters
  // are all final starts its sum across ranks, and started ones progress.
  virtual void grads_final(int first, int count) = 0;
  // Waits for every bucket (all were started), calling update(begin, end) for ranges of the
  // gradient block's elements as their sums arrive; the caller updates those elements' weights.
  // Not sharded: every rank gets every element. sharded(): each rank gets only its own share
  // (every element goes to exactly one rank), and the reducer then sends the updated weights of
  // each share to the other ranks before it returns: 1/N of the update per rank, the same bytes.
  virtual void finish(const std::function<void(size_t begin, size_t end)>& update) = 0;
  virtual bool sharded() const { return false; }
  // Sharded: optimizer state is current only in this rank's shares; sync_state fills in the other
  // ranks' shares of one state block (shaped like the gradients), on every rank. Call it on all
  // ranks between steps, before a checkpoint is written.
  virtual void sync_state(float* state) { (void)state; }
  // Sums v[0, n) over ranks in place, non-blocking: start, then wait (progressing buckets too).
  virtual void start_sum(double* v, int n) = 0;
  virtual void wait_sum() = 0;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::Cosine;
  double lr = 1e-3;        // initial
  double lr_min = 1e-5;    // cosine floor
  int t_max = 20;          // cosine period, epochs
  int step_size = 5;       // step decay: every step_size epochs ...
  double gamma = 0.5;      // ... multiply by gamma (also exp's per-epoch factor)
  // Learning rate for 0-based epoch e.
  double at(int epoch) const;
};

// Where a run stands between two steps: everything the loop needs, besides the plan's weights
// and optimizer state, to go on exactly as if it had never stopped (checkpoints hold it).
struct TrainState {
  int epoch = 0;              // 0-based epoch under way
  int64_t batch = 0;          // batches of it done
  double loss_sum = 0;        // sum over its samples so far of the per-sample loss
  int64_t correct = 0;        // its correctly classified samples so far
  int64_t skipped = 0;        // its steps skipped for a non-finite loss or gradient
  double seconds = 0;         // its training time so far
  double prev_train_loss = 0; // the previous epoch's train loss (early stopping)
};

// What to do when a step's loss or a gradient holds NaN or Inf.
enum class NonfinitePolicy { stop, skip };

// Thrown when a step meets NaN or Inf and the policy is stop: names the step, the epoch, the
// batch and the layer. A non-finite loss stops before the step's update; a non-finite gradient
// (found by the update itself, at no cost) after it. Checkpoints on disk are untouched either way.
class NonfiniteError : public Error {
 public:
  explicit NonfiniteError(const std::string& message) : Error(message) {}
};

struct TrainConfig {
  int epochs = 10;
  uint64_t seed = 1;
  bool shuffle = true;
  Schedule schedule;
  double early_stop_tol = 0;  // > 0: stop when the train loss improves by less than this
  bool evaluate = true;       // evaluate on the test set after every epoch
  // Called after every training step (progress display): 1-based epoch, samples done in this
  // epoch, samples per epoch. May be empty.
  std::function<void(int epoch, int64_t done, int64_t total)> on_step;
  // Where to begin: a checkpoint's state (the plan then holds its weights and optimizer state).
  TrainState start;
  // Every step checks its loss; with check_gradients also every gradient: for free inside the
  // update (policy stop), or by one pass before it (policy skip, ~1-2 % of a mnist-cnn step).
  bool check_gradients = true;
  NonfinitePolicy on_nonfinite = NonfinitePolicy::stop;
  // Called after every step with the state the next step starts from and what poll_stop said
  // (0 without one); returning false stops training there (TrainResult::stopped). May be empty.
  std::function<bool(const TrainState& next, int stop_signal)> after_step;
  // Augmentation (ember/loader.h): when set, batches come from a BatchLoader that crops and flips
  // on `loader_threads` background threads, `loader_depth` batches ahead of the step, and the
  // test set goes through its deterministic path (centre crop). Null: images as they are.
  const Augment* augment = nullptr;
  int loader_threads = 1, loader_depth = 3;
  // Polled once per step for a request to stop (a signal number; 0: none): after_step is then
  // called with it. In data-parallel training every rank's answers are combined first, so all
  // ranks stop after the same step.
  std::function<int()> poll_stop;
  // Gradient blocks (0: off). With K > 0 each batch of `batch` samples is split into K fixed
  // blocks (block j: samples [j n / K, (j + 1) n / K) of a batch of n); each block's gradient is
  // computed on its own and the K are summed in one fixed binary tree ((b0 + b1) + (b2 + b3)):
  // the result does not depend on how the blocks are spread over ranks. The plan's batch must
  // hold a block. `reducer` (null: one process) sums across N ranks: rank r runs blocks
  // [r K / N, (r + 1) K / N) and sums them in the tree's lower levels; the upper levels are the
  // reducer's (src/dist's deterministic reducer adds rank partials in that same tree; MPI's own
  // all-reduce promises no order). batch: the global batch size (0: the plan's).
  int blocks = 0;
  int batch = 0;
  GradReducer* reducer = nullptr;
  // Dense targets of the training set (and of the test set) for MSE and L1, read by each batch's
  // sample indices; null: the data set's class labels. With targets, accuracy is NaN (nothing to
  // compare an arg-max with), and the test set is evaluated only when test_targets is set (its
  // loss and accuracy are NaN otherwise).
  const Targets* targets = nullptr;
  const Targets* test_targets = nullptr;
};

struct EpochMetrics {
  int epoch = 0;  // 1-based
  double lr = 0, train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0;
  double seconds = 0, samples_per_s = 0;
  int64_t skipped = 0;  // steps skipped for NaN/Inf (policy skip)
  // bf16 plans (-1 in fp32 ones): gradient values flushed to zero by the rounding to bf16, and
  // values checked, over the epoch's sampled steps (one in kFlushCheckEvery; Plan::flush_count).
  int64_t bf16_flushed = -1, bf16_checked = 0;
};
constexpr int kFlushCheckEvery = 16;

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};

// Evaluates the plan's model on all of `data` in batches of plan.batch().
// With an Augment, images go through its deterministic path (a centre crop) first.
// With a reducer (data-parallel training), each rank evaluates its share and the sums are combined.
// With targets (TrainConfig::targets), the loss is against them and the accuracy NaN.
EvalResult evaluate(Plan& plan, const Dataset& data, const Augment* augment = nullptr, GradReducer* reducer = nullptr,
                    const Targets* targets = nullptr);

// The order train() visits a training set of `count` samples in `epoch` (0-based): 0..count-1,
// shuffled when `shuffle` by Fisher-Yates from pcg32(seed, stream 0x5eed0000 + epoch). The CLI's
// batch grid and Python's fit() draw the same order.
std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int epoch, bool shuffle = true);

// Trains for cfg.epochs (or until early stopping), evaluating on `test` after every epoch.
// on_epoch is called after each epoch; returning false stops training.
// The epoch's order is epoch_order(count, seed, epoch, shuffle): runs are reproducible.
struct TrainResult {
  int epochs_run = 0;
  double seconds = 0;
  EpochMetrics last;
  bool early_stopped = false;
  bool stopped = false;   // after_step returned false
  TrainState state;       // where it stopped (stopped), or the end
};
TrainResult train(Plan& plan, const Dataset& train_set, const Dataset& test_set,
                  const TrainConfig& cfg, const std::function<bool(const EpochMetrics&)>& on_epoch);

// The checks every front end shares (the CLI's flags, Python's arguments, a resumed checkpoint's
// configuration), so that none is looser than another. A FieldName spells a setting for the
// caller's errors: given its name as Python and config.json spell it ("lr", "batch_size"), the
// name to print (Python's: the same "lr"; the CLI maps it to the flag that set it).
using FieldName = std::function<std::string(const char* field)>;
// "NAME: expected an integer in [lo, hi], found V" unless lo <= v <= hi.
void check_integer(const std::string& name, int64_t v, int64_t lo, int64_t hi);
// "NAME: expected a finite number in (lo, hi], found V" ("[lo, hi]" unless lo_open) unless it is.
void check_number(const std::string& name, double v, double lo, double hi, bool lo_open);
// sgd, momentum, nesterov, adam, adamw / constant, step, exp, cosine; anything else throws
// "NAME: expected ..., found 'TEXT'" (long text cut to about 60 characters).
OptimizerKind parse_optimizer(const std::string& text, const std::string& name);
ScheduleKind parse_schedule(const std::string& text, const std::string& name);
// A run's settings in ember's ranges, throwing Error naming the first that is not: the plan's
// batch_size [1, 65536], threads [1, 256], l2 and weight_decay [0, 1000], momentum [0, 1]; the
// loop's epochs [1, 100000], lr (0, 1000], lr_min [0, 1000], t_max and step_size [1, 10^6],
// gamma (0, 1000], early_stop_tol [0, 10^9]. NaN and Inf are never in range.
void validate(const PlanOptions& plan, const FieldName& name);
void validate(const TrainConfig& cfg, const FieldName& name);

// Checks that a data set fits a plan's model (image size, classes); throws Error naming `what`.
// With an Augment, the images' size is the augmented one (its crop). With targets, the classes
// are not checked but the targets are: a loss that takes them (MSE, L1), one row per sample, the
// output's size per row.
void check_dataset_fits(const Plan& plan, const Dataset& data, const std::string& what, const Augment* augment = nullptr,
                        const Targets* targets = nullptr);

}  // namespace ember
