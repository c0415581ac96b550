// `ember profile`: trains on a limited number of samples (default 1000, as the original
// profiling build did) after a few warm-up steps, with the profiler on, and prints the per-layer
// table; --trace, --json, --folded and --flame write the Chrome trace, profile.json, folded
// stacks and an SVG flame graph of ember's own spans. An int8 plan (--weights Wq, --precision
// int8) is profiled over its forwards, in the same table.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <memory>

#include "commands.h"
#include "ember/quant.h"
#include "ember/error.h"
#include "ember_support/files.h"
#include "ember/io.h"
#include "ember/profile.h"
#include "ember_support/bench.h"
#include "ember_support/report.h"

namespace ember::cli {

void add_profile_flags(CLI::App* cmd, ProfileArgs& a) {
  add_train_flags(cmd, a.train);
  cmd->add_option("--limit-samples", a.limit_samples, "Training samples to profile")->capture_default_str();
  cmd->add_option("--warmup-steps", a.warmup_steps, "Unprofiled steps first (page faults, caches)")
      ->capture_default_str();
  cmd->add_option("--trace", a.trace, "Write a Chrome trace-event FILE.json (Perfetto, chrome://tracing)");
  cmd->add_option("--json", a.json, "Write the table as FILE.json (a run directory's profile.json)");
  cmd->add_option("--folded", a.folded, "Write folded stacks of ember's spans (flame graphs) to FILE");
  cmd->add_option("--flame", a.flame, "Write an SVG flame graph of ember's spans to FILE.svg (no perf needed)");
}

namespace {
// Mean wall time of a training step over `data` without a profiler, for the overhead figure.
double plain_step_ms(Plan& plan, const Dataset& tr, const Dataset& te, TrainConfig cfg) {
  cfg.on_step = nullptr;
  const TrainResult r = train(plan, tr, te, cfg, nullptr);
  const int64_t steps = (tr.count + plan.batch() - 1) / plan.batch() * r.epochs_run;
  return steps ? 1e3 * r.seconds / double(steps) : 0;
}

// The profiler's own cost (two clock reads per span, the spans per step of this run) beside the
// step's time without it.
void print_profiler_cost(const Profiler& prof, const ProfileSummary& s, double off_ms) {
  int64_t spans = 0;
  for (int th = 0; th < prof.threads(); ++th)
    for (int ph = 0; ph < kPhases; ++ph)
      for (int u = -1; u < prof.units(); ++u) spans += prof.total(th, Phase(ph), u).calls;
  const int64_t reps = 200000, c0 = prof.now_ns();
  int64_t sink = 0;
  for (int64_t i = 0; i < reps; ++i) sink += prof.now_ns();
  const double clock_ns = double(prof.now_ns() - c0) / double(reps) + double(sink & 0);
  const double per_step_us = s.steps ? double(spans) / double(s.steps) * 2 * clock_ns / 1e3 : 0;
  std::printf("\nprofiler cost: %.1f spans per step x 2 clock reads of %.0f ns = %.2f us per step "
              "(%.3f%% of the step); step without profiler %.3f ms, with %.3f ms\n",
              s.steps ? double(spans) / double(s.steps) : 0.0, clock_ns, per_step_us,
              s.step_ms > 0 ? 100 * per_step_us / 1e3 / s.step_ms : 0.0, off_ms, s.step_ms);
}

// --trace, --json, --folded and --flame, of either kind of plan.
void write_profile_outputs(const ProfileArgs& a, const ProfiledPlan& plan, const Profiler& prof, const ProfileSummary& s) {
  if (!a.trace.empty()) {
    write_text_file(a.trace, chrome_trace_json(plan, prof), "--trace");
    std::printf("trace written to %s (open in https://ui.perfetto.dev or chrome://tracing)\n", a.trace.c_str());
  }
  if (!a.json.empty()) write_text_file(a.json, profile_json(s), "--json");
  if (!a.folded.empty()) write_text_file(a.folded, folded_stacks(plan, prof), "--folded");
  if (!a.flame.empty()) {
    report::FlameGraphOptions fo;
    fo.unit = "us";
    fo.title = "ember profile: " + plan.model + ", batch " + std::to_string(plan.batch) + ", " + std::to_string(plan.threads) +
               " threads (microseconds)";
    const auto stacks = report::parse_folded(folded_stacks(plan, prof), "profile spans");
    write_text_file(a.flame, report::flame_graph_svg(stacks, fo), "--flame");
    std::printf("flame graph written to %s\n", a.flame.c_str());
  }
}

// The int8 plan's weights: a quantized --weights file as it is, or fp32 weights (--weights, else
// the model's initial ones of --seed) quantized here, minmax-calibrated on up to 512 of the
// profiled images (as ember quantize would). data: the profiled images.
QuantizedWeights int8_weights(TrainArgs& t, const CLI::App& cmd, int64_t limit, TrainTest* data) {
  const bool stored = !t.weights.empty() && is_quantized_file(t.weights);
  // Flags of a training run, which an int8 forward would ignore; with a quantized file, those
  // that make the model and its weights too.
  for (const char* f : {"--epochs", "--lr", "--optimizer", "--schedule", "--lr-min", "--t-max", "--step-size", "--gamma", "--l2",
                        "--weight-decay", "--momentum", "--no-shuffle", "--metrics", "--show-batch", "--init", "--early-stop-tol",
                        "--limit-train", "--qat", "--qat-freeze-after", "--qat-weight-bits", "--qat-calib-samples", "--save-dtype",
                        "--profile", "--layout"})
    if (cmd.count(f)) throw Error(std::string(f) + ": not used when profiling an int8 plan (its forwards only)");
  for (const char* f : {"--model", "--act", "--seed"})
    if (stored && cmd.count(f)) throw Error(std::string(f) + ": " + quote_path(t.weights) + " is quantized and holds its model and weights");
  if (stored) {
    if (cmd.count("--precision") && t.common.precision != "int8")
      throw Error("--precision " + one_line(t.common.precision) + ": " + quote_path(t.weights) +
                  " is quantized (int8) and profiles int8 only");
    QuantizedWeights q = load_quantized(t.weights);
    if (!cmd.count("--batch-size")) t.common.batch_size = q.model.recipe.batch_size;
    check_common(t.common);
    *data = load_data_for(t.common, limit);
    return q;
  }
  const Model model = t.weights.empty() ? model_of(t.common) : weights_model(t.common, t.weights, cmd.count("--model") || cmd.count("--act"));
  if (!cmd.count("--batch-size")) t.common.batch_size = model.recipe.batch_size;
  check_common(t.common);
  *data = load_data_for(t.common, limit);
  QuantOptionsCli o;
  o.samples = int(std::min<int64_t>(limit, 512));
  if (model.qat.on()) o.weight_bits = model.qat.weight_bits;  // as it was trained (ember eval does the same)
  return quantize_for(t.common, model, t.weights, data->train, o, t.seed);
}

// `ember profile` of an int8 plan (a quantized --weights file, or --precision int8): its forward
// over --limit-samples training images after --warmup-steps, in the fp32 profile's table, trace
// and files: a step is a batch's gather (data) and forward (one row per unit: int8 steps, the fp32
// steps between them and the conversions).
int run_profile_int8(ProfileArgs& a, const CLI::App& cmd) {
  TrainArgs& t = a.train;
  TrainTest data;
  const QuantizedWeights q = int8_weights(t, cmd, a.limit_samples, &data);
  const int B = clamp_batch(t.common.batch_size, data.train.count, "training set");
  Plan plan(q, int8_plan_options(B, t.common.threads, t.common.isa, parse_denormals(t.common.denormals, "--denormals")));
  bool augmenting = false;
  const Augment aug = augment_of(t.common, q.model, data.train.channels, &augmenting);
  std::vector<double> scale, shift;
  input_affine(aug, &scale, &shift);
  plan.set_input_affine(scale, shift);
  if (data.train.rows != q.model.in_h || data.train.cols != q.model.in_w || data.train.channels != q.model.in_c)
    throw Error("--data: profiling int8 needs images of the model's input size");
  if (data.train.streamed())
    throw Error("--data: profiling int8 reads the images from memory, and this set is streamed from disk (raise --cache-mb)");
  std::vector<int64_t> idx(static_cast<size_t>(B));
  auto step = [&](int64_t s0, Profiler* p) {  // one batch from sample s0: gather, forward
    const int n = int(std::min<int64_t>(B, data.train.count - s0));
    timed(p, Phase::step, -1, [&] {
      timed(p, Phase::data, -1, [&] {
        for (int i = 0; i < n; ++i) idx[size_t(i)] = s0 + i;
        plan.gather_u8(data.train.images.data(), data.train.labels.data(), idx.data(), n);
      });
      plan.forward(n);
    });
    if (p) p->end_step(n);
  };
  for (int w = 0; w < a.warmup_steps; ++w) step(0, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t batches = 0;
  for (int64_t s0 = 0; s0 < data.train.count; s0 += B) step(s0, nullptr), ++batches;
  const double off_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(batches);
  const ProfiledPlan pp = profiled_plan(plan);
  Profiler prof(plan.threads(), int(pp.units.size()));
  plan.set_profiler(&prof);
  for (int64_t s0 = 0; s0 < data.train.count; s0 += B) step(s0, &prof);
  plan.set_profiler(nullptr);
  const ProfileSummary s = summarize_profile(pp, prof, measure_machine(plan.isa_name()).peak_gflops_1t * plan.threads());
  std::printf("%s", format_profile(s).c_str());
  std::printf("int8 kernels: %s\n", int8_path_name(t.common.isa));
  print_profiler_cost(prof, s, off_ms);
  write_profile_outputs(a, pp, prof, s);
  return 0;
}
}  // namespace

int run_profile(ProfileArgs a, const CLI::App& cmd) {
  TrainArgs& t = a.train;
  if (a.limit_samples < 1 || a.limit_samples > (int64_t(1) << 40))
    throw Error("--limit-samples: expected an integer in [1, 1099511627776], found " + std::to_string(a.limit_samples));
  if (a.warmup_steps < 0 || a.warmup_steps > 100000)
    throw Error("--warmup-steps: expected an integer in [0, 100000], found " + std::to_string(a.warmup_steps));
  for (const auto& [flag, path] : {std::pair<const char*, std::string*>{"--trace", &a.trace},
                                   {"--json", &a.json}, {"--folded", &a.folded}, {"--flame", &a.flame}})
    if (!path->empty()) *path = check_output(*path, flag);  // before the long work
  check_distinct({{"--trace", a.trace}, {"--json", a.json}, {"--folded", a.folded}, {"--flame", a.flame}},
                 run_inputs(t.common, t.weights, ""));
  for (const char* flag : {"--resume", "--checkpoint-every", "--checkpoint-dir", "--keep-checkpoints", "--save", "--out",
                           "--targets", "--test-targets"})
    if (cmd.count(flag)) throw Error(std::string(flag) + ": not available in ember profile (use ember train)");
  if (t.common.precision == "int8" || (!t.weights.empty() && is_quantized_file(t.weights))) return run_profile_int8(a, cmd);
  TrainSetup su = make_train_setup(t, cmd);
  su.cfg.evaluate = false;
  if (!cmd.count("--epochs")) su.cfg.epochs = 1;
  if (t.limit_train == 0 || t.limit_train > a.limit_samples) t.limit_train = a.limit_samples;  // decode only these
  TrainTest data = load_train_data(t);
  su.plan.batch = t.common.batch_size = clamp_batch(t.common.batch_size, data.train.count, "training set");
  bool augmenting = false;
  const Augment aug = augment_of(t.common, su.model, data.train.channels, &augmenting);
  fit_model_to_data(su.model, data.train, augmenting ? &aug : nullptr, !t.weights.empty() && weights_fix_model(t.weights), t.weights);
  if (augmenting) su.cfg.augment = &aug;
  if (data.train.streamed()) su.cfg.loader_threads = t.common.threads;
  if (!t.weights.empty()) check_weights_fit(su.model, t.weights);  // before the plan is built
  Plan plan(su.model, su.plan);
  if (plan.bf16_emulated()) note_emulated_bf16(plan.isa_name());
  set_normalisation(plan, aug);
  check_dataset_fits(plan, data.train, "training set", su.cfg.augment);
  Dataset& train_set = data.train;  // already at most --limit-samples: the loader decoded no more
  auto init = [&] {
    plan.init_params(t.seed);
    if (!t.weights.empty()) load_weights(plan, t.weights);
  };
  init();
  if (a.warmup_steps > 0) {
    Dataset warm = train_set;
    const int64_t n = std::min<int64_t>(warm.count, int64_t(a.warmup_steps) * plan.batch());
    warm.count = n;
    TrainConfig wc = su.cfg;
    wc.epochs = 1;
    train(plan, warm, data.test, wc, nullptr);
  }
  const double off_ms = plain_step_ms(plan, train_set, data.test, su.cfg);
  init();
  Profiler prof(plan.threads(), int(plan.units().size()));
  plan.set_profiler(&prof);
  train(plan, train_set, data.test, su.cfg, nullptr);
  plan.set_profiler(nullptr);

  const ProfileSummary s = summarize_profile(plan, prof, peak_for(plan));
  std::printf("%s", format_profile(s).c_str());
  print_profiler_cost(prof, s, off_ms);
  write_profile_outputs(a, profiled_plan(plan), prof, s);
  return 0;
}

}  // namespace ember::cli
