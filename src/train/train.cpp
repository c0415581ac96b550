// The training loop: per epoch a seeded permutation of the training set, mini-batches gathered
// into the plan's arena, forward, loss, backward, optimizer; then evaluation on the test set.
// Nothing is allocated inside the loop over batches.
#include "ember/train.h"

#include <chrono>
#include <memory>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "ember/error.h"
#include "train/eval_batches.h"
#include "train/blocks.h"

namespace ember {

double Schedule::at(int e) const {
  switch (kind) {
    case ScheduleKind::Constant: return lr;
    case ScheduleKind::Step: return lr * std::pow(gamma, double(e / step_size));
    case ScheduleKind::Exp: return lr * std::pow(gamma, double(e));
    case ScheduleKind::Cosine:
      return lr_min + (lr - lr_min) * (1 + std::cos(3.141592653589793 * e / t_max)) / 2;
  }
  return lr;
}

namespace {
void check_targets_fit(const Plan& plan, const Dataset& data, const std::string& what, const Targets& t,
                       const std::string& model) {
  const LossKind loss = plan.model().loss;
  if (!loss_takes_targets(loss))
    throw Error(what + ": targets were given, but " + model + " has the loss " + loss_kind_name(loss) +
                ", which takes class labels (targets need mse or l1)");
  size_t per = 1;
  for (int v : plan.output_dims()) per *= size_t(v);
  if (t.count != data.count || t.per != per)
    throw Error(what + ": the targets hold " + std::to_string(t.count) + " rows of " + std::to_string(t.per) +
                " values, but the data set has " + std::to_string(data.count) + " samples and " + model + " outputs " +
                std::to_string(per) + " values per sample");
}
}  // namespace

void check_dataset_fits(const Plan& plan, const Dataset& data, const std::string& what, const Augment* augment,
                        const Targets* targets) {
  const Model& m = plan.model();
  Dataset d;  // only the geometry
  d.channels = data.channels, d.num_classes = data.num_classes, d.rows = data.rows, d.cols = data.cols;
  if (augment) {
    const Size2 o = augmented_size(*augment, data.rows, data.cols, "crop");
    d.rows = o.h, d.cols = o.w;
  }
  const std::string model = m.source.empty() ? "model " + m.name : "model " + m.source;
  if (m.in_c != d.channels || m.in_h != d.rows || m.in_w != d.cols)
    throw Error(what + ": images are " + std::to_string(d.rows) + "x" + std::to_string(d.cols) + " with " +
                std::to_string(d.channels) + (d.channels == 1 ? " channel" : " channels") + ", but " + model +
                " expects input [" + std::to_string(m.in_c) + ", " + std::to_string(m.in_h) + ", " +
                std::to_string(m.in_w) + "]");
  if (targets) return check_targets_fit(plan, data, what, *targets, model);
  if (!plan.has_class_scores()) {
    std::string dims;
    for (int v : plan.output_dims()) dims += (dims.empty() ? "" : ", ") + std::to_string(v);
    throw Error(what + ": the data set has class labels, but " + model + " outputs [" + dims +
                "], not [" + std::to_string(m.num_classes) + "] class scores (train it on targets of its output's shape)");
  }
  if (m.num_classes < d.num_classes)
    throw Error(what + ": the data set has " + std::to_string(d.num_classes) + " classes, " + model +
                " outputs " + std::to_string(m.num_classes));
}

EvalResult evaluate(Plan& plan, const Dataset& data, const Augment* augment, GradReducer* reducer, const Targets* targets) {
  const int B = plan.batch();
  // Data-parallel: rank r evaluates its contiguous share; the sums are combined.
  const int R = reducer ? reducer->ranks() : 1, rank = reducer ? reducer->rank() : 0;
  const int64_t first = data.count * rank / R, end = data.count * (rank + 1) / R;
  struct EvalMode {  // stochastic depth off while evaluating; the plan's mode back after
    Plan& p;
    bool was;
    explicit EvalMode(Plan& q) : p(q), was(q.train_mode()) { p.set_train_mode(false); }
    ~EvalMode() { p.set_train_mode(was); }
  } mode(plan);
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  eval_batches(
      data, augment, B, first, end,
      [&](const uint8_t* images, const uint8_t* labels, const int64_t* idx, int n) { plan.gather_u8(images, labels, idx, n); },
      [&](const int64_t* idx, int n) {
        if (targets) gather_targets(plan, *targets, idx, n);
        plan.forward(n);
        loss_sum += plan.loss(n, false) * n;
        if (!targets) correct += plan.correct(n);
      });
  if (reducer) {
    double v[2] = {loss_sum, double(correct)};
    reducer->start_sum(v, 2);
    reducer->wait_sum();
    loss_sum = v[0], correct = int64_t(std::llround(v[1]));
  }
  r.count = data.count;
  r.loss = loss_sum / double(data.count);
  r.accuracy = targets ? NAN : double(correct) / double(data.count);
  return r;
}

namespace {
std::string step_name(int64_t step, int epoch, int64_t batch, int64_t batches) {
  return "step " + std::to_string(step) + " (epoch " + std::to_string(epoch + 1) + ", batch " +
         std::to_string(batch + 1) + " of " + std::to_string(batches) + ")";
}

std::string nonfinite_grad_message(const Plan& plan, int t, const std::string& where) {
  const ParamInfo& p = plan.params()[size_t(t)];
  return "non-finite gradient of " + p.name + " (" + plan.layers()[size_t(p.layer)].kind + ", layer " +
         std::to_string(p.layer) + ") at " + where;
}

// What one training step needs to know, and what it did.
struct StepCtx {
  Plan& plan;
  const TrainConfig& cfg;
  double lr;
  int n;  // samples in the batch
  int64_t step;
  int epoch;
  int64_t batch, batches;
  Profiler* P;
  std::string where() const { return step_name(step, epoch, batch, batches); }  // only on errors
};
struct StepOutcome {
  double loss_sum = 0;  // over the batch's samples
  int64_t correct = 0;
  bool skipped = false;  // policy skip met NaN/Inf: no update
  int stop_signal = 0;   // what poll_stop said (combined over ranks)
  int local = 0;         // samples this process ran (its share of the batch)
};

// Throws for policy stop; else the outcome of a step that met `bad` (skipped).
StepOutcome nonfinite(const StepCtx& c, const std::string& bad) {
  if (c.cfg.on_nonfinite == NonfinitePolicy::stop) throw NonfiniteError(bad + " (stopped before its update)");
  StepOutcome o;
  o.skipped = true;
  return o;
}

// The whole batch in one pass: forward, loss, backward with the update overlapped (backward_step).
template <class Gather>
StepOutcome one_pass_step(const StepCtx& c, Gather&& gather) {
  Plan& plan = c.plan;
  StepOutcome o;
  o.stop_signal = c.cfg.poll_stop ? c.cfg.poll_stop() : 0;
  timed(c.P, Phase::data, -1, gather);  // with a loader: the wait for its batch, then the conversion
  plan.forward(c.n);
  double loss = 0;
  timed(c.P, Phase::loss, -1, [&] {
    loss = plan.loss(c.n, true);
    if (!c.cfg.targets) o.correct = plan.correct(c.n);
  });
  int updated = -2;  // -2: not updated yet; else what the update returned
  if (!std::isfinite(loss)) {
    const int u = plan.first_nonfinite_output(c.n);
    StepOutcome s = nonfinite(c, "non-finite loss (" + std::to_string(loss) + ") at " + c.where() +
                                     (u >= 0 ? ": first non-finite output is that of " + plan.units()[size_t(u)].name
                                             : ": every layer's output is finite, the loss itself overflowed"));
    s.stop_signal = o.stop_signal;
    s.local = c.n;
    return s;
  }
  if (c.cfg.check_gradients && c.cfg.on_nonfinite == NonfinitePolicy::skip) {
    // Skipping needs to know before the update (one pass over the gradients); stopping does
    // not: the update reads every gradient anyway and reports what it met.
    plan.backward(c.n);
    int t = -1;
    timed(c.P, Phase::optimizer, -1, [&] { t = plan.first_nonfinite_grad(); });
    if (t >= 0) {
      StepOutcome s = nonfinite(c, nonfinite_grad_message(plan, t, c.where()));
      s.stop_signal = o.stop_signal;
      s.local = c.n;
      return s;
    }
  } else {
    updated = plan.backward_step(c.n, c.lr);  // the update overlapped with the first layer's backward
  }
  const int t = updated != -2 ? updated : plan.optimizer_step(c.lr);
  if (t >= 0 && c.cfg.check_gradients)
    throw NonfiniteError(nonfinite_grad_message(plan, t, c.where()) + " (stopped after its update, which that gradient spoiled)");
  o.loss_sum = loss * c.n;
  o.local = c.n;
  return o;
}

// The batch in gradient blocks (BlockStepper), summed across ranks when there is a reducer.
template <class Gather>
StepOutcome block_step(const StepCtx& c, train_impl::BlockStepper& stepper, Gather&& gather) {
  const train_impl::BlockStepper::Result br = stepper.run(
      c.n, [&](int first, int count) { timed(c.P, Phase::data, -1, [&] { gather(first, count); }); },
      c.cfg.poll_stop ? c.cfg.poll_stop() : 0);
  const bool check = c.cfg.check_gradients && c.cfg.on_nonfinite == NonfinitePolicy::skip;
  const int t = stepper.apply(c.lr, check && br.finite, !br.finite);
  StepOutcome o;
  if (!br.finite) o = nonfinite(c, "non-finite loss (" + std::to_string(br.loss_sum / c.n) + ") at " + c.where());
  else if (t >= 0 && check) o = nonfinite(c, nonfinite_grad_message(c.plan, t, c.where()));
  else if (t >= 0 && c.cfg.check_gradients)
    throw NonfiniteError(nonfinite_grad_message(c.plan, t, c.where()) + " (stopped after its update, which that gradient spoiled)");
  o.stop_signal = br.stop_signal;
  o.local = br.local;
  if (o.skipped) return o;
  o.loss_sum = br.loss_sum;
  o.correct = br.correct;
  return o;
}
}  // namespace

std::vector<int64_t> epoch_order(int64_t count, uint64_t seed, int epoch, bool shuffle) {
  std::vector<int64_t> order(size_t(count > 0 ? count : 0));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle) return order;
  Pcg32 rng(seed, 0x5eed0000ULL + uint64_t(epoch));  // Fisher-Yates from the epoch's own stream
  for (int64_t i = count - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint32_t(i + 1))]);
  return order;
}

TrainResult train(Plan& plan, const Dataset& tr, const Dataset& te, const TrainConfig& cfg,
                  const std::function<bool(const EpochMetrics&)>& on_epoch) {
  check_dataset_fits(plan, tr, "training set", cfg.augment, cfg.targets);
  // With training targets the test set is evaluated against its own targets only.
  const bool evaluating = cfg.evaluate && (!cfg.targets || cfg.test_targets);
  if (evaluating || !cfg.targets) check_dataset_fits(plan, te, "test set", cfg.augment, cfg.test_targets);
  using clock = std::chrono::steady_clock;
  const int B = cfg.batch > 0 ? cfg.batch : plan.batch();  // the (global) batch
  if (cfg.blocks == 0 && (cfg.reducer || B != plan.batch()))
    throw Error("train: a reducer, or a batch other than the plan's, needs gradient blocks (TrainConfig::blocks)");
  std::unique_ptr<train_impl::BlockStepper> stepper;
  if (cfg.blocks > 0) stepper = std::make_unique<train_impl::BlockStepper>(plan, cfg.blocks, B, cfg.reducer, !cfg.targets);
  const int64_t batches = (tr.count + B - 1) / B;
  if (cfg.start.epoch < 0 || cfg.start.batch < 0 || cfg.start.batch > batches)
    throw Error("train: start position epoch " + std::to_string(cfg.start.epoch) + ", batch " +
                std::to_string(cfg.start.batch) + " is outside the " + std::to_string(batches) +
                " batches of an epoch");
  std::vector<int64_t> order(tr.count), ident(static_cast<size_t>(B));
  std::iota(ident.begin(), ident.end(), int64_t(0));
  std::unique_ptr<BatchLoader> loader;
  const Augment none;  // a streamed set without augmentation: the loader decodes, nothing else
  if (cfg.augment || tr.streamed())
    loader = std::make_unique<BatchLoader>(tr, cfg.augment ? *cfg.augment : none, B, cfg.loader_threads, cfg.loader_depth, cfg.seed);
  TrainResult result;
  const auto t_start = clock::now();
  double prev_loss = cfg.start.prev_train_loss;
  for (int epoch = cfg.start.epoch; epoch < cfg.epochs; ++epoch) {
    const bool resumed = epoch == cfg.start.epoch;
    TrainState st = resumed ? cfg.start : TrainState{epoch};
    st.prev_train_loss = prev_loss;
    const auto t0 = clock::now();
    order = epoch_order(tr.count, cfg.seed, epoch, cfg.shuffle);  // the epoch's own stream: resumable
    const double lr = cfg.schedule.at(epoch);
    Profiler* P = plan.profiler();
    if (loader) loader->start(order.data(), tr.count, epoch, st.batch, true);
    const bool bf16 = plan.precision() == Precision::bf16;
    plan.reset_flush_count();
    for (; st.batch < batches; ++st.batch) {
      const int64_t start = st.batch * B;
      const int n = int(std::min<int64_t>(B, tr.count - start));
      const auto ts0 = clock::now();
      const int64_t ts = P ? P->now_ns() : 0;
      const int64_t step = epoch * batches + st.batch + 1;
      if (bf16) plan.set_flush_counting(st.batch % kFlushCheckEvery == 0);
      BatchLoader::Batch lb;  // blocks: the loader's whole batch, gathered block by block
      if (stepper && loader) timed(P, Phase::data, -1, [&] { lb = loader->next(); });
      const StepCtx c{plan, cfg, lr, n, step, epoch, st.batch, batches, P};
      // The targets of the same samples, by the same indices as the images (the loader's batch
      // holds order[start ..] too): after gather_u8, which may write one-hot targets.
      const StepOutcome o = stepper ? block_step(c, *stepper, [&](int first, int count) {
        if (!loader) plan.gather_u8(tr.images.data(), tr.labels.data(), order.data() + start + first, count);
        else plan.gather_u8(lb.images, lb.labels, ident.data() + first, count);
        if (cfg.targets) gather_targets(plan, *cfg.targets, order.data() + start + first, count);
      }) : one_pass_step(c, [&] {
        if (!loader) plan.gather_u8(tr.images.data(), tr.labels.data(), order.data() + start, n);
        else {
          const BatchLoader::Batch b = loader->next();
          plan.gather_u8(b.images, b.labels, ident.data(), b.n);
        }
        if (cfg.targets) gather_targets(plan, *cfg.targets, order.data() + start, n);
      });
      const int stop_signal = o.stop_signal;
      if (o.skipped) {
        ++st.skipped;  // skip: no update, the batch counts for nothing
      } else {
        st.loss_sum += o.loss_sum;
        st.correct += o.correct;
      }
      if (P) {
        P->record(0, Phase::step, -1, ts, P->now_ns());
        P->end_step(o.local);  // GFLOP/s: the samples this process computed
      }
      st.seconds += std::chrono::duration<double>(clock::now() - ts0).count();
      if (cfg.on_step) cfg.on_step(epoch + 1, start + n, tr.count);
      if (cfg.after_step) {
        TrainState next = st;
        ++next.batch;
        if (!cfg.after_step(next, stop_signal)) {
          result.stopped = true;
          result.state = next;
          result.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
          return result;
        }
      }
    }
    const double train_seconds = st.seconds;
    EvalResult ev;
    if (cfg.targets && !cfg.test_targets) ev.loss = ev.accuracy = NAN;  // no test targets: not evaluated
    if (evaluating) {
      const int64_t te0 = P ? P->now_ns() : 0;
      plan.set_profiler(nullptr);  // evaluation's forward passes are not training steps
      ev = evaluate(plan, te, cfg.augment, cfg.reducer, cfg.test_targets);
      plan.set_profiler(P);
      if (P) P->record(0, Phase::eval, -1, te0, P->now_ns());
    }
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.lr = lr;
    const int64_t counted = tr.count - st.skipped * B;  // approximate only when a short last batch was skipped
    m.train_loss = counted > 0 ? st.loss_sum / double(counted) : NAN;  // no step applied: diverged
    m.train_acc = cfg.targets ? NAN : counted > 0 ? double(st.correct) / double(counted) : 0;
    m.test_loss = ev.loss;
    m.test_acc = ev.accuracy;
    m.seconds = (resumed ? cfg.start.seconds : 0) + std::chrono::duration<double>(clock::now() - t0).count();
    m.samples_per_s = train_seconds > 0 ? double(tr.count) / train_seconds : 0;
    m.skipped = st.skipped;
    if (bf16) {
      plan.set_flush_counting(false);
      m.bf16_flushed = plan.flush_count().flushed, m.bf16_checked = plan.flush_count().checked;
    }
    result.epochs_run = epoch + 1;
    result.last = m;
    result.state = TrainState{epoch + 1};
    result.state.prev_train_loss = m.train_loss;
    const bool go_on = on_epoch ? on_epoch(m) : true;
    if (!std::isfinite(m.train_loss))
      throw Error("training diverged: train loss is " + std::to_string(m.train_loss) + " in epoch " +
                  std::to_string(m.epoch) + " (a lower learning rate?)");
    if (!go_on) break;
    if (cfg.early_stop_tol > 0 && epoch > 0 && prev_loss - m.train_loss < cfg.early_stop_tol) {
      result.early_stopped = true;
      break;
    }
    prev_loss = m.train_loss;
  }
  result.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return result;
}

}  // namespace ember
