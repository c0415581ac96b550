// Op "fastswish": the ConvNeXt study's FastSwish: x (x + a) / (a + 3) on [-3, 3], x above, -1 / x^2 below.
// A parameter-free activation: JSON {"type": "fastswish"}, --act fastswish, Python act("fastswish").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_fastswish() {
  static const OpDesc d = activation_op(LayerKind::FastSwish, "fastswish", "the ConvNeXt study's FastSwish: x (x + a) / (a + 3) on [-3, 3], x above, -1 / x^2 below", {"Add", "Mul", "Div", "Less", "Greater", "Where"});
  return d;
}

}  // namespace ember::nn
