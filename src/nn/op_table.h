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
#include "nn/op_onnx.h"

namespace ember::nn {

class Layer;
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
  // The activation layouts it runs: "nchw", "nhwc" (channel-last images: the layout pass runs a
  // node nhwc only where its op declares it) and "flat" ([N, D]); the op test runs each.
  std::vector<const char*> layouts;
  // Element types it runs ("f32", "f64"; "bf16": bf16 products; "u8": the int8 plan runs it on u8
  // activations, int8 weights, which int8_plan.cpp reads: an op without it runs fp32 there).
  std::vector<const char*> dtypes;
  std::vector<OpField> fields;
  // Its parameters for this spec (a conv without bias has one), in the Layer's order.
  std::vector<OpParam> (*params)(const LayerSpec& s) = nullptr;
  std::string example;       // a complete model file that uses the op: input [1, 28, 28], 10 classes
  // Its layer (every op has one: make_layer asks for it).
  std::unique_ptr<Layer> (*make)(const LayerSpec& s) = nullptr;
  // Its ONNX export of input value x (returns the output value); null: onnx_export.cpp's own.
  std::string (*onnx_export)(OnnxOut& g, const std::string& x, const LayerSpec& s) = nullptr;
  // Its ONNX import from a node of type onnx[0] (one node, or the start of its pattern) or of one
  // of onnx_from (more types it maps as one node: linear's Gemm and MatMul): true when the node
  // (and its pattern) mapped, false when it is not this op's (another may map it); a node of this
  // op's that ember cannot run is refused (throws, naming the node). Of the ops importing a type,
  // the longer pattern (more types in onnx) is tried first: silu's Sigmoid -> Mul before
  // sigmoid's Sigmoid, fastswish's Add before add's.
  bool (*onnx_import)(OnnxIn& g, int node) = nullptr;
  std::vector<const char*> onnx_from;
  // The node types its import maps alone (`ember info --ops`: "onnx_import"): onnx_from, and
  // onnx[0] where onnx is that one type.
  std::vector<const char*> onnx_alone() const;
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
// Whether the op of `kind` lists `what` among its layouts or dtypes (the truth passes read).
bool op_declares_layout(LayerKind kind, std::string_view what);
bool op_declares_dtype(LayerKind kind, std::string_view what);
OpDesc activation_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx);
// An activation that brings its own layer, ONNX export and import (nn/activation.h: act_op).
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
// An add's or concat's import: Sum / Add of 1-8 tensors, or Concat over channels (one layout,
// one height and width; one input: the tensor itself).
bool import_join(OnnxIn& g, int node, bool concat);
// An activation's import of its one ONNX node (one input): a layer of kind.
bool onnx_import_node(OnnxIn& g, int node, LayerKind kind);

}  // namespace ember::nn
