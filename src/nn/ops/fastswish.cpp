// Op "fastswish": the ConvNeXt study's FastSwish: x (x + a) / (a + 3) on [-3, 3], x above, -1 / x^2 below.
// A parameter-free activation: JSON {"type": "fastswish"}, --act fastswish, Python
// act("fastswish"). Its layer runs src/kernels/act/fastswish.h (formula and vector form); ONNX: Where of
// its three pieces, and the import of that pattern (ember's and bench/convnext_torch.py's) from its Add(x, a).
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

constexpr float kA = 3.2308f;  // the study's a

// Where(x > 3, x, Where(x < -3, -1 / (x * x), x (x + a) / (a + 3))).
std::string export_fastswish(OnnxOut& g, const std::string& x, const LayerSpec&) {
  const std::string mid = g.op("Div", {g.op("Mul", {x, g.op("Add", {x, g.scalar(kA)})}), g.scalar(kA + 3)});
  const std::string low = g.op("Div", {g.scalar(-1), g.op("Mul", {x, x})});
  const std::string lo = g.op("Where", {g.op("Less", {x, g.scalar(-3)}), low, mid});
  return g.op("Where", {g.op("Greater", {x, g.scalar(3)}), x, lo});
}

// Whether node (>= 0) has the two inputs in0, in1.
bool is(OnnxIn& g, int node, const std::string& in0, const std::string& in1) {
  return node >= 0 && g.input_count(node) == 2 && g.input(node, 0) == in0 && g.input(node, 1) == in1;
}
// A two-input node's second input, else "" (a hostile file's Less(x)).
std::string second(OnnxIn& g, int node) { return node >= 0 && g.input_count(node) == 2 ? g.input(node, 1) : ""; }
// The node of type op that outputs v (still to map, v with one reader), else -1.
int made_by(OnnxIn& g, const std::string& v, const char* op) {
  const int p = g.producer(v);
  return p >= 0 && g.op_type(p) == op ? p : -1;
}
// The one reader of v of type op with `inputs` inputs, else -1.
int read_by(OnnxIn& g, const std::string& v, const char* op, int inputs) {
  const int r = g.reader(v);
  return r >= 0 && g.op_type(r) == op && g.input_count(r) == inputs ? r : -1;
}
// Whether node compares x with the constant c: Less(x, -3), Greater(x, 3).
bool compares(OnnxIn& g, int node, const std::string& x, float c) {
  return is(g, node, x, second(g, node)) && g.scalar_near(second(g, node), c);
}

// The low piece -1 / (x * x): Div(-1, x*x) (ember), or Mul(Reciprocal(x*x), -1) in either order
// (torch.onnx): the same bits. Appends its nodes (the Mul x*x last); false when it is not.
bool low_piece(OnnxIn& g, const std::string& v, const std::string& x, std::vector<int>& nodes) {
  std::string xx_value;
  if (const int div = made_by(g, v, "Div"); div >= 0 && g.input_count(div) == 2 && g.scalar_near(g.input(div, 0), -1.f)) {
    nodes.push_back(div);
    xx_value = g.input(div, 1);
  } else if (const int mul = made_by(g, v, "Mul"); mul >= 0 && g.input_count(mul) == 2) {
    const int k = g.scalar_near(g.input(mul, 1), -1.f) ? 0 : g.scalar_near(g.input(mul, 0), -1.f) ? 1 : -1;
    const int recip = k < 0 ? -1 : made_by(g, g.input(mul, k), "Reciprocal");
    if (recip < 0 || g.input_count(recip) != 1) return false;
    nodes.insert(nodes.end(), {mul, recip});
    xx_value = g.input(recip, 0);
  } else {
    return false;
  }
  const int xx = made_by(g, xx_value, "Mul");
  if (!is(g, xx, x, x)) return false;
  nodes.push_back(xx);
  return true;
}

// mid = x (x + a) / (a + 3), low = -1 / (x * x), Where(x > 3, x, Where(x < -3, low, mid)), matched
// from the Add(x, a) it starts with; every inner value has exactly one reader.
bool import_fastswish(OnnxIn& g, int add) {
  if (g.input_count(add) != 2) return false;
  const int xi = g.scalar_near(g.input(add, 1), kA) ? 0 : g.scalar_near(g.input(add, 0), kA) ? 1 : -1;
  if (xi < 0) return false;
  const std::string& x = g.input(add, xi);
  const int mul = read_by(g, g.output(add), "Mul", 2);
  if (mul < 0 || (g.input(mul, 0) != x && g.input(mul, 1) != x)) return false;
  const int div = read_by(g, g.output(mul), "Div", 2);
  if (div < 0 || g.input(div, 0) != g.output(mul) || !g.scalar_near(g.input(div, 1), kA + 3)) return false;
  const int inner = read_by(g, g.output(div), "Where", 3);
  if (inner < 0 || g.input(inner, 2) != g.output(div)) return false;
  const int less = made_by(g, g.input(inner, 0), "Less");
  if (!compares(g, less, x, -3.f)) return false;
  std::vector<int> nodes{add, mul, div, less};
  if (!low_piece(g, g.input(inner, 1), x, nodes)) return false;
  const int outer = read_by(g, g.output(inner), "Where", 3);
  if (outer < 0 || g.input(outer, 1) != x || g.input(outer, 2) != g.output(inner)) return false;
  const int greater = made_by(g, g.input(outer, 0), "Greater");
  if (!compares(g, greater, x, 3.f)) return false;
  nodes.insert(nodes.end(), {greater, inner, outer});
  LayerSpec s;
  s.kind = LayerKind::FastSwish;
  g.emit(nodes, x, s);
  return true;
}

}  // namespace

const OpDesc& op_desc_fastswish() {
  static const OpDesc d = act_op<ActId::fastswish>(
      LayerKind::FastSwish, "fastswish", "the ConvNeXt study's FastSwish: x (x + a) / (a + 3) on [-3, 3], x above, -1 / x^2 below",
      {"Add", "Mul", "Div", "Less", "Greater", "Where"}, export_fastswish, import_fastswish);
  return d;
}

}  // namespace ember::nn
