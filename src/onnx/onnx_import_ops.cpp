// The ONNX importer's op mappers: the op table's own imports (through TableIn, nn/op_table.h), then
// one function per op made before the table, each checking the node's attributes and inputs
// against what the ember layer computes, then emitting the layer and setting the node's output
// value. Anything else is refused with the node and op named.
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
bool all_are(const std::vector<int64_t>& v, int64_t x) { return nn::onnx_all_are(v, x); }

// A scalar constant's value (any shape holding one value), or NaN.
float scalar_of(const Val& v) { return v.is_const && v.c.count() == 1 && v.c.dims.size() <= 1 ? v.c.f[0] : NAN; }

std::vector<float> transpose2(const Const& c) {  // [R, C] -> [C, R]
  const size_t R = size_t(c.dims[0]), C = size_t(c.dims[1]);
  std::vector<float> t(R * C);
  for (size_t r = 0; r < R; ++r)
    for (size_t q = 0; q < C; ++q) t[q * R + r] = c.f[r * C + q];
  return t;
}

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

// The ops of the table with their own import, the longer patterns (more ONNX types) first, else in
// table order: silu's Sigmoid -> Mul is tried before sigmoid's Sigmoid.
static const std::vector<const nn::OpDesc*>& importers() {
  static const std::vector<const nn::OpDesc*> list = [] {
    std::vector<const nn::OpDesc*> v;
    for (const nn::OpDesc* d : nn::op_table())
      if (d->onnx_import && !d->onnx.empty()) v.push_back(d);
    std::stable_sort(v.begin(), v.end(), [](const nn::OpDesc* a, const nn::OpDesc* b) { return a->onnx.size() > b->onnx.size(); });
    return v;
  }();
  return list;
}

// An op of the table that maps node i itself (its first ONNX type is the node's): true when it did.
static bool table_import(Importer& im, int i, const std::string& op) {
  for (const nn::OpDesc* d : importers()) {
    if (op != d->onnx[0]) continue;
    TableIn in(im);
    if (d->onnx_import(in, i)) return true;
  }
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
  if (table_import(*this, i, op)) return;
  if (op == "Conv") return conv(i);
  if (op == "Gemm") return gemm(i);
  if (op == "MatMul") return matmul(i);
  if (op == "MaxPool" || op == "AveragePool") return pool(i, op == "MaxPool");
  if (op == "GlobalAveragePool")  // over every axis after C
    return global_pool(i, tensor(i, 0).lay == Layout::NCL ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3}, true);
  if (op == "ReduceMean") {
    Attrs a(g_.node(i), where(i));
    a.only({"axes", "keepdims"});
    std::vector<int64_t> axes = a.ints("axes", {});
    if (g_.node(i).input_size() > 1) axes = constant(i, 1).i;
    return global_pool(i, axes, a.i("keepdims", 1) != 0);
  }
  if (op == "LayerNormalization") return layernorm(i);
  if (op == "BatchNormalization") return batchnorm(i);
  // Opset 20's Gelu: one node for two ops of the table (gelu, gelu-tanh) by its attribute; their
  // own imports read the opset-17 patterns they export.
  if (op == "Gelu") {
    Attrs a(g_.node(i), where(i));
    a.only({"approximate"});
    const std::string ap = a.s("approximate", "none");
    if (ap != "none" && ap != "tanh") throw Error(where(i) + ": approximate '" + ap + "' is not supported");
    return activation(i, ap == "tanh" ? LayerKind::GELUTanh : LayerKind::GELU);
  }
  if (op == "Add" || op == "Mul") return binary(i);
  if (op == "Sum") return join(i, false);
  if (op == "Concat") return join(i, true);
  if (op == "Transpose") return transpose(i);
  if (op == "Flatten" || op == "Reshape" || op == "Squeeze") return flatten(i);
  if (op == "Pad") return pad(i);
  if (op == "Softmax") return softmax(i);
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

// Conv: [N, C, H, W] * W [K, C/G, R, S] (+ B [K]) -> [N, K, H', W']; symmetric pads, no dilation.
// 1-D: [N, C, L] * W [K, C/G, S] -> [N, K, L'], as ember's image [C, 1, L] with a 1 x S kernel.
void Importer::conv(int i) {
  const Val& x = tensor(i, 0);
  const bool one_d = x.lay == Layout::NCL;
  if (x.lay != Layout::NCHW && !one_d)
    throw Error(where(i) + ": expected an [N, C, H, W] or [N, C, L] input (not channels-last, not [N, D])");
  const Const& W = constant(i, 1);
  if (W.dims.size() != (one_d ? 3u : 4u))
    throw Error(where(i) + ": weight must be " + (one_d ? "[K, C/G, S]" : "[K, C/G, R, S]") + ", found rank " + std::to_string(W.dims.size()));
  Attrs a(g_.node(i), where(i));
  a.only({"kernel_shape", "strides", "pads", "group", "dilations", "auto_pad"});  // Conv-1 to Conv-11: the same
  const int64_t G = a.i("group", 1), K = W.dims[0], R = one_d ? 1 : W.dims[2], S = W.dims.back();
  if (!all_are(a.ints("dilations", {1, 1}), 1))
    throw Error(where(i) + ": attribute dilations " + ints_str(a.ints("dilations", {})) + " is not supported (ember's conv2d has no dilation)");
  if (window_ints(a, "kernel_shape", {R, S}, one_d) != std::vector<int64_t>{R, S})
    throw Error(where(i) + ": kernel_shape " + ints_str(a.ints("kernel_shape", {})) + " does not match the weight");
  const auto st = window_ints(a, "strides", {1, 1}, one_d);
  if (st.size() != 2) throw Error(where(i) + ": attribute strides " + ints_str(st) + " must be 2-D");
  check_strides(i, st, one_d);
  if (R < 1 || S < 1 || R > 65536 || S > 65536) throw Error(where(i) + ": weight " + ints_str(W.dims) + ": kernel sizes outside 1..65536");
  const std::vector<int64_t> pads = window_pads(i, a, x.d, {R, S}, st, one_d);
  if (G < 1 || x.d.c % G || K % G || W.dims[1] * G != x.d.c)
    throw Error(where(i) + ": weight " + ints_str(W.dims) + " with group " + std::to_string(G) + " does not fit " +
                std::to_string(x.d.c) + " input channels");
  for (int64_t v : {K, R, S, st[0], st[1], pads[0], pads[1], G})
    if (v < 0 || v > 65536) throw Error(where(i) + ": a size, stride or pad outside 0..65536");
  LayerSpec s;
  s.kind = LayerKind::Conv2d, s.out = int(K), s.kernel_h = int(R), s.kernel_w = int(S);
  s.stride_h = int(st[0]), s.stride_w = int(st[1]), s.pad_h = int(pads[0]), s.pad_w = int(pads[1]), s.groups = int(G);
  const bool has_b = g_.node(i).input_size() > 2 && !g_.node(i).input(2).empty();
  s.bias = has_b;
  const int64_t Ho = (x.d.h + 2 * pads[0] - R) / st[0] + 1, Wo = (x.d.w + 2 * pads[1] - S) / st[1] + 1;
  if (st[0] < 1 || st[1] < 1 || Ho < 1 || Wo < 1) throw Error(where(i) + ": the kernel does not fit the input");
  Val y = emit(s, {&x}, val(i, 1).weight_name, {int(K), int(Ho), int(Wo)}, x.lay);
  weight(y.ref, "weight", W.f);
  sources_[y.ref + ".weight"] = g_.node(i).input(1);
  if (has_b) sources_[y.ref + ".bias"] = g_.node(i).input(2);
  if (has_b) {
    const Const& B = constant(i, 2);
    if (B.count() != size_t(K)) throw Error(where(i) + ": bias has " + std::to_string(B.count()) + " values, expected " + std::to_string(K));
    weight(y.ref, "bias", B.f);
  }
  set(i, 0, std::move(y));
}

// The Add after a MatMul whose other input is a [K] constant: the Linear's bias (returns the node).
int Importer::fold_bias(int i, const std::string& value, int K, int rank, std::vector<float>* bias, std::string* name) {
  const int r = only_reader(value);
  if (r < 0 || done_[size_t(r)] || !live_[size_t(r)] || g_.node(r).op_type() != "Add" || g_.node(r).input_size() != 2) return -1;
  const int other = g_.node(r).input(0) == value ? 1 : 0;
  auto it = vals_.find(g_.node(r).input(other));
  if (it == vals_.end() || !it->second.is_const || it->second.c.count() != size_t(K)) return -1;
  const std::vector<int64_t>& bd = it->second.c.dims;  // [K], or [1, ..., K] no longer than the output
  if (bd.size() > size_t(rank) || (!bd.empty() && bd.back() != K)) return -1;
  *bias = it->second.c.f, *name = it->second.weight_name;
  done_[size_t(r)] = true;
  return r;
}

// Gemm's C as the Linear's bias: beta x C where C broadcasts to [N, K] the same for every row: a
// scalar, [K], [1, K], [1, 1], or [M, K] / [M, 1] whose rows are all equal (the test's fixed batch).
std::vector<float> Importer::gemm_bias(int i, int64_t K, float beta) const {
  const Const& C = constant(i, 2);
  const std::vector<int64_t>& d = C.dims;
  const int64_t cols = d.empty() ? 1 : d.back(), rows = d.size() == 2 ? d[0] : 1;
  if (d.size() > 2 || (cols != K && cols != 1) || rows < 1 || C.count() != size_t(rows * cols))
    throw Error(where(i) + ": C " + ints_str(d) + " does not broadcast to [N, " + std::to_string(K) + "]");
  for (int64_t r = 1; r < rows; ++r)
    if (!std::equal(C.f.begin(), C.f.begin() + cols, C.f.begin() + r * cols))
      throw Error(where(i) + ": C " + ints_str(d) + " differs from row to row; ember's Linear adds one bias to every row");
  std::vector<float> b(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) b[size_t(k)] = beta * C.f[size_t(cols == 1 ? 0 : k)];
  return b;
}

// Gemm: alpha A [N, D] x B (transB: [K, D], else [D, K]) + beta C: a Linear, weight alpha B as
// [K, D], bias beta C. transA would transpose the data (the batch with the features): refused.
void Importer::gemm(int i) {
  const Val& x = tensor(i, 0);
  if (x.lay != Layout::Flat) throw Error(where(i) + ": input must be [N, D] (flatten first)");
  Attrs a(g_.node(i), where(i));
  a.only({"alpha", "beta", "transA", "transB"});
  const float alpha = a.f("alpha", 1), beta = a.f("beta", 1);
  if (!std::isfinite(alpha) || !std::isfinite(beta)) throw Error(where(i) + ": attribute alpha or beta is not finite");
  if (a.i("transA", 0) != 0)
    throw Error(where(i) + ": attribute transA 1 is not supported (it would transpose the data [N, D], batch with features)");
  const Const& B = constant(i, 1);
  if (B.dims.size() != 2) throw Error(where(i) + ": B must be 2-D");
  const bool tb = a.i("transB", 0) != 0;
  const int64_t K = tb ? B.dims[0] : B.dims[1], D = tb ? B.dims[1] : B.dims[0];
  if (K < 1 || K > (1 << 24)) throw Error(where(i) + ": " + std::to_string(K) + " outputs is outside 1..2^24");
  if (D != int64_t(x.d.c)) throw Error(where(i) + ": B " + ints_str(B.dims) + " does not fit the input's " + std::to_string(x.d.c) + " features");
  LayerSpec s;
  s.kind = LayerKind::Linear, s.out = int(K);
  const bool has_c = g_.node(i).input_size() > 2 && !g_.node(i).input(2).empty();
  const std::vector<float> bias = has_c ? gemm_bias(i, K, beta) : std::vector<float>{};
  s.bias = has_c;
  std::string wname = val(i, 1).weight_name;
  if (!tb && !has_c) wname.clear();
  Val y = emit(s, {&x}, wname, {int(K), 1, 1}, Layout::Flat);
  std::vector<float> w = tb ? B.f : transpose2(B);
  if (alpha != 1)
    for (float& v : w) v *= alpha;
  weight(y.ref, "weight", std::move(w));
  if (has_c) weight(y.ref, "bias", bias);
  sources_[y.ref + ".weight"] = g_.node(i).input(1);
  if (has_c) sources_[y.ref + ".bias"] = g_.node(i).input(2);
  set(i, 0, std::move(y));
}

// MatMul: x [N, D] or channels-last [N, H, W, C] times a constant [D, K] (+ a following Add of a
// [K] constant): a Linear, over channels for the channels-last view (torchvision's CNBlock).
void Importer::matmul(int i) {
  const Val& x = tensor(i, 0);
  const Const& B = constant(i, 1);
  if (B.dims.size() != 2) throw Error(where(i) + ": the weight must be 2-D");
  const bool over = x.lay == Layout::NHWC;
  if (!over && x.lay != Layout::Flat) throw Error(where(i) + ": input must be [N, D] or channels-last [N, H, W, C]");
  const int64_t D = B.dims[0], K = B.dims[1];
  if (K < 1 || K > (1 << 24)) throw Error(where(i) + ": " + std::to_string(K) + " outputs is outside 1..2^24");
  if (D != (over ? x.d.c : int64_t(x.d.size())))
    throw Error(where(i) + ": weight " + ints_str(B.dims) + " does not fit the input's " + std::to_string(over ? x.d.c : int64_t(x.d.size())) + " features");
  std::vector<float> bias;
  std::string bname;
  const int add = fold_bias(i, g_.node(i).output(0), int(K), over ? 4 : 2, &bias, &bname);
  LayerSpec s;
  s.kind = LayerKind::Linear, s.out = int(K), s.over_channels = over, s.bias = add >= 0;
  Val y = emit(s, {&x}, bname, {int(K), over ? x.d.h : 1, over ? x.d.w : 1}, over ? Layout::NHWC : Layout::Flat);
  weight(y.ref, "weight", transpose2(B));
  sources_[y.ref + ".weight"] = g_.node(i).input(1);
  if (add >= 0) {
    sources_[y.ref + ".bias"] = bname;
    weight(y.ref, "bias", bias);
    set(add, 0, std::move(y));
  } else {
    set(i, 0, std::move(y));
  }
}

// MaxPool / AveragePool (opsets 1 to 21): kernel_shape, strides, pads or auto_pad (asymmetric:
// padding_end), ceil_mode (as padding after: max-pool padding never wins, the average's divisor
// counts the input only unless count_include_pad); each pad below the kernel; no dilations; the
// Indices output and its storage_order only when nothing reads them; count_include_pad (0, ONNX's
// default: avgpool2d's count_include_pad false).
void Importer::pool(int i, bool max) {
  const Val& x = tensor(i, 0);
  const bool one_d = x.lay == Layout::NCL;  // [N, C, L]: a 1 x k window on ember's [C, 1, L]
  if (x.lay != Layout::NCHW && !one_d)
    throw Error(where(i) + ": expected an [N, C, H, W] or [N, C, L] input (not channels-last, not [N, D])");
  Attrs a(g_.node(i), where(i));
  if (max) a.only({"kernel_shape", "strides", "pads", "ceil_mode", "dilations", "auto_pad", "storage_order"});
  else a.only({"kernel_shape", "strides", "pads", "ceil_mode", "dilations", "auto_pad", "count_include_pad"});
  const auto k = window_ints(a, "kernel_shape", {}, one_d), st = window_ints(a, "strides", {1, 1}, one_d);
  if (k.size() != 2 || st.size() != 2)
    throw Error(where(i) + ": attributes kernel_shape and strides must be " + (one_d ? "1-D" : "2-D"));
  if (!all_are(a.ints("dilations", {1, 1}), 1))
    throw Error(where(i) + ": attribute dilations " + ints_str(a.ints("dilations", {})) + " is not supported (ember's pools have no dilation)");
  if (g_.node(i).output_size() > 1 && !g_.node(i).output(1).empty() && readers_.count(g_.node(i).output(1)))
    throw Error(where(i) + ": the Indices output is not supported");
  check_strides(i, st, one_d);
  for (int64_t v : k)
    if (v < 1 || v > 65536) throw Error(where(i) + ": attribute kernel_shape " + win_str(k, one_d) + ": each size must be in 1..65536");
  bool overhang = false;  // ceil_mode's last window past the pads
  const std::vector<int64_t> pads = window_pads(i, a, x.d, k, st, one_d, &overhang);
  for (size_t d = 0; d < 4; ++d)
    if (pads[d] >= k[d % 2])
      throw Error(where(i) + ": pads " + win_str(pads, one_d) + " reach the kernel " + win_str(k, one_d) +
                  " (a window of padding only; ember's pools pad less than the kernel)");
  const bool no_pads = all_are(pads, 0), include = a.i("count_include_pad", 0) != 0;
  if (!max && include && overhang)  // ONNX divides such a window by its part inside the pads
    throw Error(where(i) + ": count_include_pad 1 with ceil_mode windows past the pads is not supported");
  LayerSpec s;
  s.count_include_pad = max || no_pads || include;  // no pads: either
  s.kind = max ? LayerKind::MaxPool2d : LayerKind::AvgPool2d;
  s.kernel_h = int(k[0]), s.kernel_w = int(k[1]), s.stride_h = int(st[0]), s.stride_w = int(st[1]);
  s.pad_h = int(pads[0]), s.pad_w = int(pads[1]);
  if (pads[2] != pads[0] || pads[3] != pads[1]) s.pad_h_end = int(pads[2]), s.pad_w_end = int(pads[3]);
  const int64_t Ho = (x.d.h + pads[0] + pads[2] - k[0]) / st[0] + 1, Wo = (x.d.w + pads[1] + pads[3] - k[1]) / st[1] + 1;
  if (Ho < 1 || Wo < 1) throw Error(where(i) + ": the window does not fit the input");
  set(i, 0, emit(s, {&x}, "", {x.d.c, int(Ho), int(Wo)}, x.lay));
}

// GlobalAveragePool, or ReduceMean over the spatial axes: [N, C, H, W] -> [N, C, 1, 1] or [N, C].
void Importer::global_pool(int i, const std::vector<int64_t>& axes_in, bool keep) {
  const Val& x = tensor(i, 0);
  std::vector<int64_t> axes;
  const int rank = rank_of(x.lay);
  for (int64_t a : axes_in) axes.push_back(a < 0 ? a + rank : a);
  std::sort(axes.begin(), axes.end());
  const std::vector<int64_t> want = x.lay == Layout::NHWC  ? std::vector<int64_t>{1, 2}
                                    : x.lay == Layout::NCL ? std::vector<int64_t>{2}
                                                           : std::vector<int64_t>{2, 3};
  if (x.lay == Layout::Flat || x.lay == Layout::Vec || axes != want) throw Error(where(i) + ": only a mean over the spatial axes is supported, found axes " + ints_str(axes_in));
  LayerSpec s;
  s.kind = LayerKind::GlobalAvgPool;
  set(i, 0, emit(s, {&x}, "", {x.d.c, 1, 1}, keep ? x.lay : Layout::Flat));  // [N, C, 1, 1], [N, C, 1] or [N, C]
}

// LayerNormalization: over C of a channels-last view (LayerNorm2d), over the trailing 1-3 dims of
// [N, C, H, W], or over D of [N, D].
void Importer::layernorm(int i) {
  const Val& x = tensor(i, 0);
  Attrs a(g_.node(i), where(i));
  a.only({"axis", "epsilon", "stash_type"});
  for (int k = 1; k < g_.node(i).output_size(); ++k)
    if (!g_.node(i).output(k).empty() && readers_.count(g_.node(i).output(k)))
      throw Error(where(i) + ": the Mean and InvStdDev outputs are not supported");
  const int rank = rank_of(x.lay);
  int64_t axis = a.i("axis", -1);
  if (axis < 0) axis += rank;
  if (x.lay == Layout::NCL && axis == 2) axis = 3;  // [N, C, L] as [N, C, 1, L]: axis 1 stays, L is ember's W
  LayerSpec s;
  s.eps = a.f("epsilon", 1e-5f);
  size_t count = 0;
  if (x.lay == Layout::NHWC && axis == 3) s.kind = LayerKind::LayerNorm2d, count = size_t(x.d.c);
  else if (x.lay == Layout::Flat && axis == 1) s.kind = LayerKind::LayerNorm, count = x.d.size();
  else if ((x.lay == Layout::NCHW || x.lay == Layout::NCL) && axis >= 1 && axis <= 3 && (!x.d.flat() || axis == 1)) {
    s.kind = LayerKind::LayerNorm, s.norm_dims = int(4 - axis);
    const int d3[3] = {x.d.c, x.d.h, x.d.w};
    count = 1;
    for (int k = int(axis) - 1; k < 3; ++k) count *= size_t(d3[k]);
  } else throw Error(where(i) + ": axis " + std::to_string(a.i("axis", -1)) + " of this input is not supported");
  const Const& scale = constant(i, 1);
  if (scale.count() != count) throw Error(where(i) + ": scale has " + std::to_string(scale.count()) + " values, expected " + std::to_string(count));
  std::vector<float> bias(count, 0.f);
  if (g_.node(i).input_size() > 2 && !g_.node(i).input(2).empty()) {
    const Const& B = constant(i, 2);
    if (B.count() != count) throw Error(where(i) + ": bias has " + std::to_string(B.count()) + " values, expected " + std::to_string(count));
    bias = B.f;
  }
  Val y = emit(s, {&x}, val(i, 1).weight_name, x.d, x.lay);
  weight(y.ref, "weight", scale.f);
  weight(y.ref, "bias", bias);
  set(i, 0, std::move(y));
}

// BatchNormalization in inference (training_mode 0 or absent) over C of [N, C, H, W] or [N, C]:
// batchnorm2d with scale, B, mean and var as its weight, bias and running statistics
// (num_batches_tracked 0). momentum (ONNX's weighs the running value) becomes 1 - momentum.
void Importer::batchnorm(int i) {
  const Val& x = tensor(i, 0);
  Attrs a(g_.node(i), where(i));
  a.only({"epsilon", "momentum", "training_mode", "spatial"});
  if (a.i("training_mode", 0) != 0) throw Error(where(i) + ": attribute training_mode 1 is not supported (inference only)");
  if (a.i("spatial", 1) != 1) throw Error(where(i) + ": attribute spatial 0 is not supported");
  if (g_.node(i).input_size() != 5) throw Error(where(i) + ": expected 5 inputs (X, scale, B, input_mean, input_var)");
  for (int k = 1; k < g_.node(i).output_size(); ++k)
    if (!g_.node(i).output(k).empty() && readers_.count(g_.node(i).output(k)))
      throw Error(where(i) + ": the running_mean and running_var outputs are not supported");
  if (x.lay == Layout::NHWC) throw Error(where(i) + ": a channels-last input is not supported");
  LayerSpec s;
  s.kind = LayerKind::BatchNorm2d;
  s.eps = a.f("epsilon", 1e-5f);
  const float m = a.f("momentum", 0.9f);
  if (!(m >= 0 && m <= 1)) throw Error(where(i) + ": attribute momentum " + std::to_string(m) + ": expected a number in [0, 1]");
  char text[32];  // 1 - 0.9f is 0.1 to float's digits, not 0.0999999940...
  std::snprintf(text, sizeof text, "%.7g", 1.0 - double(m));
  s.momentum = std::strtod(text, nullptr);
  static const char* kIn[5] = {"X", "scale", "B", "input_mean", "input_var"};
  std::vector<float> v[4];
  for (int k = 1; k < 5; ++k) {
    v[k - 1] = constant(i, k).f;
    if (v[k - 1].size() != size_t(x.d.c))
      throw Error(where(i) + ": " + kIn[k] + " has " + std::to_string(v[k - 1].size()) + " values, expected " + std::to_string(x.d.c));
    for (size_t c = 0; c < v[k - 1].size(); ++c)  // at import, not after a whole eval's NaN loss
      if (const float f = v[k - 1][c]; !std::isfinite(f) || (k == 4 && f < 0)) {
        char num[32];
        std::snprintf(num, sizeof num, "%g", double(f));
        throw Error(where(i) + ": " + kIn[k] + " '" + shown(g_.node(i).input(k)) + "' [" + std::to_string(c) + "] is " + num +
                    (k == 4 ? "; a variance is finite and >= 0" : "; expected a finite number"));
      }
  }
  Val y = emit(s, {&x}, val(i, 1).weight_name, x.d, x.lay);
  weight(y.ref, "weight", std::move(v[0]));
  weight(y.ref, "bias", std::move(v[1]));
  weight(y.ref, "running_mean", std::move(v[2]));
  weight(y.ref, "running_var", std::move(v[3]));
  weight(y.ref, "num_batches_tracked", {0.f});
  set(i, 0, std::move(y));
}

void Importer::activation(int i, LayerKind kind) {
  const Val& x = tensor(i, 0);
  LayerSpec s;
  s.kind = kind;
  set(i, 0, emit(s, {&x}, "", x.d, x.lay));
}

// Add of two tensors: a residual sum; Mul by a per-channel constant: a layer scale.
void Importer::binary(int i) {
  const pb::NodeProto& n = g_.node(i);
  if (n.input_size() != 2) throw Error(where(i) + ": expected 2 inputs");
  Attrs at(n, where(i));
  at.only({"consumed_inputs"});  // Add-1..6's and Mul-1..6's broadcast and axis align differently: refused
  const Val &a = val(i, 0), &b = val(i, 1);
  if (n.op_type() == "Add") {
    if (a.is_const || b.is_const) throw Error(where(i) + ": adding a constant is supported only as the bias right after a MatMul");
    return join(i, false);
  }
  if (a.is_const == b.is_const) throw Error(where(i) + ": only a tensor times a per-channel constant (a layer scale) is supported");
  const Val& x = a.is_const ? b : a;
  const Val& c = a.is_const ? a : b;
  const size_t rank = size_t(rank_of(x.lay));
  std::vector<int64_t> dims;
  for (int64_t d : c.c.dims)
    if (d != 1 || !dims.empty()) dims.push_back(d);  // drop leading 1s (broadcast, if no longer than x)
  const int64_t C = x.d.c;
  const std::vector<int64_t> per_channel = x.lay == Layout::NCHW ? std::vector<int64_t>{C, 1, 1}
                                           : x.lay == Layout::NCL  ? std::vector<int64_t>{C, 1}
                                                                   : std::vector<int64_t>{C};  // [N, D], NHWC
  const bool ok = x.lay != Layout::Vec && c.c.dims.size() <= rank && dims == per_channel;
  if (!ok) throw Error(where(i) + ": constant " + ints_str(c.c.dims) + " is not one scale per channel of " + std::to_string(C));
  LayerSpec s;
  s.kind = LayerKind::LayerScale;
  Val y = emit(s, {&x}, c.weight_name, x.d, x.lay);
  weight(y.ref, "layer_scale", c.c.f);
  set(i, 0, std::move(y));
}

// Sum / Add of 1-8 tensors, or Concat over channels: one layout, one height and width.
void Importer::join(int i, bool concat) {
  const pb::NodeProto& n = g_.node(i);
  if (n.input_size() == 1) {  // Sum or Concat of one tensor: the tensor itself
    if (concat) Attrs(n, where(i)).only({"axis"});
    else Attrs(n, where(i)).only({"consumed_inputs"});
    Val v = tensor(i, 0);
    set(i, 0, std::move(v));
    return;
  }
  if (n.input_size() < 2 || n.input_size() > nn::kMaxInputs)
    throw Error(where(i) + ": expected 2 to " + std::to_string(nn::kMaxInputs) + " inputs");
  std::vector<const Val*> in;
  nn::Dims d = tensor(i, 0).d;
  int64_t c = 0;
  for (int k = 0; k < n.input_size(); ++k) {
    if (concat && val(i, k).is_const)
      throw Error(where(i) + ": input " + std::to_string(k) + " is a constant; ember's concat joins tensors only");
    const Val& v = tensor(i, k);
    if (v.lay != tensor(i, 0).lay) throw Error(where(i) + ": inputs in different layouts");
    if (v.d.h != d.h || v.d.w != d.w || (!concat && v.d.c != d.c)) throw Error(where(i) + ": inputs of different shapes");
    c += v.d.c;
    in.push_back(&v);
  }
  LayerSpec s;
  s.kind = concat ? LayerKind::Concat : LayerKind::Add;
  if (!concat) Attrs(n, where(i)).only({"consumed_inputs"});  // Sum-1..6's hint; Add-1..6's broadcast is refused
  if (concat) {
    Attrs a(n, where(i));
    a.only({"axis"});
    const Layout lay = tensor(i, 0).lay;
    const int64_t axis = a.i("axis", 1), lay_axis = lay == Layout::NHWC ? 3 : 1;
    if (lay == Layout::Vec || (axis != lay_axis && axis != lay_axis - rank_of(lay)))
      throw Error(where(i) + ": only concatenation over channels is supported, found axis " + std::to_string(axis));
    if (c > 65536 * 64) throw Error(where(i) + ": " + std::to_string(c) + " channels in all is too many");
    d.c = int(c);
  }
  set(i, 0, emit(s, in, "", d, tensor(i, 0).lay));
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

// Flatten (axis 1), Reshape to [N, -1] and Squeeze of the 1x1 spatial axes: to [N, D].
void Importer::flatten(int i) {
  const pb::NodeProto& n = g_.node(i);
  const Val& x = tensor(i, 0);
  if (n.op_type() == "Flatten") {
    Attrs a(n, where(i));
    a.only({"axis"});
    const int64_t rank = rank_of(x.lay), axis = a.i("axis", 1);
    if (axis < -rank || axis > rank) throw Error(where(i) + ": attribute axis " + std::to_string(axis) + " is outside -" +
                                                 std::to_string(rank) + ".." + std::to_string(rank));
    if (axis != 1 && axis != 1 - rank)  // 0: [1, N x D]; 2 and more: [N x C.., ..]: both mix the batch in
      throw Error(where(i) + ": attribute axis " + std::to_string(axis) + " is not supported (only axis 1: any other "
                  "flattens the batch dim N into the features)");
  } else if (n.op_type() == "Reshape") {
    Attrs a(n, where(i));
    a.only({"allowzero"});
    const Const& shape = constant(i, 1);
    const int64_t D = int64_t(x.d.size());
    // [0 or -1, -1 or D]: the batch kept, the rest flattened (a fixed batch size is not: the
    // importer does not know N).
    const bool ok = shape.i.size() == 2 && (shape.i[0] == 0 || shape.i[0] == -1) && (shape.i[1] == -1 || shape.i[1] == D) &&
                    !(shape.i[0] == -1 && shape.i[1] == -1) && !(a.i("allowzero", 0) && shape.i[0] == 0);
    if (!ok) throw Error(where(i) + ": only a reshape to [N, -1] (shape [0, -1] or [-1, D]) is supported, found " + ints_str(shape.i));
  } else {  // Squeeze
    Attrs a(n, where(i));
    a.only({"axes"});
    std::vector<int64_t> axes = n.input_size() > 1 ? constant(i, 1).i : a.ints("axes", {});
    for (int64_t& v : axes) v = v < 0 ? v + 4 : v;
    std::sort(axes.begin(), axes.end());
    if (x.lay == Layout::Flat || !x.d.flat() || axes != std::vector<int64_t>{2, 3})
      throw Error(where(i) + ": only squeezing the 1x1 spatial axes is supported");
  }
  if (x.lay == Layout::Vec) throw Error(where(i) + ": the input [N] has no axis after the batch to flatten");
  if (x.lay == Layout::Flat || x.d.flat()) {  // already [D] in ember: a view
    Val y = x;
    y.lay = Layout::Flat;
    set(i, 0, std::move(y));
    return;
  }
  if (x.lay == Layout::NHWC) throw Error(where(i) + ": flattening a channels-last view of an image is not supported");
  LayerSpec s;
  s.kind = LayerKind::Flatten;
  set(i, 0, emit(s, {&x}, "", {int(x.d.size()), 1, 1}, Layout::Flat));
}

// Pad with zeros on H and W, the same before and after: ZeroPad2d.
void Importer::pad(int i) {
  const pb::NodeProto& n = g_.node(i);
  const Val& x = tensor(i, 0);
  Attrs a(n, where(i));
  a.only({"mode", "pads", "value"});
  if (a.s("mode", "constant") != "constant") throw Error(where(i) + ": mode '" + a.s("mode", "") + "' is not supported");
  std::vector<int64_t> pads = a.ints("pads", {});
  float value = a.f("value", 0);
  if (n.input_size() > 1 && !n.input(1).empty()) pads = constant(i, 1).i;
  if (n.input_size() > 2 && !n.input(2).empty()) value = constant(i, 2).count() == 1 ? constant(i, 2).f[0] : NAN;
  if (n.input_size() > 3 && !n.input(3).empty()) throw Error(where(i) + ": the axes input is not supported");
  if (value != 0) throw Error(where(i) + ": only zero padding is supported");
  if (x.lay != Layout::NCHW || pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5] || pads[2] != pads[6] ||
      pads[3] != pads[7] || pads[2] < 0 || pads[3] < 0 || pads[2] > 65536 || pads[3] > 65536)
    throw Error(where(i) + ": pads " + ints_str(pads) + ": only the same zero padding before and after H and W is supported");
  if (x.d.h + 2 * pads[2] > 65536 || x.d.w + 2 * pads[3] > 65536) throw Error(where(i) + ": the padded image is larger than 65536");
  LayerSpec s;
  s.kind = LayerKind::ZeroPad2d, s.pad_h = int(pads[2]), s.pad_w = int(pads[3]);
  set(i, 0, emit(s, {&x}, "", {x.d.c, x.d.h + 2 * s.pad_h, x.d.w + 2 * s.pad_w}, Layout::NCHW));
}

void Importer::softmax(int i) {
  const Val& x = tensor(i, 0);
  Attrs a(g_.node(i), where(i));
  a.only({"axis"});
  const int64_t axis = a.i("axis", opset_ >= 13 ? -1 : 1);
  const bool ok = x.lay == Layout::Flat ? (axis == 1 || axis == -1) : (x.lay == Layout::NCHW && x.d.flat() && axis == 1);
  if (!ok) throw Error(where(i) + ": only a softmax over the features of [N, D] is supported");
  LayerSpec s;
  s.kind = LayerKind::Softmax;
  set(i, 0, emit(s, {&x}, "", x.d, x.lay));
}

}  // namespace ember::onnx
