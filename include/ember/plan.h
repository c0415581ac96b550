// A plan is a model compiled for a batch size, a data type and a device: shapes inferred and
// checked, every activation, gradient, parameter and optimizer-state buffer placed once in one
// arena, kernels chosen from the kernel table. Steps (forward, loss, backward, optimizer) then
// allocate nothing. Batches smaller than the compiled size (an epoch's last) run as they are.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/model.h"
#include "ember/profiler.h"

namespace ember {

// A plan's element type: f32, or f64 (the scalar reference kernels: gradient checks). u8 is an
// activation's type inside an int8 plan (its quantized tensors), never a plan's.
enum class DType { f32, f64, u8 };

// The arithmetic of the matrix products (convolutions through the GEMM, Linear): fp32, or bf16
// products summed in fp32 (operands rounded to nearest even as the GEMM packs them; on CPUs with
// AVX512_BF16, VDPBF16PS at twice the fp32 FMA rate). Everything else (LayerNorm, activations,
// the loss, reductions, the optimizer, the fp32 master weights and their state) stays fp32.
// int8: an inference plan of a quantized model (Plan(QuantizedWeights, ...), ember/quant.h).
enum class Precision { fp32, bf16, int8 };
const char* precision_name(Precision p);  // "fp32", "bf16", "int8"
// "fp32" or "bf16"; anything else throws Error starting "WHAT: ".
Precision parse_precision(const std::string& text, const std::string& what);

// Denormal numbers (|x| < 2^-126) in the kernels' arithmetic. flush (the default): flush-to-zero
// and denormals-are-zero on every thread while it runs a plan's kernels (the pool's workers, the
// calling thread for the length of each call, its own mode restored on return), as TensorFlow,
// ONNX Runtime's set_denormal_as_zero and torch.set_flush_denormal(True) do: Intel cores take a
// ~100-cycle assist per denormal, and a trained network's small gradients and optimizer state go
// denormal (the README's run slowed 13x after its first epoch). keep: exact IEEE arithmetic.
enum class Denormals { flush, keep };
const char* denormals_name(Denormals d);  // "flush", "keep"
// "flush" or "keep"; anything else throws Error starting "WHAT: ".
Denormals parse_denormals(const std::string& text, const std::string& what);

enum class OptimizerKind { SGD, Momentum, Nesterov, Adam, AdamW };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;   // Adam, AdamW
  double momentum = 0.9;                           // Momentum, Nesterov
  double l2 = 0.0;             // coupled L2: g += l2 * w, weights only (not biases)
  double weight_decay = 0.0;   // decoupled: w -= lr * wd * w, weights only
  // Whether L2 and weight decay also apply to norm scales (ConvNeXt's AdamW decays every weight);
  // false: conv and linear weights and layer scales only (the ResNets' "weights only").
  bool decay_norms = true;
};

struct PlanOptions {
  int batch = 64;
  DType dtype = DType::f32;
  // bf16: f32 plans only. A bf16 plan also keeps every parameter rounded to bf16 (half the
  // parameters' bytes): the GEMMs read the weights from it; each optimizer update rewrites it in
  // the same pass (Adam's kernel writes both); init_params and the non-const param_data() mark it
  // stale, and the next forward or backward rounds it again from the fp32 masters.
  Precision precision = Precision::fp32;
  // "scalar" | "avx2" | "avx512" | "amx"; empty: EMBER_ISA when set, else the best the CPU has. An
  // int8 plan takes that set's int8 path, or an int8 set by name ("avx_vnni", "avx512_vnni") with
  // the best fp32 set.
  std::string isa;
  // "nchw" | "nhwc" | "auto" (empty: auto): nhwc runs every node that can channel-last, with
  // reorders at the edges (docs/design.md, the layout pass); auto picks nchw today. bf16 plans
  // run nchw. Parameters, checkpoints and outputs keep PyTorch's NCHW either way.
  std::string layout;
  int threads = 1;
  OptimizerConfig optimizer;    // decides how much optimizer state the arena holds
  bool fuse = true;             // run Conv2d(stride 1) -> ReLU -> MaxPool2d(2) as one fused unit, and
                                // in inference plans Conv2d -> BatchNorm2d as one (the BN folded in)
  bool split_background = true; // f32: a first fused unit whose output a sparse Linear reads hands
                                // it the windows with an all-zero input patch apart (ops::Background)
  size_t max_arena_bytes = size_t(8) << 30;  // a plan needing more throws (checked before allocating)
  // false: an inference plan: no gradients, no optimizer state, and activation buffers reused
  // once nothing reads them (loss(n, true), backward and the optimizer then throw).
  bool training = true;
  uint64_t seed = 1;            // stochastic depth's masks: drawn from (seed, optimizer step, unit)
  Denormals denormals = Denormals::flush;
};

// What a parameter is for (the op table says, per op): the optimizer's weight decay and L2 apply
// to weights, norm scales and layer scales (the rule of ember's recipes since the seed CNN: a
// node's first parameter), never to biases or norm shifts; running statistics are not trained.
enum class ParamRole { weight, bias, norm_scale, norm_shift, layer_scale, running_stat };
const char* param_role_name(ParamRole r);  // "weight", "bias", "norm_scale", ...
bool param_decays(ParamRole r);            // L2 and weight decay apply
bool param_trained(ParamRole r);           // the optimizer updates it

struct ParamInfo {
  std::string name;             // PyTorch state_dict names: "0.weight" (unnamed node 0), "stem.0.bias"
  std::vector<int> shape;       // PyTorch layout: Linear [K, C], Conv2d [K, C/G, R, S]
  size_t offset = 0;            // element offset inside the flat parameter block
  size_t size = 0;              // elements
  ParamRole role = ParamRole::weight;
  bool is_weight = false;       // param_decays(role): L2 and weight decay apply
  int fan_in = 0, fan_out = 0;
  int layer = 0;                // the model layer it belongs to
  bool constant = false;        // initialised to `value` (LayerNorm 1 and 0, layer scale), not randomly
  double value = 0;
};

struct LayerInfo {
  std::string kind;
  std::string name;                       // the node's name, or empty
  std::vector<int> in_shape, out_shape;  // per sample [C, H, W] or [D]
  size_t params = 0;
  double flops_fwd = 0;                   // per sample
};

// An execution unit: one model layer, or several run as one fused unit.
struct UnitInfo {
  std::string name;              // model layer kinds joined by '+', then the layers: "linear (4)"
  int first_layer = 0, last_layer = 0;
  double flops_fwd = 0;          // per sample, a multiply-add counted as 2
  double flops_bwd = 0;          // per sample: the weight and input gradients this plan computes
  // The arithmetic of the unit's products in forward: bf16 in a bf16 plan where the unit runs
  // bf16 kernels (convolutions, Linear); fp32 elsewhere (normalisation, activations, pools) and in
  // fp32 plans. precision_bwd: the same for its backward (the seed CNN's fused first convolution
  // multiplies bf16 in forward, fp32 in its weight gradient).
  Precision precision = Precision::fp32;
  Precision precision_bwd = Precision::fp32;
  // The algorithm chosen for this plan's batch and threads where the unit has a choice (a
  // convolution: "im2col-gemm", "direct-s1", "depthwise", ...; "" elsewhere), and its scratch.
  std::string algorithm;
  size_t workspace_bytes = 0;
  // The layouts of its (first) input and its output: "nchw", "nhwc" or "flat" (PlanOptions::layout;
  // a "reorder" unit converts between the two).
  std::string layout_in, layout_out;
  // The unit's descriptor (`ember info --model M --json`, issue 56): the model ops it runs
  // ("conv2d", "batchnorm2d"), the element type its products read ("f32", "f64", "bf16", "u8"),
  // the weight format its calls read ("kcrs" as stored, "gemm-a-panels", "gemm-b-panels",
  // "dense-map", "int8-panels"; "" without a weight), the post-ops applied in its store ("bias",
  // "batchnorm2d-fold", "relu", "add", "requantize", ...), and the weight bytes one call of the
  // plan's batch packs or reorders (0 where it reads a weight packed once per parameter change).
  std::vector<std::string> ops, post_ops;
  std::string dtype, weight_format;
  size_t weight_bytes_packed_per_call = 0;
};

struct BufferInfo {
  std::string name;              // "parameters", "activation 1 (conv2d+relu+maxpool2d (0-2) output)", ...
  size_t bytes = 0;
};

// The parameters (names, PyTorch shapes, sizes; no offsets) a plan of `model` would have, from
// shape inference alone: nothing is allocated, so a file can be checked against a model before
// a plan of it is built.
std::vector<ParamInfo> model_params(const Model& model);
// The model's per-sample output dims (Plan::output_dims without a plan): [D] or [C, H, W].
std::vector<int> model_output_dims(const Model& model);

struct QuantizedWeights;  // ember/quant.h

class Plan {
 public:
  Plan(const Model& model, const PlanOptions& options);
  // An int8 inference plan of a quantized model (options.training false, dtype f32; precision is
  // set to int8): Conv2d, Linear, ReLU, max-pool and flatten run on u8 NHWC activations with int32
  // sums, the requantization carrying the bias, a BatchNorm2d, the residual add and the ReLU; every
  // other node runs fp32 with quantize, dequantize and reorder units where a tensor changes form.
  // Input and output stay fp32 NCHW.
  Plan(const QuantizedWeights& q, const PlanOptions& options);
  struct Impl;  // opaque: defined in src/nn/plan_impl.h
  explicit Plan(std::unique_ptr<Impl> impl);  // internal: plan_impl::compile makes one
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;

  int batch() const;
  int threads() const;
  DType dtype() const;
  Precision precision() const;
  const char* isa_name() const;
  // A bf16 plan on a kernel set without native bf16 products (no AVX512_BF16, or not the avx512
  // set): the same rounded operands and fp32 sums, computed by widening to fp32, slower than fp32.
  bool bf16_emulated() const;
  const Model& model() const;
  const PlanOptions& options() const;
  size_t arena_bytes() const;
  const std::vector<ParamInfo>& params() const;
  const std::vector<LayerInfo>& layers() const;
  size_t param_count() const;   // elements in the flat parameter block
  const std::vector<UnitInfo>& units() const;
  std::vector<BufferInfo> buffers() const;  // every buffer in the arena, largest first

  // Attaches a profiler (sized for threads() tracks and units().size() units) to the steps and
  // the thread pool; null detaches. Without one, steps pay one pointer test per unit.
  void set_profiler(Profiler* p);
  Profiler* profiler() const;
  // Floating-point operations per sample of a forward pass, or of a training step (forward,
  // weight gradients, and the input gradients this plan computes), counting a multiply-add as 2.
  double flops_per_sample(bool training) const;

  // Initialises all parameters from `seed` (each tensor its own PCG32 stream); biases zero;
  // clears optimizer state and its step count.
  void init_params(uint64_t seed);

  // Input and labels of the current batch: [batch, C, H, W] of dtype, and [batch].
  void* input();
  int32_t* labels();
  // MSE and L1 (loss_takes_targets): the batch's targets, [batch, output_dims()] of dtype; other
  // losses throw. gather_u8 writes one-hot targets of its labels when the output is [classes];
  // one_hot_targets(n) does so for labels written through labels() (throws for another output).
  void* targets();
  void one_hot_targets(int n);
  // Gathers n images by index from u8 [count, H*W*C] data into the input, scaled by 1/255, and
  // their labels. Indices must be < count (checked by the caller).
  // With set_input_affine, channel c is u8 * scale[c] + shift[c] instead (per-channel mean/std
  // normalisation folded in: scale = 1 / (255 std), shift = -mean / std).
  void gather_u8(const uint8_t* images, const uint8_t* labels, const int64_t* index, int n);
  // Sets (or, with empty vectors, clears) that per-channel affine; one value per input channel.
  void set_input_affine(const std::vector<double>& scale, const std::vector<double>& shift);

  void forward(int n);
  // Mean loss over the first n samples; with grad, also d(loss)/d(output) for backward, divided
  // by mean_over (0: n). Data-parallel training runs a batch of M samples as blocks and passes M,
  // so that the blocks' gradients sum to the whole batch's mean.
  double loss(int n, bool grad, int mean_over = 0);
  // Where this batch starts inside a larger one that is run in blocks: stochastic depth then
  // draws sample i's mask as that batch's sample offset + i (0, the default: a whole batch).
  void set_sample_offset(int64_t offset);
  // Number of the first n samples whose arg-max output equals the label (has_class_scores()).
  int correct(int n) const;
  // Called by backward each time some parameters' gradients are final (nothing later in this
  // backward pass writes them): params()[first, first + count), once per unit with parameters,
  // in backward order, on the calling thread. backward_step's Adam overlap runs through it, and
  // data-parallel training puts its gradient all-reduce there.
  using GradsFinal = void (*)(void* ctx, int first, int count);
  void backward(int n, GradsFinal on_final = nullptr, void* ctx = nullptr);
  // One optimizer update of every parameter with learning rate lr (f32 plans only). Returns
  // the index into params() of the first parameter whose gradient held NaN or Inf, or -1: the
  // update reads every gradient anyway, so this check costs nothing (the update is applied).
  int optimizer_step(double lr);
  // backward(n) then optimizer_step(lr), same results bit for bit, with the Adam updates of every
  // layer but the first overlapped with the first layer's backward pass (memory-bound updates
  // interleaved with compute-bound chunks). Without a profiler attached; with one, or for SGD,
  // exactly backward + optimizer_step. Returns what optimizer_step returns.
  int backward_step(int n, double lr);
  // optimizer_step(lr) in parts, for data-parallel training's buckets: update_elements applies
  // the update optimizer_step would make to the elements [begin, end) of the flat parameter block
  // only (same bits), with the step count it would use; finish_step() then counts the step. Every
  // element once between two finish_step() calls (each rank of a sharded run updates its share).
  // Returns as optimizer_step does (or -1).
  int update_elements(double lr, size_t begin, size_t end);
  void finish_step();

  // Inference from here on: copies each Linear weight (fp32-precision f32 plans) transposed to [in, out], so that
  // a batch-1 forward reads only the weight rows its non-zero inputs select (after ReLU and
  // max-pool most are zero: mnist-cnn's fc1 then reads about a quarter of its 3.2 MB). Batches of
  // 2 or more give the same bits as before (the same values up to summation order where the
  // unfrozen plan's background link splits: a frozen plan does not); their sparse-input column
  // ranges read the copy rather than transposing the weight each call. The parameters must not change while frozen: init_params,
  // optimizer_step, backward_step and the non-const param_data() (load_weights uses it) throw;
  // writes through a pointer taken before freeze() are not seen. thaw() drops the copies.
  // Batch-1 outputs differ from the unfrozen plan's by summation order only (a few ulp), and an
  // input that is exactly 0 contributes nothing, even against an Inf weight.
  void freeze();
  void thaw();
  bool frozen() const;
  // bf16 plans: while on, each backward pass counts the output gradients of the units whose
  // products are bf16 (UnitInfo::precision) that rounding to bf16 flushes to zero (non-zero, below
  // 2^-126: bf16 keeps fp32's exponent range, so only fp32's subnormals flush, and no loss scaling
  // is needed while this stays 0), and how many values it checked. One more read of those
  // gradients: training counts one step in kFlushCheckEvery (train.h). Off by default.
  struct FlushCount {
    int64_t flushed = 0, checked = 0;
  };
  void set_flush_counting(bool on);
  FlushCount flush_count() const;  // since the plan was built or reset_flush_count()
  void reset_flush_count();
  // Optimizer state, for checkpoints: state_count() flat blocks shaped like the parameters
  // (Adam: PyTorch's "exp_avg" and "exp_avg_sq"; momentum: "momentum_buffer"; SGD: none), and
  // the number of updates done (Adam's bias correction uses it).
  int state_count() const;
  const char* state_name(int s) const;
  void* state_data(int s);
  int64_t optimizer_steps() const;
  void set_optimizer_steps(int64_t t);

  // Non-finite detection (NaN or Inf) before an update: the index into params() of the first
  // parameter whose gradient holds one, or -1. One pass, split over the pool like the optimizer
  // (each thread checks the range it updates next), ~1-2 % of a mnist-cnn step (f32 plans only).
  int first_nonfinite_grad();
  // The unit (index into units()) whose output over the first n samples is the first to hold a
  // non-finite value, or -1: names the layer where a NaN loss came from. Runs forward(n) again,
  // checking each output as it is written (plans keep an activation only while something reads
  // it, and a ReLU may overwrite its input), so call it with the input of the failing forward.
  int first_nonfinite_output(int n);
  // Train mode (a training plan's default) draws stochastic-depth masks, and BatchNorm uses the batch's statistics,
  // moving its running ones; eval mode (an inference plan's default; evaluate()): identity, running statistics.
  void set_train_mode(bool on);
  bool train_mode() const;

  // The flat parameter block and its gradient (dtype elements, param_count() of them). The
  // non-const param_data() throws on a frozen plan; the const one reads. Each call of the
  // non-const one and init_params count as a parameter change: copies derived from the parameters
  // (a bf16 plan's weight copy, an inference plan's folded conv2d+batchnorm2d weights) are made
  // again before the next pass. Write through the pointer of a fresh call, not one kept across passes.
  void* param_data();
  const void* param_data() const;
  void* grad_data();
  const void* output() const;   // [batch, output_dims()] of dtype
  // The per-sample output's dims: [D] for a vector (class scores, an embedding), [C, H, W] for an
  // image (a feature map).
  std::vector<int> output_dims() const;
  // Whether the output is [classes] (Model::num_classes): what labels, correct() and the
  // cross-entropies need.
  bool has_class_scores() const;

  std::string summary() const;  // one line per layer: kind, shapes, parameters

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
