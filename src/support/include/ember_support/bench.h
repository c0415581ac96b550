// ember_support/bench.h (not installed; src/bench, ember_bench): the end-to-end workloads behind
// `ember bench` (CNN and MLP training, CNN inference, SGEMM, peak RSS), each reported with time,
// samples/s, GFLOP/s and the share of the machine's FMA peak, measured by an FMA loop at start.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/plan.h"

namespace ember {

struct BenchOptions {
  int threads = 0;               // 0: each workload's own (the table's: 1 or all hardware threads)
  int batch = 0;                 // 0: each workload's own (64; the MLP tries several; inference 1 and 64)
  std::string isa;               // empty: the best the CPU has
  std::string layout;            // the model workloads' PlanOptions::layout (empty: auto)
  int64_t samples = 60000;       // training samples timed per training workload (after warm-up)
  // cnn-train and mlp-train: samples trained, untimed, before the timed ones (at least 10 steps):
  // -1 (the default) is one epoch of the data set, so that the timed steps start from a state that
  // has trained (the README's second epoch), where small gradients and optimizer state can go
  // denormal; 0: time from a fresh initialisation. The model workloads' training starts from
  // --weights when given.
  int64_t warmup_samples = -1;
  Denormals denormals = Denormals::flush;  // every plan's PlanOptions::denormals
  std::vector<std::string> only; // workload names to run; empty: all
  std::string data_folder;       // the data workloads' image folder; empty: a generated one
  // The model workloads' plans run in each precision in turn (fp32 then bf16: side by side, one
  // workload at a time); the GEMM rows have their own fp32 (sgemm-*) and bf16 (sbgemm-*) names.
  std::vector<Precision> precisions{Precision::fp32};
  // Weight files for the inference workloads (cnn-infer-*, the model workloads' *-infer-*): each
  // workload runs once per file of its model, in the order given, an fp32 file in an fp32 plan with
  // those weights, a quantized one (ember quantize) in the int8 plan (precision "int8"); none: random
  // fp32 weights. A file whose model no named workload runs is an error.
  std::vector<std::string> weights;
};

struct BenchMachine {
  std::string cpu;               // /proc/cpuinfo model name
  int hw_threads = 0;
  std::string isa;
  double peak_gflops_1t = 0;     // FMA loop, one thread
  double peak_gflops = 0;        // FMA loop, all hardware threads
  double amx_peak_gflops_1t = 0; // the amx set only: TDPBF16PS loop (amx_loop), one thread; else 0
  double amx_peak_gflops = 0;    // the same, all hardware threads
};

struct BenchResult {
  std::string name;              // e.g. "cnn-train"
  std::string what;              // a line saying what was measured
  int threads = 0, batch = 0;
  double value = 0;              // in `unit`
  std::string unit;              // "s/epoch", "ms", "GFLOP/s", "MB", "samples/s"
  double samples_per_s = 0;      // 0 where it does not apply
  double gflops = 0;             // 0 where it does not apply
  double peak_pct = 0;           // gflops against the peak of `threads` threads: the FMA peak, or
                                 // for bf16 (sbgemm rows, bf16 plans) that times the table's bf16_rate,
                                 // or on the amx set the measured AMX peak
  std::string precision = "fp32";  // the plan's precision (fp32, bf16, int8); the GEMM rows': their operands'
  std::string weights;           // the weight file it ran with (BenchOptions::weights), or empty
};

// The names run_bench knows, in the order it runs them.
std::vector<std::string> bench_workloads();
// The model workloads, ConvNeXts and ResNets (random 64x64 inputs; 10-60 s each): run only when
// --workloads names them (the name predates the ResNets; kept for callers).
std::vector<std::string> convnext_workloads();
// The data-pipeline workloads (an image folder of JPEGs): run only when --workloads names them.
// data-decode: images/s decoding the whole folder (train and test, 2 threads by default);
// data-augment: images/s of training epochs from the decoded cache through the BatchLoader
// (RandomCrop(S, padding=4), flip) and the conversion to normalised floats, as a step sees them.
std::vector<std::string> data_workloads();
BenchMachine measure_machine(const std::string& isa);
// Milliseconds per forward pass of an int8 plan of the quantized weights in `path` (3 untimed,
// then at least 3 and min_s seconds) on kernel set isa ("": the best), inputs gathered from d (u8 images of the model's size) or
// random normal ones when d is null; flops: per sample.
double time_int8(const std::string& path, const Dataset* d, int batch, int threads, const std::string& isa, double* flops,
                 double min_s, Denormals dn);
// Fills x[0..n) with uniform values in [-1, 1) from pcg32(seed, stream): random inputs to time.
void fill_uniform(float* x, size_t n, uint64_t seed, uint64_t stream);
// Runs the chosen workloads on `train` data (any MNIST-shaped set), calling on_result after each.
// Throws ember::Error on a bad option (unknown workload name, bad ISA, threads or batch).
void run_bench(const BenchOptions& o, const BenchMachine& machine, const Dataset& train,
               const std::function<void(const BenchResult&)>& on_result);

}  // namespace ember
