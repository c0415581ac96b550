// Op "elu": x above 0, e^x - 1 below (PyTorch's ELU(), alpha 1): an activation in two files, this
// one (its descriptor, ONNX export as one Elu node and the import of an Elu of alpha 1) and
// src/kernels/act/elu.h (its formula, the reference, and its vector form).
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_elu(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Elu", {x}); }

bool import_elu(OnnxIn& g, int node) {
  const OnnxAttrs& a = g.attrs(node);
  a.only({"alpha"});
  if (a.f("alpha", 1.f) != 1.f) throw Error(g.where(node) + ": alpha " + std::to_string(a.f("alpha", 1.f)) + " is not supported (elu: alpha 1)");
  return onnx_import_node(g, node, LayerKind::ELU);
}

}  // namespace

const OpDesc& op_desc_elu() {
  static const OpDesc d = act_op<ActId::elu>(LayerKind::ELU, "elu", "x above 0, e^x - 1 below (PyTorch's ELU())", {"Elu"},
                                             export_elu, import_elu);
  return d;
}

}  // namespace ember::nn
