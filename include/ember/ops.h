// The op table as users and front ends see it: every layer type a model can use, with its JSON
// fields, its parameters and their roles, the ONNX op types it exports to, the layouts and dtypes
// it runs and an example model file. `ember info --ops` prints it; the CLI's --act and the Python
// builder take their names from it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "ember/model.h"

namespace ember {

struct OpFieldInfo {
  std::string key, type;
  std::string fallback;    // the default as the docs show it; empty when required
  bool required = false;
};
struct OpParamInfo {
  std::string name, role;  // "weight", "weight" / "bias", "bias" / "weight", "norm_scale" / ...
};
struct OpInfo {
  std::string name, summary;
  bool activation = false;  // parameter-free, one input, shape-preserving
  int min_inputs = 1, max_inputs = 1;
  std::vector<std::string> onnx, layouts, dtypes;  // onnx: the types its export writes
  std::vector<std::string> onnx_import;            // the node types its import maps alone
  std::vector<OpFieldInfo> fields;
  std::vector<OpParamInfo> params;  // with the fields' defaults
  std::string example;     // a complete model file (JSON text): input [1, 28, 28], 10 classes
};

std::vector<OpInfo> op_infos();
// {"ops": [{"name", "summary", "onnx", "onnx_import", "layouts", "dtypes", "inputs": [min, max], "fields",
// "params": [{"name", "role"}], "example": {...}}], "fusions": [{"name", "plans", "layout"}]} (the
// fusion table, in priority order; indent as json dumps: -1 compact).
std::string ops_json(int indent = 2);
// One line an op: name, inputs, fields, parameters, ONNX types, and the dtypes and layouts it runs
// ("runs: f32,f64,bf16,u8 nchw,nhwc").
std::string ops_text();

// The activations' names ("relu", "gelu-tanh", ...), "relu, sigmoid, ... or fastswish", and the
// kind of one (false when `name` is none).
std::vector<std::string> activation_names();
std::string activation_list();
bool find_activation(std::string_view name, LayerKind* kind);

// One layer from its JSON object text ({"type": "conv2d", "out_channels": 8, ...}); errors name
// `source` and the key.
LayerSpec parse_layer_json(const std::string& text, const std::string& source);

}  // namespace ember
