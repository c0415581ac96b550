// `ember bench bitnet` (the exact-loss-delta benchmark table next to is8ac/bnn's figures, the
// bit-conv kernel alone, the brute-force oracle for contrast; --json: one line per row) and
// `ember bitnet train` (greedy layer-wise training on MNIST-format data, accuracy per epoch).
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "bitnet_cmd.h"
#include "commands.h"
#include "ember/bitnet.h"
#include "ember/error.h"
#include "ember/version.h"
#include "ember_support/json.h"

namespace ember::cli {

namespace {
// bitnet::TrainOptions / BenchConfig fields the library's errors name, and their flags.
constexpr FieldFlags kBitnetFields = {
    {"layers", "--layers"}, {"channels", "--channels"}, {"input_bits", "--input-bits"},
    {"position_bits", "--position-bits"}, {"blur_radii", "--blur"}, {"segments", "--segments"},
    {"epochs", "--epochs"}, {"batch", "--batch-size"}, {"steps", "--steps"}, {"updates", "--updates"},
    {"head_updates", "--head-updates"}, {"refit_examples", "--refit-examples"}, {"refit_margin", "--refit-margin"},
    {"refit_rounds", "--refit-rounds"}, {"conv_margin", "--conv-margin"}, {"shift_copies", "--shift-copies"},
    {"blocks", "--blocks"}, {"join_refit_margin", "--join-refit-margin"}, {"threshold", "--threshold"},
    {"layer_pool", "--layer-pool"}, {"limit_train", "--limit-train"}, {"limit_test", "--limit-test"},
    {"threads", "--threads"}, {"isa", "--isa"}};
}  // namespace

namespace {

bitnet::WeightKind parse_kind(const std::string& k) {
  if (k == "binary") return bitnet::WeightKind::binary;
  if (k == "ternary") return bitnet::WeightKind::ternary;
  throw Error("--kind: expected binary or ternary, found '" + k + "'");
}
void check_list(const char* flag, const std::vector<int>& v, int lo, int hi) {
  if (v.empty()) throw Error(std::string(flag) + ": expected at least one value");
  for (int x : v)
    if (x < lo || x > hi)
      throw Error(std::string(flag) + ": expected integers in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "], found " + std::to_string(x));
}
std::string cpu_name() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  std::string name = "unknown CPU";
  if (!f) return name;
  char line[512];
  while (std::fgets(line, sizeof line, f))
    if (std::string(line).rfind("model name", 0) == 0) {
      std::string l(line);
      name = l.substr(l.find(':') + 2);
      if (!name.empty() && name.back() == '\n') name.pop_back();
      break;
    }
  std::fclose(f);
  return name;
}

// is8ac/bnn's published figures for 1024 input bits x 1024 channels, 2x2 segments, binary
// weights (16-core machine): ms per example.
const char* is8ac_figure(const bitnet::BenchConfig& c) {
  if (c.input_bits != 1024 || c.channels != 1024 || c.segments != 2 || c.kind != bitnet::WeightKind::binary) return "";
  if (c.threads == 1) return "1612 (1 thread)";
  return c.over_examples ? "170.7 (16 ex. on 16 thr.)" : "320 (16 threads)";
}

}  // namespace

void add_bitnet_bench_flags(CLI::App* cmd, BitnetBenchArgs& a) {
  cmd->add_option("--input-bits", a.input_bits, "Input bits per pixel (comma-separated list)")->delimiter(',')->capture_default_str();
  cmd->add_option("--channels", a.channels, "Output channels (list)")->delimiter(',')->capture_default_str();
  cmd->add_option("--segments", a.segments, "Segments per side, 1..8 (list; is8ac/bnn has 1..4)")->delimiter(',')->capture_default_str();
  cmd->add_option("--threads", a.threads, "Thread counts (list); above 1 both splits are timed")->delimiter(',')->capture_default_str();
  cmd->add_option("--kind", a.kind, "Weights: binary or ternary")->capture_default_str();
  cmd->add_option("--mode", a.mode, "With threads > 1: channels (one example), examples (one per thread) or both")->capture_default_str();
  cmd->add_option("--min-time", a.min_time, "Seconds to time each configuration")->capture_default_str();
  cmd->add_option("--isa", a.isa, "Kernel set: scalar, avx2, avx512 or amx (default: the best the CPU has)");
  cmd->add_flag("--no-oracle", a.no_oracle, "Skip the brute-force oracle line");
  cmd->add_flag("--json", a.json, "One JSON object per line instead of the table");
}

int run_bitnet_bench(const BitnetBenchArgs& a) {
  check_list("--input-bits", a.input_bits, 1, 4096);
  check_list("--channels", a.channels, 1, 4096);
  check_list("--segments", a.segments, 1, bitnet::kMaxS);
  check_list("--threads", a.threads, 1, 256);
  if (!(a.min_time > 0 && a.min_time <= 3600)) throw Error("--min-time: expected a number of seconds in (0, 3600]");
  if (a.mode != "channels" && a.mode != "examples" && a.mode != "both")
    throw Error("--mode: expected channels, examples or both, found '" + a.mode + "'");
  const bitnet::WeightKind kind = parse_kind(a.kind);
  const std::string kname = naming_flags(kBitnetFields, [&] { return bitnet::kernel_name(a.isa); });  // checks --isa
  const std::string cpu = cpu_name();
  const unsigned hw = std::thread::hardware_concurrency();
  const int kb = a.input_bits.back(), kc = a.channels.back();
  const double macs = bitnet::bench_conv_bitmacs(kb, kc, a.isa, a.min_time);
  if (a.json) {
    std::printf("%s\n", json_text(nlohmann::json({{"kernel", "bit_conv"}, {"isa", kname}, {"cpu", cpu}, {"hw_threads", hw},
                                        {"input_bits", kb}, {"channels", kc}, {"threads", 1},
                                        {"bit_macs_per_s", macs}})).c_str());
  } else {
    std::printf("ember %s bench bitnet on %s (%u hardware threads), bit kernels %s, %s weights\n", kVersion,
                cpu.c_str(), hw, kname.c_str(), bitnet::kind_name(kind));
    std::printf("exact loss deltas of one random 32x32 example: 3x3 valid conv (30x30), SxS segments, 10 classes\n");
    std::printf("bit-conv kernel alone (%d bits x %d channels, 1 thread): %.3f T bit-MAC/s\n", kb, kc, macs * 1e-12);
  }
  if (!a.no_oracle) {
    bitnet::LayerShape s;
    s.H = s.W = 8, s.B = 16, s.O = 8, s.S = 2, s.kind = kind;
    const double ms = bitnet::bench_oracle_ms(s);
    const double weights = double(s.conv_weights() + s.head_weights());
    if (a.json)
      std::printf("%s\n", json_text(nlohmann::json({{"oracle", true}, {"H", s.H}, {"W", s.W}, {"input_bits", s.B},
                                          {"channels", s.O}, {"segments", s.S}, {"threads", 1},
                                          {"ms_per_example", ms}, {"ns_per_weight", ms * 1e6 / weights}})
                              ).c_str());
    else
      std::printf("brute-force oracle, 8x8 image, 16 bits, 8 channels, 2x2 segments: %.1f ms per example "
                  "(%.0f ns per weight)\n", ms, ms * 1e6 / weights);
  }
  if (!a.json) {
    std::printf("\n%10s %8s %8s %7s %-9s %12s %10s %8s  %s\n", "input_bits", "channels", "segments", "threads",
                "split", "ms/example", "ns/weight", "live_ch", "is8ac/bnn ms/example");
    std::fflush(stdout);
  }
  for (int b : a.input_bits)
    for (int c : a.channels)
      for (int sg : a.segments)
        for (int t : a.threads)
          for (int split = 0; split < 2; ++split) {
            const bool ex = split == 1;
            if (t == 1 && ex) continue;
            if (t > 1 && ((a.mode == "channels" && ex) || (a.mode == "examples" && !ex))) continue;
            bitnet::BenchConfig cfg;
            cfg.input_bits = b, cfg.channels = c, cfg.segments = sg, cfg.threads = t, cfg.kind = kind;
            cfg.over_examples = ex, cfg.min_seconds = a.min_time, cfg.isa = a.isa;
            const bitnet::BenchRow r = naming_flags(kBitnetFields, [&] { return bitnet::bench_deltas(cfg); });
            const char* mode = t == 1 ? "-" : ex ? "examples" : "channels";
            if (a.json) {
              std::printf("%s\n", json_text(nlohmann::json({{"input_bits", b}, {"channels", c}, {"segments", sg},
                                                  {"threads", t}, {"split", mode}, {"kind", bitnet::kind_name(kind)},
                                                  {"isa", kname}, {"ms_per_example", r.ms_per_example},
                                                  {"ns_per_weight", r.ns_per_weight},
                                                  {"live_channels", r.live_channels}, {"examples", r.examples}})
                                      ).c_str());
            } else {
              std::printf("%10d %8d %8d %7d %-9s %12.3f %10.3f %7.0f%%  %s\n", b, c, sg, t, mode, r.ms_per_example,
                          r.ns_per_weight, 100 * r.live_channels, is8ac_figure(cfg));
            }
            std::fflush(stdout);
          }
  return 0;
}

void add_bitnet_train_flags(CLI::App* cmd, BitnetTrainArgs& a) {
  a.threads = int(std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1);
  cmd->add_option("--data", a.data, "Directory with the four MNIST-format files (default: Fashion-MNIST in " +
                                        std::string(kDefaultDataDir) + ")");
  cmd->add_option("--layers", a.o.layers, "Layers trained greedily, one after the other")->capture_default_str();
  cmd->add_option("--channels", a.o.channels, "Output channels per layer (list; the last repeats)")->delimiter(',')->capture_default_str();
  cmd->add_option("--input-bits", a.o.input_bits, "Thermometer bits per input pixel")->capture_default_str();
  cmd->add_option("--position-bits", a.o.position_bits, "Fixed random position-code bits appended to each layer's input")
      ->capture_default_str();
  cmd->add_option("--blur", a.o.blur_radii,
                  "Box-blur radii (list): layer 1's pixels also get the thermometer code of each blurred image")
      ->delimiter(',');
  cmd->add_flag("--deskew", a.o.deskew, "Deskew every image (shear to upright, centre of mass to the centre) before encoding");
  cmd->add_flag("--mirror", a.o.mirror, "Train on every training image and its mirror image (left-right)");
  cmd->add_flag("--space-to-depth", a.o.space_to_depth,
                "Layer 1's pixels become 2x2 blocks of pixels (half the size, 4x the bits), so its 3x3 window sees 6x6 pixels");
  cmd->add_option("--shift-copies", a.o.shift_copies,
                  "Also train on this many copies of every training image moved by one pixel (0..4 directions)")
      ->capture_default_str();
  cmd->add_option("--layer-pool", a.layer_pool,
                  "2x2 pooling of a layer's output bits before the next layer: none, any (OR) or majority (>= 2 of 4)")
      ->capture_default_str();
  cmd->add_option("--segments", a.o.segments, "Segments per side of the pooling, 1..8")->capture_default_str();
  cmd->add_option("--kind", a.kind, "Weights: binary or ternary")->capture_default_str();
  cmd->add_option("--epochs", a.o.epochs, "Epochs per layer")->capture_default_str();
  cmd->add_option("--batch-size", a.o.batch, "Mini-batch of the first epoch (doubles every epoch)")->capture_default_str();
  cmd->add_option("--steps", a.o.steps, "Update steps per epoch")->capture_default_str();
  cmd->add_option("--updates", a.o.updates, "Most weight changes per step (per conv and per head)")->capture_default_str();
  cmd->add_option("--head-updates", a.o.head_updates,
                  "0: head changes follow the conv rule (one per class); N: the N best head changes per step")
      ->capture_default_str();
  cmd->add_option("--head-refit", a.head_refit,
                  "Refit the head by exact coordinate descent on frozen features: none, end (after each "
                  "layer's last epoch) or epoch (before the first and after every epoch)")
      ->capture_default_str();
  cmd->add_option("--refit-examples", a.o.refit_examples, "Training images the refits before and between epochs use (0: all); the refit after a layer's last "
                  "epoch uses all")
      ->capture_default_str();
  cmd->add_flag("--freeze-head", a.o.freeze_head,
               "Conv steps leave the head unchanged; it changes only in refits (with --head-refit epoch)");
  cmd->add_option("--refit-margin", a.o.refit_margin,
                  "0: the head refit minimises the squared error; M > 0: the multiclass hinge loss with margin M "
                  "(for accuracy); a list gives each layer its own (the last repeats)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--conv-margin", a.o.conv_margin,
                  "0: conv steps follow the squared-error deltas; M > 0: the exact deltas of the multiclass hinge "
                  "loss with margin M (use with --freeze-head --head-refit epoch); a list: per layer")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--refit-rounds", a.o.refit_rounds, "Most rounds of the hinge refit")->capture_default_str();
  cmd->add_option("--blocks", a.o.blocks,
                  "Train each layer as this many independent blocks of --channels channels, then join them into "
                  "one layer whose head is their committee (the blocks' heads side by side)")
      ->capture_default_str();
  cmd->add_option("--join-refit-margin", a.o.join_refit_margin,
                  "0: keep the committee head of the joined blocks; M > 0: refit it by the hinge loss with margin M on "
                  "all training images")
      ->capture_default_str();
  cmd->add_option("--threshold", a.o.threshold, "Drop per-example deltas with |delta| <= this")->capture_default_str();
  cmd->add_option("--limit-train", a.o.limit_train, "Use only the first N training images (0: all)")->capture_default_str();
  cmd->add_option("--limit-test", a.o.limit_test, "Use only the first N test images (0: all)")->capture_default_str();
  cmd->add_option("--threads", a.threads, "Worker threads")->capture_default_str();
  cmd->add_option("--isa", a.o.isa, "Kernel set: scalar, avx2, avx512 or amx (default: the best the CPU has)");
  cmd->add_option("--seed", a.o.seed, "Random seed")->capture_default_str();
  cmd->add_flag("--json", a.json, "One JSON object per epoch instead of the table");
}

int run_bitnet_train(BitnetTrainArgs a) {
  a.o.kind = parse_kind(a.kind);
  if (a.head_refit == "none") a.o.head_refit = bitnet::TrainOptions::Refit::none;
  else if (a.head_refit == "end") a.o.head_refit = bitnet::TrainOptions::Refit::end;
  else if (a.head_refit == "epoch") a.o.head_refit = bitnet::TrainOptions::Refit::epoch;
  else throw Error("--head-refit: expected none, end or epoch, found '" + a.head_refit + "'");
  if (a.layer_pool == "none") a.o.layer_pool = bitnet::LayerPool::none;
  else if (a.layer_pool == "any") a.o.layer_pool = bitnet::LayerPool::any;
  else if (a.layer_pool == "majority") a.o.layer_pool = bitnet::LayerPool::majority;
  else throw Error("--layer-pool: expected none, any or majority, found '" + a.layer_pool + "'");
  a.o.threads = a.threads;
  const std::string dir = a.data.empty() ? kDefaultDataDir : a.data;
  const TrainTest data = load_mnist_dir(dir);
  bool header = !a.json;  // printed with the first epoch, after every option was checked
  naming_flags(kBitnetFields, [&] { return bitnet::train(a.o, data, [&](const bitnet::EpochReport& r) {
    if (header)
      std::printf("%5s %5s %5s %8s %6s %8s %14s %8s %14s %9s %8s\n", "layer", "block", "epoch", "batch", "steps", "changes",
                  "train_loss", "refit", "refit_loss", "test_acc", "seconds");
    header = false;
    if (a.json)
      std::printf("%s\n", json_text(nlohmann::json({{"layer", r.layer}, {"block", r.block}, {"joined", r.joined}, {"epoch", r.epoch}, {"batch", r.batch},
                                          {"steps", r.steps}, {"changes", r.changes}, {"train_loss", r.train_loss},
                                          {"refit_changes", r.refit_changes}, {"refit_loss", r.refit_loss},
                                          {"refit_rounds", r.refit_rounds}, {"refit_seconds", r.refit_seconds},
                                          {"test_accuracy", r.test_accuracy}, {"seconds", r.seconds}})
                              ).c_str());
    else
      std::printf("%5d %5s %5d %8d %6d %8d %14.1f %8lld %14.1f %8.2f%% %8.1f\n", r.layer,
                  (r.block > 0 ? std::to_string(r.block) : r.joined > 1 ? "1.." + std::to_string(r.joined) : "-").c_str(), r.epoch, r.batch, r.steps,
                  r.changes, r.train_loss, (long long)r.refit_changes, r.refit_loss, 100 * r.test_accuracy, r.seconds);
    std::fflush(stdout);
  }); });
  return 0;
}

}  // namespace ember::cli
