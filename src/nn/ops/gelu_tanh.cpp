// Op "gelu-tanh": GELU's tanh approximation (PyTorch's GELU(approximate='tanh')).
// A parameter-free activation: JSON {"type": "gelu-tanh"}, --act gelu-tanh, Python
// act("gelu-tanh"). Its layer runs src/kernels/act/gelu_tanh.h (formula and vector form); ONNX: its tanh
// formula (opset 17 has no Gelu), and the import of that pattern from its first Mul(x, x).
#include <cmath>

#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

bool import_gelu_node(OnnxIn& g, int node, bool tanh);  // gelu.cpp: opset 20's Gelu node

namespace {

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
std::string export_gelu_tanh(OnnxOut& g, const std::string& x, const LayerSpec&) {
  const std::string x3 = g.op("Mul", {g.op("Mul", {x, x}), x});
  const std::string in = g.op("Add", {x, g.op("Mul", {x3, g.scalar(0.044715f)})});
  const std::string t = g.op("Tanh", {g.op("Mul", {in, g.scalar(float(std::sqrt(2.0 / M_PI)))})});
  return g.op("Mul", {g.op("Mul", {x, g.op("Add", {t, g.scalar(1)})}), g.scalar(0.5f)});
}

// The one reader of v of type op (two inputs) whose other input is `other` (a value name), or a
// scalar constant near c when `other` is empty; else -1.
int step(OnnxIn& g, const std::string& v, const char* op, const std::string& other, float c) {
  const int r = g.reader(v);
  if (r < 0 || g.op_type(r) != op || g.input_count(r) != 2) return -1;
  const std::string& o = g.input(r, g.input(r, 0) == v ? 1 : 0);
  if (!other.empty()) return o == other ? r : -1;
  return g.scalar_near(o, c) ? r : -1;
}

// As torch.onnx and ember export it (operands of each Mul and Add in either order): x2 = x*x,
// x3 = x*x2, c*x3, x + ., k*., Tanh, 1 + ., x*., 0.5*. Every inner value has exactly one reader.
bool import_gelu_tanh(OnnxIn& g, int square) {
  if (g.op_type(square) == "Gelu") return import_gelu_node(g, square, true);
  if (g.input_count(square) != 2 || g.input(square, 0) != g.input(square, 1)) return false;
  const std::string& x = g.input(square, 0);
  std::vector<int> nodes{square};
  std::string v = g.output(square);
  const struct { const char* op; bool with_x; float c; } steps[] = {
      {"Mul", true, 0}, {"Mul", false, 0.044715f}, {"Add", true, 0}, {"Mul", false, 0.7978845608f},
      {"Tanh", false, 0}, {"Add", false, 1.f}, {"Mul", true, 0}, {"Mul", false, 0.5f}};
  for (const auto& st : steps) {
    int r;
    if (std::string(st.op) == "Tanh") {
      r = g.reader(v);
      if (r < 0 || g.op_type(r) != "Tanh") return false;
    } else {
      r = step(g, v, st.op, st.with_x ? x : std::string(), st.c);
      if (r < 0) return false;
    }
    nodes.push_back(r);
    v = g.output(r);
  }
  LayerSpec s;
  s.kind = LayerKind::GELUTanh;
  g.emit(nodes, x, s);
  return true;
}

}  // namespace

const OpDesc& op_desc_gelu_tanh() {
  static const OpDesc d = act_op<ActId::gelu_tanh>(
      LayerKind::GELUTanh, "gelu-tanh", "GELU's tanh approximation (PyTorch's GELU(approximate='tanh'))",
      {"Mul", "Add", "Tanh"}, export_gelu_tanh, import_gelu_tanh, {"Gelu"});
  return d;
}

}  // namespace ember::nn
