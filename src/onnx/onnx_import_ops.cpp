// The ONNX importer's node mapping: the op files' imports (through TableIn, nn/op_onnx.h: each
// checks the node's attributes and inputs against what its layer computes, emits it and sets the
// node's output), and what is the graph's rather than an op's: constants, the pass-throughs
// (Identity, Dropout), Transpose as a layout view, and the Conv and pool window rules the op
// files share. Anything else is refused with the node and op named.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ember/error.h"
#include "nn/op_table.h"
#include "onnx/onnx_import_ops.h"

namespace ember::onnx {

namespace {

std::string ints_str(const std::vector<int64_t>& v) { return nn::onnx_ints_str(v); }
std::string win_str(const std::vector<int64_t>& v, bool one_d) { return nn::onnx_win_str(v, one_d); }

// A scalar constant's value (any shape holding one value), or NaN.
float scalar_of(const Val& v) { return v.is_const && v.c.count() == 1 && v.c.dims.size() <= 1 ? v.c.f[0] : NAN; }


}  // namespace

// A window attribute of a Conv or pool as 2-D: a 1-D one (of an [N, C, L] input) gets the unit
// H axis in front: kernel_shape [k] -> [1, k], pads [b, e] -> [0, b, 0, e].
std::vector<int64_t> Importer::window_ints(const nn::OnnxAttrs& a, const char* name, std::vector<int64_t> def, bool one_d) const {
  if (!one_d || !a.has(name)) return a.ints(name, std::move(def));
  std::vector<int64_t> v = a.ints(name, {});
  if (v.size() == 1) return {1, v[0]};
  if (v.size() == 2 && std::string(name) == "pads") return {0, v[0], 0, v[1]};
  throw Error(a.where() + ": attribute " + name + " " + ints_str(v) + " must be 1-D for an [N, C, L] input");
}

// The graph as an op's own import (the op table's onnx_import) sees it.
class TableIn final : public nn::OnnxIn {
 public:
  explicit TableIn(Importer& im) : im_(im) {}
  const std::string& op_type(int node) const override { return im_.g_.node(node).op_type(); }
  int input_count(int node) const override { return im_.g_.node(node).input_size(); }
  const std::string& input(int node, int k) const override { return im_.g_.node(node).input(k); }
  const std::string& output(int node) const override { return im_.g_.node(node).output(0); }
  int reader(const std::string& value) const override {
    const int r = im_.only_reader(value);
    return r < 0 || !im_.live_[size_t(r)] || im_.done_[size_t(r)] ? -1 : r;
  }
  int producer(const std::string& value) const override {
    auto it = im_.producer_.find(value);
    const int p = it == im_.producer_.end() ? -1 : it->second;
    return p < 0 || im_.done_[size_t(p)] || im_.only_reader(value) < 0 ? -1 : p;
  }
  float scalar(const std::string& value) const override {
    auto it = im_.vals_.find(value);
    return it == im_.vals_.end() ? NAN : scalar_of(it->second);
  }
  void emit(const std::vector<int>& nodes, const std::string& x, const LayerSpec& s) override {
    auto it = im_.vals_.find(x);
    if (it == im_.vals_.end())
      throw Error(im_.where(nodes.front()) + ": its input '" + shown(x) + "' is not a graph input, a weight or an earlier node's output");
    if (it->second.is_const)
      throw Error(im_.where(nodes.front()) + ": its input '" + shown(x) + "' is not a tensor; ember computes this op on tensors only");
    for (size_t k = 1; k < nodes.size(); ++k) im_.done_[size_t(nodes[k])] = true;
    const Val& in = it->second;
    im_.set(nodes.back(), 0, im_.emit(s, {&in}, "", in.d, in.lay));
  }
  std::string where(int node) const override { return im_.where(node); }
  int opset() const override { return im_.opset_; }
  const nn::OnnxAttrs& attrs(int node) override {
    std::unique_ptr<Attrs>& a = attrs_[node];
    if (!a) a = std::make_unique<Attrs>(im_.g_.node(node), im_.where(node));
    return *a;
  }
  const Val& val(int node, int k) const override { return im_.val(node, k); }
  const Val* find(const std::string& value) const override {
    const auto it = im_.vals_.find(value);
    return it == im_.vals_.end() ? nullptr : &it->second;
  }
  const Val& tensor(int node, int k) const override { return im_.tensor(node, k); }
  const Const& constant(int node, int k) const override { return im_.constant(node, k); }
  bool output_read(int node, int k) const override {
    const pb::NodeProto& n = im_.g_.node(node);
    return k < n.output_size() && !n.output(k).empty() && im_.readers_.count(n.output(k));
  }
  Val emit_layer(LayerSpec s, const std::vector<const Val*>& in, const std::string& weight_name, const nn::Dims& out,
                 Layout lay) override {
    return im_.emit(std::move(s), in, weight_name, out, lay);
  }
  void weight(const std::string& layer, const std::string& what, std::vector<float> data, const std::string& from) override {
    im_.weight(layer, what, std::move(data));
    if (!from.empty()) im_.sources_[layer + "." + what] = from;
  }
  void set(int node, int k, Val v) override { im_.set(node, k, std::move(v)); }
  void consume(int node) override { im_.done_[size_t(node)] = true; }
  std::vector<int64_t> window_ints(const nn::OnnxAttrs& a, const char* name, std::vector<int64_t> def,
                                   bool one_d) const override {
    return im_.window_ints(a, name, std::move(def), one_d);
  }
  void check_strides(int node, const std::vector<int64_t>& st, bool one_d) const override { im_.check_strides(node, st, one_d); }
  std::vector<int64_t> window_pads(int node, const nn::OnnxAttrs& a, const nn::Dims& x, const std::vector<int64_t>& k,
                                   const std::vector<int64_t>& st, bool one_d, bool* overhang) const override {
    return im_.window_pads(node, a, x, k, st, one_d, overhang);
  }

 private:
  Importer& im_;
  std::map<int, std::unique_ptr<Attrs>> attrs_;
};

// Whether an op's import maps nodes of type op: its first ONNX type (alone or its pattern's
// start) and its onnx_from.
static bool imports(const nn::OpDesc& d, const std::string& op) {
  if (!d.onnx_import) return false;
  if (!d.onnx.empty() && op == d.onnx[0]) return true;
  return std::any_of(d.onnx_from.begin(), d.onnx_from.end(), [&](const char* t) { return op == t; });
}

// The ops of the table with an import, the longer patterns (more ONNX types) first, else in
// table order: silu's Sigmoid -> Mul is tried before sigmoid's Sigmoid.
static const std::vector<const nn::OpDesc*>& importers() {
  static const std::vector<const nn::OpDesc*> list = [] {
    std::vector<const nn::OpDesc*> v;
    for (const nn::OpDesc* d : nn::op_table())
      if (d->onnx_import) v.push_back(d);
    std::stable_sort(v.begin(), v.end(), [](const nn::OpDesc* a, const nn::OpDesc* b) { return a->onnx.size() > b->onnx.size(); });
    return v;
  }();
  return list;
}

// An op of the table that maps node i (of type op): true when one did.
static bool table_import(Importer& im, int i, const std::string& op) {
  TableIn in(im);
  for (const nn::OpDesc* d : importers())
    if (imports(*d, op) && d->onnx_import(in, i)) return true;
  return false;
}

const Val& Importer::tensor(int i, int k) const {
  const Val& v = val(i, k);
  if (v.is_const) throw Error(where(i) + ": input " + std::to_string(k) + " is a constant; ember computes this op on tensors only");
  return v;
}

// A Conv's or pool's strides (2-D): each in 1..65536, else refused naming the attribute.
void Importer::check_strides(int i, const std::vector<int64_t>& st, bool one_d) const {
  for (int64_t v : st)
    if (v < 1 || v > 65536)
      throw Error(where(i) + ": attribute strides " + win_str(st, one_d) + ": each stride must be at least 1 and at most 65536");
}

// The [top, left, bottom, right] padding of a Conv's or pool's window (kernel k, strides st, dilation
// 1) on an H x W input: explicit pads, or auto_pad's (SAME_UPPER / SAME_LOWER: output ceil(H /
// stride), the odd row after / before; VALID: none), with ceil_mode's output size. bottom and right
// are what the last window reaches past the input (at most the pads; more under ceil_mode: then
// *overhang is set). A conv (ends null) pads both sides alike: the pads map when padding both sides
// by the one before gives the same output size (so the same windows), else they are refused.
std::vector<int64_t> Importer::window_pads(int i, const nn::OnnxAttrs& a, const nn::Dims& x, const std::vector<int64_t>& k,
                                           const std::vector<int64_t>& st, bool one_d, bool* overhang) const {
  const std::string ap = a.s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" && ap != "SAME_LOWER")
    throw Error(where(i) + ": attribute auto_pad '" + shown(ap) + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  if (ap != "NOTSET" && a.has("pads")) throw Error(where(i) + ": attributes auto_pad " + ap + " and pads together");
  std::vector<int64_t> pads = window_ints(a, "pads", {0, 0, 0, 0}, one_d);
  if (pads.size() != 4) throw Error(where(i) + ": attribute pads " + ints_str(pads) + " must be 2-D (4 values)");
  for (int64_t v : pads)
    if (v < 0 || v > 65536) throw Error(where(i) + ": attribute pads " + win_str(pads, one_d) + ": each must be in 0..65536");
  const int64_t in[2] = {x.h, x.w};
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER")
    for (size_t d = 0; d < 2; ++d) {
      const int64_t total = std::max<int64_t>(((in[d] + st[d] - 1) / st[d] - 1) * st[d] + k[d] - in[d], 0);
      pads[d] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + 2] = total - pads[d];
    }
  const bool ceil_mode = a.i("ceil_mode", 0) != 0;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t span = in[d] + pads[d] + pads[d + 2] - k[d];
    if (span < 0) throw Error(where(i) + ": the window " + win_str(k, one_d) + " does not fit the padded input");
    int64_t out = (ceil_mode ? (span + st[d] - 1) / st[d] : span / st[d]) + 1;
    // ceil_mode: the last window starts inside the input or its leading pad (PyTorch, ONNX Runtime).
    if (ceil_mode && (out - 1) * st[d] >= in[d] + pads[d]) --out;
    const int64_t reach = std::max<int64_t>((out - 1) * st[d] + k[d] - in[d] - pads[d], 0);
    if (overhang) {  // a pool: any padding after
      if (reach > pads[d + 2]) *overhang = true;
      pads[d + 2] = reach;
      continue;
    }
    const int64_t sym = in[d] + 2 * pads[d] - k[d];
    if (sym < 0 || sym / st[d] + 1 != out)
      throw Error(where(i) + ": pads " + win_str(pads, one_d) + (ap != "NOTSET" ? " (auto_pad " + ap + ")" : std::string()) +
                  (ceil_mode ? " with ceil_mode 1" : "") + " make other windows than ember's, which pads both sides "
                  "by the leading pad");
    pads[d + 2] = pads[d];
  }
  return pads;
}

void Importer::map_node(int i) {
  const std::string& op = g_.node(i).op_type();
  if (!g_.node(i).domain().empty() && g_.node(i).domain() != "ai.onnx")
    throw Error(where(i) + ": domain '" + g_.node(i).domain() + "' is not supported");
  if (op == "Constant") return constant_node(i);
  if (fold(i)) return;
  if (op == "Identity" || op == "Dropout") {  // inference: the values pass through
    if (op == "Dropout" && g_.node(i).input_size() > 2 && !g_.node(i).input(2).empty())
      throw Error(where(i) + ": training_mode input is not supported");
    if (op == "Dropout" && g_.node(i).output_size() > 1 && !g_.node(i).output(1).empty() && readers_.count(g_.node(i).output(1)))
      throw Error(where(i) + ": the mask output is not supported (ember drops nothing at inference)");
    Val v = val(i, 0);
    set(i, 0, v);
    return;
  }
  if (table_import(*this, i, op)) return;  // the op files' imports (nn/op_onnx.h)
  if (op == "Transpose") return transpose(i);
  throw Error(where(i) + ": op " + op + " is not supported by ember (docs/onnx.md lists the ops it imports)");
}

void Importer::constant_node(int i) {
  Attrs a(g_.node(i), where(i));
  a.only({"value", "value_float", "value_floats", "value_int", "value_ints"});
  Val v;
  v.is_const = true;
  if (const pb::TensorProto* t = a.tensor("value")) v.c = read_tensor(*t, where(i) + ": value");
  else if (a.has("value_float")) v.c.f = {a.f("value_float", 0)};
  else if (a.has("value_int")) v.c.is_int = true, v.c.i = {a.i("value_int", 0)}, v.c.f = {float(v.c.i[0])};
  else if (a.has("value_ints")) {
    v.c.is_int = true, v.c.i = a.ints("value_ints", {});
    for (int64_t x : v.c.i) v.c.f.push_back(float(x));
    v.c.dims = {int64_t(v.c.i.size())};
  } else throw Error(where(i) + ": no supported value attribute (value, value_float, value_int, value_ints)");
  set(i, 0, std::move(v));
}

void Importer::transpose(int i) {
  const Val& x = tensor(i, 0);
  Attrs a(g_.node(i), where(i));
  a.only({"perm"});
  const auto perm = a.ints("perm", {});
  Val y = x;
  bool same = int(perm.size()) == rank_of(x.lay);  // the identity perm: the value itself
  for (size_t k = 0; same && k < perm.size(); ++k) same = perm[k] == int64_t(k);
  if (same) {
    set(i, 0, std::move(y));
    return;
  }
  if (x.lay == Layout::NCHW && perm == std::vector<int64_t>{0, 2, 3, 1}) y.lay = Layout::NHWC;
  else if (x.lay == Layout::NHWC && perm == std::vector<int64_t>{0, 3, 1, 2}) y.lay = Layout::NCHW;
  else if (!(x.lay == Layout::Flat && perm == std::vector<int64_t>{0, 1}))
    throw Error(where(i) + ": perm " + ints_str(perm) + " is not supported (only NCHW <-> NHWC views)");
  out_.notes.push_back(where(i) + ": read as a layout view, no copy");
  set(i, 0, std::move(y));
}

}  // namespace ember::onnx
