// What data costs between two cores: the round trip of one cache line bounced between CPU 0 and
// CPU 1 (threads pinned), and reading 4 MB the other core has just written against re-reading
// it. It explains why ember's threaded ops keep each sample on the core that wrote it.
//   build/release/bench/bench_cores [CPU_A CPU_B]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof(s), &s) == 0;
}
}  // namespace

int main(int argc, char** argv) {
  const int a = argc > 2 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  if (std::thread::hardware_concurrency() < 2) {
    std::printf("bench_cores: skipped, this machine has one hardware thread\n");
    return 0;
  }
  if (!pin(a)) {
    std::fprintf(stderr, "bench_cores: cannot pin to CPU %d\n", a);
    return 2;
  }
  std::printf("bench_cores: CPU %d <-> CPU %d (%u hardware threads)\n", a, b, std::thread::hardware_concurrency());
  // 1. Ping-pong: each side waits for the other's store to the same line.
  alignas(64) std::atomic<int64_t> flag{0};
  const int64_t rounds = 200000;
  std::atomic<bool> pinned{true};
  std::thread other([&] {
    pinned = pin(b);
    for (int64_t i = 0; i < rounds; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {}
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < rounds; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2) {}
  }
  const double rt = since(t0) / rounds;
  other.join();
  if (!pinned) {
    std::fprintf(stderr, "bench_cores: cannot pin to CPU %d\n", b);
    return 2;
  }
  std::printf("cache-line round trip: %.1f ns (one way %.1f ns)\n", rt * 1e9, rt * 0.5e9);
  // 2. Read 4 MB (one load per 64-byte line) just after the other core wrote it, then again.
  const size_t n = size_t(1) << 20;
  std::vector<float> buf(n);
  std::atomic<int> phase{0};
  const int reps = 20;
  std::thread writer([&] {
    pin(b);
    for (int r = 0; r < reps; ++r) {
      while (phase.load() != 2 * r + 1) {}
      for (size_t i = 0; i < n; ++i) buf[i] = float(r + i);
      phase.store(2 * r + 2);
    }
  });
  double remote = 1e9, local = 1e9;
  float sink = 0;
  for (int r = 0; r < reps; ++r) {
    phase.store(2 * r + 1);
    while (phase.load() != 2 * r + 2) {}
    for (double* best : {&remote, &local}) {
      const auto t1 = Clock::now();
      float s = 0;
      for (size_t i = 0; i < n; i += 16) s += buf[i];
      *best = std::min(*best, since(t1));
      sink += s;
    }
  }
  writer.join();
  const double mb = n * sizeof(float) / 1e6;
  std::printf("read 4 MB the other core just wrote: %.1f us (%.1f GB/s)\n", remote * 1e6, mb / remote / 1e3);
  std::printf("read the same 4 MB again:           %.1f us (%.1f GB/s), %.2fx faster\n", local * 1e6,
              mb / local / 1e3, remote / local);
  volatile float keep = sink;  // the loads must happen
  (void)keep;
  return 0;
}
