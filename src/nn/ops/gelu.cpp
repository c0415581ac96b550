// Op "gelu": x Phi(x) with the exact erf (PyTorch's GELU()).
// A parameter-free activation: JSON {"type": "gelu"}, --act gelu, Python act("gelu").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_gelu() {
  static const OpDesc d = activation_op(LayerKind::GELU, "gelu", "x Phi(x) with the exact erf (PyTorch's GELU())", {"Div", "Erf", "Add", "Mul"});
  return d;
}

}  // namespace ember::nn
