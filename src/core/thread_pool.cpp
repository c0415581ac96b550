// The persistent thread pool: workers spin briefly on a generation counter, then sleep on it
// (C++20 atomic wait, a futex on Linux), so back-to-back parallel regions cost microseconds.
#include "core/thread_pool.h"

namespace ember {

namespace {
constexpr int kSpins = 20000;
inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::ThreadPool(int threads) : size_(threads < 1 ? 1 : threads) {
  workers_.reserve(size_ - 1);
  for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_impl(JobRef job) {
  if (size_ == 1) {
    job.call(job.obj, 0);
    return;
  }
  job_ = job;
  pending_.store(size_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  job.call(job.obj, 0);
  for (int i = 0; i < kSpins; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    cpu_relax();
  }
  for (int p = pending_.load(std::memory_order_acquire); p != 0; p = pending_.load(std::memory_order_acquire))
    pending_.wait(p, std::memory_order_acquire);
}

void ThreadPool::worker(int tid) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpins && g == seen; ++i) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    if (Profiler* p = prof_) {
      const int64_t t0 = p->now_ns();
      job_.call(job_.obj, tid);
      p->record_worker(tid, t0, p->now_ns());
    } else {
      job_.call(job_.obj, tid);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace ember
