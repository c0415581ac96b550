// A training step in gradient blocks: this rank's blocks of the batch one after another, their
// gradients summed pairwise in a fixed binary tree (a stack of partial sums, like a binary
// counter), the last block's hook folding the tree onto its gradient as each unit's gradients
// become final and handing them to the reducer, whose sums across ranks overlap its backward.
#include "train/blocks.h"

#include <csignal>
#include <cmath>
#include <cstring>
#include <string>

#include "ember/error.h"

namespace ember::train_impl {

namespace {
bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }
int log2i(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}
}  // namespace

BlockStepper::BlockStepper(Plan& plan, int blocks, int batch, GradReducer* reducer, bool count_correct)
    : plan_(plan), K_(blocks), L_(0), rank_(reducer ? reducer->rank() : 0), batch_(batch), reducer_(reducer),
      count_correct_(count_correct) {
  const int N = reducer ? reducer->ranks() : 1;
  if (K_ < 1 || K_ % N != 0)
    throw Error("blocks " + std::to_string(K_) + ": must be a multiple of the " + std::to_string(N) +
                " ranks (each rank runs the same number of blocks)");
  L_ = K_ / N;
  if (!power_of_two(L_))
    throw Error("blocks " + std::to_string(K_) + ": each of the " + std::to_string(N) + " ranks would run " +
                std::to_string(L_) + " blocks; the fixed summation tree needs a power of two");
  const int per_block = (batch + K_ - 1) / K_;
  if (plan.batch() < per_block)
    throw Error("gradient blocks: the plan's batch " + std::to_string(plan.batch()) + " cannot hold a block of " +
                std::to_string(per_block) + " samples (batch " + std::to_string(batch) + " in " + std::to_string(K_) +
                " blocks)");
  // The tree's lower levels: at most log2(L) partials wait at once, plus the one being pushed.
  const int depth = L_ > 1 ? log2i(L_) + 1 : 0;
  stack_.assign(size_t(depth), std::vector<float>(plan.param_count()));
  level_.reserve(size_t(depth));
}

void BlockStepper::fold(int first, int count) {
  float* g = static_cast<float*>(plan_.grad_data());
  const std::vector<ParamInfo>& ps = plan_.params();
  for (int t = first; t < first + count; ++t) {
    const size_t off = ps[size_t(t)].offset, len = ps[size_t(t)].size;
    for (size_t s = level_.size(); s-- > 0;) {  // the newest partial first: the lowest tree level
      const float* p = stack_[s].data() + off;
      for (size_t i = 0; i < len; ++i) g[off + i] = p[i] + g[off + i];
    }
  }
}

void BlockStepper::on_final(void* self, int first, int count) {
  auto* b = static_cast<BlockStepper*>(self);
  b->fold(first, count);
  if (b->reducer_) b->reducer_->grads_final(first, count);
}

BlockStepper::Result BlockStepper::run(int n, const std::function<void(int, int)>& gather, int local_signal) {
  level_.clear();
  local_ = 0;
  double loss_sum = 0;
  int64_t correct = 0;
  float* g = static_cast<float*>(plan_.grad_data());
  const size_t P = plan_.param_count();
  for (int i = 0; i < L_; ++i) {
    const bool last = i == L_ - 1;
    const BlockRange r = block_range(rank_ * L_ + i, n, K_);
    const int nb = r.end - r.first;
    local_ += nb;
    if (nb > 0) {
      gather(r.first, nb);
      plan_.set_sample_offset(r.first);
      plan_.forward(nb);
      loss_sum += plan_.loss(nb, true, n) * nb;
      if (count_correct_) correct += plan_.correct(nb);
    }
    if (last) {  // the step's statistics travel while the last backward runs
      stats_[0] = loss_sum, stats_[1] = double(correct);
      stats_[2] = local_signal == SIGTERM, stats_[3] = local_signal == SIGINT;
      if (reducer_) reducer_->start_sum(stats_, 4);
    }
    if (nb > 0) {
      plan_.backward(nb, last ? &BlockStepper::on_final : nullptr, this);
    } else {
      std::memset(g, 0, P * sizeof(float));  // an empty block (a batch smaller than K) adds zeros
      if (last) on_final(this, 0, int(plan_.params().size()));
    }
    if (last) break;
    // Push the block's gradient; merge equal levels: ((b0 + b1) + (b2 + b3)) ...
    std::memcpy(stack_[level_.size()].data(), g, P * sizeof(float));
    level_.push_back(0);
    while (level_.size() >= 2 && level_[level_.size() - 1] == level_[level_.size() - 2]) {
      float* lo = stack_[level_.size() - 2].data();
      const float* hi = stack_[level_.size() - 1].data();
      for (size_t e = 0; e < P; ++e) lo[e] = lo[e] + hi[e];
      level_.pop_back();
      ++level_.back();
    }
  }
  plan_.set_sample_offset(0);
  if (reducer_) reducer_->wait_sum();
  Result res;
  res.loss_sum = stats_[0];
  res.correct = int64_t(std::llround(stats_[1]));
  res.stop_signal = stats_[2] > 0 ? SIGTERM : stats_[3] > 0 ? SIGINT : 0;
  res.finite = std::isfinite(res.loss_sum);
  res.local = local_;
  return res;
}

int BlockStepper::apply(double lr, bool check_first, bool skip_update) {
  if (check_first && reducer_ && reducer_->sharded())
    throw Error("gradient blocks: a sharded reducer cannot check every gradient before the update (policy skip)");
  if (check_first || skip_update || !reducer_) {
    if (reducer_) reducer_->finish([](size_t, size_t) {});
    if (skip_update) return -1;
    if (check_first) {
      const int t = plan_.first_nonfinite_grad();
      if (t >= 0) return t;
    }
    return plan_.optimizer_step(lr);
  }
  int bad = -1;
  reducer_->finish([&](size_t begin, size_t end) {
    const int b = plan_.update_elements(lr, begin, end);
    if (b >= 0 && (bad < 0 || b < bad)) bad = b;
  });
  plan_.finish_step();
  return bad;
}

}  // namespace ember::train_impl
