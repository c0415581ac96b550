// A model is a runtime object: an input shape, a graph of layers (each reads the previous one
// unless it names its inputs) and a loss, built with the fluent builder below or read from a JSON
// model description. No recompilation to change a model. Built-in models carry their recipe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember {

// Every layer type a model can use: one an op file (src/nn/ops/, `ember info --ops`), in the
// order of the files' names. The list is generated at configure time (ember/layer_kinds.inc);
// model files, the CLI and Python name the ops by their JSON type ("conv2d", "gelu-tanh", ...).
enum class LayerKind {
#define EMBER_LAYER_KIND(k) k,
#include "ember/layer_kinds.inc"
#undef EMBER_LAYER_KIND
};
constexpr int kLayerKinds = 0
#define EMBER_LAYER_KIND(k) +1
#include "ember/layer_kinds.inc"
#undef EMBER_LAYER_KIND
    ;
// Losses: softmax cross-entropy on class scores (logits), cross-entropy on probabilities (after
// a softmax layer), both against class labels and needing an output of [classes]; MSE and L1 on
// any output against dense targets of its shape (Plan::targets), or one-hot labels when the output
// is [classes].
enum class LossKind { SoftmaxCrossEntropy, CrossEntropy, MSE, L1 };
// Whether the loss reads dense targets (MSE, L1) rather than class labels.
bool loss_takes_targets(LossKind k);
// Kaiming: He normal, std = sqrt(2 / fan_in). Xavier: Glorot uniform, bound sqrt(6/(fan_in+fan_out)).
// Torch: PyTorch's default for Linear/Conv2d weights, uniform with bound 1/sqrt(fan_in).
// TruncNormal: torchvision's ConvNeXt, normal with std 0.02 (trunc_normal_ to [-2, 2]).
// Biases always start at zero.
enum class Init { Kaiming, Xavier, Torch, TruncNormal };

const char* layer_kind_name(LayerKind k);
const char* loss_kind_name(LossKind k);
const char* init_name(Init i);

struct LayerSpec {
  LayerKind kind = LayerKind::ReLU;
  // The node's name (optional; letters, digits, '_', '.', '-'): its parameters are NAME.weight and
  // NAME.bias, else INDEX.weight as in a PyTorch nn.Sequential. Inputs: names of earlier layers or
  // "input" (the model's input); empty reads the previous layer. Add and Concat take 2 to 8.
  std::string name;
  std::vector<std::string> inputs;
  int out = 0;                        // Conv2d: K out-channels; Linear: out features
  int kernel_h = 1, kernel_w = 1;     // Conv2d, pools: R x S
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;           // before (top, left); after too unless pad_h_end, pad_w_end
  int pad_h_end = -1, pad_w_end = -1; // pools: padding after (bottom, right), as ONNX's pads; -1: pad_h, pad_w
  int groups = 1;                     // Conv2d: C and K must both divide by it
  bool bias = true;                   // Conv2d, Linear; LayerNorm(2d): affine weight and bias
  bool same = false;                  // Conv2d: PyTorch's padding='same' (stride 1, odd kernel)
  bool count_include_pad = true;      // AvgPool2d: padding counted in the divisor (PyTorch's default)
  bool over_channels = false;         // Linear: over the channels at each position of [C, H, W]
                                      // (torchvision's channels-last Linear), weight [K, C]
  int norm_dims = 0;                  // LayerNorm: trailing per-sample dims normalised (0: all)
  double eps = 1e-5;                  // LayerNorm, LayerNorm2d, BatchNorm2d
  double momentum = 0.1;              // BatchNorm2d: the running statistics' update factor
  double scale_init = 1e-6;           // LayerScale: every scale's initial value
  double drop_prob = 0;               // DropPath: the chance a sample's input is dropped (0 <= p < 1)
  std::optional<Init> init;           // overrides the model's default init
};

// The training recipe a model is meant for; the CLI's flags override each field.
struct Recipe {
  std::string optimizer = "adam";     // sgd | momentum | adam | adamw
  double lr = 1e-3;
  int batch_size = 64;
  int epochs = 10;
  std::string schedule = "cosine";    // constant | step | exp | cosine
  double lr_min = 1e-5;               // cosine
  int t_max = 20;                     // cosine, epochs
  double l2 = 1e-4;                   // coupled L2 on weights (added to gradients)
  double weight_decay = 0.0;          // decoupled (AdamW-style) weight decay
  bool decay_norms = true;            // L2 and weight decay on norm scales too (OptimizerConfig)
  double momentum = 0.9;
  // Augmentation (ember/loader.h; --crop, --pad, --flip, --resized-crop, --normalize).
  int crop = 0, pad = 0;
  bool flip = false, resized_crop = false;
  std::string normalize = "none";
};

// Quantization-aware training (docs/int8.md): the plan of a model with a QatSpec fake-quantizes
// each tensor listed (u8 per tensor: a fakequant node inserted after its producer, parameters
// TENSOR.fake_quant.range and .observed) and every Conv2d and Linear weight (int8 per output
// channel, symmetric), with the straight-through estimator; `ember quantize` keeps the ranges.
struct QatSpec {
  std::vector<std::string> tensors;  // "input" or a layer's parameter prefix ("0", "stem.0"); empty: no QAT
  int weight_bits = 8;               // 8, or 7 (weights in [-63, 63])
  int64_t freeze_after = -1;         // the observers stop after this many optimizer steps; -1: never
  bool on() const { return !tensors.empty(); }
};

struct Model {
  std::string name = "custom";
  std::string source;                  // the file it was read from, named in shape errors
  int in_c = 1, in_h = 28, in_w = 28;  // per-sample input [C, H, W]
  // A classifier's class count: the output a cross-entropy loss needs is [classes]. Models whose
  // output is another tensor (a feature map, an embedding, a regression) ignore it.
  int num_classes = 10;
  std::vector<LayerSpec> layers;
  LossKind loss = LossKind::SoftmaxCrossEntropy;
  Init init = Init::Kaiming;
  Recipe recipe;
  QatSpec qat;                         // JSON "qat"; off unless tensors are listed

  // Builder: each call appends one layer and returns *this.
  Model& conv2d(int out_channels, int kernel, int stride = 1, int pad = 0, int groups = 1);
  Model& linear(int out_features);
  Model& maxpool2d(int kernel, int stride = 0, int pad = 0);  // stride 0: = kernel
  Model& avgpool2d(int kernel, int stride = 0, int pad = 0);
  Model& flatten();
  Model& relu();
  Model& sigmoid();
  Model& tanh();
  Model& softmax();
  Model& drop_path(double p);  // stochastic depth: off in eval mode (Plan::set_train_mode)
  Model& act(LayerKind kind);  // any parameter-free single-input kind: relu, gelu, fastswish, ...
  // Residual sum and channel concatenation of earlier layers' outputs (named with named()).
  Model& add(std::vector<std::string> inputs);
  Model& concat(std::vector<std::string> inputs);
  // Names the last layer; reads: sets the last layer's inputs.
  Model& named(std::string name);
  Model& reads(std::vector<std::string> inputs);
};

// Built-in models: "mnist-cnn", "mnist-mlp", "mxnet-mlp", "convnext-seed", "convnext-fashion",
// "convnext-atto", "resnet18", "resnet50" (docs/models.md). Throws Error listing the names.
Model builtin_model(const std::string& name);
std::vector<std::string> builtin_model_names();

// JSON model descriptions (see docs/model-format.md). `source` names the file in errors.
constexpr size_t kMaxModelLayers = 4096;  // the most layers a model may have (any source)
Model parse_model_json(const std::string& text, const std::string& source);
Model load_model_file(const std::string& path);
std::string model_to_json(const Model& model);

// The ConvNeXt models (convnext_models.cpp). Their block activation is a model option (the
// study compared ReLU, GELU-tanh, HardSwish, SiLU and FastSwish): set_block_activation replaces
// it in every block of a convnext model; other models throw Error.
Model convnext_model(const std::string& name);
// The ResNets "resnet18" and "resnet50" (resnet_models.cpp): torchvision 0.14's, state_dict names.
Model resnet_model(const std::string& name);
void set_block_activation(Model& model, LayerKind act);

// A name that ends in ".json" is a file; anything else a built-in name.
Model resolve_model(const std::string& name_or_file);

}  // namespace ember
