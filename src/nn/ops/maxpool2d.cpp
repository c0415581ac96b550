// Op "maxpool2d": the largest value of each window (PyTorch MaxPool2d).
// Its stride defaults to its kernel, as PyTorch's does.
#include "nn/op_table.h"
#include "nn/pool2d.h"

namespace ember::nn {

const OpDesc& op_desc_maxpool2d() {
  static const OpDesc d = [] {
    OpDesc o = pool_op(LayerKind::MaxPool2d, "maxpool2d", "the largest value of each window (PyTorch MaxPool2d)", "MaxPool");
    o.layouts.push_back("nhwc");  // loops over windows of C runs
    o.make = [](const LayerSpec& s) -> std::unique_ptr<Layer> { return std::make_unique<Pool2d>(s, true); };
    o.onnx_export = export_pool2d;
    o.onnx_import = import_pool2d;
    o.dtypes.push_back("u8");  // the int8 plan: 2x2/2 windows, exact on u8
    return o;
  }();
  return d;
}

}  // namespace ember::nn
