// Flags and entry points of `ember bench bitnet` and `ember bitnet train` (bitnet_cmd.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "ember/bitnet.h"

namespace ember::cli {

struct BitnetBenchArgs {
  std::vector<int> input_bits = {32, 64, 128, 256, 512, 1024};
  std::vector<int> channels = {32, 64, 128, 256, 512, 1024};
  std::vector<int> segments = {1, 2, 3, 4};
  std::vector<int> threads = {1, 2};
  std::string kind = "binary";
  std::string mode = "both";
  double min_time = 0.2;
  std::string isa;
  bool no_oracle = false;
  bool json = false;
};
void add_bitnet_bench_flags(CLI::App* cmd, BitnetBenchArgs& a);
int run_bitnet_bench(const BitnetBenchArgs& a);

struct BitnetTrainArgs {
  bitnet::TrainOptions o;
  std::string data;
  std::string kind = "binary";
  std::string head_refit = "none";
  std::string layer_pool = "none";
  int threads = 1;
  bool json = false;
};
void add_bitnet_train_flags(CLI::App* cmd, BitnetTrainArgs& a);
int run_bitnet_train(BitnetTrainArgs a);

}  // namespace ember::cli
