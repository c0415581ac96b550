// ONNX files written as raw protobuf wire bytes (field numbers from onnx.proto), so the CLI tests
// can make hostile models (millions of nodes, lying versions, missing outputs) without an ONNX
// library, and stream the big ones to disk instead of holding them twice in memory.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace onnx_wire {

using Bytes = std::string;  // wire bytes

inline Bytes varint(uint64_t v) {
  Bytes b;
  for (; v >= 0x80; v >>= 7) b += char(uint8_t(v) | 0x80);
  return b + char(uint8_t(v));
}
inline Bytes tag(int field, int wire) { return varint(uint64_t(field) << 3 | uint64_t(wire)); }
inline Bytes num(int field, uint64_t v) { return tag(field, 0) + varint(v); }                       // int
inline Bytes str(int field, const Bytes& s) { return tag(field, 2) + varint(s.size()) + s; }   // string, bytes, message

// TypeProto of a float tensor; dims: a number, or 0 for the symbolic batch "N".
inline Bytes float_type(const std::vector<int64_t>& dims) {
  Bytes shape;
  for (int64_t d : dims) shape += str(1, d ? num(1, uint64_t(d)) : str(2, "N"));  // Dimension: dim_value 1, dim_param 2
  return str(1, num(1, 1) + str(2, shape));  // TypeProto.tensor_type {elem_type FLOAT, shape}
}
// ValueInfoProto: name 1, type 2 (left out when empty).
inline Bytes value_info(const std::string& name, const Bytes& type) { return str(1, name) + (type.empty() ? "" : str(2, type)); }

// NodeProto: input 1, output 2, name 3, op_type 4, attribute 5.
inline Bytes node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                  const std::string& name = "", const Bytes& attrs = "") {
  Bytes n;
  for (const auto& s : in) n += str(1, s);
  for (const auto& s : out) n += str(2, s);
  if (!name.empty()) n += str(3, name);
  return n + str(4, op) + attrs;
}
// AttributeProto in NodeProto.attribute (5): name 1, i 3, ints 8, type 20 (INT 2, INTS 7).
inline Bytes attr_int(const std::string& name, int64_t v) { return str(5, str(1, name) + num(3, uint64_t(v)) + num(20, 2)); }
inline Bytes attr_ints(const std::string& name, const std::vector<int64_t>& v) {
  Bytes a = str(1, name);
  for (int64_t x : v) a += num(8, uint64_t(x));
  return str(5, a + num(20, 7));
}

// TensorProto of floats (dims 1, data_type 2 = FLOAT, name 8, raw_data 9), every value `v`.
inline Bytes float_tensor(const std::string& name, const std::vector<int64_t>& dims, float v) {
  Bytes t;
  size_t n = 1;
  for (int64_t d : dims) t += num(1, uint64_t(d)), n *= size_t(d);
  Bytes raw;
  for (size_t k = 0; k < n; ++k) raw.append(reinterpret_cast<const char*>(&v), 4);
  return t + num(2, 1) + str(8, name) + str(9, raw);
}

// The parts of a model: GraphProto fields (node 1, initializer 5, input 11, output 12) and the
// ModelProto around them (ir_version 1, opset_import 8 {version 2}, graph 7).
struct Model {
  int64_t ir_version = 8, opset = 17;
  Bytes nodes, initializers, inputs, outputs;
  Bytes graph() const { return nodes + str(2, "g") + initializers + inputs + outputs; }
  Bytes head() const { return num(1, uint64_t(ir_version)) + str(8, num(2, uint64_t(opset))); }
  Bytes bytes() const { return head() + str(7, graph()); }
};

// An MNIST classifier's start: x [N, 1, 28, 28] -> Flatten -> Gemm (fc.weight [10, 784], transB)
// -> `out` ([N, 10]); the caller adds the graph's output.
inline Model gemm_model(const std::string& out) {
  Model m;
  m.nodes = str(1, node("Flatten", {"x"}, {"flat"})) + str(1, node("Gemm", {"flat", "fc.weight"}, {out}, "fc", attr_int("transB", 1)));
  m.initializers = str(5, float_tensor("fc.weight", {10, 784}, 0.01f));
  m.inputs = str(11, value_info("x", float_type({0, 1, 28, 28})));
  return m;
}

// Writes m with `count` more nodes after its own, node k made by more(k) (each the same size, so
// the graph's length is known before they are written): a file of millions of nodes, streamed.
template <class F>
bool write_with_nodes(const std::string& path, const Model& m, uint64_t count, F more) {
  const Bytes one = str(1, more(0));
  const Bytes rest = m.graph();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << m.head() << tag(7, 2) << varint(rest.size() + one.size() * count) << rest;
  for (uint64_t k = 0; k < count; ++k) f << str(1, more(k));
  return f.good();
}

}  // namespace onnx_wire
