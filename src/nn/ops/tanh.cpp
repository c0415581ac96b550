// Op "tanh": tanh(x).
// A parameter-free activation: JSON {"type": "tanh"}, --act tanh, Python act("tanh"). Its layer
// runs src/kernels/act/tanh.h (formula and vector form); ONNX: one Tanh node each way.
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_tanh(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Tanh", {x}); }
bool import_tanh(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::Tanh); }

}  // namespace

const OpDesc& op_desc_tanh() {
  static const OpDesc d = act_op<ActId::tanh>(
      LayerKind::Tanh, "tanh", "tanh(x)", {"Tanh"}, export_tanh, import_tanh);
  return d;
}

}  // namespace ember::nn
