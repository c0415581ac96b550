// Op "softsign": x / (1 + |x|) (PyTorch's Softsign, ONNX's Softsign), an activation that lives in
// this one file: its formula and derivative (the layer on every kernel set, nn/pointwise.h), its
// ONNX export as one Softsign node and the import of that node.
#include <cmath>

#include "nn/op_table.h"
#include "nn/pointwise.h"

namespace ember::nn {

namespace {

struct Softsign {
  template <class T>
  static T f(T x) { return x / (T(1) + std::abs(x)); }
  // d/dx = 1 / (1 + |x|)^2
  template <class T>
  static T df(T x) {
    const T d = T(1) + std::abs(x);
    return T(1) / (d * d);
  }
};

std::string export_softsign(OnnxOut& g, const std::string& x, const LayerSpec&) { return g.op("Softsign", {x}); }

bool import_softsign(OnnxIn& g, int node) { return onnx_import_node(g, node, LayerKind::Softsign); }

}  // namespace

const OpDesc& op_desc_softsign() {
  static const OpDesc d = pointwise_op<Softsign>(LayerKind::Softsign, "softsign", "x / (1 + |x|) (PyTorch's Softsign)",
                                                  {"Softsign"}, export_softsign, import_softsign);
  return d;
}

}  // namespace ember::nn
