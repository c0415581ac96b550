// The ember command-line tool: `ember train`, `ember eval`, `ember profile`, `ember bench` (and `bench bitnet`), `ember bitnet train`, `ember info`. Parses flags with CLI11,
// validates every value (one-line errors naming the flag, non-zero exit), and drives the public
// library API only.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "bitnet_cmd.h"
#include "commands.h"
#include "report_cmd.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace {
// Until training starts (and after it ends) SIGINT/SIGTERM stop ember at once, with nothing
// written: outputs are only written after every input has been read and checked, and each
// write is a rename of a finished temporary file. Async-signal-safe: write and _exit only.
extern "C" void exit_on_signal(int sig) {
  static const char kInt[] = "ember: interrupted (SIGINT): stopped before training, nothing written\n";
  static const char kTerm[] = "ember: terminated (SIGTERM): stopped before training, nothing written\n";
  if (sig == SIGINT) (void)!write(2, kInt, sizeof kInt - 1);
  else (void)!write(2, kTerm, sizeof kTerm - 1);
  _exit(128 + sig);
}

// An error message as printed: one line, and at most ~2,000 characters of whatever a file held.
std::string shown(const std::string& message) {
  std::string s = ember::one_line(message);
  if (s.size() > 2000) s = s.substr(0, 2000) + "... (" + std::to_string(s.size() - 2000) + " more characters)";
  return s;
}

void install_signal_exit() {
  struct sigaction sa {};
  sa.sa_handler = exit_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t both;  // a parent may have left them blocked
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &both, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
  // Past a file size limit, writes fail with EFBIG (a clear error) instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  install_signal_exit();
  CLI::App app{"ember: train and run neural networks on the CPU, and see where the time goes"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  ember::cli::TrainArgs train;
  CLI::App* train_cmd = app.add_subcommand("train", "Train a model and evaluate it on the test set every epoch");
  ember::cli::add_train_flags(train_cmd, train);

  ember::cli::EvalArgs eval;
  CLI::App* eval_cmd = app.add_subcommand("eval", "Evaluate saved weights on the test set");
  ember::cli::add_eval_flags(eval_cmd, eval);
  ember::cli::QuantizeArgs quant;
  CLI::App* quant_cmd = app.add_subcommand("quantize", "Quantize fp32 weights to int8, calibrated on training images (docs/int8.md)");
  ember::cli::add_quantize_flags(quant_cmd, quant);

  ember::cli::ExportArgs exp;
  CLI::App* export_cmd = app.add_subcommand("export", "Write saved weights and their model as an ONNX file");
  ember::cli::add_export_flags(export_cmd, exp);

  ember::cli::BenchArgs bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "Time the end-to-end workloads against the machine's FMA peak");
  ember::cli::add_bench_flags(bench_cmd, bench);
  bench_cmd->require_subcommand(0, 1);
  ember::cli::BitnetBenchArgs bitbench;
  CLI::App* bitbench_cmd = bench_cmd->add_subcommand(
      "bitnet", "Time the exact loss deltas of binarized layers (is8ac/bnn's table) and the bit-conv kernel");
  ember::cli::add_bitnet_bench_flags(bitbench_cmd, bitbench);

  CLI::App* bitnet_cmd = app.add_subcommand("bitnet", "Binarized networks trained by exact loss deltas");
  bitnet_cmd->require_subcommand(1);
  ember::cli::BitnetTrainArgs bittrain;
  CLI::App* bittrain_cmd = bitnet_cmd->add_subcommand(
      "train", "Greedy layer-wise training without backpropagation; test accuracy per layer and epoch");
  ember::cli::add_bitnet_train_flags(bittrain_cmd, bittrain);

  ember::cli::ProfileArgs profile;
  CLI::App* profile_cmd = app.add_subcommand(
      "profile", "Train on a few samples with the profiler on: where each step's time goes, per layer");
  ember::cli::add_profile_flags(profile_cmd, profile);

  ember::cli::ReportArgs report;
  CLI::App* report_cmd = app.add_subcommand("report", "Write a self-contained HTML report of a run directory");
  ember::cli::add_report_flags(report_cmd, report);

  ember::cli::FlamegraphArgs flame;
  CLI::App* flame_cmd = app.add_subcommand("flamegraph", "Draw an SVG flame graph from perf script output or folded stacks");
  ember::cli::add_flamegraph_flags(flame_cmd, flame);

  CLI::App* info_cmd = app.add_subcommand("info", "Show CPU features, chosen kernels, threads and build; with --model, its plans' arenas");
  ember::cli::InfoArgs info;
  info_cmd->add_option("--model", info.model, "A built-in model name or FILE.json: print its layers and the arena of its training and inference plans");
  info_cmd->add_option("--batch-size", info.batch_size, "Batch size of those plans (default: the model's recipe)");
  info_cmd->add_option("--layout", info.layout, "auto, nchw or nhwc: those plans' activation layout (each unit's input and output layouts are listed)")
      ->capture_default_str();
  info_cmd->add_option("--weights", info.weights, "A quantized weight file: each layer's scales and the calibration used");
  info_cmd->add_flag("--kernels", info.kernels, "List every kernel-table entry and what it runs on each kernel set (own code, the scalar reference, or none)");
  info_cmd->add_flag("--ops", info.ops, "Print the op table alone: every layer type, its JSON fields, parameters and roles, ONNX types");
  info_cmd->add_option("--precision", info.precision, "fp32, bf16 or int8: with --model, those plans' precision (int8: the plan of the model's initial weights once quantized)");
  info_cmd->add_flag("--json", info.json, "With --ops: the op table as JSON ({\"ops\": [...]}); with --model: its plans' units ({\"plans\": [...]})");

  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "ember: error: " + shown(e.what()) + " (see --help)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    std::string line = "ember";
    for (int i = 1; i < argc; ++i) line += std::string(" ") + argv[i];
    train.command_line = profile.train.command_line = line;
    if (train_cmd->parsed()) return ember::cli::run_train(train, *train_cmd);
    if (profile_cmd->parsed()) return ember::cli::run_profile(profile, *profile_cmd);
    if (eval_cmd->parsed()) return ember::cli::run_eval(eval, *eval_cmd);
    if (quant_cmd->parsed()) return ember::cli::run_quantize(quant, *quant_cmd);
    if (info_cmd->parsed()) return info.ops ? ember::cli::run_info_ops(info) : ember::cli::run_info(info);
    if (export_cmd->parsed()) return ember::cli::run_export(exp);
    if (bitbench_cmd->parsed()) return ember::cli::run_bitnet_bench(bitbench);
    if (bench_cmd->parsed()) return ember::cli::run_bench(bench);
    if (bittrain_cmd->parsed()) return ember::cli::run_bitnet_train(bittrain);
    if (report_cmd->parsed()) return ember::cli::run_report(report);
    if (flame_cmd->parsed()) return ember::cli::run_flamegraph(flame);
  } catch (const ember::Error& e) {  // one line, whatever a path or a file held
    std::fflush(stdout);
    std::fprintf(stderr, "ember: error: %s\n", shown(e.what()).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ember: error: out of memory\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: error: %s\n", shown(e.what()).c_str());
    return 4;
  }
  return 1;
}
