// The ONNX side of the op table: what an op's export writes through (OnnxOut) and what its
// import reads the graph through (OnnxIn, with the imported values and attributes); the onnx
// library implements both (onnx_export.cpp, onnx_import_ops.cpp), each op file maps itself.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ember/model.h"
#include "nn/layers.h"

namespace ember::nn {

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

// How an imported ONNX value lies: ember's tensor as [N, C, H, W] (NCHW), the same tensor seen
// channels-last through Transpose(0, 2, 3, 1) (NHWC), [N, D] (Flat), a sequence [N, C, L] (NCL:
// ember's image [C, 1, L], what a 1-D conv or pool reads), or one value per sample [N] (Vec).
enum class OnnxLayout { NCHW, NHWC, Flat, NCL, Vec };
int onnx_rank(OnnxLayout l);  // its ONNX rank: 4, 4, 2, 3, 1

// A constant: dims and its values as float (FLOAT, DOUBLE, FLOAT16 and integer types converted)
// and, for integer types, as int64 too.
struct OnnxConst {
  std::vector<int64_t> dims;
  std::vector<float> f;
  std::vector<int64_t> i;   // integer tensors only
  bool is_int = false;
  size_t count() const { return f.size(); }
};

// An imported value: a constant, or an ember tensor (the layer that makes it) in a layout.
struct OnnxValue {
  bool is_const = false;
  OnnxConst c;              // constants
  std::string weight_name;  // an initializer's name (names the layer that takes it as weights)
  std::string ref;          // tensors: the ember layer that makes it, or "input"
  OnnxLayout lay = OnnxLayout::NCHW;
  Dims d;                   // ember's per-sample dims [C, H, W] ([D, 1, 1] when flat)
};

// A node's attributes by name; each getter checks the type and names node and attribute.
class OnnxAttrs {
 public:
  virtual bool has(const std::string& name) const = 0;
  virtual int64_t i(const std::string& name, int64_t def) const = 0;
  virtual float f(const std::string& name, float def) const = 0;
  virtual std::string s(const std::string& name, const std::string& def) const = 0;
  virtual std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def) const = 0;
  // Throws for any attribute not in `known` ("attribute 'dilations' is not supported").
  virtual void only(std::initializer_list<const char*> known) const = 0;
  virtual const std::string& where() const = 0;  // the node, for messages

 protected:
  ~OnnxAttrs() = default;
};

// What an op's ONNX import reads the graph through and emits layers by (onnx_import_ops.cpp
// implements it). Patterns: the nodes by index, a value's one reader that is still to map (or
// -1), the node that outputs a value (still to map, the value with one reader; or -1), a scalar
// constant's value, and emit(), the layer for a group of nodes (the last one's output becomes the
// layer's; x: its input value). Single nodes: their attributes, inputs as values (tensor() and
// constant() refuse the other kind, naming the node), the layer made (emit_layer: named after a
// weight), its weights, and the node's output set. Errors: where(node) names the file and node.
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

  virtual std::string where(int node) const = 0;
  virtual int opset() const = 0;
  virtual const OnnxAttrs& attrs(int node) = 0;
  bool has_input(int node, int k) const { return k < input_count(node) && !input(node, k).empty(); }
  virtual const OnnxValue& val(int node, int k) const = 0;       // any input (missing: refused)
  virtual const OnnxValue* find(const std::string& value) const = 0;  // a value mapped so far, or null
  virtual const OnnxValue& tensor(int node, int k) const = 0;    // a tensor input
  virtual const OnnxConst& constant(int node, int k) const = 0;  // a constant input
  virtual bool output_read(int node, int k) const = 0;           // output k exists and is read
  virtual OnnxValue emit_layer(LayerSpec s, const std::vector<const OnnxValue*>& in, const std::string& weight_name,
                               const Dims& out, OnnxLayout lay) = 0;
  // A parameter of the layer emitted ("weight", ...), and the ONNX value it came from (or "").
  virtual void weight(const std::string& layer, const std::string& what, std::vector<float> data,
                      const std::string& from = "") = 0;
  virtual void set(int node, int k, OnnxValue v) = 0;  // node's output k is v
  virtual void consume(int node) = 0;                  // node maps with another (a MatMul's bias Add)
  // A Conv's or pool's window attributes as 2-D (a 1-D one of an [N, C, L] input gets the unit H
  // axis in front), its strides checked (1..65536), and its [top, left, bottom, right] padding on
  // input x (explicit pads or auto_pad; ceil_mode). overhang null: a conv (both sides alike, else
  // refused); else a pool (any padding after; set when ceil_mode's last window passes the pads).
  virtual std::vector<int64_t> window_ints(const OnnxAttrs& a, const char* name, std::vector<int64_t> def,
                                           bool one_d) const = 0;
  virtual void check_strides(int node, const std::vector<int64_t>& st, bool one_d) const = 0;
  virtual std::vector<int64_t> window_pads(int node, const OnnxAttrs& a, const Dims& x, const std::vector<int64_t>& k,
                                           const std::vector<int64_t>& st, bool one_d, bool* overhang) const = 0;

 protected:
  ~OnnxIn() = default;
};

// Messages: a list of ints as "[a, b]"; a window attribute as the file wrote it (a 1-D one's
// lifted 2-D form shown as [k], [b, e]); whether every value is x.
std::string onnx_ints_str(const std::vector<int64_t>& v);
std::string onnx_win_str(const std::vector<int64_t>& v, bool one_d);
bool onnx_all_are(const std::vector<int64_t>& v, int64_t x);
std::string onnx_shown(const std::string& name);  // a name from the file, cut to 120 characters

}  // namespace ember::nn
