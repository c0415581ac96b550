// ember/dist.h: data-parallel training over MPI (Open MPI under mpirun or Slurm's srun): the world
// of ranks, and the gradient reducer train() drives (ember::GradReducer). Built without MPI, World
// is one rank that refuses a launcher. The ember_dist target (CLI, tests), not libember: not installed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/plan.h"
#include "ember/train.h"

namespace ember::dist {

bool built_with_mpi();
// The launcher variable that says this process is one of a parallel job (OMPI_COMM_WORLD_SIZE,
// PMIX_RANK, PMI_RANK, PMI_SIZE), or empty.
std::string launcher_variable();

class World {
 public:
  // MPI_Init_thread (funneled: only the main thread calls MPI) when a launcher started this
  // process; otherwise one rank without MPI. Throws Error when launched but built without MPI.
  World();
  ~World();  // MPI_Finalize
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks on this node
  bool mpi() const { return mpi_; }
  // Ends every rank of the job now (MPI_Abort), with exit code `code`.
  [[noreturn]] void abort(int code) const;
  // Whether `value` is the same on every rank (min == max), waiting at most timeout_s.
  bool same_everywhere(uint64_t value, double timeout_s) const;
  // Where the ranks' `values` (one per setting, as many on every rank) first differ: the index of
  // the first value some rank holds unlike rank 0, and the lowest rank that does; index -1 when
  // all agree. Waits at most timeout_s (then throws Error); throws when the counts differ.
  struct Difference {
    int index = -1, rank = 0;
  };
  Difference first_difference(const std::vector<uint64_t>& values, double timeout_s) const;
  // Every rank here, waiting at most timeout_s; throws Error naming `what` on timeout.
  void barrier(double timeout_s, const std::string& what) const;

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool mpi_ = false;
};

struct ReducerOptions {
  size_t bucket_bytes = size_t(4) << 20;  // --bucket-mb
  // A power-of-two number of ranks sums by recursive halving then doubling, adding rank partials
  // pairwise in the fixed binary tree; other counts use MPI_Iallreduce, which deterministic refuses.
  bool deterministic = true;
  // Tree only: each rank updates its share of every bucket and the doubling sends the updated
  // weights instead of the summed gradients (1/N of the optimizer's work; GradReducer::sharded).
  bool shard_update = false;
  bool mpi_allreduce = false;             // MPI_Iallreduce for any count (bench_allreduce compares)
  double timeout_s = 60;                  // --comm-timeout: the longest wait for another rank
  // Communication on its own track `track` of the profiler (all-reduce, waiting, bytes).
  Profiler* profiler = nullptr;
  int track = 0;
};

// The reducer of `plan`'s gradient block across `world`'s ranks (world.size() > 1, MPI built).
std::unique_ptr<GradReducer> make_reducer(const World& world, Plan& plan, const ReducerOptions& options);

}  // namespace ember::dist
