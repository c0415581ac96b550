// Op "avgpool2d": the mean of each window (PyTorch AvgPool2d).
// Its stride defaults to its kernel, as PyTorch's does; "count_include_pad" (default true, as
// PyTorch) false divides by the window's input positions only (ONNX AveragePool's default).
#include "nn/op_table.h"
#include "nn/pool2d.h"

namespace ember::nn {

namespace {
OpField count_include_pad_field() {
  return {"count_include_pad", "bool", "true",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.count_include_pad = r.boolean(v, p); },
          [](const LayerSpec& s, json& o) {
            if (!s.count_include_pad) o["count_include_pad"] = false;
          }};
}
}  // namespace

const OpDesc& op_desc_avgpool2d() {
  static const OpDesc d = [] {
    OpDesc o = pool_op(LayerKind::AvgPool2d, "avgpool2d", "the mean of each window (PyTorch AvgPool2d)", "AveragePool");
    o.fields.push_back(count_include_pad_field());
    o.make = [](const LayerSpec& s) -> std::unique_ptr<Layer> { return std::make_unique<Pool2d>(s, false); };
    o.onnx_export = export_pool2d;
    o.onnx_import = import_pool2d;
    return o;
  }();
  return d;
}

}  // namespace ember::nn
