// Models: the fluent builder, the built-in models with their recipes, and the JSON model
// description (parsed with nlohmann-json; every key checked, unknown keys rejected, errors name
// the file and the JSON path). Format: docs/model-format.md.
#include <algorithm>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ember/error.h"
#include "ember/files.h"
#include "ember/model.h"
#include "fs/json_read.h"
#include "nn/graph.h"

namespace ember {

using json = nlohmann::json;

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Conv2d: return "conv2d";
    case LayerKind::Linear: return "linear";
    case LayerKind::MaxPool2d: return "maxpool2d";
    case LayerKind::AvgPool2d: return "avgpool2d";
    case LayerKind::Flatten: return "flatten";
    case LayerKind::ReLU: return "relu";
    case LayerKind::Sigmoid: return "sigmoid";
    case LayerKind::Tanh: return "tanh";
    case LayerKind::Softmax: return "softmax";
    case LayerKind::Add: return "add";
    case LayerKind::Concat: return "concat";
    case LayerKind::GELU: return "gelu";
    case LayerKind::GELUTanh: return "gelu-tanh";
    case LayerKind::HardSwish: return "hardswish";
    case LayerKind::SiLU: return "silu";
    case LayerKind::FastSwish: return "fastswish";
    case LayerKind::LayerNorm: return "layernorm";
    case LayerKind::LayerNorm2d: return "layernorm2d";
    case LayerKind::GlobalAvgPool: return "globalavgpool";
    case LayerKind::LayerScale: return "layerscale";
    case LayerKind::ZeroPad2d: return "zeropad2d";
    case LayerKind::DropPath: return "droppath";
  }
  return "?";
}
const char* loss_kind_name(LossKind k) {
  switch (k) {
    case LossKind::SoftmaxCrossEntropy: return "softmax_cross_entropy";
    case LossKind::CrossEntropy: return "cross_entropy";
    case LossKind::MSE: return "mse";
  }
  return "?";
}
const char* init_name(Init i) {
  switch (i) {
    case Init::Kaiming: return "kaiming";
    case Init::Xavier: return "xavier";
    case Init::Torch: return "torch";
    case Init::TruncNormal: return "trunc_normal";
  }
  return "?";
}

namespace {
LayerSpec window(LayerKind kind, int kernel, int stride, int pad) {
  LayerSpec s;
  s.kind = kind;
  s.kernel_h = s.kernel_w = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  return s;
}
LayerSpec simple(LayerKind kind) {
  LayerSpec s;
  s.kind = kind;
  return s;
}
}  // namespace

Model& Model::conv2d(int out_channels, int kernel, int stride, int pad, int groups) {
  LayerSpec s = window(LayerKind::Conv2d, kernel, stride, pad);
  s.out = out_channels;
  s.groups = groups;
  layers.push_back(s);
  return *this;
}
Model& Model::linear(int out_features) {
  LayerSpec s = simple(LayerKind::Linear);
  s.out = out_features;
  layers.push_back(s);
  return *this;
}
Model& Model::maxpool2d(int kernel, int stride, int pad) {
  layers.push_back(window(LayerKind::MaxPool2d, kernel, stride ? stride : kernel, pad));
  return *this;
}
Model& Model::avgpool2d(int kernel, int stride, int pad) {
  layers.push_back(window(LayerKind::AvgPool2d, kernel, stride ? stride : kernel, pad));
  return *this;
}
Model& Model::flatten() { layers.push_back(simple(LayerKind::Flatten)); return *this; }
Model& Model::relu() { layers.push_back(simple(LayerKind::ReLU)); return *this; }
Model& Model::sigmoid() { layers.push_back(simple(LayerKind::Sigmoid)); return *this; }
Model& Model::tanh() { layers.push_back(simple(LayerKind::Tanh)); return *this; }
Model& Model::softmax() { layers.push_back(simple(LayerKind::Softmax)); return *this; }
Model& Model::act(LayerKind kind) { layers.push_back(simple(kind)); return *this; }
Model& Model::drop_path(double p) {
  layers.push_back(simple(LayerKind::DropPath));
  layers.back().drop_prob = p;
  return *this;
}
Model& Model::add(std::vector<std::string> in) {
  layers.push_back(simple(LayerKind::Add));
  layers.back().inputs = std::move(in);
  return *this;
}
Model& Model::concat(std::vector<std::string> in) {
  layers.push_back(simple(LayerKind::Concat));
  layers.back().inputs = std::move(in);
  return *this;
}
Model& Model::named(std::string name) {
  if (layers.empty()) throw Error("Model::named: no layer to name yet");
  layers.back().name = std::move(name);
  return *this;
}
Model& Model::reads(std::vector<std::string> in) {
  if (layers.empty()) throw Error("Model::reads: no layer yet");
  layers.back().inputs = std::move(in);
  return *this;
}

std::vector<std::string> builtin_model_names() {
  return {"mnist-cnn", "mnist-mlp", "mxnet-mlp", "convnext-seed", "convnext-fashion", "convnext-atto"};
}

Model builtin_model(const std::string& name) {
  Model m;
  m.name = name;
  // PyTorch's default init, so the built-ins start where the same nn.Sequential would. Measured on
  // MNIST over seeds 1-5 (mnist-cnn, 10 epochs): mean test accuracy 98.93% with it, 98.88% with He.
  m.init = Init::Torch;
  if (name == "mnist-cnn") {
    // The original C library's network and recipe (Adam 1e-3, cosine to 1e-5 over T_max 20, L2 1e-4).
    m.conv2d(32, 5, 1, 2).relu().maxpool2d(2).flatten().linear(128).relu().linear(10);
  } else if (name == "mnist-mlp") {
    m.flatten().linear(128).relu().linear(10);
  } else if (name == "mxnet-mlp") {
    // MXNet's MNIST MLP example: SGD 0.1, batch 100, weight decay 1e-2 (coupled, as MXNet's wd).
    m.flatten().linear(128).relu().linear(64).relu().linear(10);
    m.recipe.optimizer = "sgd";
    m.recipe.lr = 0.1;
    m.recipe.batch_size = 100;
    m.recipe.schedule = "constant";
    m.recipe.l2 = 1e-2;
  } else if (name.rfind("convnext-", 0) == 0 && name.size() < 40) {
    return convnext_model(name);
  } else {
    std::string known;
    for (auto& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown model '" + name + "' (expected one of " + known +
                ", or a FILE.json model description)");
  }
  return m;
}

namespace {

// Limits that keep any description's reading and compiling bounded (see docs/model-format.md).
constexpr int kMaxDepth = 32;      // JSON nesting; the format itself needs 3
constexpr size_t kMaxLayers = kMaxModelLayers;
constexpr size_t kShown = 60;      // characters of a key quoted in a message
constexpr uint64_t kMaxModelFile = uint64_t(16) << 20;  // a description of 4096 layers is < 1 MiB

std::string brief(const json& j) { return json_brief(j); }

// An object key for a JSON path: as it is when plain, else quoted and escaped (one line).
std::string key_name(const std::string& key) {
  const bool plain = !key.empty() && key.size() <= kShown &&
                     std::all_of(key.begin(), key.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; });
  return plain ? key : brief(json(key));
}

struct Reader {
  const std::string& source;
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw Error(source + ": " + path + ": " + msg);
  }
  int integer(const json& j, const std::string& path, int lo, int hi) const {
    if (!j.is_number_integer()) fail(path, "expected an integer, found " + brief(j));
    // Unsigned values above INT64_MAX would wrap in get<long long>(); they are out of range anyway.
    const bool big = j.is_number_unsigned() && j.get<unsigned long long>() > (unsigned long long)hi;
    const long long v = big ? (long long)hi + 1 : j.get<long long>();
    if (v < lo || v > hi)
      fail(path, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], found " + (big ? json_text(j) : std::to_string(v)));
    return int(v);
  }
  // An int or a pair [h, w].
  void pair(const json& j, const std::string& path, int lo, int hi, int* h, int* w) const {
    if (j.is_array()) {
      if (j.size() != 2) fail(path, "expected an integer or [h, w], found " + brief(j));
      *h = integer(j[0], path + "[0]", lo, hi);
      *w = integer(j[1], path + "[1]", lo, hi);
    } else {
      *h = *w = integer(j, path, lo, hi);
    }
  }
  Init init(const json& j, const std::string& path) const {
    const std::string v = j.is_string() ? j.get<std::string>() : "";
    if (v == "kaiming" || v == "he") return Init::Kaiming;
    if (v == "xavier" || v == "glorot") return Init::Xavier;
    if (v == "torch") return Init::Torch;
    if (v == "trunc_normal") return Init::TruncNormal;
    fail(path, "expected \"kaiming\", \"xavier\", \"torch\" or \"trunc_normal\", found " + brief(j));
  }
  void only(const json& obj, const std::string& path, std::initializer_list<const char*> keys) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool ok = false;
      for (const char* k : keys) ok = ok || it.key() == k;
      if (!ok) {
        std::string list;
        for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(path + "." + key_name(it.key()), "unknown key (expected one of " + list + ")");
      }
    }
  }
};

// "name" (a string) and "inputs" (a name or an array of 1 to 8 names), allowed on every layer.
void parse_links(const Reader& r, const json& j, const std::string& path, LayerSpec* s) {
  auto name = [&](const json& v, const std::string& at) {
    if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 128)
      r.fail(at, "expected a layer name (a string of 1 to 128 characters), found " + brief(v));
    return v.get<std::string>();
  };
  if (j.contains("name")) s->name = name(j["name"], path + ".name");
  if (!j.contains("inputs")) return;
  const json& in = j["inputs"];
  if (in.is_string()) {
    s->inputs.push_back(name(in, path + ".inputs"));
    return;
  }
  if (!in.is_array() || in.empty() || in.size() > 8)
    r.fail(path + ".inputs", "expected a layer name or an array of 1 to 8 names, found " + brief(in));
  for (size_t i = 0; i < in.size(); ++i) s->inputs.push_back(name(in[i], path + ".inputs[" + std::to_string(i) + "]"));
}

LayerSpec parse_layer(const Reader& r, const json& j, const std::string& path) {
  if (!j.is_object()) r.fail(path, "expected an object, found " + brief(j));
  if (!j.contains("type") || !j["type"].is_string()) r.fail(path + ".type", "missing layer type");
  const std::string type = j["type"].get<std::string>();
  LayerSpec s;
  parse_links(r, j, path, &s);
  constexpr int kMax = 1 << 20;
  if (type == "conv2d") {
    r.only(j, path, {"type", "name", "inputs", "out_channels", "kernel", "stride", "padding", "groups", "bias", "init"});
    s.kind = LayerKind::Conv2d;
    if (!j.contains("out_channels")) r.fail(path + ".out_channels", "missing");
    if (!j.contains("kernel")) r.fail(path + ".kernel", "missing");
    s.out = r.integer(j["out_channels"], path + ".out_channels", 1, kMax);
    r.pair(j["kernel"], path + ".kernel", 1, 4096, &s.kernel_h, &s.kernel_w);
    if (j.contains("stride")) r.pair(j["stride"], path + ".stride", 1, 4096, &s.stride_h, &s.stride_w);
    if (j.contains("padding") && j["padding"] == "same") s.same = true;
    else if (j.contains("padding")) r.pair(j["padding"], path + ".padding", 0, 4096, &s.pad_h, &s.pad_w);
    if (j.contains("groups")) s.groups = r.integer(j["groups"], path + ".groups", 1, kMax);
  } else if (type == "linear") {
    r.only(j, path, {"type", "name", "inputs", "out_features", "over", "bias", "init"});
    s.kind = LayerKind::Linear;
    if (j.contains("over")) {
      if (j["over"] != "features" && j["over"] != "channels")
        r.fail(path + ".over", "expected \"features\" or \"channels\", found " + brief(j["over"]));
      s.over_channels = j["over"] == "channels";
    }
    if (!j.contains("out_features")) r.fail(path + ".out_features", "missing");
    s.out = r.integer(j["out_features"], path + ".out_features", 1, kMax);
  } else if (type == "maxpool2d" || type == "avgpool2d") {
    r.only(j, path, {"type", "name", "inputs", "kernel", "stride", "padding"});
    s.kind = type == "maxpool2d" ? LayerKind::MaxPool2d : LayerKind::AvgPool2d;
    if (!j.contains("kernel")) r.fail(path + ".kernel", "missing");
    r.pair(j["kernel"], path + ".kernel", 1, 4096, &s.kernel_h, &s.kernel_w);
    s.stride_h = s.kernel_h, s.stride_w = s.kernel_w;
    if (j.contains("stride")) r.pair(j["stride"], path + ".stride", 1, 4096, &s.stride_h, &s.stride_w);
    if (j.contains("padding")) r.pair(j["padding"], path + ".padding", 0, 4096, &s.pad_h, &s.pad_w);
  } else if (type == "layernorm" || type == "layernorm2d") {
    r.only(j, path, {"type", "name", "inputs", "dims", "eps", "affine"});
    s.kind = type == "layernorm" ? LayerKind::LayerNorm : LayerKind::LayerNorm2d;
    if (j.contains("dims")) {
      if (s.kind != LayerKind::LayerNorm) r.fail(path + ".dims", "only layernorm takes dims");
      s.norm_dims = r.integer(j["dims"], path + ".dims", 1, 3);
    }
    if (j.contains("eps")) {
      if (!j["eps"].is_number() || !(j["eps"].get<double>() > 0) || j["eps"].get<double>() > 1)
        r.fail(path + ".eps", "expected a number in (0, 1], found " + brief(j["eps"]));
      s.eps = j["eps"].get<double>();
    }
    if (j.contains("affine")) {
      if (!j["affine"].is_boolean()) r.fail(path + ".affine", "expected true or false, found " + brief(j["affine"]));
      s.bias = j["affine"].get<bool>();
    }
  } else if (type == "layerscale") {
    r.only(j, path, {"type", "name", "inputs", "init_value"});
    s.kind = LayerKind::LayerScale;
    if (j.contains("init_value")) {
      if (!j["init_value"].is_number() || !std::isfinite(j["init_value"].get<double>()))
        r.fail(path + ".init_value", "expected a finite number, found " + brief(j["init_value"]));
      s.scale_init = j["init_value"].get<double>();
    }
  } else if (type == "droppath") {
    r.only(j, path, {"type", "name", "inputs", "p"});
    s.kind = LayerKind::DropPath;
    if (j.contains("p")) {
      if (!j["p"].is_number() || !(j["p"].get<double>() >= 0 && j["p"].get<double>() < 1))
        r.fail(path + ".p", "expected a probability in [0, 1), found " + brief(j["p"]));
      s.drop_prob = j["p"].get<double>();
    }
  } else if (type == "zeropad2d") {
    r.only(j, path, {"type", "name", "inputs", "padding"});
    s.kind = LayerKind::ZeroPad2d;
    if (!j.contains("padding")) r.fail(path + ".padding", "missing");
    r.pair(j["padding"], path + ".padding", 0, 4096, &s.pad_h, &s.pad_w);
  } else {
    static const std::pair<const char*, LayerKind> simple_kinds[] = {
        {"flatten", LayerKind::Flatten}, {"relu", LayerKind::ReLU}, {"sigmoid", LayerKind::Sigmoid},
        {"tanh", LayerKind::Tanh}, {"softmax", LayerKind::Softmax}, {"add", LayerKind::Add},
        {"concat", LayerKind::Concat}, {"gelu", LayerKind::GELU}, {"gelu-tanh", LayerKind::GELUTanh},
        {"hardswish", LayerKind::HardSwish}, {"silu", LayerKind::SiLU}, {"fastswish", LayerKind::FastSwish},
        {"globalavgpool", LayerKind::GlobalAvgPool}};
    bool found = false;
    for (auto& [name, kind] : simple_kinds)
      if (type == name) s.kind = kind, found = true;
    if (!found)
      r.fail(path + ".type", "unknown layer " + brief(j["type"]) +
                                 " (expected conv2d, linear, maxpool2d, avgpool2d, flatten, relu, "
                                 "sigmoid, tanh, gelu, gelu-tanh, hardswish, silu, fastswish, softmax, add, "
                                 "concat, layernorm, layernorm2d, globalavgpool, layerscale, zeropad2d or droppath)");
    r.only(j, path, {"type", "name", "inputs"});
  }
  if (j.contains("bias")) {
    if (!j["bias"].is_boolean()) r.fail(path + ".bias", "expected true or false, found " + brief(j["bias"]));
    s.bias = j["bias"].get<bool>();
  }
  if (j.contains("init")) s.init = r.init(j["init"], path + ".init");
  return s;
}

json layer_json(const LayerSpec& s) {
  json j{{"type", layer_kind_name(s.kind)}};
  if (!s.name.empty()) j["name"] = s.name;
  if (!s.inputs.empty()) j["inputs"] = s.inputs;
  auto pair = [](int h, int w) { return h == w ? json(h) : json::array({h, w}); };
  switch (s.kind) {
    case LayerKind::Conv2d:
      j["out_channels"] = s.out;
      j["kernel"] = pair(s.kernel_h, s.kernel_w);
      j["stride"] = pair(s.stride_h, s.stride_w);
      j["padding"] = s.same ? json("same") : pair(s.pad_h, s.pad_w);
      j["groups"] = s.groups;
      j["bias"] = s.bias;
      break;
    case LayerKind::Linear:
      j["out_features"] = s.out;
      if (s.over_channels) j["over"] = "channels";
      j["bias"] = s.bias;
      break;
    case LayerKind::MaxPool2d:
    case LayerKind::AvgPool2d:
      j["kernel"] = pair(s.kernel_h, s.kernel_w);
      j["stride"] = pair(s.stride_h, s.stride_w);
      j["padding"] = pair(s.pad_h, s.pad_w);
      break;
    case LayerKind::LayerNorm:
    case LayerKind::LayerNorm2d:
      if (s.kind == LayerKind::LayerNorm && s.norm_dims) j["dims"] = s.norm_dims;
      j["eps"] = s.eps;
      j["affine"] = s.bias;
      break;
    case LayerKind::LayerScale: j["init_value"] = s.scale_init; break;
    case LayerKind::ZeroPad2d: j["padding"] = pair(s.pad_h, s.pad_w); break;
    case LayerKind::DropPath: j["p"] = s.drop_prob; break;
    default: break;
  }
  if (s.init) j["init"] = init_name(*s.init);
  return j;
}

// The loss must fit the last layer: cross_entropy reads probabilities (a softmax last), and
// softmax_cross_entropy applies its own softmax (a softmax last would apply it twice).
void check_loss(const Reader& r, const Model& m) {
  const bool softmax_last = m.layers.back().kind == LayerKind::Softmax;
  const std::string last = "layers[" + std::to_string(m.layers.size() - 1) + "] (" +
                           layer_kind_name(m.layers.back().kind) + ")";
  if (m.loss == LossKind::CrossEntropy && !softmax_last)
    r.fail("loss", "\"cross_entropy\" expects probabilities, but the last layer " + last +
                       " is not a softmax: add {\"type\": \"softmax\"} or use \"softmax_cross_entropy\" on logits");
  if (m.loss == LossKind::SoftmaxCrossEntropy && softmax_last)
    r.fail("loss", "\"softmax_cross_entropy\" applies softmax itself, and the last layer " + last +
                       " is a softmax too (applied twice): remove it, or use \"cross_entropy\"");
}

}  // namespace

Model parse_model_json(const std::string& text, const std::string& source) {
  const Reader r{source};
  const json j = parse_json(text, source, kMaxDepth);  // depth counted before parsing
  if (!j.is_object()) r.fail("(top level)", "expected an object, found " + brief(j));
  r.only(j, "(top level)", {"name", "input", "classes", "loss", "init", "layers"});
  Model m;
  m.source = source;
  if (j.contains("name")) {
    if (!j["name"].is_string()) r.fail("name", "expected a string, found " + brief(j["name"]));
    m.name = j["name"].get<std::string>();
  }
  if (j.contains("input")) {
    const json& in = j["input"];
    if (!in.is_array() || in.size() != 3) r.fail("input", "expected [C, H, W], found " + brief(in));
    m.in_c = r.integer(in[0], "input[0]", 1, 1 << 16);
    m.in_h = r.integer(in[1], "input[1]", 1, 1 << 16);
    m.in_w = r.integer(in[2], "input[2]", 1, 1 << 16);
  }
  if (j.contains("classes")) m.num_classes = r.integer(j["classes"], "classes", 2, 1 << 20);
  if (j.contains("loss")) {
    const std::string l = j["loss"].is_string() ? j["loss"].get<std::string>() : "";
    if (l == "softmax_cross_entropy") m.loss = LossKind::SoftmaxCrossEntropy;
    else if (l == "cross_entropy") m.loss = LossKind::CrossEntropy;
    else if (l == "mse") m.loss = LossKind::MSE;
    else r.fail("loss", "expected \"softmax_cross_entropy\", \"cross_entropy\" or \"mse\", found " + brief(j["loss"]));
  }
  if (j.contains("init")) m.init = r.init(j["init"], "init");
  if (!j.contains("layers") || !j["layers"].is_array() || j["layers"].empty())
    r.fail("layers", "expected a non-empty array of layers");
  if (j["layers"].size() > kMaxLayers)
    r.fail("layers", "expected at most " + std::to_string(kMaxLayers) + " layers, found " +
                         std::to_string(j["layers"].size()));
  for (size_t i = 0; i < j["layers"].size(); ++i)
    m.layers.push_back(parse_layer(r, j["layers"][i], "layers[" + std::to_string(i) + "]"));
  check_loss(r, m);
  nn::resolve(m);  // names and inputs: errors name the layer now, not when a plan is built
  return m;
}

Model load_model_file(const std::string& path) {
  return parse_model_json(read_input(path, kMaxModelFile, "model description"), path);
}

std::string model_to_json(const Model& m) {
  json j{{"name", m.name},
         {"input", {m.in_c, m.in_h, m.in_w}},
         {"classes", m.num_classes},
         {"loss", loss_kind_name(m.loss)},
         {"init", init_name(m.init)},
         {"layers", json::array()}};
  for (auto& s : m.layers) j["layers"].push_back(layer_json(s));
  return json_text(j, 2);
}

Model resolve_model(const std::string& name_or_file) {
  const std::string ext = ".json";
  if (name_or_file.size() > ext.size() &&
      name_or_file.compare(name_or_file.size() - ext.size(), ext.size(), ext) == 0)
    return load_model_file(name_or_file);
  return builtin_model(name_or_file);
}

}  // namespace ember
