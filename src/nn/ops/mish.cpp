// Op "mish": x tanh(softplus(x)) (Misra 2019; PyTorch's Mish): an activation in two files, this one
// (its descriptor, ONNX export as Softplus -> Tanh -> Mul (opset 17 has no Mish) and the import of
// that pattern) and src/kernels/act/mish.h (its formula, the reference, and its vector form).
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_mish(OnnxOut& g, const std::string& x, const LayerSpec&) {
  return g.op("Mul", {x, g.op("Tanh", {g.op("Softplus", {x})})});
}

// Softplus(x) -> Tanh -> Mul(x, .), as ember and torch.onnx (opset < 18) export Mish.
bool import_mish(OnnxIn& g, int softplus) {
  if (g.input_count(softplus) != 1) return false;
  const std::string& x = g.input(softplus, 0);
  const int tanh = g.reader(g.output(softplus));
  if (tanh < 0 || g.op_type(tanh) != "Tanh") return false;
  const int mul = g.reader(g.output(tanh));
  if (mul < 0 || g.op_type(mul) != "Mul" || g.input_count(mul) != 2) return false;
  const std::string &a = g.input(mul, 0), &b = g.input(mul, 1), &t = g.output(tanh);
  if (!((a == x && b == t) || (a == t && b == x))) return false;
  LayerSpec s;
  s.kind = LayerKind::Mish;
  g.emit({softplus, tanh, mul}, x, s);
  return true;
}

}  // namespace

const OpDesc& op_desc_mish() {
  static const OpDesc d = act_op<ActId::mish>(LayerKind::Mish, "mish", "x tanh(softplus(x)) (PyTorch's Mish)",
                                         {"Softplus", "Tanh", "Mul"}, export_mish, import_mish);
  return d;
}

}  // namespace ember::nn
