// The built-in profiler: timed spans of every plan unit's forward and backward pass, the optimizer,
// batch gathering, the loss and whole steps, on every thread of the pool. Recording is two clock
// reads and a store into buffers sized up front (no allocation, no lock: each thread writes its own
// track). Aggregates cover the whole run; individual spans are kept up to a capacity, for traces.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

// comm: data-parallel training's all-reduce work (posting, testing, summing received halves);
// comm_wait: blocked until other ranks' data arrives. Both on the communication track.
enum class Phase : uint8_t { step, data, forward, loss, backward, optimizer, eval, comm, comm_wait };
constexpr int kPhases = 9;
const char* phase_name(Phase p);

struct Span {
  int64_t t0_ns, t1_ns;  // steady clock, since the profiler was made
  int32_t unit;          // plan unit, or -1 for work that belongs to no unit (data, loss, step)
  int32_t step;          // 0-based training step
  Phase phase;
};

class Profiler {
 public:
  // threads: one track each (tid 0 is the caller); units: the plan's execution units;
  // span_capacity: spans kept per track for traces (later ones are only aggregated).
  Profiler(int threads, int units, size_t span_capacity = size_t(1) << 16);

  int64_t now_ns() const;
  void record(int tid, Phase phase, int unit, int64_t t0, int64_t t1);

  // What the pool's workers are doing: set by tid 0 before each parallel region.
  void set_context(Phase phase, int unit) {
    ctx_phase_ = phase;
    ctx_unit_ = unit;
  }
  void record_worker(int tid, int64_t t0, int64_t t1) { record(tid, ctx_phase_, ctx_unit_, t0, t1); }

  // The training loop counts steps and samples (GFLOP/s need the samples each unit saw).
  void end_step(int samples) {
    ++step_;
    samples_ += samples;
  }
  int64_t steps() const { return step_; }
  // Bytes this rank sent in data-parallel all-reduces (written by the communication track).
  void add_comm_bytes(int64_t b) { comm_bytes_ += b; }
  int64_t comm_bytes() const { return comm_bytes_; }
  int64_t samples() const { return samples_; }

  struct Total {
    int64_t calls = 0, ns = 0;
  };
  // Aggregate of one track, phase and unit (-1 for none).
  const Total& total(int tid, Phase phase, int unit) const {
    return totals_[index(tid, phase, unit)];
  }
  const std::vector<Span>& spans(int tid) const { return spans_[size_t(tid)]; }
  int64_t dropped() const;  // spans aggregated but not kept
  int threads() const { return threads_; }
  int units() const { return units_; }

 private:
  size_t index(int tid, Phase phase, int unit) const {
    return (size_t(tid) * kPhases + size_t(phase)) * size_t(units_ + 1) + size_t(unit + 1);
  }
  int threads_, units_;
  size_t capacity_;
  int64_t origin_ns_;
  int64_t step_ = 0, samples_ = 0, comm_bytes_ = 0;
  Phase ctx_phase_ = Phase::forward;
  int ctx_unit_ = -1;
  std::vector<Total> totals_;
  std::vector<std::vector<Span>> spans_;
  std::vector<int64_t> dropped_;
};

// Runs fn(), timed as (phase, unit) on the caller's track (tid 0) and set as the pool's context,
// when p is non-null; otherwise just runs it.
template <class F>
void timed(Profiler* p, Phase phase, int unit, F&& fn) {
  if (!p) {
    fn();
    return;
  }
  p->set_context(phase, unit);
  const int64_t t0 = p->now_ns();
  fn();
  p->record(0, phase, unit, t0, p->now_ns());
}

}  // namespace ember
