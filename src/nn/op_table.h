// The op table: one descriptor per op, each in its own file under src/nn/ops/ (OP.cpp defines
// op_desc_OP()); the list of files is generated at configure time (op_list.inc), so an op enters
// by its file alone. The JSON model reader and writer, `ember info --ops`, the CLI's --act, the
// Python builder and the graph's parameter roles read it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ember/model.h"
#include "ember/plan.h"

namespace ember::nn {

using json = nlohmann::json;

// Reads a model description's values; every message names the source and the JSON path.
struct JsonFields {
  const std::string& source;
  [[noreturn]] void fail(const std::string& path, const std::string& msg) const;
  int integer(const json& j, const std::string& path, int lo, int hi) const;
  // An int or a pair [h, w].
  void pair(const json& j, const std::string& path, int lo, int hi, int* h, int* w) const;
  bool boolean(const json& j, const std::string& path) const;
  // A number in [lo, hi] (lo excluded when open_lo, hi when open_hi); non-finite is refused.
  double number(const json& j, const std::string& path, double lo, double hi, bool open_lo, bool open_hi,
                const std::string& expected) const;
  Init init(const json& j, const std::string& path) const;
};

// An object key for a JSON path: as it is when plain, else quoted and escaped (one line).
std::string json_key(const std::string& key);

// One JSON field of a layer: how it is documented, read and written.
struct OpField {
  const char* key;
  const char* type;          // for the docs: "int", "int or [h, w]", "bool", "number", ...
  const char* fallback;      // the default as the docs show it; nullptr: required
  void (*read)(const JsonFields& r, const json& v, const std::string& path, LayerSpec& s);
  void (*write)(const LayerSpec& s, json& out);  // may write nothing (a default left out)
};

struct OpParam {
  const char* name;          // the PyTorch attribute: the node's name, a dot, then this
  ParamRole role;
};

struct OpDesc {
  LayerKind kind;
  const char* name;          // the JSON "type", --act's and Python's name
  const char* summary;       // one line for `ember info --ops`
  bool activation = false;   // parameter-free, one input, shape-preserving: --act, Model::act, act()
  int min_inputs = 1, max_inputs = 1;
  std::vector<const char*> onnx;     // the ONNX op types its export writes (empty: none)
  std::vector<const char*> layouts;  // activation layouts it runs ("nchw"; "flat" is [N, D])
  std::vector<const char*> dtypes;   // element types it runs ("f32", "f64"; "bf16": bf16 products)
  std::vector<OpField> fields;
  // Its parameters for this spec (a conv without bias has one), in the Layer's order.
  std::vector<OpParam> (*params)(const LayerSpec& s) = nullptr;
  std::string example;       // a complete model file that uses the op: input [1, 28, 28], 10 classes
};

// Every op, in LayerKind order; the descriptor of a kind; the op of a JSON name (or null).
const std::vector<const OpDesc*>& op_table();
const OpDesc& op_desc(LayerKind kind);
const OpDesc* find_op(std::string_view name);

// A layer from its JSON object (type, name, inputs, the op's fields) and back.
LayerSpec read_layer(const JsonFields& r, const json& j, const std::string& path);
json write_layer(const LayerSpec& s);

// Building blocks the op files share.
OpDesc make_op(LayerKind kind, const char* name, const char* summary);
std::vector<const char*> all_dtypes();                 // f32, f64, bf16
std::vector<const char*> fp_dtypes();                  // f32, f64
OpDesc activation_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx);
std::string example_model(const std::string& op, const std::string& layers_json);
OpField kernel_field(bool required);
OpField stride_field(const char* fallback);
OpField padding_field(bool same, bool required);
OpField bias_field();
OpField init_field();
std::vector<OpParam> weight_and_bias(const LayerSpec& s);

}  // namespace ember::nn
