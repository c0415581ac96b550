// Op "silu": x sigmoid(x) (PyTorch's SiLU, swish).
// A parameter-free activation: JSON {"type": "silu"}, --act silu, Python act("silu").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_silu() {
  static const OpDesc d = activation_op(LayerKind::SiLU, "silu", "x sigmoid(x) (PyTorch's SiLU, swish)", {"Sigmoid", "Mul"});
  return d;
}

}  // namespace ember::nn
