// `ember train`, `ember eval` and `ember info`: flag definitions, the setup train and profile share, validation of every value
// (one line naming the flag, what was expected and what was found), and the runs themselves.
#include "commands.h"
#include "ember/quant.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "ember/cpu.h"
#include "ember/data.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/io.h"
#include "ember/model.h"
#include "ember/plan.h"
#include "ember/train.h"
#include "ember/onnx.h"
#include "ember/onnx_quant.h"
#include "ember/ops.h"
#include "ember/version.h"

namespace ember::cli {

namespace {
uint64_t file_size_or_zero(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0;
}
// The bytes the regular files below dir hold (symlinks not followed, at most 2^20 entries): for
// an out-of-memory message only.
uint64_t tree_bytes(const std::string& dir) {
  std::error_code ec;
  uint64_t total = 0;
  size_t n = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != decltype(it)() && ++n < (1u << 20);
       it.increment(ec))
    if (it->is_regular_file(ec)) {
      const uintmax_t size = it->file_size(ec);
      if (!ec) total += size;  // on an error file_size says uintmax_t(-1)
    }
  return total + file_size_or_zero(dir);
}
}  // namespace

int default_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : int(hc > 64 ? 64 : hc);
}

std::string flag_name(const char* field) {
  std::string f = std::string("--") + field;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

namespace {
bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/'; }
}  // namespace

std::string with_flags(const std::string& message, FieldFlags fields) {
  std::string m = message;
  for (const auto& [field, flag] : fields) {
    const std::string f = field;
    if (m.rfind(f, 0) == 0 && m.size() > f.size() && (m[f.size()] == ':' || m[f.size()] == ' ')) m = flag + m.substr(f.size());
    if (f.find('_') == std::string::npos) continue;
    for (size_t at = m.find(f); at != std::string::npos; at = m.find(f, at + 1)) {
      const size_t end = at + f.size();
      if ((at > 0 && word_char(m[at - 1])) || (end < m.size() && word_char(m[end]) && m[end] != '.')) continue;
      m.replace(at, f.size(), flag);
    }
  }
  return m;
}

std::string mib(uint64_t bytes) {
  char b[48];
  const double m = double(bytes) / double(1 << 20);
  std::snprintf(b, sizeof b, m < 10 ? "%.1f MiB" : "%.0f MiB", m);
  return b;
}

OnnxImport import_model_file(const std::string& path) {
  return naming_oom([&] { return "--model " + quote_path(path) + ": out of memory importing the ONNX model (the file holds " +
                                 mib(file_size_or_zero(path)) + ")"; },
                    [&] { return import_onnx(path); });
}

Model model_flag(const std::string& name) {
  if (is_onnx_path(name)) return import_model_file(name).model;  // its structure; its weights: eval, bench
  try {
    return resolve_model(name);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("unknown model", 0) == 0) throw Error(std::string("--model: ") + e.what());
    throw;
  }
}

Model model_of(const CommonArgs& a) {
  Model m = model_flag(a.model);
  if (a.act.empty()) return m;
  LayerKind kind;
  if (!find_activation(a.act, &kind))
    throw Error("--act: expected " + activation_list() + ", found '" + clip_text(a.act) + "'");
  try {
    set_block_activation(m, kind);
  } catch (const Error& e) {
    throw Error(std::string("--act: ") + e.what());
  }
  return m;
}

namespace {

void add_common(CLI::App* cmd, CommonArgs& a) {
  a.threads = default_threads();
  std::string names;
  for (const std::string& n : builtin_model_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--model", a.model, "Built-in model (" + names + ") or FILE.json")
      ->capture_default_str();
  cmd->add_option("--act", a.act, "A ConvNeXt model's block activation: " + activation_list() + " (the op table's activations)");
  cmd->add_option("--data", a.data,
                  "Data set directory: MNIST-format files, CIFAR-10/100 binary batches, or image folders "
                  "(train/<class>/*.png|jpg, test/ or val/; TinyImageNet's layout) (default: Fashion-MNIST in " +
                      std::string(kDefaultDataDir) + ")");
  cmd->add_option("--data-format", a.data_format, "auto (detected from the files), idx, folder, tinyimagenet or cifar")
      ->capture_default_str();
  cmd->add_option("--image-size", a.image_size, "Image folders: resize every image to SIZE x SIZE (0: all must share one size)")
      ->capture_default_str();
  cmd->add_option("--resize", a.resize, "The --image-size filter: bilinear or bicubic (PIL's, antialiased when shrinking)")->capture_default_str();
  cmd->add_option("--label", a.label, "CIFAR-100: fine (100 classes) or coarse (20)")->capture_default_str();
  cmd->add_option("--crop", a.crop, "Random crop to SIZE x SIZE while training, centre crop in evaluation (default: the recipe's; 0: none)")
      ->check(non_negative());
  cmd->add_option("--pad", a.pad, "Zero border added on each side before the crop (default: the recipe's)")->check(non_negative());
  cmd->add_flag("--flip", a.flip, "Random horizontal flip while training");
  cmd->add_flag("--resized-crop", a.resized_crop, "RandomResizedCrop to --crop SIZE (area 8-100 %, aspect 3/4-4/3) instead of a padded crop");
  cmd->add_option("--cache-mb", a.cache_mb, "Image folders: keep the decoded images in memory up to this size, else read them from disk as needed (default: a quarter of RAM)")
      ->check(non_negative());
  cmd->add_flag("--no-augment", a.no_augment, "No crop, padding or flip, whatever the recipe says");
  cmd->add_option("--normalize", a.normalize, "Per-channel normalisation: none, imagenet, M,S or M1,M2,M3,S1,S2,S3 (default: the recipe's)");
  cmd->add_option("--batch-size", a.batch_size, "Mini-batch size (default: the model's recipe)")
      ->capture_default_str();
  cmd->add_option("--threads", a.threads, "Worker threads")->capture_default_str();
  cmd->add_option("--isa", a.isa, "Force a kernel set: scalar, avx2, avx512 or amx (default: best the CPU has; env EMBER_ISA)");
  cmd->add_option("--precision", a.precision,
                  "fp32 or bf16: the matrix products' arithmetic (bf16: operands rounded to bf16, products summed "
                  "in fp32; LayerNorm, activations, the loss and the optimizer stay fp32); eval and profile also take int8")
      ->capture_default_str();
  cmd->add_option("--layout", a.layout,
                  "auto, nchw or nhwc: the activations' layout (nhwc: channel-last wherever a node can, reorders "
                  "at the edges; auto: nchw for now; bf16 plans run nchw)")
      ->capture_default_str();
  cmd->add_option("--denormals", a.denormals,
                  "flush or keep: numbers below 2^-126 in the kernels' arithmetic flushed to zero (flush-to-zero and "
                  "denormals-are-zero, as PyTorch's set_flush_denormal; Intel cores slow down on them many times) or "
                  "kept (exact IEEE)")
      ->capture_default_str();
  cmd->add_option("--limit-test", a.limit_test, "Use only the first N test images (0: all)")
      ->capture_default_str();
}

[[noreturn]] void bad(const std::string& flag, const std::string& expected, const std::string& found) {
  throw Error(flag + ": expected " + expected + ", found " + found);
}
std::string plain(const char* flag) { return flag; }
// The library's field names ("batch_size") as the flags that set them, labelled by L.
FieldName flags_of(const Label& L) {
  return [&L](const char* field) { return L(flag_name(field).c_str()); };
}

void validate_common(const CommonArgs& a, const Label& L = plain) {
  PlanOptions po;  // the plan's settings, checked by the code that checks Python's
  po.batch = a.batch_size, po.threads = a.threads;
  validate(po, flags_of(L));
  check_integer(L("--limit-test"), a.limit_test, 0, int64_t(1) << 40);
  check_integer(L("--image-size"), a.image_size, 0, 4096);
  if (a.data_format != "auto" && a.data_format != "idx" && a.data_format != "folder" && a.data_format != "tinyimagenet" &&
      a.data_format != "cifar")
    bad(L("--data-format"), "auto, idx, folder, tinyimagenet or cifar", "'" + one_line(a.data_format) + "'");
  if (a.label != "fine" && a.label != "coarse") bad(L("--label"), "fine or coarse", "'" + one_line(a.label) + "'");
  if (a.resize != "bilinear" && a.resize != "bicubic") bad(L("--resize"), "bilinear or bicubic", "'" + one_line(a.resize) + "'");
  if (a.crop != -1) check_integer(L("--crop"), a.crop, 0, 4096);
  if (a.cache_mb != -1) check_integer(L("--cache-mb"), a.cache_mb, 0, int64_t(1) << 30);
  if (a.pad != -1) check_integer(L("--pad"), a.pad, 0, 1024);
  resolve_kernel_set(one_line(a.isa), L("--isa"));
  if (a.precision != "int8") parse_precision(one_line(a.precision), L("--precision"));  // int8: eval's and profile's, checked there
  if (a.layout != "auto" && a.layout != "nchw" && a.layout != "nhwc")
    bad(L("--layout"), "auto, nchw or nhwc", "'" + one_line(a.layout) + "'");
  parse_denormals(a.denormals, L("--denormals"));
}

std::string data_format(const CommonArgs& a, const std::string& dir) {
  if (a.data_format != "auto") return a.data_format;
  if (is_cifar_dir(dir)) return "cifar";
  if (is_image_folder(dir, "--data")) return "folder";
  return "idx";
}

TrainTest load_data(const CommonArgs& a, int64_t limit_train) {
  const std::string dir = a.data.empty() ? kDefaultDataDir : a.data;
  try {
    const std::string f = data_format(a, dir);
    if (a.label == "coarse" && !(f == "cifar" && is_cifar100_dir(dir)))
      throw Error("--label coarse: only CIFAR-100 has coarse labels, --data " + quote_path(dir) + " is " +
                  (f == "cifar" ? "CIFAR-10" : f == "idx" ? "MNIST-format" : "an image folder"));
    if (f == "cifar") return load_cifar_dir(dir, a.label == "fine", limit_train, a.limit_test);
    if (f == "folder" || f == "tinyimagenet") {
      if (f == "tinyimagenet" && ::access((dir + "/wnids.txt").c_str(), F_OK) != 0)
        throw Error("--data " + quote_path(dir) + ": no wnids.txt (TinyImageNet's layout has it)");
      FolderOptions o;
      o.what = "--data";
      o.image_size = a.image_size, o.threads = a.threads, o.limit_train = limit_train, o.limit_test = a.limit_test;
      o.cubic = a.resize == "bicubic";
      const uint64_t ram = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
      o.cache_bytes = a.cache_mb >= 0 ? uint64_t(a.cache_mb) << 20 : ram / 4;
      FolderReport rep;
      TrainTest t = load_image_folder(dir, o, &rep);
      if (rep.streamed)
        std::fprintf(stderr, "ember: --data %s: the decoded images would not fit --cache-mb %lld: read from disk as each batch needs them\n",
                     quote_path(dir).c_str(), (long long)(o.cache_bytes >> 20));
      if (rep.skipped_train + rep.skipped_test > 0)
        std::fprintf(stderr, "ember: --data %s: skipped %lld train and %lld test files that are not .png/.jpg/.jpeg images\n",
                     quote_path(dir).c_str(), (long long)rep.skipped_train, (long long)rep.skipped_test);
      return t;
    }
    return load_mnist_dir(dir, limit_train, a.limit_test);
  } catch (const Error& e) {
    if (a.data.empty())
      throw Error(std::string(e.what()) +
                  " (the default data set comes from Debian's dataset-fashion-mnist package; "
                  "install it or pass --data DIR)");
    throw;
  }
}

}  // namespace

std::vector<NamedPath> run_inputs(const CommonArgs& c, const std::string& weights, const std::string& resume_path) {
  const std::string dir = c.data.empty() ? kDefaultDataDir : c.data;
  // An image folder is read 10 levels deep (train/CLASS/ and 8 below): no output replaces a file
  // in it or lands inside it. IDX and CIFAR files lie at its top: no output replaces one of them,
  // but outputs may go beside them (`--data . --save w.safetensors`).
  const std::string f = data_format(c, dir);
  const bool images = f == "folder" || f == "tinyimagenet";
  std::vector<NamedPath> in{{"--data", dir, images ? 12 : 1, images}};
  if ((c.model.size() > 5 && c.model.ends_with(".json")) || is_onnx_path(c.model)) in.push_back({"--model", c.model});
  in.push_back({"--weights", weights});
  in.push_back({"--resume", resume_path});
  return in;
}

namespace {

// load_data, its allocation failure named: the data set and the bytes its files hold; the
// FolderOptions fields its errors name, as flags.
TrainTest load_data_named(const CommonArgs& a, int64_t limit_train) {
  const std::string dir = a.data.empty() ? kDefaultDataDir : a.data;
  return naming_oom([&] { return "--data " + quote_path(dir) + ": out of memory reading the data set (its files hold " +
                                 mib(tree_bytes(dir)) + "; --limit-train and --limit-test read fewer images)"; },
                    [&] {
                      return naming_flags({{"image_size", "--image-size"}, {"cache_bytes", "--cache-mb"},
                                           {"limit_train", "--limit-train"}, {"limit_test", "--limit-test"}},
                                          [&] { return load_data(a, limit_train); });
                    });
}

// Flags the user did not give take the model's recipe.
void apply_recipe(TrainArgs& a, const Model& m, const std::function<bool(const char*)>& given) {
  const Recipe& r = m.recipe;
  if (!given("--optimizer")) a.optimizer = r.optimizer;
  if (!given("--lr")) a.lr = r.lr;
  if (!given("--batch-size")) a.common.batch_size = r.batch_size;
  if (!given("--epochs")) a.epochs = r.epochs;
  if (!given("--schedule")) a.schedule = r.schedule;
  if (!given("--lr-min")) a.lr_min = r.lr_min;
  if (!given("--t-max")) a.t_max = r.t_max;
  if (!given("--l2")) a.l2 = r.l2;
  if (!given("--weight-decay")) a.weight_decay = r.weight_decay;
  if (!given("--momentum")) a.momentum = r.momentum;
}

}  // namespace

void add_train_flags(CLI::App* cmd, TrainArgs& a) {
  add_common(cmd, a.common);
  cmd->add_option("--epochs", a.epochs, "Epochs (default: the model's recipe)")->capture_default_str();
  cmd->add_option("--lr", a.lr, "Initial learning rate")->capture_default_str();
  cmd->add_option("--optimizer", a.optimizer, "sgd | momentum | nesterov | adam | adamw")->capture_default_str();
  cmd->add_option("--schedule", a.schedule, "constant | step | exp | cosine (stepped per epoch)")
      ->capture_default_str();
  cmd->add_option("--lr-min", a.lr_min, "Cosine: final learning rate")->capture_default_str();
  cmd->add_option("--t-max", a.t_max, "Cosine: period in epochs")->capture_default_str();
  cmd->add_option("--step-size", a.step_size, "Step: epochs between decays")->capture_default_str();
  cmd->add_option("--gamma", a.gamma, "Step/exp: decay factor")->capture_default_str();
  cmd->add_option("--l2", a.l2, "Coupled L2 on weights, added to their gradients")->capture_default_str();
  cmd->add_option("--weight-decay", a.weight_decay, "Decoupled weight decay on weights (AdamW-style)")
      ->capture_default_str();
  cmd->add_option("--momentum", a.momentum, "Momentum for momentum/nesterov SGD")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed for initialisation and shuffling (an integer >= 0)")
      ->capture_default_str()
      ->check(seed_check());
  cmd->add_flag("--no-shuffle", a.no_shuffle, "Keep the data set's order every epoch");
  cmd->add_option("--metrics", a.metrics, "Write one JSON object per epoch to FILE.jsonl");
  cmd->add_option("--targets", a.targets,
                  "Dense targets of the training set for a model with loss mse or l1: FILE.npy ('<f4' or '<f8', "
                  "C order) of shape [N, *output] or [N, output size], in the data set's sample order");
  cmd->add_option("--test-targets", a.test_targets,
                  "With --targets: the test set's, likewise (without it the test set is not evaluated)");
  cmd->add_option("--save", a.save, "Save the trained weights to FILE (safetensors)");
  cmd->add_option("--save-dtype", a.save_dtype,
                  "fp32 or bf16: the dtype of --save's tensors (bf16: rounded to nearest even, half the size; "
                  "PyTorch loads either; checkpoints keep fp32)")
      ->capture_default_str();
  cmd->add_option("--show-batch", a.show_batch, "Write the first augmented training batch to FILE.png as a grid");
  cmd->add_option("--init", a.init, "Weight init: kaiming, xavier or torch (default: the model's)");
  cmd->add_option("--early-stop-tol", a.early_stop_tol,
                  "Stop when the train loss improves by less than this between epochs (0: off)")
      ->capture_default_str();
  cmd->add_option("--limit-train", a.limit_train, "Use only the first N training images (0: all)")
      ->capture_default_str();
  cmd->add_option("--out", a.out,
                  "Run directory to write: config.json, model.json, metrics.jsonl (and the profile "
                  "with --profile); `ember report DIR` turns it into HTML");
  cmd->add_flag("--profile", a.profile,
                "Profile the run: per-layer table at the end; with --out also profile.json, "
                "profile.folded and trace.json");
  cmd->add_flag("--quiet", a.quiet, "No progress display and no per-epoch lines");
  cmd->add_option("--weights", a.weights, "Start training from these weights (safetensors, PyTorch names and layouts)");
  cmd->add_flag("--qat", a.qat,
                "Quantization-aware training of --weights: fake-quantized activations and weights (straight-through), "
                "ranges calibrated first, then learnt; `ember quantize` of the saved file keeps them (docs/int8.md)");
  cmd->add_option("--qat-freeze-after", a.qat_freeze_after,
                  "--qat: the range observers stop after N optimizer steps (default: half the run's; -1: never)")
      ->check(integer_check(-1, 2147483647, "a step count in [0, 2147483647], or -1 (never)"));  // a saved model's range
  cmd->add_option("--qat-weight-bits", a.qat_weight_bits, "--qat: 8, or 7 (weights in [-63, 63], for AVX2 CPUs)")
      ->capture_default_str();
  cmd->add_option("--qat-calib-samples", a.qat_calib_samples, "--qat: training images the starting ranges are calibrated on")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", a.checkpoint_every,
                  "Write a checkpoint every N steps, and at the end (0: only on SIGINT/SIGTERM)")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", a.checkpoint_dir,
                  "Directory for checkpoints (default: OUT/checkpoints with --out, else ./checkpoints)");
  cmd->add_option("--keep-checkpoints", a.keep_checkpoints, "How many of the newest checkpoints to keep")
      ->capture_default_str();
  cmd->add_option("--resume", a.resume,
                  "Continue a run from a checkpoint FILE or the newest in DIR, bit for bit as if never stopped");
  cmd->add_option("--on-nonfinite", a.on_nonfinite,
                  "NaN/Inf in the loss or a gradient: stop (keep the last checkpoint) or skip the step")
      ->capture_default_str();
  cmd->add_flag("--deterministic,!--no-deterministic", a.deterministic,
                "Sum gradients over fixed blocks of each batch in a fixed tree: the same weights bit for bit for "
                "1, 2 or 4 ranks at the same --threads (costs 9-23 % at 2 ranks; off by default)");
  cmd->add_option("--grad-blocks", a.grad_blocks,
                  "--deterministic: blocks per batch (a power of two, a multiple of the ranks; 0: max(4, ranks))")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", a.bucket_mb, "Data-parallel: gradient all-reduce bucket size in MiB")->capture_default_str();
  cmd->add_option("--comm-timeout", a.comm_timeout,
                  "Data-parallel: seconds a rank waits for the others before it stops the job with an error")
      ->capture_default_str();
}

void add_eval_flags(CLI::App* cmd, EvalArgs& a) {
  add_common(cmd, a.common);
  cmd->add_option("--calib-samples", a.calib.samples, "--precision int8 with fp32 weights: training images to calibrate on")
      ->capture_default_str();
  cmd->add_option("--calib", a.calib.calib, "--precision int8 with fp32 weights: minmax, percentile or mse")
      ->capture_default_str();
  cmd->add_option("--weight-bits", a.calib.weight_bits, "--precision int8 with fp32 weights: 8, or 7 (as ember quantize)")
      ->capture_default_str();
  cmd->add_option("--weights", a.weights,
                  "Weights to evaluate (safetensors, from `ember train --save`); not needed for --model FILE.onnx");
}

TrainSetup make_train_setup(TrainArgs& a, const CLI::App& cmd) {
  const auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (a.weights.empty() || !a.resume.empty()) return make_train_setup(a, given);
  const Model stored = weights_model(a.common, a.weights, given("--model") || given("--act"));
  return make_train_setup(a, given, &stored);
}

TrainSetup make_train_setup(TrainArgs& a, const std::function<bool(const char*)>& given,
                            const Model* model_override, const Label& label) {
  const Label& L = label ? label : Label(plain);
  TrainSetup su;
  su.model = model_override ? *model_override : model_of(a.common);
  Model& model = su.model;
  apply_recipe(a, model, given);
  validate_common(a.common, L);
  check_integer(L("--limit-train"), a.limit_train, 0, int64_t(1) << 40);
  check_integer(L("--checkpoint-every"), a.checkpoint_every, 0, int64_t(1) << 40);
  check_integer(L("--keep-checkpoints"), a.keep_checkpoints, 1, 1000000);
  check_integer(L("--grad-blocks"), a.grad_blocks, 0, 65536);
  check_number(L("--bucket-mb"), a.bucket_mb, 0, 1 << 20, true);
  check_number(L("--comm-timeout"), a.comm_timeout, 0, 1e6, true);
  if (a.on_nonfinite != "stop" && a.on_nonfinite != "skip")
    bad(L("--on-nonfinite"), "stop or skip", "'" + clip_text(a.on_nonfinite) + "'");
  if (!a.resume.empty() && !a.weights.empty())
    throw Error("--weights: cannot be combined with --resume (a checkpoint holds its own weights)");
  if (!a.init.empty()) {
    if (a.init == "kaiming") model.init = Init::Kaiming;
    else if (a.init == "xavier") model.init = Init::Xavier;
    else if (a.init == "torch") model.init = Init::Torch;
    else bad(L("--init"), "kaiming, xavier or torch", "'" + clip_text(a.init) + "'");
  }
  PlanOptions& po = su.plan;
  po.batch = a.common.batch_size;
  po.threads = a.common.threads;
  po.isa = a.common.isa;
  po.layout = a.common.layout;
  po.precision = parse_precision(a.common.precision, L("--precision"));
  po.denormals = parse_denormals(a.common.denormals, "--denormals");
  po.seed = a.seed;  // stochastic depth's masks
  po.optimizer.kind = parse_optimizer(a.optimizer, L("--optimizer"));
  po.optimizer.l2 = a.l2;
  po.optimizer.weight_decay = a.weight_decay;
  po.optimizer.momentum = a.momentum;
  po.optimizer.decay_norms = model.recipe.decay_norms;
  TrainConfig& cfg = su.cfg;
  cfg.epochs = a.epochs;
  cfg.seed = a.seed;
  cfg.shuffle = !a.no_shuffle;
  cfg.early_stop_tol = a.early_stop_tol;
  cfg.schedule = {parse_schedule(a.schedule, L("--schedule")), a.lr, a.lr_min, a.t_max, a.step_size, a.gamma};
  cfg.on_nonfinite = a.on_nonfinite == "skip" ? NonfinitePolicy::skip : NonfinitePolicy::stop;
  validate(po, flags_of(L));  // the ranges Python's arguments are checked against too
  validate(cfg, flags_of(L));
  return su;
}

int clamp_batch(int batch, int64_t count, const char* set) {
  if (count <= 0 || batch <= count) return batch;
  std::printf("note: batch size %d is larger than the %s's %lld samples: using %lld\n", batch, set,
              (long long)count, (long long)count);
  return int(count);
}

void note_emulated_bf16(const char* isa) {
  std::fprintf(stderr, "note: bf16 is emulated on this CPU (no AVX512_BF16 with kernel set %s): the same "
               "rounded products as native bf16, but slower than fp32\n", isa);
}

TrainTest load_train_data(const TrainArgs& a) { return load_data_named(a.common, a.limit_train); }

void write_batch_grid(const std::string& path, const Dataset& d, const Augment& a, int batch, uint64_t seed, bool shuffle) {
  const int n = int(std::min<int64_t>(batch, d.count));
  const std::vector<int64_t> order = epoch_order(d.count, seed, 0, shuffle);  // epoch 0's, as train() draws it
  BatchLoader loader(d, a, n, 1, 1, seed);
  loader.start(order.data(), n, 0, 0, true);
  const BatchLoader::Batch b = loader.next();
  const Size2 s = loader.size();
  const int C = d.channels, cols = int(std::ceil(std::sqrt(double(n)))), rows = (n + cols - 1) / cols;
  const int gap = 2, GW = cols * (s.w + gap) - gap, GH = rows * (s.h + gap) - gap;
  std::vector<uint8_t> grid(size_t(C) * GH * GW, 128);
  for (int i = 0; i < b.n; ++i)
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < s.h; ++y)
        std::memcpy(&grid[(size_t(c) * GH + (i / cols) * (s.h + gap) + y) * GW + (i % cols) * (s.w + gap)],
                    b.images + ((size_t(i) * C + c) * s.h + y) * s.w, size_t(s.w));
  const std::string png = encode_png(grid.data(), C, GH, GW, path);
  write_file_atomic(path, {png});
}

void set_normalisation(Plan& plan, const Augment& a) {
  std::vector<double> scale, shift;
  input_affine(a, &scale, &shift);
  plan.set_input_affine(scale, shift);
}

Augment augment_of(const CommonArgs& c, const Model& m, int channels, bool* active) {
  const Recipe& r = m.recipe;
  Augment a;
  if (!c.no_augment) {
    a.crop = c.crop >= 0 ? c.crop : r.crop;
    a.pad = c.pad >= 0 ? c.pad : r.pad;
    a.flip = c.flip || r.flip;
    a.resized_crop = c.resized_crop || r.resized_crop;
  }
  if (a.resized_crop && a.crop <= 0) throw Error("--resized-crop: needs --crop SIZE");
  parse_normalize(c.normalize.empty() ? r.normalize : c.normalize, channels, a, "--normalize");
  *active = a.random() || !a.mean.empty();
  return a;
}

namespace {

// Whether the model's shapes infer at input [C, S, S].
bool fits_size(Model m, int S) {
  m.in_h = m.in_w = S;
  try {
    model_params(m);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A model whose shapes do not infer at the data's image size, but would at a larger one (its
// downsampling shrinks small images to nothing): say so, with the smallest square size it takes,
// rather than the layer's own complaint about the shape it was left with.
void check_image_size(const Model& m) {
  try {
    model_params(m);
    return;
  } catch (const Error& e) {
    int hi = std::max(m.in_h, m.in_w);
    while (hi < 4096 && !fits_size(m, hi)) hi = std::min(4096, hi * 2);
    if (!fits_size(m, hi)) throw;
    int lo = std::max(m.in_h, m.in_w);  // fits_size(lo) is false unless lo == hi
    while (hi - lo > 1) (fits_size(m, (lo + hi) / 2) ? hi : lo) = (lo + hi) / 2;
    throw Error("--data: the images are " + std::to_string(m.in_w) + "x" + std::to_string(m.in_h) + " (after any --crop), too small for model " +
                one_line(m.name) + ": it needs at least " + std::to_string(hi) + "x" + std::to_string(hi) +
                " (an image folder: pass --image-size " + std::to_string(hi) + " or more)");
  }
}

}  // namespace

void fit_model_to_data(Model& m, const Dataset& d, const Augment* a, bool fixed, const std::string& weights) {
  if (fixed) return;
  const Size2 o = a ? augmented_size(*a, d.rows, d.cols, "--crop") : Size2{d.rows, d.cols};
  const auto dims = [](int c, int h, int w) { return "[" + std::to_string(c) + ", " + std::to_string(h) + ", " + std::to_string(w) + "]"; };
  Model f = m;
  std::string notes;
  if (f.in_c != d.channels || f.in_h != o.h || f.in_w != o.w) {
    f.in_c = d.channels, f.in_h = o.h, f.in_w = o.w;
    check_image_size(f);
    notes += "ember: model " + one_line(m.name) + ": input " + dims(m.in_c, m.in_h, m.in_w) + " set to the data's " +
             dims(d.channels, o.h, o.w) + "\n";
  }
  // Only a built-in model's head grows: a description file's class count is the user's choice
  // (a head that does not fit: check_dataset_fits names it).
  if (f.source.empty() && f.num_classes < d.num_classes && !f.layers.empty() && f.layers.back().kind == LayerKind::Linear &&
      f.layers.back().out == f.num_classes) {
    notes += "ember: model " + one_line(m.name) + ": " + std::to_string(f.num_classes) + " outputs set to the data's " +
             std::to_string(d.num_classes) + " classes\n";
    f.layers.back().out = f.num_classes = d.num_classes;
  }
  if (!weights.empty()) check_weights_fit(f, weights);  // before the notes: a refusal stays one line
  std::fputs(notes.c_str(), stderr);
  m = std::move(f);
}


namespace {
// m with the input [C, H, W] and class count of `like`, as a run on like's data set makes it
// (fit_model_to_data: the input always, a built-in model's last Linear when it has fewer outputs).
Model fitted_to(Model m, const Model& like) {
  m.in_c = like.in_c, m.in_h = like.in_h, m.in_w = like.in_w;
  if (m.source.empty() && m.num_classes < like.num_classes && !m.layers.empty() &&
      m.layers.back().kind == LayerKind::Linear && m.layers.back().out == m.num_classes)
    m.layers.back().out = m.num_classes = like.num_classes;
  return m;
}
// The QAT settings are not the model's structure: a file trained with --qat is still of its model.
bool same_model(const Model& a, const Model& stored) {
  Model f = fitted_to(a, stored);
  f.qat = stored.qat;
  return model_to_json(f) == model_to_json(stored);
}
}  // namespace

bool weights_fix_model(const std::string& weights) {
  const auto meta = read_weights_metadata(weights);
  const auto it = meta.find("model");
  if (it == meta.end()) return false;
  const auto names = builtin_model_names();
  return std::find(names.begin(), names.end(), it->second) == names.end();
}

Model weights_model(const CommonArgs& c, const std::string& weights, bool model_given) {
  const auto meta = read_weights_metadata(weights);
  const auto it = meta.find("model");
  if (it == meta.end()) return model_of(c);
  const auto names = builtin_model_names();  // PyTorch-written files may name a built-in model
  const bool named = std::find(names.begin(), names.end(), it->second) != names.end();
  Model stored = named ? builtin_model(it->second) : parse_model_json(it->second, weights + ": __metadata__.model");
  if (model_given) {
    const Model given = model_of(c);
    if (!same_model(given, stored))
      throw Error("--model: " + quote_path(c.model) + " (" + one_line(given.name) + ") is not the model the weights " +
                  quote_path(weights) + " were saved from (" + one_line(stored.name) + "); leave --model out to use theirs");
    stored.recipe = given.recipe;
    return stored;
  }
  // A built-in model's recipe (augmentation, batch) goes with it.
  if (!named && std::find(names.begin(), names.end(), stored.name) != names.end()) {
    const Model b = builtin_model(stored.name);
    if (same_model(b, stored)) stored.recipe = b.recipe;
  }
  return stored;
}

void add_common_flags(CLI::App* cmd, CommonArgs& a) { add_common(cmd, a); }
void check_common(const CommonArgs& a) { validate_common(a); }
TrainTest load_data_for(const CommonArgs& a, int64_t limit_train) { return load_data_named(a, limit_train); }

namespace {
// eval's flags that would do nothing in its run are refused: a precision other than int8 for a
// quantized file (it runs int8), and the calibration flags unless fp32 weights are quantized here.
// stored: the run's weights are quantized (a quantized file, a QDQ model run int8).
void check_eval_flags(const EvalArgs& a, const CLI::App& cmd, bool stored, bool int8) {
  const std::string file = quote_path(a.weights.empty() ? a.common.model : a.weights);
  const std::string& p = a.common.precision;
  if (p != "fp32" && p != "bf16" && p != "int8") bad("--precision", "fp32, bf16 or int8", "'" + clip_text(p) + "'");
  if (stored && cmd.count("--precision") && (p == "fp32" || p == "bf16"))
    throw Error("--precision " + p + ": " + file + " is quantized (int8) and runs int8 only (--precision " + p +
                " takes fp32 weights)");
  for (const char* f : {"--calib", "--calib-samples", "--weight-bits"})
    if (cmd.count(f) && (stored || !int8))
      throw Error(std::string(f) + ": only with --precision int8 of fp32 weights (they are quantized here); " +
                  (stored ? file + " is already quantized" : "this eval runs " + one_line(p)));
}
}  // namespace

int run_eval(EvalArgs a, const CLI::App& cmd) {
  const bool onnx = a.weights.empty() && is_onnx_path(a.common.model);
  // A QDQ --model FILE.onnx runs int8 unless --precision names another precision.
  const bool qdq = onnx && (a.common.precision == "int8" || !cmd.count("--precision")) && is_quantized_onnx(a.common.model);
  const bool stored = qdq || (!a.weights.empty() && is_quantized_file(a.weights));
  check_eval_flags(a, cmd, stored, stored || a.common.precision == "int8");
  if (stored || a.common.precision == "int8") {
    if (a.weights.empty() && !qdq)
      throw Error("--precision int8: needs --weights (fp32 weights to quantize, or quantized ones) or a QDQ --model FILE.onnx");
    return run_eval_int8(a, cmd);
  }
  if (a.weights.empty() && !onnx) throw Error("--weights: required (or --model FILE.onnx, which holds its weights)");
  if (onnx && cmd.count("--act")) throw Error("--act: an ONNX model keeps its own activations");
  std::optional<OnnxImport> imported;
  if (onnx) imported = import_model_file(a.common.model);
  Model model = onnx ? imported->model : weights_model(a.common, a.weights, cmd.count("--model") || cmd.count("--act"));
  if (!cmd.count("--batch-size")) a.common.batch_size = model.recipe.batch_size;
  validate_common(a.common);
  TrainTest data = load_data_named(a.common, 1);  // the training set is not used: read as little as possible
  a.common.batch_size = clamp_batch(a.common.batch_size, data.test.count, "test set");
  bool augmenting = false;
  const Augment aug = augment_of(a.common, model, data.test.channels, &augmenting);
  // Weights without their model's description (PyTorch's): the model built for the data, as train builds it.
  if (!onnx) fit_model_to_data(model, data.test, augmenting ? &aug : nullptr, weights_fix_model(a.weights), a.weights);
  if (!onnx) check_weights_fit(model, a.weights);  // before a plan of a (maybe edited) model is built
  PlanOptions po;
  po.batch = a.common.batch_size;
  po.threads = a.common.threads;
  po.isa = a.common.isa;
  po.layout = a.common.layout;
  po.precision = parse_precision(a.common.precision, "--precision");
  po.denormals = parse_denormals(a.common.denormals, "--denormals");
  po.optimizer.kind = OptimizerKind::SGD;
  Plan plan(model, po);
  if (plan.bf16_emulated()) note_emulated_bf16(plan.isa_name());
  if (onnx) load_onnx_weights(plan, *imported);
  else load_weights(plan, a.weights);
  set_normalisation(plan, aug);
  check_dataset_fits(plan, data.test, "test set", augmenting ? &aug : nullptr);
  const EvalResult r = naming_oom(
      [&] { return "model " + one_line(model.name) + ": out of memory while evaluating (batch " + std::to_string(po.batch) +
                   ", beside the plan's " + mib(plan.arena_bytes()) + " and the test set's images)"; },
      [&] { return evaluate(plan, data.test, augmenting ? &aug : nullptr); });
  std::printf("ember eval: model %s, weights %s: test accuracy %.2f%% (loss %.4f) on %lld images\n",
              model.name.c_str(), one_line(onnx ? a.common.model : a.weights).c_str(), 100 * r.accuracy, r.loss, (long long)r.count);
  if (!std::isfinite(r.loss)) throw Error("eval: the loss is " + std::to_string(r.loss) + ": the model's outputs are not finite");
  return 0;
}

}  // namespace ember::cli
