// `ember quantize W.safetensors --data DIR --calib-samples N --calib minmax|percentile|mse -o Wq`:
// post-training quantization (docs/int8.md) of saved fp32 weights, calibrated on the first N
// training images (shuffled), written atomically as a quantized weight file; and the int8 paths
// of `ember eval` (quantized weights, or --precision int8 quantizing on the fly) and `ember info`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "ember/error.h"
#include "ember/io.h"
#include "ember/onnx_quant.h"
#include "ember/quant.h"
#include "ember_support/files.h"

namespace ember::cli {

void add_quantize_flags(CLI::App* cmd, QuantizeArgs& a) {
  cmd->add_option("weights", a.weights, "fp32 weights (safetensors from `ember train --save`)")->required();
  cmd->add_option("-o,--output", a.output, "The quantized weight file to write (safetensors)")->required();
  add_common_flags(cmd, a.common);
  cmd->add_option("--calib-samples", a.calib_samples, "Training images the activation ranges are calibrated on")
      ->capture_default_str();
  cmd->add_option("--calib", a.calib, "minmax, percentile or mse: how each activation's range is chosen")
      ->capture_default_str();
  cmd->add_option("--percentile", a.percentile, "--calib percentile: the central share of values kept, in %")
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Shuffles the training images the calibration samples are taken from")
      ->capture_default_str()
      ->check(seed_check());
  cmd->add_option("--weight-bits", a.weight_bits,
                  "8, or 7: weights in [-63, 63], which AVX2 CPUs without VNNI run with VPMADDUBSW (faster; docs/int8.md)")
      ->capture_default_str();
}

namespace {
// The fp32 weights of `model` from `path` (model_params order); path "": its initial weights of
// `init_seed`.
std::vector<float> fp32_values(const Model& model, const std::string& path, uint64_t init_seed = 1) {
  if (!path.empty()) check_weights_fit(model, path);
  PlanOptions po;
  po.batch = 1, po.threads = 1, po.training = false;
  Plan plan(model, po);
  if (path.empty()) plan.init_params(init_seed);
  else load_weights(plan, path);
  const float* v = static_cast<const float*>(std::as_const(plan).param_data());
  return std::vector<float>(v, v + plan.param_count());
}
}  // namespace

QuantizedWeights quantize_for(const CommonArgs& c, const Model& model, const std::string& weights, const Dataset& train,
                              const QuantOptionsCli& o, uint64_t init_seed) {
  check_integer("--calib-samples", o.samples, 1, 1 << 20);
  if (train.rows != model.in_h || train.cols != model.in_w || train.channels != model.in_c)
    throw Error("--data: calibration needs images of the model's input [" + std::to_string(model.in_c) + ", " +
                std::to_string(model.in_h) + ", " + std::to_string(model.in_w) + "], the training set's are [" +
                std::to_string(train.channels) + ", " + std::to_string(train.rows) + ", " + std::to_string(train.cols) + "]");
  bool active = false;
  const Augment aug = augment_of(c, model, train.channels, &active);
  std::vector<double> scale, shift;
  input_affine(aug, &scale, &shift);
  const int n = int(std::min<int64_t>(o.samples, train.count));
  const std::vector<float> x = calibration_inputs(train, n, o.seed, scale, shift);
  QuantOptions qo;
  qo.method = parse_calib_method(o.calib, "--calib");
  qo.percentile = o.percentile;
  if (!(o.percentile > 50 && o.percentile <= 100)) throw Error("--percentile: expected a number in (50, 100], found " + std::to_string(o.percentile));
  qo.data = c.data.empty() ? "default data set" : c.data;
  if (o.weight_bits != 7 && o.weight_bits != 8) throw Error("--weight-bits: expected 7 or 8, found " + std::to_string(o.weight_bits));
  qo.weight_bits = o.weight_bits;
  qo.threads = c.threads, qo.isa = c.isa;
  qo.denormals = parse_denormals(c.denormals, "--denormals");
  return quantize_model(model, fp32_values(model, weights, init_seed), x.data(), n, qo);
}

Model qat_model(const TrainArgs& a, bool freeze_given, const Model& model, const Dataset& train, int64_t steps,
                QuantizedWeights* calibrated) {
  if (a.weights.empty()) throw Error("--qat: needs --weights W.safetensors (the trained fp32 model to fine-tune)");
  if (a.common.precision != "fp32" && !a.common.precision.empty())
    throw Error("--qat: runs fp32 plans with fake quantization; --precision " + a.common.precision + " does not apply");
  if (model.qat.on()) throw Error(a.weights + ": already trained with --qat (its model has \"qat\"); drop --qat to go on");
  check_integer("--qat-calib-samples", a.qat_calib_samples, 1, 1 << 20);  // --qat-freeze-after is checked as parsed
  if (a.qat_weight_bits != 7 && a.qat_weight_bits != 8)
    throw Error("--qat-weight-bits: expected 7 or 8, found " + std::to_string(a.qat_weight_bits));
  *calibrated = quantize_for(a.common, model, a.weights, train, {a.qat_calib_samples, "minmax", 99.99, a.seed, a.qat_weight_bits});
  Model m = model;
  m.qat.tensors = int8_qat_tensors(*calibrated);
  m.qat.weight_bits = a.qat_weight_bits;
  m.qat.freeze_after = freeze_given ? a.qat_freeze_after : steps / 2;
  if (!m.qat.on()) throw Error("--qat: the model has no tensor its int8 plan rounds to 8 bits (no Conv2d or Linear runs int8)");
  return m;
}

void load_qat_start(Plan& plan, const std::string& weights, const QuantizedWeights& calibrated) {
  const std::vector<float> v = fp32_values(calibrated.model, weights);
  std::map<std::string, const ParamInfo*> fp32;
  for (const ParamInfo& p : calibrated.params) fp32[p.name] = &p;  // the fp32 model's names and offsets
  float* dst = static_cast<float*>(plan.param_data());
  const std::string fq = ".fake_quant.";
  for (const ParamInfo& p : plan.params()) {
    const auto it = fp32.find(p.name);
    if (it != fp32.end()) {
      std::copy(v.begin() + long(it->second->offset), v.begin() + long(it->second->offset + p.size), dst + p.offset);
      continue;
    }
    const size_t at = p.name.rfind(fq);  // TENSOR.fake_quant.range [2] or .observed []
    if (at == std::string::npos) throw Error("internal: --qat: parameter " + p.name + " is neither the model's nor a range");
    const QParams& q = calibrated.acts.at(p.name.substr(0, at));
    if (p.name.compare(at + fq.size(), std::string::npos, "range") == 0)
      dst[p.offset] = float(-q.zero_point) * q.scale, dst[p.offset + 1] = float(255 - q.zero_point) * q.scale;
    else
      dst[p.offset] = 1;  // observed: the calibration counts as the first observation
  }
}

namespace {
// The shared flags of a run that quantize does not make, refused rather than ignored.
void check_quantize_flags(const CLI::App& cmd) {
  const std::pair<const char*, const char*> unused[] = {
      {"--precision", "the file it writes is int8 (eval runs it; eval --precision int8 quantizes fp32 weights itself)"},
      {"--layout", "the file it writes holds no layout (eval takes --layout)"},
      {"--batch-size", "the file it writes holds no batch size (eval takes --batch-size)"},
      {"--limit-test", "it reads no test images (--calib-samples sets the training images it calibrates on)"},
      {"--flip", "the calibration images are not augmented (--normalize applies)"},
      {"--crop", "the calibration images are not augmented (--normalize applies)"},
      {"--pad", "the calibration images are not augmented (--normalize applies)"},
      {"--resized-crop", "the calibration images are not augmented (--normalize applies)"}};
  for (const auto& [flag, why] : unused)
    if (cmd.count(flag)) throw Error(std::string(flag) + ": does not apply to quantize: " + why);
}
}  // namespace

int run_quantize(QuantizeArgs a, const CLI::App& cmd) {
  check_quantize_flags(cmd);
  check_integer("--calib-samples", a.calib_samples, 1, 1 << 20);  // before it limits the data set's reading
  check_output(a.output, "--output");
  check_distinct({{"--output", a.output}}, run_inputs(a.common, a.weights, ""));
  if (is_quantized_file(a.weights)) throw Error(a.weights + ": already quantized (its metadata has ember_quant)");
  const Model model = weights_model(a.common, a.weights, cmd.count("--model") || cmd.count("--act"));
  if (model.qat.on() && !cmd.count("--weight-bits")) a.weight_bits = model.qat.weight_bits;  // as it was trained
  if (model.qat.on() && a.weight_bits != model.qat.weight_bits)
    throw Error("--weight-bits: " + a.weights + " was trained (--qat) with " + std::to_string(model.qat.weight_bits) +
                "-bit weights; quantize it with those");
  check_common(a.common);
  const TrainTest data = load_data_for(a.common, a.calib_samples);
  const QuantizedWeights q = quantize_for(a.common, model, a.weights, data.train,
                                          {a.calib_samples, a.calib, a.percentile, a.seed, a.weight_bits});
  save_quantized(q, a.output);
  const std::string learnt = q.calib.qat_ranges > 0 ? std::to_string(q.calib.qat_ranges) + " ranges learnt by QAT, the others " : "";
  std::printf("ember quantize: model %s, weights %s -> %s: %zu layers int8, activations %scalibrated (%s) on %d images of %s; "
              "%s -> %s\n", model.name.c_str(), one_line(a.weights).c_str(), one_line(a.output).c_str(), q.layers.size(),
              learnt.c_str(), calib_method_name(q.calib.method), q.calib.samples, one_line(q.calib.data).c_str(),
              mib(std::filesystem::file_size(a.weights)).c_str(), mib(std::filesystem::file_size(a.output)).c_str());
  return 0;
}

int run_eval_int8(EvalArgs& a, const CLI::App& cmd) {
  const bool from_onnx = a.weights.empty();  // a QDQ --model FILE.onnx (run_eval checked it)
  const bool stored = from_onnx || is_quantized_file(a.weights);
  QuantizedWeights q;
  TrainTest data;
  if (stored) {
    q = from_onnx ? import_onnx_quantized(a.common.model) : load_quantized(a.weights);
    if (!cmd.count("--batch-size")) a.common.batch_size = q.model.recipe.batch_size;
    check_common(a.common);
    data = load_data_for(a.common, 1);
  } else {  // --precision int8 with fp32 weights: quantized here, calibrated on the training set
    const Model model = weights_model(a.common, a.weights, cmd.count("--model") || cmd.count("--act"));
    if (model.qat.on() && !cmd.count("--weight-bits")) a.calib.weight_bits = model.qat.weight_bits;  // as it was trained
    if (!cmd.count("--batch-size")) a.common.batch_size = model.recipe.batch_size;
    check_common(a.common);
    check_integer("--calib-samples", a.calib.samples, 1, 1 << 20);  // before it limits the data set's reading
    data = load_data_for(a.common, a.calib.samples);
    q = quantize_for(a.common, model, a.weights, data.train, a.calib);
  }
  a.common.batch_size = clamp_batch(a.common.batch_size, data.test.count, "test set");
  bool augmenting = false;
  const Augment aug = augment_of(a.common, q.model, data.test.channels, &augmenting);
  Plan plan(q, int8_plan_options(a.common.batch_size, a.common.threads, a.common.isa, parse_denormals(a.common.denormals, "--denormals")));
  std::vector<double> scale, shift;
  input_affine(aug, &scale, &shift);
  plan.set_input_affine(scale, shift);
  if (data.test.rows != q.model.in_h || data.test.cols != q.model.in_w || data.test.channels != q.model.in_c)
    if (!augmenting) throw Error("--data: the test images do not have the model's input size");
  const EvalResult r = evaluate(plan, data.test, augmenting ? &aug : nullptr);
  std::printf("ember eval: model %s, weights %s (int8, %s kernels%s): test accuracy %.2f%% (loss %.4f) on %lld images\n",
              q.model.name.c_str(), one_line(from_onnx ? a.common.model : a.weights).c_str(), int8_path_name(a.common.isa),
              from_onnx ? ", QDQ ONNX" : stored ? "" : ", quantized on the fly",
              100 * r.accuracy, r.loss, (long long)r.count);
  if (!std::isfinite(r.loss)) throw Error("eval: the loss is " + std::to_string(r.loss) + ": the model's outputs are not finite");
  return 0;
}

void print_quantized(const std::string& path) {
  const QuantizedWeights q = load_quantized(path);
  std::printf("\nquantized weights %s: model %s, calibration %s on %d samples of %s", one_line(path).c_str(),
              q.model.name.c_str(), calib_method_name(q.calib.method), q.calib.samples, one_line(q.calib.data).c_str());
  if (q.calib.method == CalibMethod::percentile) std::printf(" (%.4g %%)", q.calib.percentile);
  if (q.calib.qat_ranges > 0) std::printf(", %d ranges learnt by quantization-aware training", q.calib.qat_ranges);
  std::printf(", %d-bit weights", q.calib.weight_bits);
  std::printf("\n  input: scale %.6g zero point %d\n", double(q.acts.at("input").scale), q.acts.at("input").zero_point);
  for (const QuantLayer& l : q.layers) {
    float lo = l.w_scale[0], hi = l.w_scale[0];
    for (float s : l.w_scale) lo = std::min(lo, s), hi = std::max(hi, s);
    const QParams& o = q.acts.at(l.prefix);
    std::printf("  %-24s int8 weights %zu channels, scales %.4g .. %.4g; output scale %.6g zero point %d\n",
                l.prefix.c_str(), l.w_scale.size(), double(lo), double(hi), double(o.scale), o.zero_point);
  }
  // The int8 plan's steps: what runs in int8, in fp32, and the quantize / dequantize between.
  std::printf("int8 plan (%s kernels), in order:\n%s", int8_path_name(""), int8_summary(q).c_str());
}

QuantizedWeights initial_quantized(const Model& model) {
  PlanOptions po;
  po.batch = 1, po.training = false;
  Plan p(model, po);
  p.init_params(1);
  const float* v = static_cast<const float*>(std::as_const(p).param_data());
  std::vector<float> x(size_t(2) * model.in_c * model.in_h * model.in_w);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) >> 8 & 0xffff) / 65536.0f;
  QuantOptions o;
  o.weight_bits = model.qat.on() ? model.qat.weight_bits : 8;
  return quantize_model(model, std::vector<float>(v, v + p.param_count()), x.data(), 2, o);
}

void print_int8_plan_of(const Model& model) {
  try {
    const std::string summary = int8_summary(initial_quantized(model));
    std::printf("\nint8 plan once quantized (`ember quantize`; %s kernels), in order:\n%s", int8_path_name(""), summary.c_str());
  } catch (const Error& e) {
    std::printf("\nint8 plan: none (%s)\n", e.what());
  }
}

}  // namespace ember::cli
