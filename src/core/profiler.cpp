// The profiler's recording side: per-track span buffers reserved up front, per-track aggregates
// indexed by (phase, unit). Only tid's own entries are written by thread tid.
#include "ember/profiler.h"

#include <chrono>

namespace ember {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::step: return "step";
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::loss: return "loss";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::eval: return "eval";
    case Phase::comm: return "all-reduce";
    case Phase::comm_wait: return "waiting";
  }
  return "?";
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Profiler::Profiler(int threads, int units, size_t span_capacity)
    : threads_(threads < 1 ? 1 : threads),
      units_(units < 0 ? 0 : units),
      capacity_(span_capacity),
      origin_ns_(steady_ns()),
      totals_(size_t(threads_) * kPhases * size_t(units_ + 1)),
      spans_(size_t(threads_)),
      dropped_(size_t(threads_), 0) {
  for (auto& s : spans_) s.reserve(capacity_);
}

int64_t Profiler::now_ns() const { return steady_ns() - origin_ns_; }

void Profiler::record(int tid, Phase phase, int unit, int64_t t0, int64_t t1) {
  if (tid < 0 || tid >= threads_ || unit < -1 || unit >= units_) return;
  Total& t = totals_[index(tid, phase, unit)];
  ++t.calls;
  t.ns += t1 - t0;
  std::vector<Span>& s = spans_[size_t(tid)];
  if (s.size() < capacity_) s.push_back(Span{t0, t1, unit, int32_t(step_), phase});
  else ++dropped_[size_t(tid)];
}

int64_t Profiler::dropped() const {
  int64_t n = 0;
  for (int64_t d : dropped_) n += d;
  return n;
}

}  // namespace ember
