// The op table: one descriptor per op, each in its own file under src/nn/ops/ (OP.cpp defines
// op_desc_OP()); the list of files is generated at configure time (op_list.inc), so an op enters
// by its file alone. The JSON model reader and writer, `ember info --ops`, the CLI's --act, the
// Python builder and the graph's parameter roles read it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "ember/model.h"
#include "ember/plan.h"

namespace ember::nn {

class Layer;
struct Dims;
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

// An ONNX node attribute an op's export writes: an int, a float or a list of ints.
struct OnnxAttr {
  OnnxAttr(const char* n, int64_t v) : name(n), kind(kInt), i(v) {}
  OnnxAttr(const char* n, int v) : name(n), kind(kInt), i(v) {}
  OnnxAttr(const char* n, float v) : name(n), kind(kFloat), f(v) {}
  OnnxAttr(const char* n, std::vector<int64_t> v) : name(n), kind(kInts), ints(std::move(v)) {}
  enum Kind { kInt, kFloat, kInts };
  const char* name;
  Kind kind;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
};

// What an op's ONNX export writes through (onnx_export.cpp implements it) for one layer: nodes
// of one output each, named after the layer; constants; the layer's parameters as initializers
// under their names (prefix.what). Values are [N, D] (rank 2) or [N, C, H, W] (rank 4): a node's
// output has the rank given, else the largest of its tensor inputs' (constants have none). The layer's inputs are input(k), x the first.
class OnnxOut {
 public:
  virtual std::string op(const std::string& type, std::vector<std::string> inputs, std::vector<OnnxAttr> attrs = {},
                         int rank = 0) = 0;
  virtual std::string scalar(float v) = 0;
  virtual std::string ints(std::vector<int64_t> v) = 0;  // an int64 constant [n] (axes, pads)
  // A float constant of this layer (ones, zeros), named after it.
  virtual std::string floats(const std::string& what, std::vector<int64_t> dims, const std::vector<float>& v) = 0;
  // The layer's parameter `what` as the fp32 initializer of these dims.
  virtual std::string param(const std::string& what, std::vector<int64_t> dims) = 0;
  // A Conv's or Gemm's weight or bias: the export hook's value (a QDQ export's quantized one),
  // else param's.
  virtual std::string weight(const std::string& what, std::vector<int64_t> dims) = 0;
  virtual int rank(const std::string& value) const = 0;
  virtual int input_count() const = 0;
  virtual const std::string& input(int k) const = 0;
  virtual Dims in_dims(int k = 0) const = 0;  // per-sample, as the graph infers them
  std::string flat(const std::string& v);  // as [N, D]: v, or a Flatten of it
  std::string img(const std::string& v);   // as [N, C, H, W]: v, or [N, D] unsqueezed to [N, D, 1, 1]

 protected:
  ~OnnxOut() = default;
};

// What an op's ONNX import reads a pattern through (onnx_import_ops.cpp implements it): the
// graph's nodes by index, a value's one reader that is still to map (or -1), the node that
// outputs a value (still to map, the value with one reader; or -1), a scalar constant's value,
// and the layer it emits for a group of nodes (the last one's output becomes the layer's; x: its
// input value).
class OnnxIn {
 public:
  virtual const std::string& op_type(int node) const = 0;
  virtual int input_count(int node) const = 0;
  virtual const std::string& input(int node, int k) const = 0;
  virtual const std::string& output(int node) const = 0;
  virtual int reader(const std::string& value) const = 0;
  virtual int producer(const std::string& value) const = 0;
  virtual float scalar(const std::string& value) const = 0;  // NaN: not a constant of one value
  virtual void emit(const std::vector<int>& nodes, const std::string& x, const LayerSpec& s) = 0;
  // Whether value is a scalar constant within 1e-6 (relative) of c.
  bool scalar_near(const std::string& value, float c) const;

 protected:
  ~OnnxIn() = default;
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
  // The activation layouts it runs: "nchw", "nhwc" (channel-last images: the layout pass runs a
  // node nhwc only where its op declares it) and "flat" ([N, D]); the op test runs each.
  std::vector<const char*> layouts;
  std::vector<const char*> dtypes;   // element types it runs ("f32", "f64"; "bf16": bf16 products)
  std::vector<OpField> fields;
  // Its parameters for this spec (a conv without bias has one), in the Layer's order.
  std::vector<OpParam> (*params)(const LayerSpec& s) = nullptr;
  std::string example;       // a complete model file that uses the op: input [1, 28, 28], 10 classes
  // Its layer (every op has one: make_layer asks for it).
  std::unique_ptr<Layer> (*make)(const LayerSpec& s) = nullptr;
  // Its ONNX export of input value x (returns the output value); null: onnx_export.cpp's own.
  std::string (*onnx_export)(OnnxOut& g, const std::string& x, const LayerSpec& s) = nullptr;
  // Its ONNX import from a node of type onnx[0]: true when the node (and its pattern) mapped. Of
  // the ops whose onnx[0] is a node's type, the longer pattern (more types in onnx) is tried
  // first: silu's Sigmoid -> Mul before sigmoid's Sigmoid.
  bool (*onnx_import)(OnnxIn& g, int node) = nullptr;
  // Its backward is the straight-through estimator (fakequant), not the derivative: the op test
  // checks it against the estimator's definition (tests/quant/test_qat.cpp), not finite differences.
  bool straight_through = false;
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
// An activation that brings its own layer, ONNX export and import (nn/pointwise.h, nn/activation.h).
OpDesc activation_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx,
                     decltype(OpDesc::make) make, decltype(OpDesc::onnx_export) onnx_export,
                     decltype(OpDesc::onnx_import) onnx_import);
// A 2D pooling window (kernel, stride = kernel by default, padding) and a join of 2 to 8 inputs.
OpDesc pool_op(LayerKind kind, const char* name, const char* summary, const char* onnx);
OpDesc join_op(LayerKind kind, const char* name, const char* summary, const char* onnx);
std::string example_model(const std::string& op, const std::string& layers_json);
OpField kernel_field(bool required);
OpField stride_field(const char* fallback);
OpField padding_field(bool same, bool required);
OpField bias_field();
OpField init_field();
std::vector<OpParam> weight_and_bias(const LayerSpec& s);
// An add's or concat's ONNX inputs: the layer's inputs, each as [N, D] where any one is.
std::vector<std::string> join_inputs(OnnxOut& g);
// An activation's import of its one ONNX node (one input): a layer of kind.
bool onnx_import_node(OnnxIn& g, int node, LayerKind kind);

}  // namespace ember::nn
