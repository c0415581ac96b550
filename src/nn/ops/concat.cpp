// Op "concat": 2 to 8 earlier layers' outputs joined over channels.
// "inputs" names them (layer names, or "input").
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_concat() {
  static const OpDesc d = join_op(LayerKind::Concat, "concat", "2 to 8 earlier layers' outputs joined over channels", "Concat");
  return d;
}

}  // namespace ember::nn
