// Op "avgpool2d": the mean of each window (PyTorch AvgPool2d).
// Its stride defaults to its kernel, as PyTorch's does.
#include "nn/op_table.h"

namespace ember::nn {

const OpDesc& op_desc_avgpool2d() {
  static const OpDesc d = pool_op(LayerKind::AvgPool2d, "avgpool2d", "the mean of each window (PyTorch AvgPool2d)", "AveragePool");
  return d;
}

}  // namespace ember::nn
