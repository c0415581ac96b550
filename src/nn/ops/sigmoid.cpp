// Op "sigmoid": 1 / (1 + exp(-x)).
// A parameter-free activation: JSON {"type": "sigmoid"}, --act sigmoid, Python act("sigmoid").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_sigmoid() {
  static const OpDesc d = activation_op(LayerKind::Sigmoid, "sigmoid", "1 / (1 + exp(-x))", {"Sigmoid"});
  return d;
}

}  // namespace ember::nn
