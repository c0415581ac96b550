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

void check_dataset_fits(const Plan& plan, const Dataset& data, const std::string& what, const Augment* augment) {
  const Model& m = plan.model();
  Dataset d;  // only the geometry
  d.channels = data.channels, d.num_classes = data.num_classes, d.rows = data.rows, d.cols = data.cols;
  if (augment) {
    const Size2 o = augmented_size(*augment, data.rows, data.cols, "--crop");
    d.rows = o.h, d.cols = o.w;
  }
  const std::string model = m.source.empty() ? "model " + m.name : "model " + m.source;
  if (m.in_c != d.channels || m.in_h != d.rows || m.in_w != d.cols)
    throw Error(what + ": images are " + std::to_string(d.rows) + "x" + std::to_string(d.cols) + " with " +
                std::to_string(d.channels) + (d.channels == 1 ? " channel" : " channels") + ", but " + model +
                " expects input [" + std::to_string(m.in_c) + ", " + std::to_string(m.in_h) + ", " +
                std::to_string(m.in_w) + "]");
  if (m.num_classes < d.num_classes)
    throw Error(what + ": the data set has " + std::to_string(d.num_classes) + " classes, " + model +
                " outputs " + std::to_string(m.num_classes));
}

EvalResult evaluate(Plan& plan, const Dataset& data, const Augment* augment) {
  const int B = plan.batch();
  struct EvalMode {  // stochastic depth off while evaluating; the plan's mode back after
    Plan& p;
    bool was;
    explicit EvalMode(Plan& q) : p(q), was(q.train_mode()) { p.set_train_mode(false); }
    ~EvalMode() { p.set_train_mode(was); }
  } mode(plan);
  std::vector<int64_t> index(data.count);
  std::iota(index.begin(), index.end(), int64_t(0));
  std::unique_ptr<BatchLoader> loader;
  const Augment none;  // a streamed set without augmentation: the loader decodes, nothing else
  if (augment || data.streamed()) {
    loader = std::make_unique<BatchLoader>(data, augment ? *augment : none, B, data.streamed() ? 2 : 1, 3, 0);
    loader->start(index.data(), data.count, 0, 0, false);
  }
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < data.count; start += B) {
    const int n = int(std::min<int64_t>(B, data.count - start));
    if (loader) {
      const BatchLoader::Batch b = loader->next();
      plan.gather_u8(b.images, b.labels, index.data(), n);  // the batch in order: index 0 .. n-1
    } else {
      plan.gather_u8(data.images.data(), data.labels.data(), index.data() + start, n);
    }
    plan.forward(n);
    loss_sum += plan.loss(n, false) * n;
    correct += plan.correct(n);
  }
  r.count = data.count;
  r.loss = loss_sum / double(data.count);
  r.accuracy = double(correct) / double(data.count);
  return r;
}

namespace {
std::string step_name(int64_t step, int epoch, int64_t batch, int64_t batches) {
  return "step " + std::to_string(step) + " (epoch " + std::to_string(epoch + 1) + ", batch " +
         std::to_string(batch + 1) + " of " + std::to_string(batches) + ")";
}
}  // namespace

TrainResult train(Plan& plan, const Dataset& tr, const Dataset& te, const TrainConfig& cfg,
                  const std::function<bool(const EpochMetrics&)>& on_epoch) {
  check_dataset_fits(plan, tr, "training set", cfg.augment);
  check_dataset_fits(plan, te, "test set", cfg.augment);
  using clock = std::chrono::steady_clock;
  const int B = plan.batch();
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
    std::iota(order.begin(), order.end(), int64_t(0));
    if (cfg.shuffle) {  // Fisher-Yates from the epoch's own stream: reproducible and resumable
      Pcg32 rng(cfg.seed, 0x5eed0000ULL + uint64_t(epoch));
      for (int64_t i = tr.count - 1; i > 0; --i) std::swap(order[i], order[rng.below(uint32_t(i + 1))]);
    }
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
      timed(P, Phase::data, -1, [&] {  // with a loader: the wait for its batch, then the conversion
        if (!loader) return plan.gather_u8(tr.images.data(), tr.labels.data(), order.data() + start, n);
        const BatchLoader::Batch b = loader->next();
        plan.gather_u8(b.images, b.labels, ident.data(), b.n);
      });
      plan.forward(n);
      double loss = 0;
      int correct = 0;
      timed(P, Phase::loss, -1, [&] {
        loss = plan.loss(n, true);
        correct = plan.correct(n);
      });
      const int64_t step = epoch * batches + st.batch + 1;
      auto grad_message = [&](int t) {
        const ParamInfo& p = plan.params()[size_t(t)];
        return "non-finite gradient of " + p.name + " (" + plan.layers()[size_t(p.layer)].kind + ", layer " +
               std::to_string(p.layer) + ") at " + step_name(step, epoch, st.batch, batches);
      };
      if (bf16) plan.set_flush_counting(st.batch % kFlushCheckEvery == 0);
      std::string bad;
      int updated = -2;  // -2: not updated yet; else what the update returned
      if (!std::isfinite(loss)) {
        const int u = plan.first_nonfinite_output(n);
        bad = "non-finite loss (" + std::to_string(loss) + ") at " + step_name(step, epoch, st.batch, batches) +
              (u >= 0 ? ": first non-finite output is that of " + plan.units()[size_t(u)].name
                      : ": every layer's output is finite, the loss itself overflowed");
      } else if (cfg.check_gradients && cfg.on_nonfinite == NonfinitePolicy::skip) {
        // Skipping needs to know before the update (one pass over the gradients); stopping does
        // not: the update reads every gradient anyway and reports what it met.
        plan.backward(n);
        int t = -1;
        timed(P, Phase::optimizer, -1, [&] { t = plan.first_nonfinite_grad(); });
        if (t >= 0) bad = grad_message(t);
      } else {
        updated = plan.backward_step(n, lr);  // the update overlapped with the first layer's backward
      }
      if (!bad.empty()) {
        if (cfg.on_nonfinite == NonfinitePolicy::stop) throw NonfiniteError(bad + " (stopped before its update)");
        ++st.skipped;  // skip: no update, the batch counts for nothing
      } else {
        const int t = updated != -2 ? updated : plan.optimizer_step(lr);
        if (t >= 0 && cfg.check_gradients)
          throw NonfiniteError(grad_message(t) + " (stopped after its update, which that gradient spoiled)");
        st.loss_sum += loss * n;
        st.correct += correct;
      }
      if (P) {
        P->record(0, Phase::step, -1, ts, P->now_ns());
        P->end_step(n);
      }
      st.seconds += std::chrono::duration<double>(clock::now() - ts0).count();
      if (cfg.on_step) cfg.on_step(epoch + 1, start + n, tr.count);
      if (cfg.after_step) {
        TrainState next = st;
        ++next.batch;
        if (!cfg.after_step(next)) {
          result.stopped = true;
          result.state = next;
          result.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
          return result;
        }
      }
    }
    const double train_seconds = st.seconds;
    EvalResult ev;
    if (cfg.evaluate) {
      const int64_t te0 = P ? P->now_ns() : 0;
      plan.set_profiler(nullptr);  // evaluation's forward passes are not training steps
      ev = evaluate(plan, te, cfg.augment);
      plan.set_profiler(P);
      if (P) P->record(0, Phase::eval, -1, te0, P->now_ns());
    }
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.lr = lr;
    const int64_t counted = tr.count - st.skipped * B;  // approximate only when a short last batch was skipped
    m.train_loss = counted > 0 ? st.loss_sum / double(counted) : NAN;  // no step applied: diverged
    m.train_acc = counted > 0 ? double(st.correct) / double(counted) : 0;
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
                  std::to_string(m.epoch) + " (lower --lr?)");
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
