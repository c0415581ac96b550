// The CLI's subcommands: their flags (with the defaults shown in --help) and their entry points.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/loader.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/model.h"
#include "ember/onnx.h"
#include "ember/plan.h"
#include "ember/train.h"
#include "ember/quant.h"

namespace ember::cli {

// Library errors name the value or the option's field ("unknown model 'x'", "channels: ...",
// "blocks 6: ...", "... (timeout_s 60)"); the CLI names its flags. A FieldFlags table pairs the
// fields a call's errors may name with their flags ({"channels", "--channels"}).
using FieldFlags = std::initializer_list<std::pair<const char*, const char*>>;
// The message with the fields named as flags: a field that starts it (before ':' or ' ') and, for
// fields holding a '_' (never a plain word), every mention of it as a whole word.
std::string with_flags(const std::string& message, FieldFlags fields);
// Runs f; an ember::Error it throws is rethrown with_flags(fields) when that changes its text.
template <class F>
auto naming_flags(FieldFlags fields, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    std::string msg = with_flags(e.what(), fields);
    if (msg != e.what()) throw Error(msg);
    throw;
  }
}
// A library field name ("batch_size") as the flag that sets it: "--" + field with '_' as '-'.
std::string flag_name(const char* field);
// Runs f; a std::bad_alloc it throws becomes one line, what(): what was being allocated, for which
// file or model, and how much (built only then), ending in "out of memory".
template <class F>
auto naming_oom(const std::function<std::string()>& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    throw Error(what());
  }
}
// "N MiB" (one decimal below 10).
std::string mib(uint64_t bytes);
// import_onnx(path), its allocation failure named (--model FLAG, the file and its size).
OnnxImport import_model_file(const std::string& path);
// resolve_model(name) with "--model: " before an unknown built-in name.
Model model_flag(const std::string& name);

// Flags shared by train and eval: what to run on and how.
struct CommonArgs {
  std::string model = "mnist-cnn";
  std::string data;          // empty: the default data set
  int batch_size = 64;
  int threads = 0;           // 0 is rejected; the default is set from the CPU in add_*_flags
  std::string isa;
  std::string precision = "fp32";  // --precision: fp32 or bf16 (the matrix products)
  std::string layout = "auto";     // --layout: auto, nchw or nhwc (the activations' layout)
  std::string denormals = "flush";  // --denormals: flush or keep (PlanOptions::denormals)
  int64_t limit_test = 0;    // 0: all
  std::string act;           // --act: a ConvNeXt model's block activation; empty: the model's
  std::string data_format = "auto";  // auto, idx, folder, tinyimagenet, cifar
  int image_size = 0;        // folders: resize every image to this square size (0: keep)
  std::string resize = "bilinear";  // its filter: bilinear or bicubic
  std::string label = "fine";  // CIFAR-100: fine (100 classes) or coarse (20)
  // Augmentation; -1 / "" take the model's recipe. --no-augment: none at all.
  int crop = -1, pad = -1;
  bool flip = false, resized_crop = false, no_augment = false;
  std::string normalize;
  int64_t cache_mb = -1;     // image folders: decoded sets above this stream from disk (-1: a quarter of RAM)
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
  std::string targets, test_targets;  // --targets, --test-targets: FILE.npy dense targets (MSE, L1)
  std::string save;
  std::string save_dtype = "fp32";  // --save-dtype: fp32 or bf16 (checkpoints stay fp32)
  std::string show_batch;    // FILE.png: a grid of the first augmented training batch
  std::string init;
  double early_stop_tol = 0;
  int64_t limit_train = 0;
  std::string out;           // run directory: config.json, model.json, metrics.jsonl (+ profile)
  bool profile = false;      // profile the whole run (written to --out)
  bool quiet = false;        // no progress display, no per-epoch lines
  std::string command_line;  // as typed, for config.json
  std::string weights;       // start from these weights (safetensors)
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: none, but on a signal)
  std::string checkpoint_dir;    // default: OUT/checkpoints with --out, else ./checkpoints
  int keep_checkpoints = 3;
  std::string resume;            // checkpoint file, or a directory (its newest)
  std::string on_nonfinite = "stop";  // stop | skip
  // Data-parallel training (mpirun/srun; docs/distributed.md). deterministic: gradients summed in
  // `grad_blocks` fixed blocks (0: max(4, ranks)) in a fixed tree, bit-identical for any number of
  // ranks that divides them; off by default (it cost more than 10 % at 2 ranks on the seed CNN).
  bool deterministic = false;
  int grad_blocks = 0;
  double bucket_mb = 4;         // gradient all-reduce bucket size
  double comm_timeout = 60;     // seconds a rank waits for the others before it gives up
  // Quantization-aware training (docs/int8.md): fine-tune --weights with fake quantization.
  bool qat = false;
  int64_t qat_freeze_after = -1;  // observers frozen after N optimizer steps (-1: never; not given: half the run's)
  int qat_weight_bits = 8;
  int qat_calib_samples = 512;    // the ranges start from a minmax calibration on these training images
};

// `ember profile`: training on a few samples with the profiler on.
struct ProfileArgs {
  TrainArgs train;
  int64_t limit_samples = 1000;
  int warmup_steps = 3;
  std::string trace;         // Chrome trace-event JSON
  std::string json;          // profile.json
  std::string folded;        // folded stacks of ember's own spans
  std::string flame;         // SVG flame graph of ember's own spans (no perf needed)
};

// Calibration of post-training quantization (`ember quantize`, and eval's --precision int8).
struct QuantOptionsCli {
  int samples = 512;
  std::string calib = "minmax";
  double percentile = 99.99;
  uint64_t seed = 1;
  int weight_bits = 8;
};
struct EvalArgs {
  CommonArgs common;
  std::string weights;
  QuantOptionsCli calib;   // --precision int8 with fp32 weights
};
struct QuantizeArgs {
  CommonArgs common;
  std::string weights, output;
  int calib_samples = 512;
  std::string calib = "minmax";
  double percentile = 99.99;
  uint64_t seed = 1;
  int weight_bits = 8;
};
void add_quantize_flags(CLI::App* cmd, QuantizeArgs& a);
int run_quantize(QuantizeArgs a, const CLI::App& cmd);
// --qat: the model with Model::qat (the tensors its int8 plan rounds to u8, from a minmax
// calibration of the weights on the training set), and the QAT plan started from the fp32 weights
// with those calibrated ranges (quantize_cmd.cpp).
// freeze_given: --qat-freeze-after was typed (else half the run's `steps`).
Model qat_model(const TrainArgs& a, bool freeze_given, const Model& model, const Dataset& train, int64_t steps,
                QuantizedWeights* calibrated);
void load_qat_start(Plan& plan, const std::string& weights, const QuantizedWeights& calibrated);
// Post-training quantization of `model` with the fp32 weights in `weights` ("": its initial
// weights of init_seed), calibrated as o says on the first images of `train` (ember quantize,
// eval and profile --precision int8 of fp32 weights).
QuantizedWeights quantize_for(const CommonArgs& c, const Model& model, const std::string& weights, const Dataset& train,
                              const QuantOptionsCli& o, uint64_t init_seed = 1);
// Eval of quantized weights, or of fp32 weights quantized here (--precision int8).
int run_eval_int8(EvalArgs& a, const CLI::App& cmd);
// `ember info --weights Wq`: each quantized layer's scales and the calibration used.
void print_quantized(const std::string& path);
// `ember info --model M`: the int8 plan's steps for M once quantized (int8 kernels, the fp32 ops
// between a dequantize and a quantize): they depend on the layers, not the weights' values.
// The model's initial weights (seed 1) quantized on two fixed inputs in [0, 1), as `ember quantize`
// would quantize trained ones: what `ember info --model M` shows of its int8 plan.
QuantizedWeights initial_quantized(const Model& model);
void print_int8_plan_of(const Model& model);
// The flags and checks train and eval share, and the data set they read (limit_train: the first
// training images only), for the other commands.
void add_common_flags(CLI::App* cmd, CommonArgs& a);
void check_common(const CommonArgs& a);
TrainTest load_data_for(const CommonArgs& a, int64_t limit_train);
// An integer flag's check on its text: in [lo, hi], else "expected an integer in [lo, hi], found
// 'TEXT'" (`what` in place of "an integer in [lo, hi]"); CLI11 alone would saturate or wrap.
CLI::Validator integer_check(int64_t lo, int64_t hi, const std::string& what = "");
// --seed's check (train, quantize): an integer in [0, 2^64 - 1] as typed (CLI11 wraps -1 to 2^64 - 1).
CLI::Validator seed_check();
// For flags whose -1 default means "the recipe's" or "automatic": a negative value given on the
// command line is refused, not taken as that default.
CLI::Validator non_negative();

// `ember export WEIGHTS -o FILE.onnx [--model M]`.
struct ExportArgs {
  std::string weights, output, model;
};
void add_export_flags(CLI::App* cmd, ExportArgs& a);
int run_export(const ExportArgs& a);

struct BenchArgs {
  int threads = 0;             // 0: each workload's own
  int batch_size = 0;          // 0: each workload's own
  std::string isa;
  std::string layout = "auto";  // --layout: the model workloads' activation layout
  int64_t samples = 60000;
  int64_t warmup_samples = -1;  // --warmup-samples: trained before the timed training samples (-1: an epoch)
  std::string denormals = "flush";  // --denormals: flush or keep
  std::vector<std::string> workloads;
  std::string data;
  std::string data_folder;   // the data-* workloads' image folder (empty: generated)
  std::string model;         // --model: time only this model's forward pass (model-infer-bB)
  std::vector<std::string> precisions{"fp32"};  // --precision fp32,bf16: each model workload in each
  std::vector<std::string> weights;  // --weights: fp32 or quantized files the inference workloads run with
  bool json = false;
  bool list = false;
};

void add_bench_flags(CLI::App* cmd, BenchArgs& a);
int run_bench(const BenchArgs& a);
void add_train_flags(CLI::App* cmd, TrainArgs& a);
void add_eval_flags(CLI::App* cmd, EvalArgs& a);
int run_train(TrainArgs a, const CLI::App& cmd);
int run_eval(EvalArgs a, const CLI::App& cmd);
// `ember info [--model M [--batch-size B]]`: the CPU, kernels and threads; with a model, its
// layers and the arena of its training and inference plans.
struct InfoArgs {
  std::string model;
  bool kernels = false;  // --kernels: what each kernel-table entry runs on each set
  bool ops = false;      // --ops: the op table (alone), as JSON with --json
  bool json = false;
  int batch_size = 0;  // 0: the model's recipe
  std::string layout = "auto";  // --layout: the plans' (with --model)
  std::string weights;          // --weights: a quantized file's scales and calibration
  std::string precision;        // --precision fp32|bf16|int8 (with --model; "": fp32 and the int8 plan's steps)
};
int run_info(const InfoArgs& a);
int run_info_ops(const InfoArgs& a);
void add_profile_flags(CLI::App* cmd, ProfileArgs& a);
int run_profile(ProfileArgs a, const CLI::App& cmd);

// What train and profile share: the model, the plan options and the loop's configuration from
// the flags (recipe defaults applied, every value checked), and the data.
struct TrainSetup {
  Model model;
  PlanOptions plan;
  TrainConfig cfg;
};
// The model a weights file was saved from (__metadata__.model; without one, --model), for eval,
// train --weights and profile --weights: a built-in model's recipe goes with it. A --model (or
// --act) that is given must be the same model once its input and classes are those the weights
// were fitted to (a run on their data set), else "--model: ..." names both.
Model weights_model(const CommonArgs& c, const std::string& weights, bool model_given);
Model model_of(const CommonArgs& a);  // --model resolved, with --act applied (ConvNeXt models only)
// Whether a weights file fixes its model's input and classes: its metadata describes the model
// (ember's files). A file without one (PyTorch's), or naming a built-in model, leaves them to the
// run, which fits the model to its data (fit_model_to_data) before checking the weights against it.
bool weights_fix_model(const std::string& weights);
// How a value is named in errors: the flag, or where a resumed checkpoint stored it.
using Label = std::function<std::string(const char*)>;
// `given(flag)` says whether the user set a flag (the recipe fills the others); `model`, when
// not null, is used instead of resolving --model (a resumed checkpoint's own description);
// `label` names each value in errors (default: its flag).
TrainSetup make_train_setup(TrainArgs& a, const std::function<bool(const char*)>& given,
                            const Model* model = nullptr, const Label& label = nullptr);
TrainSetup make_train_setup(TrainArgs& a, const CLI::App& cmd);
// The inputs a run reads, that no output may replace: the data set (a tree: every file in it, and
// nothing new inside it), the model file (FILE.json, FILE.onnx), the weights and the checkpoint.
std::vector<NamedPath> run_inputs(const CommonArgs& c, const std::string& weights, const std::string& resume_path);
// The data set, reading only the first --limit-train / --limit-test samples.
TrainTest load_train_data(const TrainArgs& a);
// A new run's model takes its input [C, H, W] from the data, and a built-in model's last Linear
// with fewer outputs than the data's classes grows to them (a FILE.json model's does not); each change is one line on stderr. `fixed` (resuming, or
// starting from --weights that describe their model) keeps the model as saved: check_dataset_fits then names a mismatch.
// `weights` (a file that does not fix the model): checked against the fitted model before those lines.
void fit_model_to_data(Model& m, const Dataset& d, const Augment* a, bool fixed, const std::string& weights = "");
// --show-batch: the first training batch as the loader makes it (epoch 1's order and
// augmentation), as a PNG grid of its images, 2-pixel grey gaps between them.
void write_batch_grid(const std::string& path, const Dataset& d, const Augment& a, int batch, uint64_t seed, bool shuffle);
// The augmentation's mean/std as the plan's input affine.
void set_normalisation(Plan& plan, const Augment& a);
// The augmentation of a run: the flags given, else the model's recipe; normalisation checked
// against the data's channels. `active` says whether any of it applies (else no loader runs).
Augment augment_of(const CommonArgs& c, const Model& m, int channels, bool* active);
// `batch`, or the set's count when smaller (with a note on stdout).
int clamp_batch(int batch, int64_t count, const char* set);
// The one line on stderr for a bf16 run whose kernel set `isa` emulates bf16 (Plan::bf16_emulated,
// Kernels::bf16_rate 1): it computes what native bf16 does, slower than fp32.
void note_emulated_bf16(const char* isa);
int default_threads();
// Run-directory helpers (train_cmd.cpp): files are written to FILE.tmp, then renamed.
void write_text_file(const std::string& path, const std::string& text, const std::string& what);
void make_run_dir(const std::string& dir);
std::string model_summary_json(const Plan& plan);
double peak_for(const Plan& plan);  // FMA-loop peak of plan.threads() threads, GFLOP/s

}  // namespace ember::cli
