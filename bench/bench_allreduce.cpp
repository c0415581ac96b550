// The all-reduce of data-parallel training, measured on its own: ember's reducer (recursive
// halving and doubling, what training uses with a power-of-two number of ranks) and MPI_Iallreduce on gradient blocks of 4 B to 64 MiB, one
// bucket each. Prints latency and bus bandwidth (2 (N-1)/N bytes per rank / time) on rank 0.
//   mpirun -np 2 build/release/bench_allreduce [--max-mb 64] [--reps 20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ember/dist.h"
#include "ember/model.h"
#include "ember/plan.h"

using namespace ember;

namespace {
// A plan whose gradient block holds `floats` values: one Linear [out, 1024] (+ bias).
Plan plan_of(size_t floats) {
  const size_t out = floats < 2050 ? 2 : floats / 1025;
  const size_t in = std::max<size_t>(1, floats / out - 1);
  const std::string json = R"({"name": "bucket", "input": [1, 1, )" + std::to_string(in) +
                           R"(], "classes": )" + std::to_string(out) +
                           R"(, "layers": [{"type": "flatten"}, {"type": "linear", "out_features": )" + std::to_string(out) + "}]}";
  PlanOptions po;
  po.batch = 1;
  return Plan(parse_model_json(json, "bench_allreduce"), po);
}

double time_reduce(GradReducer& r, const Plan& plan, int reps) {
  const int params = int(plan.params().size());
  auto once = [&] {
    r.grads_final(0, params);
    r.finish([](size_t, size_t) {});
  };
  once();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int run(int argc, char** argv) {
  double max_mb = 64;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--max-mb")) max_mb = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  dist::World world;
  if (world.size() < 2) {
    std::fprintf(stderr, "bench_allreduce: run it under mpirun with 2 or more ranks\n");
    return 2;
  }
  if (world.rank() == 0)
    std::printf("%d ranks; best of %d; bus bandwidth = 2 (N-1)/N x bytes / time\n%12s %14s %10s %14s %10s\n", world.size(),
                reps, "bytes", "ember (tree)", "GB/s", "MPI_Iallreduce", "GB/s");
  for (size_t bytes = 16; bytes <= size_t(max_mb * (1 << 20)); bytes *= 4) {
    Plan plan = plan_of(std::max<size_t>(bytes / 4, 2));
    const double b = double(plan.param_count() * 4), bus = 2.0 * (world.size() - 1) / world.size() * b;
    double t[2];
    for (int det = 1; det >= 0; --det) {
      dist::ReducerOptions o;
      o.bucket_bytes = size_t(1) << 40, o.deterministic = det == 1, o.mpi_allreduce = det == 0;
      auto r = dist::make_reducer(world, plan, o);
      t[1 - det] = time_reduce(*r, plan, reps);
    }
    if (world.rank() == 0)
      std::printf("%12.0f %11.1f us %10.2f %11.1f us %10.2f\n", b, t[0] * 1e6, bus / t[0] / 1e9, t[1] * 1e6, bus / t[1] / 1e9);
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 2;
  }
}
