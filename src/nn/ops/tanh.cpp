// Op "tanh": tanh(x).
// A parameter-free activation: JSON {"type": "tanh"}, --act tanh, Python act("tanh").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_tanh() {
  static const OpDesc d = activation_op(LayerKind::Tanh, "tanh", "tanh(x)", {"Tanh"});
  return d;
}

}  // namespace ember::nn
