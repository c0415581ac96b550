// Op "hardswish": x relu6(x + 3) / 6 (PyTorch's Hardswish).
// A parameter-free activation: JSON {"type": "hardswish"}, --act hardswish, Python
// act("hardswish"). Its layer runs src/kernels/act/hardswish.h (formula and vector form); ONNX: one
// HardSwish node each way.
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_hardswish(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("HardSwish", {x}); }
bool import_hardswish(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::HardSwish); }

}  // namespace

const OpDesc& op_desc_hardswish() {
  static const OpDesc d = act_op<ActId::hardswish>(
      LayerKind::HardSwish, "hardswish", "x relu6(x + 3) / 6 (PyTorch's Hardswish)",
      {"HardSwish"}, export_hardswish, import_hardswish);
  return d;
}

}  // namespace ember::nn
