// Op "softsign": x / (1 + |x|) (PyTorch's Softsign, ONNX's Softsign): an activation in two files,
// this one (its descriptor, ONNX export as one Softsign node and the import of that node) and
// src/kernels/act/softsign.h (its formula, the reference, and its vector form).
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_softsign(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Softsign", {x}); }

bool import_softsign(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::Softsign); }

}  // namespace

const OpDesc& op_desc_softsign() {
  static const OpDesc d = act_op<ActId::softsign>(LayerKind::Softsign, "softsign", "x / (1 + |x|) (PyTorch's Softsign)",
                                                  {"Softsign"}, export_softsign, import_softsign);
  return d;
}

}  // namespace ember::nn
