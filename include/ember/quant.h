// int8 inference (docs/int8.md): post-training quantization calibrated on data, quantized weight
// files (safetensors: I8 weights beside their scales and zero points, the model and the calibration
// in the metadata), and the int8 plan that runs them (u8 activations, int32 sums, fp32 where an op
// has no int8 kernel).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/loader.h"
#include "ember/model.h"
#include "ember/plan.h"
#include "ember/profile.h"
#include "ember/train.h"

namespace ember {

// How an activation's range is chosen from the values the calibration data produced.
// minmax: the smallest and largest value; percentile: the central `percentile` % of a histogram
// (the tails clipped); mse: the clipping range of the histogram whose quantization error is least.
enum class CalibMethod { minmax, percentile, mse };
const char* calib_method_name(CalibMethod m);  // "minmax", "percentile", "mse"
// Parses a name; anything else throws Error starting "WHAT: ".
CalibMethod parse_calib_method(const std::string& text, const std::string& what);

// A tensor's 8-bit quantization (activations, per tensor): real = (q - zero_point) * scale, q u8.
struct QParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

// A Conv2d's or Linear's quantized parameters: weights int8, symmetric per output channel (q in
// [-127, 127], real = q * w_scale[k], zero points 0), the bias int32 in units of
// in_scale * w_scale[k] (in_scale: the scale of the layer's input tensor).
struct QuantLayer {
  std::string prefix;             // the node's parameter prefix: "0", "stem.0"
  std::vector<int> shape;         // PyTorch layout: Conv2d [K, C/G, R, S], Linear [K, C]
  std::vector<int8_t> w;
  std::vector<float> w_scale;     // [K]
  bool has_bias = true;           // the fp32 layer's; the file then holds PREFIX.bias as I32
  std::vector<int32_t> bias;      // [K] (zeros where the layer has none)
};

struct QuantCalib {
  CalibMethod method = CalibMethod::minmax;
  int samples = 0;                // calibration inputs seen
  double percentile = 99.99;      // percentile only
  std::string data;               // where they came from (a directory, "qat", ...)
  int weight_bits = 8;            // 8: weights in [-127, 127]; 7: [-63, 63] (the avx2 VPMADDUBSW GEMM's range)
  int qat_ranges = 0;             // tensors whose range quantization-aware training learnt (Model::qat)
};

struct QuantizedWeights {
  Model model;
  std::vector<QuantLayer> layers;           // in node order
  // Per tensor: "input" (the model's input) and each node's parameter prefix (its output).
  std::map<std::string, QParams> acts;
  // The model's parameters (model_params order, names and shapes), fp32: the quantized layers'
  // weights and biases dequantized, every other parameter (LayerNorm, ...) as the fp32 file had it.
  std::vector<ParamInfo> params;
  std::vector<float> values;
  QuantCalib calib;
  const QuantLayer* layer(const std::string& prefix) const;  // null: not quantized
};

struct QuantOptions {
  CalibMethod method = CalibMethod::minmax;
  double percentile = 99.99;
  std::string data;               // recorded in the file
  int threads = 1;
  Denormals denormals = Denormals::flush;  // the calibration runs' floating-point mode (PlanOptions)
  std::string isa;                // the fp32 kernel set of the calibration runs
  // 8, or 7: weights in [-63, 63] per channel (scale max|w| / 63), so that on AVX2 without VNNI every
  // quantized layer runs the VPMADDUBSW GEMM (exact for |w| <= 64; docs/int8.md) at a small cost in
  // accuracy. VNNI sets run either at the same speed.
  int weight_bits = 8;
};

// Quantizes a model's fp32 parameters (values: model_params order) after running it over n
// calibration inputs x [n, C, H, W] (already normalised as training fed them) and observing
// every tensor. Conv2d and Linear layers get int8 weights; every tensor gets activation QParams.
// A model trained with Model::qat: its fakequant nodes go, and their learnt ranges replace the
// calibrated QParams of their tensors (opt.weight_bits must be the model's qat.weight_bits).
QuantizedWeights quantize_model(const Model& model, const std::vector<float>& values, const float* x, int n,
                                const QuantOptions& opt);

// The quantized weight file: safetensors with PREFIX.weight (I8, PyTorch shape),
// PREFIX.weight_scale (F32 [K]), PREFIX.weight_zero_point (I8 [K], zeros), PREFIX.bias (I32 [K]),
// NAME.output_scale (F32 []) and NAME.output_zero_point (U8 []) per tensor ("input.scale" and
// "input.zero_point" for the model's input), every other parameter F32 under its own name; the
// model (metadata "model") and the calibration ("ember_quant": JSON) in __metadata__. Written atomically.
void save_quantized(const QuantizedWeights& q, const std::string& path);
// Reads and checks everything (scales finite and > 0, zero points in range, shapes against the
// model, no tensor both quantized and fp32, nothing missing or extra): Error naming the tensor.
QuantizedWeights load_quantized(const std::string& path);
QuantizedWeights load_quantized_from_memory(const uint8_t* bytes, size_t n, const std::string& name);
// Whether a weights file is a quantized one (its metadata has "ember_quant"); reads the header only.
bool is_quantized_file(const std::string& path);

// The int8 path this CPU runs for an fp32 kernel set (empty: EMBER_ISA when set, else the best): "avx512_vnni", "avx_vnni",
// "avx2" or "scalar" (EMBER_ISA=avx2 gives avx2, as on an AVX2-only CPU).
const char* int8_path_name(const std::string& isa);

// What a QDQ export (ember/onnx_quant.h) writes: ember's int8 arithmetic as ONNX can state it, so
// that ONNX Runtime rounds where and as ember does. q keeps activation entries only at the tensors
// the int8 plan holds in u8, with the QParams it rounds them by (a ReLU's, max-pool's or flatten's
// are its input's), not on the fp32 outputs it gives LayerNorm nor inside what it fuses; and each
// BatchNorm2d the plan folds into a Conv2d's requantization is folded into that layer as the plan
// computes it: per output channel k (BN y = a x + c), int8 weights times sign(a_k), scale
// s_w[k] |a_k|, int32 bias the plan's round((B_k + c_k / a_k) / (s_in s_w[k])) times sign(a_k).
// A layer with a weight of -128 where some a_k < 0 (a QDQ import's) keeps its BatchNorm2d (its
// bias alone in the plan's units). Other biases are in units of the input scale the plan uses; a
// quantized layer the plan runs fp32 (a grouped, non-depthwise conv) is written fp32, as it runs.
// The view is for export only: its layers no longer match its model's BatchNorm2d nodes.
struct QdqExport {
  QuantizedWeights q;
  std::map<std::string, std::string> folded_bn;  // Conv2d prefix -> the BatchNorm2d prefix it carries
};

// A quantized model runs as an int8 Plan (ember/plan.h: Plan(QuantizedWeights, PlanOptions)), an
// inference plan with these options (isa: as PlanOptions::isa, an int8 set's name included).
PlanOptions int8_plan_options(int batch, int threads = 1, const std::string& isa = "", Denormals denormals = Denormals::flush);
// What its lowering decides, without building one:
// per model node "int8", "int8 (fused)", or "fp32" (a dequantize before, a quantize after where needed);
std::vector<std::string> int8_node_paths(const QuantizedWeights& q);
// the tensors it holds in u8 (QuantizedWeights::acts names): where its arithmetic rounds an
// activation to 8 bits (a QDQ export puts its Q/DQ pairs there and nowhere else);
std::vector<std::string> int8_u8_tensors(const QuantizedWeights& q);
// those of them with QParams of their own (not a ReLU's, max-pool's or flatten's, which keep
// their input's): the tensors quantization-aware training fake-quantizes (Model::qat);
std::vector<std::string> int8_qat_tensors(const QuantizedWeights& q);
// one line per step, in order: what runs, in which arithmetic, with the int8 kernels of isa
// (as PlanOptions::isa; their 7-bit weight path named where it is taken).
std::string int8_summary(const QuantizedWeights& q, const std::string& isa = "");

QdqExport qdq_export_view(const QuantizedWeights& q);

// The first n images of `data` (their order shuffled by `seed`) as the model's fp32 inputs
// [n, C, H, W]: u8 / 255, or u8 * scale[c] + shift[c] with a per-channel affine (input_affine):
// what quantize_model calibrates on. The images must have the model's input size.
std::vector<float> calibration_inputs(const Dataset& data, int n, uint64_t seed, const std::vector<double>& scale,
                                      const std::vector<double>& shift);

}  // namespace ember
