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
#include "ember/model.h"
#include "ember/plan.h"
#include "ember_support/files.h"
#include "fs/json_read.h"
#include "nn/graph.h"
#include "nn/op_table.h"

namespace ember {

using json = nlohmann::json;

const char* layer_kind_name(LayerKind k) { return nn::op_desc(k).name; }
const char* loss_kind_name(LossKind k) {
  switch (k) {
    case LossKind::SoftmaxCrossEntropy: return "softmax_cross_entropy";
    case LossKind::CrossEntropy: return "cross_entropy";
    case LossKind::MSE: return "mse";
    case LossKind::L1: return "l1";
  }
  return "?";
}
bool loss_takes_targets(LossKind k) { return k == LossKind::MSE || k == LossKind::L1; }
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
  return {"mnist-cnn", "mnist-mlp", "mxnet-mlp", "convnext-seed", "convnext-fashion", "convnext-atto", "resnet18", "resnet50"};
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
  } else if (name == "resnet18" || name == "resnet50") {
    return resnet_model(name);
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
constexpr uint64_t kMaxModelFile = uint64_t(16) << 20;  // a description of 4096 layers is < 1 MiB

std::string brief(const json& j) { return json_brief(j); }

// The top level's keys: each one of `keys`.
void only(const nn::JsonFields& r, const json& obj, std::initializer_list<const char*> keys) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it.key() == k;
    if (ok) continue;
    std::string list;
    for (const char* k : keys) list += (list.empty() ? "" : ", ") + std::string(k);
    r.fail("(top level)." + nn::json_key(it.key()),
           "unknown key (expected one of " + list + ")");
  }
}

// The loss must fit the last layer: cross_entropy reads probabilities (a softmax last), and
// softmax_cross_entropy applies its own softmax (a softmax last would apply it twice).
void check_loss(const nn::JsonFields& r, const Model& m) {
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

// "qat": {"tensors": [names], "weight_bits": 8 | 7, "freeze_after": steps (-1: never)}.
QatSpec read_qat(const nn::JsonFields& r, const json& j) {
  if (!j.is_object()) r.fail("qat", "expected an object, found " + brief(j));
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "tensors" && it.key() != "weight_bits" && it.key() != "freeze_after")
      r.fail("qat." + nn::json_key(it.key()), "unknown key (expected one of tensors, weight_bits, freeze_after)");
  QatSpec q;
  if (!j.contains("tensors") || !j["tensors"].is_array() || j["tensors"].empty() || j["tensors"].size() > kMaxLayers + 1)
    r.fail("qat.tensors", "expected a non-empty array of tensor names (\"input\" or a layer's parameter prefix)");
  for (size_t i = 0; i < j["tensors"].size(); ++i) {
    const json& t = j["tensors"][i];
    if (!t.is_string() || t.get<std::string>().empty() || t.get<std::string>().size() > 256)
      r.fail("qat.tensors[" + std::to_string(i) + "]", "expected a tensor name, found " + brief(t));
    q.tensors.push_back(t.get<std::string>());
  }
  if (j.contains("weight_bits")) {
    q.weight_bits = r.integer(j["weight_bits"], "qat.weight_bits", 7, 8);
  }
  if (j.contains("freeze_after")) q.freeze_after = r.integer(j["freeze_after"], "qat.freeze_after", -1, 2147483647);
  return q;
}

}  // namespace

Model parse_model_json(const std::string& text, const std::string& source) {
  const nn::JsonFields r{source};
  const json j = parse_json(text, source, kMaxDepth);  // depth counted before parsing
  if (!j.is_object()) r.fail("(top level)", "expected an object, found " + brief(j));
  only(r, j, {"name", "input", "classes", "loss", "init", "layers", "qat"});
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
    else if (l == "l1") m.loss = LossKind::L1;
    else r.fail("loss", "expected \"softmax_cross_entropy\", \"cross_entropy\", \"mse\" or \"l1\", found " + brief(j["loss"]));
  }
  if (j.contains("init")) m.init = r.init(j["init"], "init");
  if (!j.contains("layers") || !j["layers"].is_array() || j["layers"].empty())
    r.fail("layers", "expected a non-empty array of layers");
  if (j["layers"].size() > kMaxLayers)
    r.fail("layers", "expected at most " + std::to_string(kMaxLayers) + " layers, found " +
                         std::to_string(j["layers"].size()));
  for (size_t i = 0; i < j["layers"].size(); ++i)
    m.layers.push_back(nn::read_layer(r, j["layers"][i], "layers[" + std::to_string(i) + "]"));
  check_loss(r, m);
  if (j.contains("qat")) m.qat = read_qat(r, j["qat"]);
  nn::resolve(m);  // names and inputs: errors name the layer now, not when a plan is built
  if (m.qat.on()) model_params(m);  // the QAT pass: every tensor it names must exist
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
  for (auto& s : m.layers) j["layers"].push_back(nn::write_layer(s));
  if (m.qat.on()) j["qat"] = {{"tensors", m.qat.tensors}, {"weight_bits", m.qat.weight_bits}, {"freeze_after", m.qat.freeze_after}};
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
