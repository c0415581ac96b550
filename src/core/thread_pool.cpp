// The persistent thread pool: workers spin briefly on a generation counter, then sleep on it
// (C++20 atomic wait, a futex on Linux), so back-to-back parallel regions cost microseconds.
// Parts are claimed (a per-part stamp of the last region that took it), so the caller runs the
// parts of a worker that has not shown up: with a CPU hog on the second vCPU, 2-thread mnist-cnn
// training went from 7.2-8.0 to 3.7-4.1 s/epoch; without one, no change.
#include "core/thread_pool.h"

#include "core/fp_mode.h"

#include <pthread.h>
#include <signal.h>

namespace ember {

namespace {
constexpr int kSpins = 20000;
inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::ThreadPool(int threads, bool flush_denormals)
    : size_(threads < 1 ? 1 : threads), flush_(flush_denormals), claimed_(new std::atomic<uint64_t>[size_t(size_)]) {
  for (int p = 0; p < size_; ++p) claimed_[p].store(0, std::memory_order_relaxed);
  workers_.reserve(size_ - 1);
  // Workers are born with SIGINT and SIGTERM blocked, so those always reach the thread that
  // created the pool, which decides what they do (stop ember, or stop training at a step's end).
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { worker(t); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

int ThreadPool::claim(uint64_t gen, int t) {
  for (int i = 0; i < size_; ++i) {
    const int p = (t + i) % size_;
    uint64_t last = claimed_[p].load(std::memory_order_relaxed);
    while (last < gen)
      if (claimed_[p].compare_exchange_weak(last, gen, std::memory_order_acquire, std::memory_order_relaxed)) return p;
  }
  return -1;
}

// Runs parts of region gen until none is left to claim. The job is read only after a claim: a
// claim of region gen means that region is not finished, so job_ is still its job.
void ThreadPool::run_parts(uint64_t gen, int t, JobRef job) {
  for (int p; (p = claim(gen, t)) >= 0;) {
    const JobRef j = job.call ? job : job_;
    Profiler* prof = t == 0 ? nullptr : prof_;  // the caller's time is the region's own span
    const int64_t t0 = prof ? prof->now_ns() : 0;
    j.call(j.obj, p);
    if (prof) prof->record_worker(t, t0, prof->now_ns());
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) done_.notify_one();
  }
}

void ThreadPool::run_impl(JobRef job) {
  const FpModeScope mode(flush_);
  if (size_ == 1) {
    job.call(job.obj, 0);
    return;
  }
  job_ = job;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  generation_.store(gen, std::memory_order_release);  // publishes job_ and done_
  generation_.notify_all();
  run_parts(gen, 0, job);
  for (int i = 0; i < kSpins; ++i) {
    if (done_.load(std::memory_order_acquire) == size_) return;
    cpu_relax();
  }
  for (int d = done_.load(std::memory_order_acquire); d != size_; d = done_.load(std::memory_order_acquire))
    done_.wait(d, std::memory_order_acquire);
}

void ThreadPool::worker(int tid) {
  set_thread_fp_mode(flush_);
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
    run_parts(g, tid, JobRef{nullptr, nullptr});
  }
}

}  // namespace ember
