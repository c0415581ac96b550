// Op "silu": x sigmoid(x) (PyTorch's SiLU, swish).
// A parameter-free activation: JSON {"type": "silu"}, --act silu, Python act("silu"). Its layer
// runs src/kernels/act/silu.h (formula and vector form); ONNX: x * Sigmoid(x) (opset 17 has no SiLU),
// and the import of that pattern from its Sigmoid (tried before sigmoid's own, the longer pattern).
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_silu(OnnxOut& g, const std::string& x, const LayerSpec&) {
  return g.op("Mul", {x, g.op("Sigmoid", {x})});
}

// Sigmoid(x) -> Mul(x, .) in either operand order.
bool import_silu(OnnxIn& g, int sigmoid) {
  if (g.input_count(sigmoid) != 1) return false;
  const std::string &x = g.input(sigmoid, 0), &sig = g.output(sigmoid);
  const int mul = g.reader(sig);
  if (mul < 0 || g.op_type(mul) != "Mul" || g.input_count(mul) != 2) return false;
  const std::string &a = g.input(mul, 0), &b = g.input(mul, 1);
  if (!((a == x && b == sig) || (a == sig && b == x))) return false;
  LayerSpec s;
  s.kind = LayerKind::SiLU;
  g.emit({sigmoid, mul}, x, s);
  return true;
}

}  // namespace

const OpDesc& op_desc_silu() {
  static const OpDesc d = act_op<ActId::silu>(
      LayerKind::SiLU, "silu", "x sigmoid(x) (PyTorch's SiLU, swish)",
      {"Sigmoid", "Mul"}, export_silu, import_silu);
  return d;
}

}  // namespace ember::nn
