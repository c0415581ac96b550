// Op "relu": max(x, 0): in place after a convolution, fused with a conv and a 2x2 max-pool.
// A parameter-free activation: JSON {"type": "relu"}, --act relu, Python act("relu"). Its layer
// runs src/kernels/act/relu.h (formula and vector form; the conv -> relu -> max-pool fusion is
// conv_relu_pool.cpp); ONNX: one Relu node each way.
#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

std::string export_relu(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Relu", {x}); }
bool import_relu(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::ReLU); }

}  // namespace

const OpDesc& op_desc_relu() {
  static const OpDesc d = [] {
    OpDesc o = act_op<ActId::relu>(LayerKind::ReLU, "relu",
                                   "max(x, 0): in place after a convolution, fused with a conv and a 2x2 max-pool", {"Relu"},
                                   export_relu, import_relu);
    o.dtypes.push_back("u8");  // the int8 plan: exact on u8, or in a conv's or Linear's requantization
    return o;
  }();
  return d;
}

}  // namespace ember::nn
