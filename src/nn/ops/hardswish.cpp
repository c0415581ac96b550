// Op "hardswish": x relu6(x + 3) / 6 (PyTorch's Hardswish).
// A parameter-free activation: JSON {"type": "hardswish"}, --act hardswish, Python act("hardswish").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_hardswish() {
  static const OpDesc d = activation_op(LayerKind::HardSwish, "hardswish", "x relu6(x + 3) / 6 (PyTorch's Hardswish)", {"HardSwish"});
  return d;
}

}  // namespace ember::nn
