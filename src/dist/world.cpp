// The world of ranks: MPI started and ended (only when a launcher started this process), the
// launcher's variables, aborting the whole job, and checks that every rank holds the same values.
// Without MPI at build time: one rank, and an error under a launcher.
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ember/dist.h"
#include "ember/error.h"

#ifdef EMBER_HAVE_MPI
#include <mpi.h>
#endif

namespace ember::dist {

bool built_with_mpi() {
#ifdef EMBER_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string launcher_variable() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    const char* e = std::getenv(v);
    if (e && *e) return v;
  }
  return "";
}

#ifdef EMBER_HAVE_MPI
namespace {
// Waits for a non-blocking collective, at most timeout_s.
bool wait_for(MPI_Request& r, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int flag = 0;;) {
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (flag) return true;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    sched_yield();
  }
}
}  // namespace

World::World() {
  if (launcher_variable().empty()) return;
  // SIGINT/SIGTERM stay blocked in every thread, MPI's own included (they inherit the mask): the
  // training loop polls them, so that all ranks stop after the same step (SignalStop).
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &both, nullptr);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed (started by a launcher: " + launcher_variable() + " is set)");
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
}

World::~World() {
  if (mpi_) MPI_Finalize();
}

void World::abort(int code) const {
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

namespace {
[[noreturn]] void late_start(double timeout_s) {
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", timeout_s);
  throw Error(std::string("data-parallel training: the ranks did not all start within timeout_s ") + limit + " s");
}
}  // namespace

bool World::same_everywhere(uint64_t value, double timeout_s) const {
  if (!mpi_ || size_ < 2) return true;
  unsigned long long v[2] = {value, ~value}, r[2] = {0, 0};  // max of v and of ~v: max and ~min
  MPI_Request q;
  MPI_Iallreduce(v, r, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &q);
  if (!wait_for(q, timeout_s)) late_start(timeout_s);
  return r[0] == value && ~r[1] == value;
}

World::Difference World::first_difference(const std::vector<uint64_t>& values, double timeout_s) const {
  if (!mpi_ || size_ < 2) return {};
  const int n = int(values.size());
  if (!same_everywhere(uint64_t(n), timeout_s))
    throw Error("data-parallel training: the ranks compare different numbers of settings (another ember build on some node?)");
  std::vector<unsigned long long> root(values.begin(), values.end());
  MPI_Request q;
  MPI_Ibcast(root.data(), n, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD, &q);
  if (!wait_for(q, timeout_s)) late_start(timeout_s);
  int mine[2] = {n, rank_}, first[2] = {n, 0};  // (index, rank): MINLOC finds the lowest of each
  for (int i = 0; i < n; ++i)
    if (root[size_t(i)] != values[size_t(i)]) {
      mine[0] = i;
      break;
    }
  MPI_Iallreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD, &q);
  if (!wait_for(q, timeout_s)) late_start(timeout_s);
  return first[0] == n ? Difference{} : Difference{first[0], first[1]};
}

void World::barrier(double timeout_s, const std::string& what) const {
  if (!mpi_ || size_ < 2) return;
  MPI_Request q;
  MPI_Ibarrier(MPI_COMM_WORLD, &q);
  if (!wait_for(q, timeout_s))
    throw Error("data-parallel training: rank " + std::to_string(rank_) + " waited more than " +
                std::to_string(int(timeout_s)) + " s for the other ranks " + what);
}
#else
World::World() {
  const std::string v = launcher_variable();
  if (!v.empty())
    throw Error("this ember was built without MPI (mpi.h was missing): it cannot run as one of a parallel job (" + v +
                " is set); install libopenmpi-dev and rebuild, or run it without mpirun/srun");
}
World::~World() = default;
void World::abort(int code) const { std::_Exit(code); }
bool World::same_everywhere(uint64_t, double) const { return true; }
World::Difference World::first_difference(const std::vector<uint64_t>&, double) const { return {}; }
void World::barrier(double, const std::string&) const {}
std::unique_ptr<GradReducer> make_reducer(const World&, Plan&, const ReducerOptions&) {
  throw Error("data-parallel training needs MPI: this ember was built without it");
}
#endif

}  // namespace ember::dist
