// Op "gelu-tanh": GELU's tanh approximation (PyTorch's GELU(approximate='tanh')).
// A parameter-free activation: JSON {"type": "gelu-tanh"}, --act gelu-tanh, Python act("gelu-tanh").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_gelu_tanh() {
  static const OpDesc d = activation_op(LayerKind::GELUTanh, "gelu-tanh", "GELU's tanh approximation (PyTorch's GELU(approximate='tanh'))", {"Mul", "Add", "Tanh"});
  return d;
}

}  // namespace ember::nn
