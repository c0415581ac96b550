// Single-thread SGEMM throughput (GFLOP/s) per ISA: square sizes and the network shapes
// ember's Linear and Conv layers produce. The scalar reference only runs the small shapes.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace {

using ember::Isa;

struct Shape {
  const char* name;
  bool ta, tb;
  int M, N, K;
};

constexpr Shape kShapes[] = {
    {"sq256_NN", false, false, 256, 256, 256},
    {"sq512_NN", false, false, 512, 512, 512},
    {"sq1024_NN", false, false, 1024, 1024, 1024},
    {"linear_fwd_NT", false, true, 64, 128, 6272},
    {"linear_dw_TN", true, false, 128, 6272, 64},
    {"linear_dx_NN", false, false, 64, 6272, 128},
    {"conv_fwd_NN", false, false, 32, 784, 25},
    {"conv_dw_NT", false, true, 32, 25, 784},
};

void run_sgemm(benchmark::State& state, Isa isa, Shape s) {
  if (!ember::isa_supported(isa)) {
    state.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<float> A((size_t)s.M * s.K), B((size_t)s.K * s.N), C((size_t)s.M * s.N);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : A) v = dist(rng);
  for (float& v : B) v = dist(rng);
  const ember::SgemmFn sgemm = ember::kernels_for(isa).sgemm;
  for (auto _ : state) {
    sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), s.N);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * s.M * s.N * s.K;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

void register_all() {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    for (const Shape& s : kShapes) {
      const double flops = 2.0 * s.M * s.N * s.K;
      if (isa == Isa::scalar && flops > 4e7) continue;  // the reference is slow on big shapes
      const std::string name = std::string("sgemm/") + ember::isa_name(isa) + "/" + s.name;
      benchmark::RegisterBenchmark(name.c_str(), run_sgemm, isa, s)->Unit(benchmark::kMicrosecond);
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
