// One persistent pool of worker threads. run(fn) calls fn(part) once for every part in
// [0, size()) and returns when all are done. Thread t runs part t when it arrives in time; a part
// nobody has started is run by whichever thread is free, so a worker whose vCPU the hypervisor
// has descheduled does not hold up the region: the caller runs its part. Parts therefore must not
// wait for each other. No allocation per run: the job is a non-owning function reference.
// Every part runs in the pool's floating-point mode (core/fp_mode.h): the workers hold it for
// their lifetime, the caller for the length of run(), its own mode restored on return.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "ember/profiler.h"

namespace ember {

class ThreadPool {
 public:
  // flush_denormals: FTZ and DAZ on in every part (ember's default); false: exact IEEE.
  explicit ThreadPool(int threads, bool flush_denormals = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  bool flushes_denormals() const { return flush_; }
  // With a profiler, each worker's share of every run is recorded on its own track, attributed
  // to the profiler's current context. Set between runs only (null: off, no cost but a test).
  void set_profiler(Profiler* p) { prof_ = p; }

  template <class F>
  void run(F&& fn) {
    run_impl(JobRef{&fn, [](void* f, int tid) { (*static_cast<std::remove_reference_t<F>*>(f))(tid); }});
  }

 private:
  struct JobRef {
    void* obj;
    void (*call)(void*, int);
  };
  void run_impl(JobRef job);
  void worker(int tid);
  // Claims a part of region `gen` for thread t (its own first, then any), or returns -1.
  int claim(uint64_t gen, int t);
  void run_parts(uint64_t gen, int t, JobRef job);

  int size_;
  bool flush_;
  std::vector<std::thread> workers_;
  JobRef job_{nullptr, nullptr};
  std::atomic<uint64_t> generation_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;  // per part: the last region that claimed it
  std::atomic<int> done_{0};                          // parts finished in the current region
  std::atomic<bool> stop_{false};
  Profiler* prof_ = nullptr;
};

// The half-open range [begin, end) of n items that part `part` of `parts` owns: contiguous,
// sizes differ by at most one, fixed for a given (n, parts) so results are reproducible.
struct Range {
  int64_t begin, end;
};
inline Range split_range(int64_t n, int part, int parts) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t b = part * base + (part < extra ? part : extra);
  return {b, b + base + (part < extra ? 1 : 0)};
}
// The same, with boundaries rounded to multiples of `align` (the last part takes the tail).
inline Range split_range_aligned(int64_t n, int part, int parts, int64_t align) {
  const int64_t blocks = (n + align - 1) / align;
  Range r = split_range(blocks, part, parts);
  r.begin = r.begin * align < n ? r.begin * align : n;
  r.end = r.end * align < n ? r.end * align : n;
  return r;
}

// Items [0, n) in the contiguous per-thread ranges of split_range, each taken exactly once: a
// thread takes its own items from the front, then, when its range is empty, the others' from
// their back. Owners thus touch the same samples step after step (their outputs stay in their
// own caches; one cache line between the two vCPUs here costs ~240 ns one way), while a core
// that is slower at the moment is still helped. Built per parallel region, on the stack.
class OwnedRanges {
 public:
  static constexpr int kMaxParts = 256;
  OwnedRanges(int64_t n, int parts) : parts_(parts) {
    for (int t = 0; t < parts; ++t) {
      const Range r = split_range(n, t, parts);
      r_[t].store(uint64_t(r.begin) << 32 | uint64_t(r.end), std::memory_order_relaxed);
    }
  }
  // The next item for thread t, or -1 when none is left anywhere.
  int64_t next(int t) {
    for (int i = 0; i < parts_; ++i) {
      std::atomic<uint64_t>& a = r_[(t + i) % parts_];
      uint64_t v = a.load(std::memory_order_relaxed);
      for (;;) {
        const uint64_t b = v >> 32, e = v & 0xFFFFFFFFu;
        if (b >= e) break;
        const uint64_t nv = i == 0 ? (b + 1) << 32 | e : b << 32 | (e - 1);
        if (a.compare_exchange_weak(v, nv, std::memory_order_relaxed)) return int64_t(i == 0 ? b : e - 1);
      }
    }
    return -1;
  }

 private:
  int parts_;
  std::atomic<uint64_t> r_[kMaxParts];  // (begin << 32) | end, n < 2^32
};

}  // namespace ember
