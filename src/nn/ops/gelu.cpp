// Op "gelu": x Phi(x) with the exact erf (PyTorch's GELU()).
// A parameter-free activation: JSON {"type": "gelu"}, --act gelu, Python act("gelu"). Its layer
// runs src/kernels/act/gelu.h (formula and vector form); ONNX: 0.5 x (1 + erf(x / sqrt 2)) as torch.onnx
// writes nn.GELU() (opset 17 has no Gelu), and the import of that pattern from its Div. (Opset
// 20's one Gelu node, gelu or gelu-tanh by its attribute, too: import_gelu_node.)
#include <cmath>

#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

bool import_gelu_node(OnnxIn& g, int node, bool tanh);

namespace {

std::string export_gelu(OnnxOut& g, const std::string& x, const LayerSpec&) {
  const std::string e = g.op("Erf", {g.op("Div", {x, g.scalar(float(std::sqrt(2.0)))})});
  return g.op("Mul", {g.op("Mul", {x, g.op("Add", {e, g.scalar(1)})}), g.scalar(0.5f)});
}

// The one reader of v when it is an op node of two inputs, the other one the constant c.
int next_with(OnnxIn& g, const std::string& v, const char* op, float c) {
  const int r = g.reader(v);
  if (r < 0 || g.op_type(r) != op || g.input_count(r) != 2) return -1;
  return g.scalar(g.input(r, g.input(r, 0) == v ? 1 : 0)) == c ? r : -1;
}

// Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5), as torch.onnx and ember export it.
bool import_gelu(OnnxIn& g, int div) {
  if (g.op_type(div) == "Gelu") return import_gelu_node(g, div, false);
  if (g.input_count(div) != 2 || !(std::fabs(g.scalar(g.input(div, 1)) - float(std::sqrt(2.0))) <= 1e-4f)) return false;
  const std::string& x = g.input(div, 0);
  const int erf = g.reader(g.output(div));
  if (erf < 0 || g.op_type(erf) != "Erf") return false;
  const int add = next_with(g, g.output(erf), "Add", 1.f);
  const int mx = add < 0 ? -1 : g.reader(g.output(add));
  if (mx < 0 || g.op_type(mx) != "Mul" || g.input_count(mx) != 2 || (g.input(mx, 0) != x && g.input(mx, 1) != x))
    return false;
  const int half = next_with(g, g.output(mx), "Mul", 0.5f);
  if (half < 0) return false;
  LayerSpec s;
  s.kind = LayerKind::GELU;
  g.emit({div, erf, add, mx, half}, x, s);
  return true;
}

}  // namespace

// Opset 20's one Gelu node: gelu (approximate "none") or gelu-tanh ("tanh"; other values refused).
bool import_gelu_node(OnnxIn& g, int node, bool tanh) {
  const OnnxAttrs& a = g.attrs(node);
  a.only({"approximate"});
  const std::string ap = a.s("approximate", "none");
  if (ap != "none" && ap != "tanh") throw Error(g.where(node) + ": approximate '" + ap + "' is not supported");
  return (ap == "tanh") == tanh && onnx_import_node(g, node, tanh ? LayerKind::GELUTanh : LayerKind::GELU);
}

const OpDesc& op_desc_gelu() {
  static const OpDesc d = act_op<ActId::gelu>(
      LayerKind::GELU, "gelu", "x Phi(x) with the exact erf (PyTorch's GELU())",
      {"Div", "Erf", "Add", "Mul"}, export_gelu, import_gelu, {"Gelu"});
  return d;
}

}  // namespace ember::nn
