// Op "sigmoid": 1 / (1 + exp(-x)).
// A parameter-free activation: JSON {"type": "sigmoid"}, --act sigmoid, Python act("sigmoid").
// Its layer runs src/kernels/act/sigmoid.h (formula and vector form); ONNX: one Sigmoid node each way
// (a Sigmoid read by Mul(x, .) imports as silu, whose longer pattern is tried first).
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_sigmoid(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Sigmoid", {x}); }
bool import_sigmoid(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::Sigmoid); }

}  // namespace

const OpDesc& op_desc_sigmoid() {
  static const OpDesc d = act_op<ActId::sigmoid>(
      LayerKind::Sigmoid, "sigmoid", "1 / (1 + exp(-x))", {"Sigmoid"}, export_sigmoid, import_sigmoid);
  return d;
}

}  // namespace ember::nn
