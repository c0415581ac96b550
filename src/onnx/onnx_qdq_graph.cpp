// QDQ and integer-op ONNX graphs rewritten as fp32 graphs (onnx_qdq.h): one pass over the nodes in
// order. Quantized activations become aliases of the fp32 values they quantize (their QParams
// kept), quantized initializers are dequantized in place under their own names.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "ember/error.h"
#include "onnx/onnx_qdq.h"

namespace ember::onnx {
namespace {

bool is_quant_op(const std::string& op) {
  static const char* const kOps[] = {"QuantizeLinear", "DequantizeLinear", "QLinearConv",          "QLinearMatMul",
                                     "ConvInteger",    "MatMulInteger",    "DynamicQuantizeLinear"};
  for (const char* k : kOps)
    if (op == k) return true;
  return false;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t k = 0; k < d.size(); ++k) s += (k ? ", " : "") + std::to_string(d[k]);
  return s + "]";
}

// The shortest text that reads back as x (0.1f: "0.1").
std::string num_str(float x) {
  char b[32];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, double(x));
    if (std::strtof(b, nullptr) == x) break;
  }
  return b;
}

std::string type_str(int type) {
  switch (type) {
    case pb::TensorProto::UINT8: return "uint8";
    case pb::TensorProto::INT8: return "int8";
    case pb::TensorProto::INT32: return "int32";
    case pb::TensorProto::FLOAT: return "float";
    default: return "data_type " + std::to_string(type);
  }
}

class Rewriter {
 public:
  Rewriter(pb::GraphProto& g, std::string file) : g_(g), file_(std::move(file)) {
    fold_constants();
    for (int k = 0; k < g.initializer_size(); ++k) inits_[g.initializer(k).name()] = g.mutable_initializer(k);
    for (int k = 0; k < g.node_size(); ++k)
      for (const std::string& in : g.node(k).input()) readers_[in].push_back(k);
  }

  QdqInfo run() {
    info_.quantized = has_quant_ops(g_);
    for (int i = 0; i < g_.node_size(); ++i)
      if (!skip_.count(i)) map(i);
    finish();
    return std::move(info_);
  }

 private:
  struct QVal {
    std::string f;  // the fp32 value
    QParams p;
    int type = pb::TensorProto::UINT8;  // the quantized value's ONNX type (its zero point's: UINT8 or INT8)
    std::string from;                   // the node that quantized it ("QuantizeLinear 'q'")
  };

  // torch.onnx.export writes scales, zero points and quantized weights as Constant nodes, and a
  // bias's zero point as Cast(ConstantOfShape): these become initializers (under their output's
  // name) before the pass, so the quantization ops read them as they read any initializer.
  void fold_constants() {
    std::map<std::string, const pb::TensorProto*> consts;  // RepeatedPtrField: elements stay put
    for (const pb::TensorProto& t : g_.initializer()) consts.emplace(t.name(), &t);
    auto* nodes = g_.mutable_node();
    for (int i = 0; i < nodes->size(); ++i) {
      const pb::NodeProto& n = nodes->Get(i);
      const std::string w = file_ + ": node " + std::to_string(i) + " '" + shown(n.name()) + "' (" + shown(n.op_type()) + ")";
      const bool all_const = n.input_size() > 0 && consts.count(n.input(0)) && n.output_size() == 1;
      pb::TensorProto t;
      if (n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() == 1 && n.attribute(0).name() == "value" &&
          n.attribute(0).has_t()) {
        t = n.attribute(0).t();
      } else if ((n.op_type() == "ConstantOfShape" || n.op_type() == "Cast") && all_const && n.input_size() == 1) {
        t = fold_node(n, *consts.at(n.input(0)), w);
      } else {
        continue;
      }
      t.set_name(n.output(0));
      pb::TensorProto* added = g_.add_initializer();
      *added = std::move(t);
      consts[n.output(0)] = added;
      nodes->DeleteSubrange(i--, 1);
    }
  }
  // ConstantOfShape (shape [at most 2^16 elements]) or Cast (between int8, uint8, int32, int64 and
  // float, values that fit) of an initializer.
  pb::TensorProto fold_node(const pb::NodeProto& n, const pb::TensorProto& in, const std::string& w) const {
    const Const c = read_tensor(in, w + ": input");
    const Attrs a(n, w);
    Const v;
    int type;
    if (n.op_type() == "ConstantOfShape") {
      const pb::TensorProto* value = a.tensor("value");
      v = value ? read_tensor(*value, w + ": value") : Const{{1}, {0.f}, {0}, true};
      type = value ? value->data_type() : int(pb::TensorProto::FLOAT);
      if (v.count() != 1 || !c.is_int || c.dims.size() > 1) throw Error(w + ": expected a 1-D integer shape and one value");
      size_t count = 1;
      for (int64_t d : c.i)
        if (d < 0 || (count *= size_t(d)) > (size_t(1) << 16)) throw Error(w + ": a constant of more than 65536 values");
      v.dims = c.i;
      v.f.assign(count, v.f[0]);
      if (v.is_int) v.i.assign(count, v.i[0]);
    } else {
      v = c;
      type = int(a.i("to", 0));
    }
    return typed_tensor(v, type, w);
  }
  static pb::TensorProto typed_tensor(const Const& v, int type, const std::string& w) {
    pb::TensorProto t;
    t.set_data_type(type);
    for (int64_t d : v.dims) t.add_dims(d);
    std::string raw;
    const auto put = [&](auto x) { raw.append(reinterpret_cast<const char*>(&x), sizeof x); };
    for (size_t k = 0; k < v.count(); ++k) {
      const double x = v.is_int ? double(v.i[k]) : double(v.f[k]);
      const auto fits = [&](double lo, double hi) {
        if (!(x >= lo && x <= hi && x == std::nearbyint(x))) throw Error(w + ": " + std::to_string(x) + " does not fit the Cast's type");
      };
      switch (type) {
        case pb::TensorProto::FLOAT: put(float(x)); break;
        case pb::TensorProto::INT8: fits(-128, 127), put(int8_t(x)); break;
        case pb::TensorProto::UINT8: fits(0, 255), put(uint8_t(x)); break;
        case pb::TensorProto::INT32: fits(-2147483648.0, 2147483647.0), put(int32_t(x)); break;
        case pb::TensorProto::INT64: fits(-9.2e18, 9.2e18), put(v.is_int ? v.i[k] : int64_t(x)); break;
        default: throw Error(w + ": folds to float, int8, uint8, int32 or int64, not type " + std::to_string(type));
      }
    }
    t.set_raw_data(raw);
    return t;
  }

  std::string where(int i) const {
    const pb::NodeProto& n = g_.node(i);
    return file_ + ": node " + std::to_string(i) + " '" + shown(n.name()) + "' (" + shown(n.op_type()) + ")";
  }
  std::string label(int i) const { return shown(g_.node(i).op_type()) + " '" + shown(g_.node(i).name()) + "'"; }
  std::string tname(const std::string& name) const { return file_ + ": tensor '" + shown(name) + "'"; }
  bool has_in(int i, int k) const { return g_.node(i).input_size() > k && !g_.node(i).input(k).empty(); }

  pb::TensorProto* init_of(int i, int k) {
    if (!has_in(i, k)) throw Error(where(i) + ": input " + std::to_string(k) + " is missing");
    auto it = inits_.find(g_.node(i).input(k));
    if (it == inits_.end())
      throw Error(where(i) + ": input " + std::to_string(k) + " ('" + shown(g_.node(i).input(k)) + "') must be an initializer");
    return it->second;
  }
  Const read(const pb::TensorProto* t) const { return read_tensor(*t, tname(t->name())); }

  std::vector<float> scales(const pb::TensorProto* t) const {
    if (t->data_type() != pb::TensorProto::FLOAT) throw Error(tname(t->name()) + ": a scale must be float");
    const Const c = read(t);
    if (c.dims.size() > 1) throw Error(tname(t->name()) + ": scales " + dims_str(c.dims) + " must be a scalar or 1-D");
    if (c.f.empty()) throw Error(tname(t->name()) + ": no scale");
    for (float s : c.f)
      if (!std::isfinite(s) || s <= 0) throw Error(tname(t->name()) + ": scale " + std::to_string(s) + " is not finite and > 0");
    return c.f;
  }

  // An activation's (scale, zero point) inputs ks, kz of node i, as u8 QParams (int8: shifted by 128).
  QParams act_params(int i, int ks, int kz) {
    const pb::TensorProto* st = init_of(i, ks);
    const std::vector<float> s = scales(st);
    if (s.size() != 1)
      throw Error(tname(st->name()) + ": " + std::to_string(s.size()) + " scales; activations are quantized per tensor (one scale)");
    QParams p;
    p.scale = s[0];
    if (!has_in(i, kz)) return p;
    const pb::TensorProto* zt = init_of(i, kz);
    const Const z = read(zt);
    if (z.count() != 1 || !z.is_int) throw Error(tname(zt->name()) + ": expected one integer zero point");
    const int64_t v = z.i[0];
    const bool s8 = zt->data_type() == pb::TensorProto::INT8;
    if (s8 ? (v < -128 || v > 127) : (v < 0 || v > 255))
      throw Error(tname(zt->name()) + ": zero point " + std::to_string(v) + " is outside " + (s8 ? "-128..127 (int8)" : "0..255 (uint8)"));
    p.zero_point = int32_t(s8 ? v + 128 : v);  // int8 q with zero point z is u8 q + 128 with z + 128
    return p;
  }

  void set_float(pb::TensorProto* t, const std::vector<float>& f) {
    t->set_data_type(pb::TensorProto::FLOAT);
    t->clear_int32_data(), t->clear_int64_data(), t->clear_float_data();
    t->set_raw_data(std::string(reinterpret_cast<const char*>(f.data()), f.size() * 4));
  }

  // Dequantizes weight initializer wt (INT8 or UINT8) with scales s along axis (per tensor: one),
  // zero points zt (may be null): int8 in -128..127 after the zero point (ember writes -127..127;
  // PyTorch's symmetric observers give -128 too, which ember's kernels take), or refused.
  void dequant_weight(pb::TensorProto* wt, const std::vector<float>& s, const pb::TensorProto* zt, int64_t axis) {
    const std::string name = wt->name();
    if (info_.weights.count(name)) {
      if (info_.weights[name].scale != s) throw Error(tname(name) + ": dequantized twice with different scales");
      return;
    }
    const int type = wt->data_type();
    if (type != pb::TensorProto::INT8 && type != pb::TensorProto::UINT8)
      throw Error(tname(name) + ": quantized weights must be int8 or uint8, found data_type " + std::to_string(type));
    const Const w = read(wt);
    const int64_t rank = int64_t(w.dims.size());
    if (axis < 0) axis += rank;
    const bool per_tensor = s.size() == 1;
    if (!per_tensor && (axis < 0 || axis >= rank || w.dims[size_t(axis)] != int64_t(s.size())))
      throw Error(tname(name) + ": " + std::to_string(s.size()) + " scales do not match axis " + std::to_string(axis) + " of its dims " + dims_str(w.dims));
    std::vector<int64_t> z(s.size(), 0);
    if (zt) z = weight_zero_points(zt, type, s.size());
    size_t inner = 1;
    for (int64_t k = axis + 1; !per_tensor && k < rank; ++k) inner *= size_t(w.dims[size_t(k)]);
    std::vector<float> f(w.count());
    for (size_t j = 0; j < f.size(); ++j) {
      const size_t c = per_tensor ? 0 : (j / inner) % s.size();
      const int64_t q = w.i[j] - z[c];
      if (q < -128 || q > 127)
        throw Error(tname(name) + ": weight " + std::to_string(w.i[j]) + " (zero point " + std::to_string(z[c]) +
                    ") is outside the int8 range -128..127");
      f[j] = float(q) * s[c];
    }
    info_.weights[name] = {s, per_tensor ? -1 : int(axis), w.dims};
    set_float(wt, f);
  }
  std::vector<int64_t> weight_zero_points(const pb::TensorProto* zt, int type, size_t n) const {
    if (zt->data_type() != type) throw Error(tname(zt->name()) + ": the zero point's type differs from the weight's");
    const Const z = read(zt);
    if (z.count() != n)
      throw Error(tname(zt->name()) + ": " + std::to_string(z.count()) + " zero points for " + std::to_string(n) + " scales");
    for (int64_t v : z.i)  // int8: symmetric only; uint8: any zero point whose shift stays in range (checked per value)
      if (type == pb::TensorProto::INT8 && v != 0)
        throw Error(tname(zt->name()) + ": weight zero point " + std::to_string(v) + " is not 0 (ember's int8 weights are symmetric)");
    return z.i;
  }

  // Dequantizes an INT32 bias with per-channel scales s (one: broadcast); zero points must be 0.
  void dequant_bias(pb::TensorProto* bt, const std::vector<float>& s, const pb::TensorProto* zt) {
    const std::string name = bt->name();
    if (info_.biases.count(name)) return;
    if (bt->data_type() != pb::TensorProto::INT32) throw Error(tname(name) + ": a quantized bias must be int32");
    const Const b = read(bt);
    if (b.dims.size() > 1 || (s.size() != 1 && b.count() != s.size()))
      throw Error(tname(name) + ": bias " + dims_str(b.dims) + " does not match its " + std::to_string(s.size()) + " scales");
    if (zt) {
      const Const z = read(zt);
      if (!z.is_int || (z.count() != 1 && z.count() != s.size())) throw Error(tname(zt->name()) + ": zero points do not match the scales");
      for (int64_t v : z.i)
        if (v != 0) throw Error(tname(zt->name()) + ": zero point " + std::to_string(v) + " is not 0 (int32 biases are symmetric)");
    }
    QdqInfo::Bias q;
    std::vector<float> f(b.count());
    for (size_t k = 0; k < f.size(); ++k) {
      q.q.push_back(int32_t(b.i[k]));
      q.scale.push_back(s[s.size() == 1 ? 0 : k]);
      f[k] = float(b.i[k]) * q.scale.back();
    }
    info_.biases[name] = std::move(q);
    set_float(bt, f);
  }

  // The fp32 value a quantized input stands for.
  const QVal& qval(int i, int k) const {
    auto it = has_in(i, k) ? qvals_.find(g_.node(i).input(k)) : qvals_.end();
    if (it == qvals_.end())
      throw Error(where(i) + ": input " + std::to_string(k) + " must be a QuantizeLinear or QLinear output (ember's input is float)");
    return it->second;
  }

  void map(int i) {
    const std::string& op = g_.node(i).op_type();
    const bool quant_op = op == "QuantizeLinear" || op == "DequantizeLinear" || op == "QLinearConv" ||
                          op == "QLinearMatMul" || op == "ConvInteger" || op == "MatMulInteger";
    if (quant_op && (g_.node(i).output_size() != 1 || g_.node(i).output(0).empty()))
      throw Error(where(i) + ": expected one output, found " + std::to_string(g_.node(i).output_size()));
    if (op == "QuantizeLinear") return quantize(i);
    if (op == "DequantizeLinear") return dequantize(i);
    if (op == "QLinearConv" || op == "QLinearMatMul") return qlinear(i, op == "QLinearConv");
    if (op == "ConvInteger" || op == "MatMulInteger") return integer(i, op == "ConvInteger");
    if (op == "Cast" && g_.node(i).input_size() == 1 && qvals_.count(g_.node(i).input(0))) return cast(i);
    if (op == "DynamicQuantizeLinear")
      throw Error(where(i) + ": dynamic quantization is not supported (ember's activations have calibrated scales)");
    nodes_.push_back(g_.node(i));
  }

  // x's QParams p, set by node i (label); another node's other QParams for x: refused.
  void set_act(int i, const std::string& x, const QParams& p) {
    auto it = act_from_.find(x);
    if (it == act_from_.end()) {
      info_.acts[x] = p, act_from_[x] = label(i);
      return;
    }
    const QParams& q = info_.acts.at(x);
    if (q.scale != p.scale || q.zero_point != p.zero_point)
      throw Error(file_ + ": " + label(i) + " quantizes '" + shown(x) + "' with other QParams than " + it->second +
                  " (scale " + num_str(p.scale) + " against " + num_str(q.scale) + "; ember's int8 plan keeps one per tensor)");
  }
  int zero_type(int i, int kz) { return has_in(i, kz) ? init_of(i, kz)->data_type() : int(pb::TensorProto::UINT8); }

  void quantize(int i) {
    const pb::NodeProto& n = g_.node(i);
    const QParams p = act_params(i, 1, 2);
    const std::string x = resolve(n.input(0));
    set_act(i, x, p);
    rename_[n.output(0)] = x;
    qvals_[n.output(0)] = {x, p, zero_type(i, 2), label(i)};
  }

  // Node i reads quantized value v (input 0) with its own scale and zero point (inputs ks, kz):
  // they must be v's (a zero point of v's type and one value; left out: 0), else refused naming
  // both nodes (ember runs one QParams per tensor: none other is substituted).
  void same_qparams(int i, const QVal& v, int ks, int kz, const std::string& what) {
    int64_t z = 0;
    if (has_in(i, kz)) {
      const pb::TensorProto* zt = init_of(i, kz);
      const Const c = read(zt);
      const std::string w = where(i) + ": its zero point '" + shown(zt->name()) + "' is ";
      if (zt->data_type() != v.type)
        throw Error(w + type_str(zt->data_type()) + " " + dims_str(c.dims) + "; its input '" + shown(g_.node(i).input(0)) +
                    "' is " + type_str(v.type) + " (from " + v.from + ")");
      if (c.count() != 1 || c.dims.size() > 1 || !c.is_int) throw Error(w + dims_str(c.dims) + "; an activation's is one value");
      z = c.i[0];
    }
    const pb::TensorProto* st = init_of(i, ks);
    const std::vector<float> s = scales(st);
    if (s.size() != 1) throw Error(where(i) + ": its scale '" + shown(st->name()) + "' has " + std::to_string(s.size()) + " values; an activation's is one");
    const int64_t vz = v.p.zero_point - (v.type == pb::TensorProto::INT8 ? 128 : 0);
    if (s[0] != v.p.scale || z != vz)
      throw Error(file_ + ": " + label(i) + " uses other " + what + "QParams than its " + v.from + " (scale " + num_str(s[0]) +
                  ", zero point " + std::to_string(z) + "; its: scale " + num_str(v.p.scale) + ", zero point " + std::to_string(vz) + ")");
  }
  // Cast of a quantized value to its own type (torch.onnx.export writes one after each
  // QuantizeLinear): the same value.
  void cast(int i) {
    const pb::NodeProto& n = g_.node(i);
    const QVal& v = qvals_.at(n.input(0));
    if (Attrs(n, where(i)).i("to", 0) != v.type || n.output_size() != 1)
      throw Error(where(i) + ": a Cast of a quantized value to another type (its type is " + std::to_string(v.type) + ")");
    rename_[n.output(0)] = n.input(0);
    qvals_[n.output(0)] = QVal(v);
  }

  void dequantize(int i) {
    const pb::NodeProto& n = g_.node(i);
    if (n.output_size() < 1) throw Error(where(i) + ": no output");
    const std::string& y = n.input_size() ? n.input(0) : std::string();
    if (qvals_.count(y)) {
      const QVal v = qvals_.at(y);
      same_qparams(i, v, 1, 2, "");
      rename_[n.output(0)] = v.f;
      return;
    }
    pb::TensorProto* t = init_of(i, 0);
    const pb::TensorProto* zt = has_in(i, 2) ? init_of(i, 2) : nullptr;
    const std::vector<float> s = scales(init_of(i, 1));
    int64_t axis = 1;
    for (const auto& a : n.attribute())
      if (a.name() == "axis") axis = a.i();
    if (t->data_type() == pb::TensorProto::INT32 || info_.biases.count(t->name())) dequant_bias(t, s, zt);
    else dequant_weight(t, s, zt, axis);
    rename_[n.output(0)] = t->name();
  }

  // QLinearConv (x, xs, xz, w, ws, wz, ys, yz[, B]) / QLinearMatMul (a, as, az, b, bs, bz, ys, yz):
  // Conv / MatMul of the fp32 values, the output's QParams kept.
  void qlinear(int i, bool conv) {
    const pb::NodeProto& n = g_.node(i);
    const QVal x = qval(i, 0);
    same_qparams(i, x, 1, 2, "input ");
    pb::TensorProto* wt = init_of(i, 3);
    const std::vector<float> ws = scales(init_of(i, 4));
    dequant_weight(wt, ws, has_in(i, 5) ? init_of(i, 5) : nullptr, conv ? 0 : 1);
    pb::NodeProto out;
    out.set_name(n.name()), out.set_op_type(conv ? "Conv" : "MatMul");
    out.add_input(x.f), out.add_input(wt->name());
    if (conv && has_in(i, 8)) {
      std::vector<float> bs(ws.size());
      for (size_t k = 0; k < bs.size(); ++k) bs[k] = info_.acts[x.f].scale * ws[k];
      pb::TensorProto* bt = init_of(i, 8);
      dequant_bias(bt, bs, nullptr);
      out.add_input(bt->name());
    }
    if (conv) *out.mutable_attribute() = n.attribute();
    const QParams yp = act_params(i, 6, 7);
    out.add_output(n.output(0));
    set_act(i, n.output(0), yp);
    qvals_[n.output(0)] = {n.output(0), yp, zero_type(i, 7), label(i)};
    nodes_.push_back(std::move(out));
  }

  // ConvInteger / MatMulInteger (x, w, x_zp, w_zp) -> Cast(float) -> Mul(c): the weight's scales
  // are c / the input's scale; Conv / MatMul writes the Mul's output.
  void integer(int i, bool conv) {
    const pb::NodeProto& n = g_.node(i);
    const QVal x = qval(i, 0);
    if (has_in(i, 2)) {
      const QParams z = act_params_zero(i, 2, x.p);
      if (z.zero_point != x.p.zero_point) throw Error(where(i) + ": x_zero_point differs from the QuantizeLinear's");
    }
    const int cast = only_reader(n.output(0)), mul = cast < 0 ? -1 : only_reader(g_.node(cast).output(0));
    if (cast < 0 || g_.node(cast).op_type() != "Cast" || mul < 0 || g_.node(mul).op_type() != "Mul")
      throw Error(where(i) + ": expected its output to be read by Cast(float) then Mul by the scales (the int32 sum alone has no scale)");
    const pb::NodeProto& m = g_.node(mul);
    const int kc = m.input(0) == g_.node(cast).output(0) ? 1 : 0;
    std::vector<float> ws = mul_scales(init_of(mul, kc), conv);
    for (float& s : ws) s /= x.p.scale;
    pb::TensorProto* wt = init_of(i, 1);
    dequant_weight(wt, ws, has_in(i, 3) ? init_of(i, 3) : nullptr, conv ? 0 : 1);
    pb::NodeProto out;
    out.set_name(n.name()), out.set_op_type(conv ? "Conv" : "MatMul");
    out.add_input(x.f), out.add_input(wt->name()), out.add_output(m.output(0));
    if (conv) *out.mutable_attribute() = n.attribute();
    skip_.insert(cast), skip_.insert(mul);
    nodes_.push_back(std::move(out));
  }
  // The Mul's scales: one, or one per output channel ([K, 1, 1] / [1, K, 1, 1] for Conv, [K] /
  // [1, K] for MatMul).
  std::vector<float> mul_scales(const pb::TensorProto* t, bool conv) const {
    if (t->data_type() != pb::TensorProto::FLOAT) throw Error(tname(t->name()) + ": a scale must be float");
    const Const c = read(t);
    size_t big = 0;
    for (size_t k = 0; k < c.dims.size(); ++k)
      if (c.dims[k] != 1) big = k + 1;
    const size_t want = conv ? c.dims.size() - 2 : c.dims.size();  // the channel axis, 1-based
    if (c.f.empty() || (big && (c.dims.size() < (conv ? 3u : 1u) || big != want)))
      throw Error(tname(t->name()) + ": scales " + dims_str(c.dims) + " are not one per tensor or per output channel");
    for (float s : c.f)
      if (!std::isfinite(s) || s <= 0) throw Error(tname(t->name()) + ": scale " + std::to_string(s) + " is not finite and > 0");
    return c.f;
  }
  QParams act_params_zero(int i, int kz, QParams p) {
    const pb::TensorProto* zt = init_of(i, kz);
    const Const z = read(zt);
    if (z.count() != 1 || !z.is_int) throw Error(tname(zt->name()) + ": expected one integer zero point");
    p.zero_point = int32_t(zt->data_type() == pb::TensorProto::INT8 ? z.i[0] + 128 : z.i[0]);
    return p;
  }
  int only_reader(const std::string& v) const {
    auto it = readers_.find(v);
    return it == readers_.end() || it->second.size() != 1 ? -1 : it->second[0];
  }

  std::string resolve(std::string v) const {
    for (int k = 0; k < 1000; ++k) {
      auto it = rename_.find(v);
      if (it == rename_.end() || it->second == v) return v;
      v = it->second;
    }
    throw Error(file_ + ": value '" + shown(v) + "': the quantization pairs loop");
  }

  // The new node list (inputs renamed), Identity for renamed graph outputs, unread initializers out.
  void finish() {
    std::set<std::string> read;
    for (pb::NodeProto& n : nodes_)
      for (int k = 0; k < n.input_size(); ++k) n.set_input(k, resolve(n.input(k))), read.insert(n.input(k));
    for (const pb::ValueInfoProto& o : g_.output())
      if (resolve(o.name()) != o.name()) {
        pb::NodeProto id;
        id.set_op_type("Identity"), id.set_name(o.name() + "_dequantized");
        id.add_input(resolve(o.name())), id.add_output(o.name());
        read.insert(id.input(0));
        nodes_.push_back(std::move(id));
      }
    g_.clear_node();
    for (pb::NodeProto& n : nodes_) *g_.add_node() = std::move(n);
    drop_unread(read);
  }
  void drop_unread(const std::set<std::string>& read) {
    std::set<std::string> dropped;
    auto* in = g_.mutable_initializer();
    for (int k = in->size() - 1; k >= 0; --k)
      if (!read.count(in->Get(k).name())) dropped.insert(in->Get(k).name()), in->DeleteSubrange(k, 1);
    auto* gi = g_.mutable_input();
    for (int k = gi->size() - 1; k >= 0; --k)
      if (dropped.count(gi->Get(k).name())) gi->DeleteSubrange(k, 1);
  }

  pb::GraphProto& g_;
  std::string file_;
  std::map<std::string, pb::TensorProto*> inits_;
  std::map<std::string, std::vector<int>> readers_;
  std::map<std::string, std::string> rename_;  // a dropped node's output -> the value it stands for
  std::map<std::string, QVal> qvals_;          // quantized values
  std::map<std::string, std::string> act_from_;  // an fp32 value -> the node that set its info_.acts entry
  std::set<int> skip_;
  std::vector<pb::NodeProto> nodes_;
  QdqInfo info_;
};

}  // namespace

bool has_quant_ops(const pb::GraphProto& g) {
  for (const pb::NodeProto& n : g.node())
    if (is_quant_op(n.op_type())) return true;
  return false;
}

QdqInfo dequantize_graph(pb::GraphProto& g, const std::string& file) { return Rewriter(g, file).run(); }

}  // namespace ember::onnx
