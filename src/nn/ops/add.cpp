// Op "add": the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection).
// "inputs" names them (layer names, or "input").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_add() {
  static const OpDesc d = join_op(LayerKind::Add, "add", "the elementwise sum of 2 to 8 earlier layers' outputs (a residual connection)", "Sum");
  return d;
}

}  // namespace ember::nn
