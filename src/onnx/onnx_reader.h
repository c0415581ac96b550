// The checked view of an ONNX file that the importer maps: constant tensors (initializers and
// Constant nodes) as f32 or i64 values after every field is checked against the bytes, the node
// attributes read with their types checked, and the graph's names checked for single assignment and
// topological order. Errors name the file and the field.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ember_onnx.pb.h"
#include "nn/op_onnx.h"

namespace ember::onnx {

namespace pb = ember_onnx;

// A name from the file as messages show it: cut to 120 characters (import_onnx makes it one line).
std::string shown(const std::string& s);

using Const = nn::OnnxConst;  // a constant: dims, values as float and (integer types) int64

// Reads a TensorProto (`what` names it in errors); refuses external data and sizes that the
// bytes do not hold.
Const read_tensor(const pb::TensorProto& t, const std::string& what);

// Every tensor the graph names is assigned once and defined before it is read: initializer names
// unique ("initializer 'w' appears twice"), each node output written by one node only and not an
// initializer's or the graph input's name, and each node input that a node writes written by an
// earlier node (ONNX's topological order; a later one: "used before any node produces it", or "the
// graph has a cycle"). Names no node writes are left to the importer. Error "FILE: ...".
void check_graph_names(const pb::GraphProto& g, const std::string& file);

// A node's attributes by name; each getter checks the type and names node and attribute.
class Attrs final : public nn::OnnxAttrs {
 public:
  Attrs(const pb::NodeProto& n, std::string where);
  bool has(const std::string& name) const override { return a_.count(name) > 0; }
  int64_t i(const std::string& name, int64_t def) const override;
  float f(const std::string& name, float def) const override;
  std::string s(const std::string& name, const std::string& def) const override;
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def) const override;
  const pb::TensorProto* tensor(const std::string& name) const;
  // Throws for any attribute not in `known` ("attribute 'dilations' is not supported").
  void only(std::initializer_list<const char*> known) const override;
  const std::string& where() const override { return where_; }

 private:
  const pb::AttributeProto& get(const std::string& name, pb::AttributeProto::AttributeType t) const;
  std::map<std::string, const pb::AttributeProto*> a_;
  std::string where_;
};

}  // namespace ember::onnx
