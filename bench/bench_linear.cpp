// mnist-cnn's fc1 (x[64, 6272] -> y[64, 128]) one level above the kernels, on the thread pool:
// forward, and backward (weight and input gradients), by the dense path (ops::linear_fwd/bwd) and
// by the sparse-input path (ops::linear_fwd_sp/bwd_sp, which picks per column chunk), at a share
// of non-zero inputs, for 1 and 2 threads. Counter: GFLOP/s counted dense (2 N C K per product).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace {

using namespace ember;

struct Fc1 {
  static constexpr int N = 64, C = 6272, K = 128;
  std::vector<float> x, w, b, dy, y, dx, dw, db, ws;
  std::vector<uint8_t> saved;
  explicit Fc1(double density, int threads)
      : x(size_t(N) * C), w(size_t(K) * C), b(K), dy(size_t(N) * K), y(size_t(N) * K),
        dx(size_t(N) * C), dw(size_t(K) * C), db(K), ws(ops::linear_fwd_workspace(N, K) + 1),
        saved(ops::linear_sp_saved_bytes(N, C, K, threads) + 64) {
    std::mt19937 g(1);
    std::normal_distribution<float> d(0.f, 1.f);
    std::uniform_real_distribution<double> u(0, 1);
    for (auto& v : x) v = u(g) < density ? std::abs(d(g)) : 0.f;  // ReLU outputs
    for (auto* v : {&w, &b, &dy})
      for (auto& e : *v) e = d(g);
  }
  void* sv() { return saved.data() + (64 - reinterpret_cast<uintptr_t>(saved.data()) % 64) % 64; }
};

void fc1(benchmark::State& st, bool sparse, bool backward, double density, int threads) {
  if (!isa_supported(Isa::avx512)) {
    st.SkipWithError("needs AVX-512");
    return;
  }
  ThreadPool pool(threads);
  const ops::Exec e{kernels_for(Isa::avx512), pool};
  Fc1 f(density, threads);
  const int N = Fc1::N, C = Fc1::C, K = Fc1::K;
  for (auto _ : st) {
    if (sparse) {
      ops::linear_fwd_sp(e, f.y.data(), f.sv(), f.x.data(), f.w.data(), f.b.data(), N, C, K, f.ws.data());
      if (backward)
        ops::linear_bwd_sp(e, f.dx.data(), f.dw.data(), f.db.data(), f.dy.data(), f.x.data(), f.w.data(),
                           f.sv(), true, N, C, K);
    } else {
      ops::linear_fwd<float>(e, f.y.data(), f.x.data(), f.w.data(), f.b.data(), N, C, K, f.ws.data());
      if (backward)
        ops::linear_bwd<float>(e, f.dx.data(), f.dw.data(), f.db.data(), f.dy.data(), f.x.data(), f.w.data(), N, C, K);
    }
    benchmark::ClobberMemory();
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * C * K * (backward ? 3 : 1) * 1e-9 * st.iterations(),
                                              benchmark::Counter::kIsRate);
}

void register_all() {
  for (int threads : {1, 2})
    for (bool backward : {false, true})
      for (int pct : {20, 30, 50, 70}) {
        for (bool sparse : {false, true})
          benchmark::RegisterBenchmark((std::string("fc1_") + (backward ? "fwd_bwd" : "fwd") + "/" +
                                        (sparse ? "sparse_path" : "dense_path") + "/d" + std::to_string(pct) +
                                        "/threads:" + std::to_string(threads)).c_str(),
                                       fc1, sparse, backward, pct / 100.0, threads)
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
      }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
