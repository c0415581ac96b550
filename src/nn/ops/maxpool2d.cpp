// Op "maxpool2d": the largest value of each window (PyTorch MaxPool2d).
// Its stride defaults to its kernel, as PyTorch's does.
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_maxpool2d() {
  static const OpDesc d = pool_op(LayerKind::MaxPool2d, "maxpool2d", "the largest value of each window (PyTorch MaxPool2d)", "MaxPool");
  return d;
}

}  // namespace ember::nn
