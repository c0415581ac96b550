// Op "relu": max(x, 0): in place after a convolution, fused with a conv and a 2x2 max-pool.
// A parameter-free activation: JSON {"type": "relu"}, --act relu, Python act("relu").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_relu() {
  static const OpDesc d = activation_op(LayerKind::ReLU, "relu", "max(x, 0): in place after a convolution, fused with a conv and a 2x2 max-pool", {"Relu"});
  return d;
}

}  // namespace ember::nn
