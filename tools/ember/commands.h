// The CLI's subcommands: their flags (with the defaults shown in --help) and their entry points.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::cli {

// Flags shared by train and eval: what to run on and how.
struct CommonArgs {
  std::string model = "mnist-cnn";
  std::string data;          // empty: the default data set
  int batch_size = 64;
  int threads = 0;           // 0 is rejected; the default is set from the CPU in add_*_flags
  std::string isa;
  int64_t limit_test = 0;    // 0: all
};

struct TrainArgs {
  CommonArgs common;
  int epochs = 10;
  double lr = 1e-3;
  std::string optimizer = "adam";
  std::string schedule = "cosine";
  double lr_min = 1e-5;
  int t_max = 20;
  int step_size = 5;
  double gamma = 0.5;
  double l2 = 1e-4;
  double weight_decay = 0;
  double momentum = 0.9;
  uint64_t seed = 1;
  bool no_shuffle = false;
  std::string metrics;
  std::string save;
  std::string init;
  double early_stop_tol = 0;
  int64_t limit_train = 0;
};

struct EvalArgs {
  CommonArgs common;
  std::string weights;
};

struct BenchArgs {
  int threads = 0;             // 0: each workload's own
  int batch_size = 0;          // 0: each workload's own
  std::string isa;
  int64_t samples = 60000;
  std::vector<std::string> workloads;
  std::string data;
  bool json = false;
  bool list = false;
};

void add_bench_flags(CLI::App* cmd, BenchArgs& a);
int run_bench(const BenchArgs& a);
void add_train_flags(CLI::App* cmd, TrainArgs& a);
void add_eval_flags(CLI::App* cmd, EvalArgs& a);
int run_train(TrainArgs a, const CLI::App& cmd);
int run_eval(EvalArgs a, const CLI::App& cmd);
int run_info();

}  // namespace ember::cli
