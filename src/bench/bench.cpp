// The workloads of `ember bench`: each builds a plan (or GEMM operands) once, warms up, then
// times a fixed amount of work with a steady clock. FLOP counts come from the plan (training:
// forward, weight and input gradients) or 2*M*N*K; % of peak is against the FMA loop's rate
// for the same number of threads.
#include "ember_support/bench.h"
#include "ember/quant.h"
#include "ember/io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include "core/thread_pool.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/loader.h"
#include "ember/model.h"
#include "core/rng.h"
#include "ember/plan.h"
#include "ops/parallel_gemm.h"

namespace ember {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int hw_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }

// The peak of `threads` threads running `loop` (an FmaLoopFn) at once for ~0.2 s.
double loop_peak(FmaLoopFn loop, int threads) {
  ThreadPool pool(threads);
  float sink[256] = {};
  int64_t iters = 1 << 16;
  // A peak is a maximum: the best of 5 runs of at least 0.05 s each (a noisy host's slow moments
  // would otherwise lower it, and every "% of peak" with it).
  double best = 0;
  for (int runs = 0; runs < 5;) {
    double flops[256] = {};
    const auto t0 = Clock::now();
    pool.run([&](int t) { flops[t] = loop(iters, &sink[t]); });
    const double s = since(t0);
    if (s < 0.05) {  // grow until one run takes long enough to time
      iters *= s < 0.005 ? 8 : 2;
      continue;
    }
    double total = 0;
    for (int t = 0; t < threads; ++t) total += flops[t];
    best = std::max(best, total / s / 1e9);
    ++runs;
  }
  return best;
}

// The FMA peak: the ISA's FMA loop; the AMX peak: the tile loop, on the amx set only (else 0).
double fma_peak(Isa isa, int threads) { return loop_peak(kernels_for(isa).fma_loop, threads); }
double amx_peak(Isa isa, int threads) { return isa == Isa::amx ? loop_peak(amx_loop, threads) : 0.0; }

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

OptimizerConfig optimizer_of(const Recipe& r) {
  OptimizerConfig o;
  o.kind = r.optimizer == "sgd" ? OptimizerKind::SGD
           : r.optimizer == "momentum" ? OptimizerKind::Momentum
           : r.optimizer == "nesterov" ? OptimizerKind::Nesterov
           : r.optimizer == "adamw" ? OptimizerKind::AdamW : OptimizerKind::Adam;
  o.l2 = r.l2, o.weight_decay = r.weight_decay, o.momentum = r.momentum, o.decay_norms = r.decay_norms;
  return o;
}

// The settings every workload's plan shares.
PlanOptions plan_options(int batch, int threads, Isa isa, Precision prec, const std::string& layout, Denormals dn) {
  PlanOptions po;
  po.batch = batch, po.threads = threads, po.isa = isa_name(isa), po.precision = prec, po.layout = layout;
  po.denormals = dn;
  return po;
}

// Seconds for `samples` training samples of `model`, after `warmup` untimed ones (at least 10
// steps): from a state that has trained, as an epoch after the first sees it.
double time_training(const Model& model, const Dataset& d, int batch, int threads, Isa isa, Precision prec,
                     int64_t samples, double* flops_per_sample, const std::string& layout, int64_t warmup, Denormals dn) {
  PlanOptions po = plan_options(batch, threads, isa, prec, layout, dn);
  po.optimizer = optimizer_of(model.recipe);
  Plan plan(model, po);
  plan.init_params(1);
  *flops_per_sample = plan.flops_per_sample(true);
  std::vector<int64_t> idx(batch);
  int64_t cursor = 0;
  auto step = [&](int n) {
    for (int i = 0; i < n; ++i) idx[i] = (cursor++ * 7919) % d.count;  // a fixed scattered order
    plan.gather_u8(d.images.data(), d.labels.data(), idx.data(), n);
    plan.forward(n);
    plan.loss(n, true);
    plan.backward_step(n, model.recipe.lr);
  };
  if (warmup < 0) warmup = d.count;  // one epoch
  for (int64_t done = 0, i = 0; i < 10 || done < warmup; ++i, done += batch) step(batch);
  const auto t0 = Clock::now();
  for (int64_t done = 0; done < samples; done += batch) step(int(std::min<int64_t>(batch, samples - done)));
  return since(t0);
}

// Milliseconds per forward pass of a batch (the inference path: no loss, no backward).
double time_inference(const Model& model, const Dataset& d, int batch, int threads, Isa isa, Precision prec,
                      double* flops_per_sample, const std::string& layout, Denormals dn, const std::string& weights = "") {
  PlanOptions po = plan_options(batch, threads, isa, prec, layout, dn);
  po.optimizer.kind = OptimizerKind::SGD;
  Plan plan(model, po);
  plan.init_params(1);
  if (!weights.empty()) load_weights(plan, weights);
  plan.freeze();  // inference only: batch 1 reads fc1's weight rows for non-zero inputs only
  *flops_per_sample = plan.flops_per_sample(false);
  std::vector<int64_t> idx(batch);
  for (int i = 0; i < batch; ++i) idx[i] = i % d.count;
  plan.gather_u8(d.images.data(), d.labels.data(), idx.data(), batch);
  for (int i = 0; i < 20; ++i) plan.forward(batch);
  int64_t reps = 0;
  const auto t0 = Clock::now();
  do {
    for (int i = 0; i < 50; ++i) plan.forward(batch);
    reps += 50;
  } while (since(t0) < 0.5);
  return since(t0) / reps * 1e3;
}

// The weight files a workload of `model` runs with (BenchOptions::weights): each with its model's
// name and whether it is quantized; {""} (random fp32 weights) when none are given.
struct WeightRun {
  std::string path;
  bool int8 = false;
};
std::vector<WeightRun> weight_runs(const BenchOptions& o, const std::string& model) {
  if (o.weights.empty()) return {WeightRun{}};
  std::vector<WeightRun> out;
  for (const std::string& w : o.weights) {
    const auto meta = read_weights_metadata(w);
    const auto it = meta.find("model");
    if (it == meta.end()) throw Error("weights: " + w + " names no model (no __metadata__.model)");
    const Model m = parse_model_json(it->second, w + ": __metadata__.model");
    if (m.name == model) out.push_back({w, meta.count("ember_quant") > 0});
  }
  return out;
}

// The model workloads (ConvNeXts, ResNets): random inputs [batch, C, H, W] and labels, no data set.
// Training: samples per second over whole steps (forward, loss, backward, the recipe's optimizer)
// after 2 untimed ones, timed
// for at least 3 steps and 4 s; inference: milliseconds per forward of an inference plan.
double convnext_run(const Model& model, int batch, int threads, Isa isa, Precision prec, bool training, double* flops,
                    const std::string& layout, Denormals dn, const std::string& weights = "") {
  PlanOptions po = plan_options(batch, threads, isa, prec, layout, dn);
  po.training = training;
  po.optimizer = optimizer_of(model.recipe);
  Plan plan(model, po);
  plan.init_params(1);
  if (!weights.empty()) load_weights(plan, weights);
  *flops = plan.flops_per_sample(training);
  Pcg32 rng(7, 1);
  float* x = static_cast<float*>(plan.input());
  for (size_t i = 0; i < size_t(batch) * model.in_c * model.in_h * model.in_w; ++i) x[i] = float(rng.normal());
  for (int i = 0; i < batch; ++i) plan.labels()[i] = int32_t(rng.next_u32() % uint32_t(model.num_classes));
  auto step = [&] {
    plan.forward(batch);
    if (!training) return;
    plan.loss(batch, true);
    plan.backward_step(batch, model.recipe.lr);
  };
  for (int i = 0; i < 2; ++i) step();
  int64_t reps = 0;
  const auto t0 = Clock::now();
  while (reps < 3 || since(t0) < 4.0) step(), ++reps;
  const double s = since(t0) / double(reps);
  return training ? batch / s : s * 1e3;
}

// GFLOP/s of C[M,N] = op(A) op(B) split over `threads`, best of several timed runs; with bf16,
// A and B hold bf16 values (the table's sbgemm).
double time_sgemm(bool ta, bool tb, int M, int N, int K, int threads, Isa isa, bool bf16 = false) {
  std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(i % 13) * 0.01f;
  std::vector<uint16_t> Ah(bf16 ? A.size() : 0), Bh(bf16 ? B.size() : 0);
  ThreadPool pool(threads);
  const ops::Exec e{kernels_for(isa), pool};
  if (bf16) e.k.cvt_f32_bf16(Ah.data(), A.data(), A.size()), e.k.cvt_f32_bf16(Bh.data(), B.data(), B.size());
  auto run = [&] {
    if (bf16)
      ops::parallel_sbgemm(e, ta, tb, M, N, K, 1.f, Ah.data(), ta ? M : K, Bh.data(), tb ? K : N, 0.f, C.data(), N);
    else
      ops::parallel_sgemm(e, ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, C.data(), N);
  };
  run();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    int64_t n = 0;
    const auto t0 = Clock::now();
    do {
      run();
      ++n;
    } while (since(t0) < 0.1);
    best = std::min(best, since(t0) / n);
  }
  return 2.0 * M * N * K / best / 1e9;
}
}  // namespace

double time_int8(const std::string& path, const Dataset* d, int batch, int threads, const std::string& isa, double* flops,
                 double min_s, Denormals dn) {
  const QuantizedWeights q = load_quantized(path);
  if (d && (d->rows != q.model.in_h || d->cols != q.model.in_w || d->channels != q.model.in_c || d->streamed()))
    throw Error("weights: " + path + ": the data's images are not of its model's input size (or are not in memory)");
  Plan plan(q, int8_plan_options(batch, threads, isa, dn));
  *flops = plan.flops_per_sample(false);
  float* x = static_cast<float*>(plan.input());
  if (d) {
    std::vector<int64_t> idx(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) idx[size_t(i)] = i % d->count;
    plan.gather_u8(d->images.data(), d->labels.data(), idx.data(), batch);
  } else {
    Pcg32 rng(7, 1);
    for (size_t i = 0; i < size_t(batch) * q.model.in_c * q.model.in_h * q.model.in_w; ++i) x[i] = float(rng.normal());
  }
  for (int i = 0; i < 3; ++i) plan.forward(batch);
  int64_t reps = 0;
  const auto t0 = Clock::now();
  while (reps < 3 || since(t0) < min_s) plan.forward(batch), ++reps;
  return since(t0) / double(reps) * 1e3;
}


// A folder of 64x64 RGB JPEGs (quality 90) in 10 classes, 2,000 train and 500 test images, under
// a new temporary directory; removed by the caller.
std::string make_jpeg_folder() {
  std::string dir = (std::filesystem::temp_directory_path() / "ember-bench-jpegs-XXXXXX").string();
  if (!::mkdtemp(dir.data())) throw Error("bench: cannot make a temporary directory: " + std::string(std::strerror(errno)));
  Pcg32 rng(11, 3);
  std::vector<uint8_t> px(3 * 64 * 64);
  for (const char* split : {"train", "test"})
    for (int c = 0; c < 10; ++c) {
      const std::string cd = dir + "/" + split + "/class" + std::to_string(c);
      std::filesystem::create_directories(cd);
      for (int i = 0; i < (split[1] == 'r' ? 200 : 50); ++i) {
        const int fx = 1 + int(rng.below(6)), fy = 1 + int(rng.below(6)), tone = int(rng.below(200));
        for (size_t k = 0; k < px.size(); ++k) {
          const int x = int(k % 64), y = int(k / 64 % 64), ch = int(k / 4096);
          px[k] = uint8_t(tone / 2 + 60 * (1 + std::sin(fx * x * 0.1 + fy * y * 0.07 + ch + c)) + rng.below(20));
        }
        write_file_atomic(cd + "/" + std::to_string(i) + ".jpg", {encode_jpeg(px.data(), 3, 64, 64, 90, cd)});
      }
    }
  return dir;
}

// Images per second of data-decode or data-augment (best of 3 runs).
double time_data(const std::string& name, const std::string& folder, int threads, int batch) {
  FolderOptions fo;
  fo.threads = threads;
  fo.what = "data_folder";  // the errors name the BenchOptions field
  double best = 0;
  if (name == "data-decode") {
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      const TrainTest t = load_image_folder(folder, fo);
      best = std::max(best, double(t.train.count + t.test.count) / since(t0));
    }
    return best;
  }
  const TrainTest t = load_image_folder(folder, fo);
  Augment a;
  a.pad = 4, a.flip = true;
  a.mean = {0.485, 0.456, 0.406}, a.std = {0.229, 0.224, 0.225};
  std::vector<double> scale, shift;
  input_affine(a, &scale, &shift);
  BatchLoader loader(t.train, a, batch, threads, 4, 1);
  const int S = loader.size().h, C = t.train.channels;  // square: 64 x 64
  std::vector<float> x(size_t(batch) * C * S * S);
  std::vector<int64_t> order(size_t(t.train.count));
  std::iota(order.begin(), order.end(), int64_t(0));
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    int64_t n = 0;
    for (int epoch = 0; epoch < 5; ++epoch) {
      loader.start(order.data(), t.train.count, epoch, 0, true);
      for (BatchLoader::Batch b; (b = loader.next()).n > 0; n += b.n)  // the step's conversion (Plan::gather_u8)
        for (int s = 0; s < b.n; ++s)
          for (int c = 0; c < C; ++c) {
            const float sc = float(scale[size_t(c)]), sh = float(shift[size_t(c)]);
            const size_t o = (size_t(s) * C + c) * S * S;
            for (size_t i = o; i < o + size_t(S) * S; ++i) x[i] = b.images[i] * sc + sh;
          }
    }
    best = std::max(best, double(n) / since(t0));
  }
  return best;
}

std::vector<std::string> data_workloads() { return {"data-decode", "data-augment"}; }

// The model workloads: NAME-train, NAME-infer-b1 and NAME-infer-b64 (the ConvNeXt study's
// activation variants and atto train only).
struct ModelWorkload {
  const char* name;
  const char* model;
  const char* what;
};
const std::vector<ModelWorkload>& model_workloads() {
  static const std::vector<ModelWorkload> w = {
      {"convnext-train", "convnext-seed", "convnext-seed"},
      {"convnext-train-gelu-tanh", "convnext-seed", "convnext-seed (GELU-tanh blocks)"},
      {"convnext-train-fastswish", "convnext-seed", "convnext-seed (FastSwish blocks)"},
      {"convnext-infer-b1", "convnext-seed", "convnext-seed"},
      {"convnext-infer-b64", "convnext-seed", "convnext-seed"},
      {"atto-train", "convnext-atto", "convnext-atto (torchvision's ConvNeXt)"},
      {"resnet18-train", "resnet18", "resnet18 (torchvision's)"},
      {"resnet18-infer-b1", "resnet18", "resnet18 (torchvision's)"},
      {"resnet18-infer-b64", "resnet18", "resnet18 (torchvision's)"},
      {"resnet50-train", "resnet50", "resnet50 (torchvision's)"},
      {"resnet50-infer-b1", "resnet50", "resnet50 (torchvision's)"},
      {"resnet50-infer-b64", "resnet50", "resnet50 (torchvision's)"}};
  return w;
}
std::vector<std::string> convnext_workloads() {
  std::vector<std::string> names;
  for (const ModelWorkload& w : model_workloads()) names.push_back(w.name);
  return names;
}

std::vector<std::string> bench_workloads() {
  return {"cnn-train",    "cnn-train-1t", "peak-rss",     "mlp-train",     "cnn-infer-b1",
          "cnn-infer-b64", "sgemm-2048-1t", "sgemm-2048", "sgemm-fc1-fwd", "sgemm-fc1-dx",
          "sgemm-fc1-dw", "sbgemm-2048-1t", "sbgemm-2048", "sbgemm-fc1-fwd", "sbgemm-fc1-dx", "sbgemm-fc1-dw",
          "sgemm-cx-1x1", "sbgemm-cx-1x1"};
}

BenchMachine measure_machine(const std::string& isa_text) {
  const Isa isa = resolve_isa(isa_text, "isa");
  BenchMachine m;
  m.cpu = cpu_name();
  m.hw_threads = hw_threads();
  m.isa = isa_name(isa);
  m.peak_gflops_1t = fma_peak(isa, 1);
  m.peak_gflops = m.hw_threads > 1 ? fma_peak(isa, m.hw_threads) : m.peak_gflops_1t;
  m.amx_peak_gflops_1t = amx_peak(isa, 1);
  m.amx_peak_gflops = m.hw_threads > 1 ? amx_peak(isa, m.hw_threads) : m.amx_peak_gflops_1t;
  return m;
}

void fill_uniform(float* x, size_t n, uint64_t seed, uint64_t stream) {
  Pcg32 rng(seed, stream);
  for (size_t i = 0; i < n; ++i) x[i] = float(rng.uniform() * 2 - 1);
}

namespace {
// One workload in one precision (o.data_folder: the data workloads' folder, already made).
void run_one(const std::string& name, Precision prec, const BenchOptions& o, const BenchMachine& machine,
             const Dataset& train, Isa isa, const std::function<void(const BenchResult&)>& on_result) {
  const int all = machine.hw_threads;
  auto wants = [&](const std::string& n) { return n == name; };
  auto threads_or = [&](int t) { return o.threads > 0 ? o.threads : t; };
  auto batch_or = [&](int b) { return o.batch > 0 ? o.batch : b; };
  auto peak = [&](int t) { return t == 1 ? machine.peak_gflops_1t : machine.peak_gflops_1t * t; };
  auto bf16_peak = [&](int t) {  // the measured tile peak on amx, else the FMA peak times the bf16 rate
    if (machine.amx_peak_gflops_1t > 0) return t == 1 ? machine.amx_peak_gflops_1t : machine.amx_peak_gflops_1t * t;
    return kernels_for(isa).bf16_rate * peak(t);
  };
  auto emit = [&](BenchResult r, bool int8 = false) {
    r.precision = int8 ? "int8" : precision_name(prec);
    // bf16 rows: against the bf16 peak (the FMA peak times the table's bf16 rate: 2 with VDPBF16PS)
    if (r.name.rfind("sbgemm", 0) == 0) r.precision = "bf16";
    if (r.gflops > 0) r.peak_pct = 100.0 * r.gflops / (r.precision == "bf16" ? bf16_peak(r.threads) : peak(r.threads));
    on_result(r);
  };
  const Model cnn = builtin_model("mnist-cnn"), mlp = builtin_model("mxnet-mlp");

  for (const char* name : {"cnn-train", "cnn-train-1t"}) {
    if (!wants(name)) continue;
    BenchResult r;
    r.name = name, r.what = "mnist-cnn training (original recipe), seconds per 60000-sample epoch after " +
                            std::to_string(o.warmup_samples < 0 ? train.count : o.warmup_samples) + " warm-up samples";
    r.threads = threads_or(std::string(name) == "cnn-train" ? all : 1), r.batch = batch_or(64);
    double fps = 0;
    const double s = time_training(cnn, train, r.batch, r.threads, isa, prec, o.samples, &fps, o.layout, o.warmup_samples, o.denormals);
    r.value = s * 60000.0 / double(o.samples), r.unit = "s/epoch";
    r.samples_per_s = double(o.samples) / s, r.gflops = fps * r.samples_per_s / 1e9;
    emit(r);
  }
  if (wants("peak-rss")) {
    BenchResult r;
    r.name = "peak-rss", r.what = "peak resident memory while training mnist-cnn (data set, plan)";
    r.threads = threads_or(all), r.batch = batch_or(64);
    double fps = 0;
    time_training(cnn, train, r.batch, r.threads, isa, prec, std::min<int64_t>(o.samples, 6400), &fps, o.layout, 0, o.denormals);
    r.value = peak_rss_mb(), r.unit = "MB";
    emit(r);
  }
  if (wants("mlp-train")) {
    BenchResult r;
    r.name = "mlp-train", r.what = "MLP 784-128-64-10 training (SGD), best batch of 64..1024";
    r.threads = threads_or(all);
    const std::vector<int> batches = o.batch > 0 ? std::vector<int>{o.batch} : std::vector<int>{64, 128, 256, 512, 1024};
    for (int b : batches) {
      double fps = 0;
      const int64_t samples = std::max<int64_t>(o.samples, 20 * b);
      const double s = time_training(mlp, train, b, r.threads, isa, prec, samples, &fps, o.layout, o.warmup_samples, o.denormals);
      if (samples / s > r.samples_per_s) {
        r.samples_per_s = samples / s, r.batch = b, r.gflops = fps * r.samples_per_s / 1e9;
      }
    }
    r.value = r.samples_per_s, r.unit = "samples/s";
    emit(r);
  }
  for (const char* name : {"cnn-infer-b1", "cnn-infer-b64"}) {
    if (!wants(name)) continue;
    const bool b1 = std::string(name) == "cnn-infer-b1";
    for (const WeightRun& wr : weight_runs(o, "mnist-cnn")) {
      if (wr.int8 && prec != Precision::fp32) continue;
      BenchResult r;
      r.name = name, r.what = "mnist-cnn forward pass, milliseconds per batch", r.weights = wr.path;
      r.threads = threads_or(b1 ? 1 : all), r.batch = batch_or(b1 ? 1 : 64);
      double fps = 0;
      r.value = wr.int8 ? time_int8(wr.path, &train, r.batch, r.threads, isa_name(isa), &fps, 0.5, o.denormals)
                        : time_inference(cnn, train, r.batch, r.threads, isa, prec, &fps, o.layout, o.denormals, wr.path);
      r.unit = "ms";
      r.samples_per_s = r.batch / (r.value / 1e3), r.gflops = fps * r.samples_per_s / 1e9;
      emit(r, wr.int8);
    }
  }
  // The model workloads (ConvNeXts, ResNets) run only when named (--workloads): each takes 10-60 s.
  auto named = wants;
  for (const ModelWorkload& w : model_workloads()) {
    const std::string name = w.name;
    if (!named(name)) continue;
    const bool infer = name.find("-infer-") != std::string::npos;
    Model m = builtin_model(w.model);
    if (name == "convnext-train-gelu-tanh") set_block_activation(m, LayerKind::GELUTanh);
    if (name == "convnext-train-fastswish") set_block_activation(m, LayerKind::FastSwish);
    BenchResult r;
    r.name = name;
    r.what = std::string(w.what) + (infer ? " forward pass of random 64x64 inputs, milliseconds per batch"
                                          : " training on random 64x64 inputs (" + m.recipe.optimizer + "), samples per second");
    const bool b1 = name.ends_with("-infer-b1");
    r.threads = threads_or(all), r.batch = batch_or(b1 ? 1 : 64);
    // Training starts from an fp32 --weights file of the model when given (a state that has
    // trained), else from a fresh initialisation; quantized files are for inference only.
    for (const WeightRun& wr : weight_runs(o, m.name)) {
      if (wr.int8 && (prec != Precision::fp32 || !infer)) continue;
      double fps = 0;
      r.weights = wr.path;
      r.value = wr.int8 ? time_int8(wr.path, nullptr, r.batch, r.threads, isa_name(isa), &fps, 4.0, o.denormals)
                        : convnext_run(m, r.batch, r.threads, isa, prec, !infer, &fps, o.layout, o.denormals, wr.path);
      r.unit = infer ? "ms" : "samples/s";
      r.samples_per_s = infer ? r.batch / (r.value / 1e3) : r.value;
      r.gflops = fps * r.samples_per_s / 1e9;
      emit(r, wr.int8);
    }
  }
  for (const std::string& name : data_workloads()) {
    if (!named(name)) continue;
    BenchResult r;
    r.name = name;
    r.what = name == "data-decode" ? "decode an image folder of JPEGs (train and test), images per second"
                                   : "training epochs from the decoded cache: RandomCrop(padding 4), flip, normalise to float, images per second";
    r.threads = threads_or(all), r.batch = batch_or(64);
    r.value = time_data(name, o.data_folder, r.threads, r.batch);
    r.unit = "images/s", r.samples_per_s = r.value;
    emit(r);
  }
  struct Gemm { const char* name; const char* what; bool ta, tb; int M, N, K, threads; bool bf16 = false; };
  const Gemm gemms[] = {
      {"sbgemm-2048-1t", "bf16 GEMM 2048^3 (fp32 C), C = A B", false, false, 2048, 2048, 2048, 1, true},
      {"sbgemm-2048", "bf16 GEMM 2048^3 (fp32 C), C = A B", false, false, 2048, 2048, 2048, all, true},
      {"sgemm-2048-1t", "SGEMM 2048^3, C = A B", false, false, 2048, 2048, 2048, 1},
      {"sgemm-2048", "SGEMM 2048^3, C = A B", false, false, 2048, 2048, 2048, all},
      {"sgemm-fc1-fwd", "fc1 forward y[64,128] = x[64,6272] w[128,6272]^T", false, true, 64, 128, 6272, all},
      {"sgemm-fc1-dx", "fc1 input gradient dx[64,6272] = dy[64,128] w[128,6272]", false, false, 64, 6272, 128, all},
      {"sgemm-fc1-dw", "fc1 weight gradient dw[128,6272] = dy[64,128]^T x[64,6272]", true, false, 128, 6272, 64, all},
      {"sbgemm-fc1-fwd", "bf16 fc1 forward y[64,128] = x[64,6272] w[128,6272]^T", false, true, 64, 128, 6272, all, true},
      {"sbgemm-fc1-dx", "bf16 fc1 input gradient dx[64,6272] = dy[64,128] w[128,6272]", false, false, 64, 6272, 128, all, true},
      {"sbgemm-fc1-dw", "bf16 fc1 weight gradient dw[128,6272] = dy[64,128]^T x[64,6272]", true, false, 128, 6272, 64, all, true},
      {"sgemm-cx-1x1", "convnext-seed stage 1 1x1 conv, one sample: y[256,256] = w[256,256] x[256,256]", false, false, 256, 256, 256, all},
      {"sbgemm-cx-1x1", "bf16 convnext-seed stage 1 1x1 conv, one sample: y[256,256] = w[256,256] x[256,256]", false, false, 256, 256, 256, all, true}};
  for (const Gemm& g : gemms) {
    if (!wants(g.name)) continue;
    BenchResult r;
    r.name = g.name, r.what = g.what;
    r.threads = threads_or(g.threads);
    r.gflops = time_sgemm(g.ta, g.tb, g.M, g.N, g.K, r.threads, isa, g.bf16);
    r.value = r.gflops, r.unit = "GFLOP/s";
    emit(r);
  }
}

bool runs_a_plan(const std::string& name) {
  return name.find("gemm") == std::string::npos && name.rfind("data-", 0) != 0;
}
}  // namespace

void run_bench(const BenchOptions& o, const BenchMachine& machine, const Dataset& train,
               const std::function<void(const BenchResult&)>& on_result) {
  const Isa isa = resolve_isa(o.isa, "BenchOptions::isa");
  auto names = bench_workloads();
  for (const auto& n : convnext_workloads()) names.push_back(n);
  for (const auto& n : data_workloads()) names.push_back(n);
  for (const auto& n : o.only)
    if (std::find(names.begin(), names.end(), n) == names.end())
      throw Error("BenchOptions::only: unknown workload '" + n + "' (bench_workloads() and convnext_workloads() list them)");
  if (o.threads < 0 || o.threads > 256) throw Error("BenchOptions::threads: expected 0..256, found " + std::to_string(o.threads));
  if (o.batch < 0 || o.batch > 65536) throw Error("BenchOptions::batch: expected 0..65536, found " + std::to_string(o.batch));
  if (o.samples < 1) throw Error("BenchOptions::samples: expected at least 1, found " + std::to_string(o.samples));
  auto wants = [&](const std::string& n) { return o.only.empty() || std::find(o.only.begin(), o.only.end(), n) != o.only.end(); };
  bool needs_data = false;  // the ConvNeXt workloads make their own random inputs
  for (const auto& n : bench_workloads()) needs_data = needs_data || wants(n);
  if (needs_data && (train.count < 1 || train.rows != 28 || train.cols != 28))
    throw Error("bench: the data set must hold 28x28 images");
  if (o.precisions.empty()) throw Error("BenchOptions::precisions: expected fp32, bf16 or both, found none");
  BenchOptions run = o;
  bool data_named = false;
  for (const auto& n : data_workloads()) data_named = data_named || std::find(o.only.begin(), o.only.end(), n) != o.only.end();
  if (data_named && o.data_folder.empty()) run.data_folder = make_jpeg_folder();  // removed below
  const auto base = bench_workloads();  // what runs when no workload is named
  for (const std::string& w : o.weights) {  // each file needs an inference workload of its model
    const auto meta = read_weights_metadata(w);
    const auto it = meta.find("model");
    const std::string model = it == meta.end() ? "" : parse_model_json(it->second, w + ": __metadata__.model").name;
    bool runs = false;
    for (const char* n : {"cnn-infer-b1", "cnn-infer-b64"})
      runs = runs || (model == "mnist-cnn" && (o.only.empty() || std::find(o.only.begin(), o.only.end(), n) != o.only.end()));
    for (const ModelWorkload& mw : model_workloads())
      runs = runs || (model == mw.model && std::string(mw.name).find("-infer-") != std::string::npos &&
                      std::find(o.only.begin(), o.only.end(), mw.name) != o.only.end());
    if (!runs) throw Error("weights: " + w + " holds model '" + model + "', which no inference workload named runs");
  }
  try {
    for (const std::string& name : names) {
      const bool selected = std::find(o.only.begin(), o.only.end(), name) != o.only.end();
      const bool by_default = o.only.empty() && std::find(base.begin(), base.end(), name) != base.end();
      if (!selected && !by_default) continue;
      for (Precision p : runs_a_plan(name) ? o.precisions : std::vector<Precision>{Precision::fp32})
        run_one(name, p, run, machine, train, isa, on_result);
    }
  } catch (...) {
    if (data_named && o.data_folder.empty()) std::filesystem::remove_all(run.data_folder);
    throw;
  }
  if (data_named && o.data_folder.empty()) std::filesystem::remove_all(run.data_folder);
}

}  // namespace ember
