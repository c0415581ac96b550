// The int8 lowering: a quantized model compiled into steps, then a graph that Plan runs
// (Plan(QuantizedWeights, ...)). Conv2d (groups 1 or depthwise), Linear, ReLU, max-pool and flatten
// run on u8 NHWC activations, a Conv2d or Linear taking the BatchNorm2d, the residual add and the
// ReLU into its requantization; every other node is the plan's fp32 node (channel-last where it can),
// with quantize, dequantize and transpose units where a tensor is read in another form than written.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <sstream>

#include "ember/error.h"
#include "ember/quant.h"
#include "kernels/int8_kernels.h"
#include "kernels/ref/ref_batchnorm.h"
#include "nn/plan_impl.h"
#include "nn/op_table.h"
#include "quant/int8_ops.h"
#include "quant/int8_plan_impl.h"
#include "quant/node_graph.h"
#include "quant/quant_math.h"

namespace ember {

namespace int8plan {  // the compiler (its state and what int8_view.cpp uses: int8_plan_impl.h)

const LayerSpec& spec(const Impl& m, int node) { return *m.g().nodes[size_t(node)].spec; }
// Whether the op declares "u8" (its descriptor's dtypes: the truth of what runs int8 here).
bool runs_u8(LayerKind k) { return nn::op_declares_dtype(k, "u8"); }
// Node `node` is of kind k, an op that runs u8.
bool kind_is(const Impl& m, int node, LayerKind k) { return spec(m, node).kind == k && runs_u8(k); }
int only_reader(const Impl& m, int t) {
  const auto& r = m.g().tensors[size_t(t)].readers;
  return r.size() == 1 ? r[0] : -1;
}

bool has_act(const Impl& m, int t) { return m.q.acts.count(m.name(size_t(t))) > 0; }
// Whether tensor t (its producer's role known) has 8-bit parameters: its own activation entry, or
// those of an exact u8 op's input. A tensor without (a QDQ file that quantizes only some) stays
// fp32: every node that reads it runs fp32.
bool has_qp(const Impl& m, int t) {
  if (has_act(m, t)) return true;
  const int p = m.g().tensors[size_t(t)].producer;
  return p >= 0 && exact_u8(m.role[size_t(p)]);
}
// The QParams tensor t's u8 values carry (the roles of the nodes before it known): its own, or
// for an exact u8 op's output its input's.
QParams u8_qparams(const Impl& m, int t) {
  for (int p = m.g().tensors[size_t(t)].producer; p >= 0 && exact_u8(m.role[size_t(p)]); p = m.g().tensors[size_t(t)].producer)
    t = m.g().nodes[size_t(p)].in[0];
  const auto a = m.q.acts.find(m.name(size_t(t)));
  return a == m.q.acts.end() ? QParams{} : a->second;
}

// Whether a max-pool runs on u8: always a 2x2/2 one (its output's pair must then be its input's:
// check_exact_u8_outputs); another window when the file's pair at its output (if it has its own) is
// the one its u8 input carries. Files written before ember ran those on u8 calibrated such a pool's
// output on its own: that pool stays fp32 for them, as it ran (dequantize, pool, quantize).
bool keeps_qparams(const Impl& m, const nn::Node& n) {
  if (m.quantizing) return true;
  const LayerSpec& s = *n.spec;
  if (s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0 &&
      s.pad_h_end <= 0 && s.pad_w_end <= 0)
    return true;
  const auto own = m.q.acts.find(m.name(size_t(n.out)));
  const QParams in = u8_qparams(m, n.in[0]);
  return own == m.q.acts.end() || (own->second.scale == in.scale && own->second.zero_point == in.zero_point);
}

// The node's int8 role before fusion (by kind, parameters, shapes and which tensors have 8-bit
// parameters).
Role base_role(const Impl& m, int i) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  const LayerSpec& s = *n.spec;
  const nn::Dims in = m.g().tensors[size_t(n.in[0])].dims;
  const bool act_in = has_act(m, n.in[0]);  // the file's bias is in units of the input's scale
  if (!runs_u8(s.kind)) return Role::fallback;
  if (s.kind == LayerKind::Conv2d && m.q.layer(n.param_prefix) && act_in) {
    if (s.groups == 1) return Role::gemm;
    if (s.groups == in.c && s.out % in.c == 0 && s.stride_h == s.stride_w) return Role::dw;
    return Role::fallback;
  }
  if (s.kind == LayerKind::Linear && m.q.layer(n.param_prefix) && act_in) return Role::gemm;
  const int p = m.g().tensors[size_t(n.in[0])].producer;
  const bool u8_in = p >= 0 && m.role[size_t(p)] != Role::fallback && has_qp(m, n.in[0]);
  if (s.kind == LayerKind::ReLU && u8_in) return Role::relu8;
  if (s.kind == LayerKind::MaxPool2d && u8_in && keeps_qparams(m, n)) return Role::pool8;  // any window and padding
  if (s.kind == LayerKind::Flatten && u8_in && !m.g().tensors[size_t(n.out)].readers.empty()) {
    for (int r : m.g().tensors[size_t(n.out)].readers)
      if (!kind_is(m, r, LayerKind::Linear) || spec(m, r).over_channels || !m.q.layer(m.g().nodes[size_t(r)].param_prefix))
        return Role::fallback;
    return Role::flatten8;
  }
  return Role::fallback;
}

// The eval-mode BatchNorm2d of node bn as y = a x + c per channel (false where some a is 0: the
// requantization could not carry c then). Its parameters: weight, bias (affine only), running_mean,
// running_var, num_batches_tracked.
bool bn_affine(const Impl& m, int bn, std::vector<double>* a, std::vector<double>* c) {
  const size_t t = size_t(m.ng.first_param[size_t(bn)]);
  const bool affine = spec(m, bn).bias;
  const int C = m.g().tensors[size_t(m.g().nodes[size_t(bn)].out)].dims.c;
  const float* p = m.q.values.data();
  const float *g = affine ? p + m.ng.params[t].offset : nullptr, *b = affine ? p + m.ng.params[t + 1].offset : nullptr;
  const size_t mean = m.ng.params[t + (affine ? 2 : 0)].offset;  // running mean [C], then running var [C]
  if (m.ng.params[t + (affine ? 3 : 1)].offset != mean + size_t(C)) throw Error("internal: int8 plan: running var not after running mean");
  const float* run = p + mean;
  a->resize(size_t(C)), c->resize(size_t(C));
  for (int k = 0; k < C; ++k) {
    ref::batchnorm_affine(g, b, run, C, spec(m, bn).eps, k, &(*a)[size_t(k)], &(*c)[size_t(k)]);
    if (!(std::fabs((*a)[size_t(k)]) > 1e-30) || !std::isfinite((*a)[size_t(k)])) return false;
  }
  return true;
}

// Layer l's int32 bias in units of s_in s_w[k] carrying its real bias B_k (the file's int32 in
// units of s_file s_w[k]) and an affine y = a_k x + c_k after it: round((B_k + c_k / a_k) /
// (s_in s_w[k])); false where one does not fit int32.
bool bias_in_units(const QuantLayer& l, double s_file, float s_in, const std::vector<double>& a,
                   const std::vector<double>& c, std::vector<int32_t>* bias) {
  const size_t K = l.w_scale.size();
  bias->assign(K, 0);
  for (size_t k = 0; k < K && k < a.size(); ++k) {
    const double unit = double(s_in) * l.w_scale[k], B = double(l.bias[k]) * s_file * l.w_scale[k];
    const double v = std::nearbyint((B + c[k] / a[k]) / unit);
    if (!(std::fabs(v) <= 2147483647.0)) return false;  // NaN too
    (*bias)[k] = int32_t(v);
  }
  return a.size() == K;
}

// Layer l with the affine a folded in (bias: its bias with the shift, in l's units), as the QDQ
// export writes it: int8 weights times sign a_k, scales s_w[k] |a_k|, the bias times sign a_k;
// false (l unchanged) where a weight of -128 would need negating.
bool fold_affine(QuantLayer* l, const std::vector<double>& a, const std::vector<int32_t>& bias) {
  const size_t K = a.size(), per = l->w.size() / K;
  for (size_t k = 0; k < K; ++k)
    if (a[k] < 0 && std::find(l->w.begin() + long(k * per), l->w.begin() + long((k + 1) * per), int8_t(-128)) !=
                        l->w.begin() + long((k + 1) * per))
      return false;
  for (size_t k = 0; k < K; ++k) {
    const int sign = a[k] < 0 ? -1 : 1;
    for (size_t j = 0; j < per; ++j) l->w[k * per + j] = int8_t(sign * l->w[k * per + j]);
    l->w_scale[k] = float(double(l->w_scale[k]) * std::fabs(a[k]));
    l->bias[k] = sign * bias[k];
  }
  l->has_bias = true;
  return true;
}

// Whether conv node i can carry the BatchNorm2d (a, c) after it in its requantization, and so in
// its export: its bias with the BN's shift fits int32, and the folded layer passes layer_problem
// (else the BN runs fp32).
bool bn_foldable(const Impl& m, int i, const std::vector<double>& a, const std::vector<double>& c) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  const QuantLayer& l = *m.q.layer(n.param_prefix);
  const float s_in = u8_qparams(m, n.in[0]).scale;
  std::vector<int32_t> bias;
  if (!bias_in_units(l, m.q.acts.at(m.name(size_t(n.in[0]))).scale, s_in, a, c, &bias)) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!quant::normal_scale(std::fabs(a[k]) * l.w_scale[k])) return false;  // the folded scale as a float
  QuantLayer f = l;
  return !fold_affine(&f, a, bias) || !quant::layer_problem(f, s_in, "");
}

// Fuses a BatchNorm2d, then a ReLU, or an Add (with the other input ready) and a ReLU after it,
// into gemm/dw node i.
void fuse_after(Impl& m, int i) {
  int t = m.g().nodes[size_t(i)].out;
  int r = only_reader(m, t);
  std::vector<double> a, c;
  // A BatchNorm2d after a Conv2d only (the QDQ export folds it into the Conv the same way).
  if (r >= 0 && kind_is(m, i, LayerKind::Conv2d) && kind_is(m, r, LayerKind::BatchNorm2d) && bn_affine(m, r, &a, &c) &&
      bn_foldable(m, i, a, c)) {
    m.role[size_t(r)] = Role::fused, m.bn_of[size_t(i)] = r;
    t = m.g().nodes[size_t(r)].out, r = only_reader(m, t);
  }
  if (r >= 0 && kind_is(m, r, LayerKind::Add) && m.g().nodes[size_t(r)].in.size() == 2) {
    const auto& in = m.g().nodes[size_t(r)].in;
    const int other = in[0] == t ? in[1] : in[0];
    const int p = m.g().tensors[size_t(other)].producer;
    if (other != t && p < i && has_qp(m, other)) {
      m.role[size_t(r)] = Role::fused, m.res_of[size_t(i)] = other;
      t = m.g().nodes[size_t(r)].out, r = only_reader(m, t);
    }
  }
  if (r >= 0 && kind_is(m, r, LayerKind::ReLU)) m.role[size_t(r)] = Role::fused, t = m.g().nodes[size_t(r)].out;
  m.final_of[size_t(i)] = t;
}

void classify(Impl& m) {
  const size_t n = m.g().nodes.size();
  m.role.assign(n, Role::fallback);
  m.final_of.assign(n, -1);
  m.res_of.assign(n, -1);
  m.bn_of.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (m.role[i] == Role::fused) continue;
    m.role[i] = base_role(m, int(i));
    if (m.role[i] == Role::gemm || m.role[i] == Role::dw) fuse_after(m, int(i));
  }
}

// Per tensor: dims, qparams (the exact u8 ops keep their input's), the form its producer writes.
void tensor_forms(Impl& m) {
  const nn::Graph& g = m.g();
  m.ts.assign(g.tensors.size(), {});
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const nn::Dims d = g.tensors[t].dims;
    TensorInfo& x = m.ts[t];
    x.image = !d.flat(), x.C = d.c, x.HW = d.h * d.w;
    const auto a = m.q.acts.find(m.name(t));  // none: fp32 only (has_qp), or inherited below
    if (a != m.q.acts.end()) x.qp = a->second;
  }
  m.ts[0].native = kF32Nchw;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    TensorInfo& out = m.ts[size_t(n.out)];
    switch (m.role[i]) {
      case Role::fused: break;
      case Role::gemm:
      case Role::dw: {
        TensorInfo& f = m.ts[size_t(m.final_of[i])];
        bool f32 = true;  // every reader runs fp32 (none: the model's output)
        for (int r : g.tensors[size_t(m.final_of[i])].readers) f32 = f32 && m.role[size_t(r)] == Role::fallback;
        f.native = !f32 ? kU8 : f.image ? kF32Nhwc : kF32Nchw;
        break;
      }
      case Role::relu8:
      case Role::pool8:
      case Role::flatten8:
        out.native = kU8, out.qp = m.ts[size_t(n.in[0])].qp;
        if (m.role[i] == Role::flatten8 && m.ts[size_t(n.in[0])].image) out.hwc_from = n.in[0];
        break;
      case Role::fallback:
        out.native = !out.image ? kF32Nchw : n.layout == nn::Layout::nhwc ? kF32Nhwc : kF32Nchw;
        break;
    }
  }
}

// A new value of the lowered graph: tensor t in form f (its id is the graph's tensor id).
int new_block(Impl& m, int t, int form) {
  m.vals.push_back({t, form});
  return int(m.vals.size()) - 1;
}

// Tensor t in form f for the next step: a conversion from its native form the first time.
int form_of(Impl& m, int t, int f) {
  TensorInfo& x = m.ts[size_t(t)];
  if (!x.image && f == kF32Nhwc) f = kF32Nchw;
  if (x.buf[f] < 0) {
    if (x.hwc_from >= 0 && f != kU8)
      throw Error("internal: int8 plan: a flattened NHWC tensor read in fp32");
    Step c;
    c.kind = Step::convert;
    c.tensor = t, c.from = x.native, c.to = f;
    c.in = x.buf[x.native];
    c.out = x.buf[f] = new_block(m, t, f);
    c.what = std::string(f == kU8 ? "quantize" : x.native == kU8 ? "dequantize" : "transpose") + " " + m.name(size_t(t));
    c.algorithm = f == kU8 ? "quantize" : x.native == kU8 ? "dequantize" : "transpose";
    c.ops = {c.algorithm};
    c.layout = f == kF32Nchw ? "nchw" : "nhwc";
    m.steps.push_back(c);
  }
  return x.buf[f];
}

// The int32 bias of node i's requantization, in units of s_in s_w[k]: per channel, with the
// layer's real bias B_k and a fused BatchNorm's affine y = a_k x + c_k (else a 1, c 0), the sum
// a_k (s_in s_w[k] acc + B_k) + c_k is a_k s_in s_w[k] (acc + bias_k). a, c: that affine
// (with_bn false: the layer's own bias alone, for an export that keeps the BatchNorm2d).
std::vector<int32_t> requant_bias(const Impl& m, int i, const QuantLayer& l, float s_in, std::vector<double>* a,
                                  std::vector<double>* c, bool with_bn) {
  const size_t K = l.w_scale.size();
  a->assign(K, 1.0), c->assign(K, 0.0);
  const int bn = with_bn ? m.bn_of[size_t(i)] : -1;
  if (bn >= 0) bn_affine(m, bn, a, c);
  const int in = m.g().nodes[size_t(i)].in[0];
  const double s_file = m.q.acts.at(m.name(size_t(in))).scale;  // the file's bias is in its units
  std::vector<int32_t> bias;
  if (!bias_in_units(l, s_file, s_in, *a, *c, &bias))
    fail(m, {l.prefix + ".bias", std::string("does not fit int32 in the units the int8 plan computes in (") + quant::scale_text(s_in) +
                                     ", the scale its u8 input keeps, times " + l.prefix + ".weight_scale" +
                                     (bn >= 0 ? ", batchnorm2d folded in)" : ")")});
  return bias;
}

// Node i's requantization scales a_k s_in s_w[k] / out_s (out_s 1 for an fp32 output), each a
// normal float, into tensor `final`; an fp32 output's largest value (from any u8 input) finite.
std::vector<float> requant_scales(const Impl& m, int i, const QuantLayer& l, float s_in, double out_s, bool f32_out,
                                  const std::vector<double>& a, const std::vector<int32_t>& bias) {
  const std::string in = quant::act_scale_name(m.name(size_t(m.g().nodes[size_t(i)].in[0]))), ws = l.prefix + ".weight_scale";
  const std::string out = f32_out ? ws : quant::act_scale_name(m.name(size_t(m.final_of[size_t(i)])));
  const size_t per = l.w.size() / a.size();
  std::vector<float> scale(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string at = std::string("[").append(std::to_string(k)).append("] ");
    const double v = a[k] * double(s_in) * l.w_scale[k] / out_s;
    const float f = quant::normal_scale(std::fabs(v));
    if (!f)
      fail(m, {out, "the requantization scale " + at + "of layer " + l.prefix + " (" + in + " * " + ws +
                        (m.bn_of[size_t(i)] >= 0 ? " * batchnorm2d a" : "") + (f32_out ? "" : " / " + out) + " = " +
                        quant::scale_text(v) + ") is not a normal float"});
    scale[k] = v < 0 ? -f : f;
    int w = 0;
    for (size_t j = 0; f32_out && j < per; ++j) w = std::max(w, std::abs(int(l.w[k * per + j])));
    const double top = (double(per) * 255.0 * w + std::fabs(double(bias[k]))) * f;
    if (f32_out && !(top <= double(FLT_MAX)))
      fail(m, {ws, at + "layer " + l.prefix + " writes fp32: its largest output (" + std::to_string(per) + " products of 255 and " +
                       std::to_string(w) + ", plus the bias " + std::to_string(bias[k]) + ", times " + quant::scale_text(f) +
                       ") overflows float"});
  }
  return scale;
}

// The requantization of node i's fused step into tensor `final` (u8, or f32 for fp32 readers):
// z = scale_k (acc + bias_k) in units of the output, scale_k = a_k s_in s_w[k] / s_out.
Int8Epilogue epilogue(const Impl& m, int i, const QuantLayer& l, float s_in, std::vector<float>* scale,
                      std::vector<int32_t>* bias) {
  const int final = m.final_of[size_t(i)];
  const TensorInfo& f = m.ts[size_t(final)];
  Int8Epilogue ep;
  ep.f32_out = f.native != kU8;
  const double s_out = ep.f32_out ? 1.0 : f.qp.scale;
  const bool relu = kind_is(m, m.g().tensors[size_t(final)].producer, LayerKind::ReLU);
  ep.relu = relu && ep.f32_out;
  ep.zero_point = f.qp.zero_point;
  ep.lo = relu && !ep.f32_out ? f.qp.zero_point : 0;
  std::vector<double> a, c;
  *bias = requant_bias(m, i, l, s_in, &a, &c);
  *scale = requant_scales(m, i, l, s_in, s_out, ep.f32_out, a, *bias);
  if (const int r = m.res_of[size_t(i)]; r >= 0) {
    const double v = double(m.ts[size_t(r)].qp.scale) / s_out;
    ep.res_scale = quant::normal_scale(v);
    if (!ep.res_scale)
      fail(m, {quant::act_scale_name(m.name(size_t(final))), "the residual's scale ratio for layer " + l.prefix + " (" +
                                                                 quant::act_scale_name(m.name(size_t(r))) + " / " +
                                                                 quant::act_scale_name(m.name(size_t(final))) + " = " +
                                                                 quant::scale_text(v) + ") is not a normal float"});
    ep.res_zp = m.ts[size_t(r)].qp.zero_point;
  }
  return ep;
}

// Linear weights [K, C*H*W] read by an NHWC flatten: columns in (h, w, c) order.
std::vector<int8_t> hwc_columns(const std::vector<int8_t>& w, int K, int C, int HW) {
  std::vector<int8_t> out(w.size());
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < HW; ++i) out[(size_t(k) * HW + i) * C + c] = w[(size_t(k) * C + c) * HW + i];
  return out;
}

void add_gemm(Impl& m, int i, Step& st) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  const LayerSpec& s = *n.spec;
  const QuantLayer& l = *m.q.layer(n.param_prefix);
  const TensorInfo& x = m.ts[size_t(n.in[0])];
  const nn::Dims in = m.g().tensors[size_t(n.in[0])].dims, out = m.g().tensors[size_t(n.out)].dims;
  std::vector<float> scale;
  std::vector<int32_t> bias;
  st.ep = epilogue(m, i, l, x.qp.scale, &scale, &bias);
  st.op = int(m.gemms.size());
  quant::GemmOp& op = m.gemms.emplace_back();
  if (!m.pack) return;  // steps and checks only
  op.x_zp = x.qp.zero_point;
  op.K = l.shape[0];
  std::vector<int8_t> rows = l.w;
  if (s.kind == LayerKind::Conv2d) {
    op.C = in.c, op.H = in.h, op.W = in.w, op.R = s.kernel_h, op.S = s.kernel_w, op.P = out.h, op.Q = out.w;
    op.stride_h = s.stride_h, op.stride_w = s.stride_w;
    op.pad_h = s.same ? (s.kernel_h - 1) / 2 : s.pad_h, op.pad_w = s.same ? (s.kernel_w - 1) / 2 : s.pad_w;
    op.im2col = !(op.R == 1 && op.S == 1 && op.stride_h == 1 && op.stride_w == 1 && op.pad_h == 0 && op.pad_w == 0);
    rows = quant::conv_rows_rsc(l.w, op.K, op.C, op.R, op.S);
  } else if (s.over_channels) {
    op.C = in.c, op.H = op.P = in.h, op.W = op.Q = in.w;
  } else {
    op.C = int(in.size());
    if (x.hwc_from >= 0) {
      const TensorInfo& img = m.ts[size_t(x.hwc_from)];
      rows = hwc_columns(l.w, op.K, img.C, img.HW);
    }
  }
  quant::pack_gemm(*m.k, op, rows, bias, scale);
}

void add_dw(Impl& m, int i, Step& st) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  const LayerSpec& s = *n.spec;
  const QuantLayer& l = *m.q.layer(n.param_prefix);
  const TensorInfo& x = m.ts[size_t(n.in[0])];
  const nn::Dims in = m.g().tensors[size_t(n.in[0])].dims, out = m.g().tensors[size_t(n.out)].dims;
  quant::DwOp op;
  const int ph = s.same ? (s.kernel_h - 1) / 2 : s.pad_h, pw = s.same ? (s.kernel_w - 1) / 2 : s.pad_w;
  op.s = {in.h, in.w, in.c, out.c, s.kernel_h, s.kernel_w, s.stride_h, ph, pw, out.h, out.w};
  op.x_zp = x.qp.zero_point;
  const int RS = s.kernel_h * s.kernel_w;
  if (m.pack) {
    op.w.resize(l.w.size());
    for (int k = 0; k < out.c; ++k)
      for (int j = 0; j < RS; ++j) op.w[size_t(j) * out.c + k] = l.w[size_t(k) * RS + j];
  }
  st.ep = epilogue(m, i, l, x.qp.scale, &op.scale, &op.bias);
  st.op = int(m.dws.size());
  m.dws.push_back(std::move(op));
}

// The step's descriptor: node i's ops with what its requantization carries as post-ops.
void describe_step(const Impl& m, int i, Role r, int out, Step& st) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  st.ops = {layer_kind_name(n.spec->kind)};
  st.flops = n.layer->flops_per_sample();
  st.layout = r == Role::fallback ? nn::layout_name(n.layout) : m.ts[size_t(n.in[0])].image ? "nhwc" : "flat";
  if (r == Role::fallback) {
    st.algorithm = "fp32 " + (n.layer->algorithm().empty() ? std::string(layer_kind_name(n.spec->kind)) : n.layer->algorithm());
    if (!n.layer->param_shapes().empty()) st.weight_format = n.layer->weight_format().empty() ? "as stored" : n.layer->weight_format();
    if (m.fk) st.packed_per_call = n.layer->weight_bytes_packed_per_call(m.batch, m.threads, *m.fk, false);
    return;
  }
  st.algorithm = r == Role::gemm ? "int8-gemm" : r == Role::dw ? "int8-depthwise" : r == Role::relu8 ? "u8-relu" : "u8-maxpool";
  if (r != Role::gemm && r != Role::dw) return;
  // A u8 flatten before a Linear is no step of its own (the same bytes; an NHWC one's order is in the
  // Linear's permuted columns): the Linear's unit runs it.
  const int in_producer = m.g().tensors[size_t(n.in[0])].producer;
  if (in_producer >= 0 && m.role[size_t(in_producer)] == Role::flatten8) st.ops.insert(st.ops.begin(), "flatten");
  st.weight_format = r == Role::gemm ? "int8-panels" : "int8-kcrs";
  st.post_ops = {"bias"};
  if (m.bn_of[size_t(i)] >= 0) st.ops.push_back("batchnorm2d"), st.post_ops.push_back("batchnorm2d-fold");
  if (m.res_of[size_t(i)] >= 0) st.ops.push_back("add"), st.post_ops.push_back("add");
  if (kind_is(m, m.g().tensors[size_t(out)].producer, LayerKind::ReLU)) st.ops.push_back("relu"), st.post_ops.push_back("relu");
  st.post_ops.push_back(m.ts[size_t(out)].native == kU8 ? "requantize" : "dequantize");
}

// Node i's step, after the conversions its inputs need.
void add_step(Impl& m, int i) {
  const nn::Node& n = m.g().nodes[size_t(i)];
  const Role r = m.role[size_t(i)];
  if (r == Role::fused) return;
  Step st;
  st.kind = r == Role::gemm ? Step::gemm : r == Role::dw ? Step::dw : r == Role::relu8 ? Step::relu8
            : r == Role::pool8 ? Step::pool8 : Step::fallback;
  st.node = i;
  int out = n.out;
  if (r == Role::fallback) {
    for (int t : n.in) st.ins.push_back(form_of(m, t, n.layout == nn::Layout::nhwc ? kF32Nhwc : kF32Nchw));
  } else if (r == Role::flatten8) {  // the same bytes: the output shares its input's block
    m.ts[size_t(out)].buf[kU8] = form_of(m, n.in[0], kU8);
    return;
  } else {
    st.in = form_of(m, n.in[0], kU8);
    if (r == Role::gemm || r == Role::dw) {
      out = m.final_of[size_t(i)];
      if (m.res_of[size_t(i)] >= 0) st.res = form_of(m, m.res_of[size_t(i)], kU8);
      if (r == Role::gemm) add_gemm(m, i, st);
      else add_dw(m, i, st);
    }
  }
  TensorInfo& o = m.ts[size_t(out)];
  st.out = o.buf[o.native] = new_block(m, out, o.native);
  st.what = std::string(r == Role::fallback ? "fp32 " : "int8 ") + n.label;
  if (r == Role::gemm || r == Role::dw) {  // what its requantization carries
    if (m.bn_of[size_t(i)] >= 0) st.what += " + batchnorm2d";
    if (m.res_of[size_t(i)] >= 0) st.what += " + add " + m.name(size_t(m.res_of[size_t(i)]));
    if (kind_is(m, m.g().tensors[size_t(out)].producer, LayerKind::ReLU)) st.what += " + relu";
    st.what += m.ts[size_t(out)].native == kU8 ? " -> u8" : " -> fp32";
    if (r == Role::gemm && m.gemms[size_t(st.op)].w7) st.what += " (7-bit weights: " + std::string(m.k->name) + " VPMADDUBSW)";
  }
  describe_step(m, i, r, out, st);
  m.steps.push_back(std::move(st));
}

size_t step_scratch(const Impl& m, const Step& st) {
  const int T = m.threads;
  if (st.kind == Step::gemm) return m.gemms[size_t(st.op)].scratch_bytes(T);
  if (st.kind == Step::fallback) return m.ng.ws_elems * 4;
  if (st.kind == Step::convert) return size_t(T) * m.ts[size_t(st.tensor)].C * m.ts[size_t(st.tensor)].HW * 4;
  return 0;
}

// The scales every step computes with (the requantization's are checked as each step is made):
// each activation's QParams and each int8 layer's scales in the units the plan reads it in.
void check_scales(const Impl& m) {
  for (const auto& [t, p] : m.q.acts)
    if (const quant::Problem e = quant::qparams_problem(p, quant::act_scale_name(t), quant::act_zp_name(t))) fail(m, e);
  for (size_t i = 0; i < m.g().nodes.size(); ++i) {
    if (m.role[i] != Role::gemm && m.role[i] != Role::dw) continue;
    const nn::Node& n = m.g().nodes[i];
    const std::string in = quant::act_scale_name(m.name(size_t(n.in[0])));
    if (const quant::Problem e = quant::layer_problem(*m.q.layer(n.param_prefix), m.ts[size_t(n.in[0])].qp.scale, in)) fail(m, e);
  }
}

void build_steps(Impl& m) {
  m.ng = quant::make_node_graph(m.q.model, m.batch, m.threads);
  classify(m);
  std::vector<bool> nhwc(m.role.size());
  for (size_t i = 0; i < nhwc.size(); ++i) nhwc[i] = m.role[i] == Role::fallback;
  m.ng = quant::make_node_graph(m.q.model, m.batch, m.threads, nhwc);
  tensor_forms(m);
  check_scales(m);
  if (m.file_checks) check_exact_u8_outputs(m);
  m.ts[0].buf[kF32Nchw] = new_block(m, 0, kF32Nchw);
  for (size_t i = 0; i < m.g().nodes.size(); ++i) add_step(m, int(i));
  form_of(m, nn::output(m.g()), kF32Nchw);
  for (Step& st : m.steps) st.scratch = step_scratch(m, st);
}

// One step of the lowered graph as the plan's layer: an int8 GEMM or depthwise convolution with its
// requantization, a u8 ReLU or max-pool, or a conversion (quantize, dequantize, fp32 transpose).
// It shares the compiler's state (the packed weights, the tensors' QParams) with the plan.
class Int8Unit final : public nn::Layer {
 public:
  Int8Unit(const LayerSpec& s, std::shared_ptr<const Impl> m, int step) : Layer(s), m_(std::move(m)), st_(m_->steps[size_t(step)]) {}
  nn::Dims infer(const nn::Dims& in) override { return out_dims(); }
  nn::Dims infer_inputs(const std::vector<nn::Dims>& in) override { return out_dims(); }
  DType input_dtype(int j, DType plan) const override { return form(j == 0 ? st_.in : st_.res) == kU8 ? DType::u8 : plan; }
  DType output_dtype(DType plan) const override { return form(st_.out) == kU8 ? DType::u8 : plan; }
  size_t workspace_elems(int, int) const override { return st_.scratch ? (st_.scratch + 128 + 3) / 4 : 0; }
  double flops_per_sample() const override { return st_.flops; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool describe_unit(UnitInfo* u) const override;
  void forward(const ops::Exec& e, const nn::Bufs& b, int n) override;
  void backward(const ops::Exec&, const nn::Bufs&, int) override { throw Error("internal: an int8 unit has no backward"); }

 private:
  int form(int v) const { return v < 0 ? kF32Nchw : m_->vals[size_t(v)].form; }
  nn::Dims out_dims() const { return m_->g().tensors[size_t(m_->vals[size_t(st_.out)].tensor)].dims; }
  std::shared_ptr<const Impl> m_;
  const Step& st_;
};

bool Int8Unit::describe_unit(UnitInfo* u) const {
  const Impl& m = *m_;
  u->name = st_.what;
  if (st_.node >= 0) {  // as the fp32 plan names its units: the ops, then the model layers ("linear+relu (4-5)")
    const bool fused = st_.kind == Step::gemm || st_.kind == Step::dw;
    const int last = fused ? m.g().tensors[size_t(m.final_of[size_t(st_.node)])].producer : st_.node;
    const int first = !st_.ops.empty() && st_.ops[0] == "flatten" && st_.kind == Step::gemm  // a u8 flatten it runs
                          ? m.g().tensors[size_t(m.g().nodes[size_t(st_.node)].in[0])].producer
                          : st_.node;
    std::string ops;
    for (const std::string& o : st_.ops) ops += (ops.empty() ? "" : "+") + o;
    u->name = ops + " (" + std::to_string(first) + (last > first ? "-" + std::to_string(last) : "") + ")";
  }
  u->ops = st_.ops;
  u->algorithm = st_.algorithm;
  u->layout_in = u->layout_out = st_.layout;
  u->dtype = st_.kind == Step::convert ? "f32" : "u8";
  u->weight_format = st_.weight_format;
  u->post_ops = st_.post_ops;
  u->precision = Precision::int8;
  return true;
}

void Int8Unit::forward(const ops::Exec& e, const nn::Bufs& b, int n) {
  const Impl& m = *m_;
  const Int8Kernels& k = *m.k;
  const nn::Node* node = st_.node >= 0 ? &m.g().nodes[size_t(st_.node)] : nullptr;
  const uint8_t* x = static_cast<const uint8_t*>(b.x);
  switch (st_.kind) {
    case Step::gemm:
    case Step::dw: {
      Int8Epilogue ep = st_.ep;
      if (st_.res >= 0) ep.res = static_cast<const uint8_t*>(b.xs[1]);
      if (st_.kind == Step::gemm)
        quant::run_gemm(k, e.pool, m.gemms[size_t(st_.op)], ep, x, static_cast<std::byte*>(b.y), static_cast<uint8_t*>(b.ws), n);
      else
        quant::run_dw(k, e.pool, m.dws[size_t(st_.op)], ep, x, static_cast<std::byte*>(b.y), n);
      break;
    }
    case Step::relu8: {  // [n, H, W, C] or [n, D] u8: max(x, zero point)
      const TensorInfo& t = m.ts[size_t(node->in[0])];
      const uint8_t z = uint8_t(t.qp.zero_point);
      uint8_t* y = static_cast<uint8_t*>(b.y);
      for (size_t j = 0, end = size_t(n) * t.C * t.HW; j < end; ++j) y[j] = std::max(x[j], z);
      break;
    }
    case Step::pool8: {  // [n, H, W, C] -> [n, P, Q, C] u8
      const nn::Dims d = m.g().tensors[size_t(node->in[0])].dims, o = m.g().tensors[size_t(node->out)].dims;
      uint8_t* y = static_cast<uint8_t*>(b.y);
      const LayerSpec& s = *node->spec;
      const Int8PoolShape ps{d.h, d.w, d.c, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w, o.h, o.w};
      e.pool.run([&](int t) {  // the n * P output rows split evenly
        const Range r = split_range(int64_t(n) * o.h, t, e.pool.size());
        for (int64_t row = r.begin; row < r.end;) {
          const int64_t j = row / o.h, p0 = row % o.h, p1 = std::min<int64_t>(o.h, p0 + (r.end - row));
          k.maxpool(y + size_t(j) * o.size(), x + size_t(j) * d.size(), ps, int(p0), int(p1));
          row += p1 - p0;
        }
      });
      break;
    }
    case Step::convert: {
      const TensorInfo& t = m.ts[size_t(st_.tensor)];
      float* sf = static_cast<float*>(b.ws);
      if (st_.to == kU8)
        quant::quantize_rows(k, e.k.transpose, e.pool, static_cast<uint8_t*>(b.y), static_cast<const float*>(b.x), n, t.C, t.HW,
                             st_.from == kF32Nchw, t.qp.scale, t.qp.zero_point, sf);
      else if (st_.from == kU8)
        quant::dequantize_rows(k, e.k.transpose, e.pool, static_cast<float*>(b.y), x, n, t.C, t.HW, st_.to == kF32Nchw, t.qp.scale,
                               t.qp.zero_point, sf);
      else
        quant::transpose_rows(e.k.transpose, e.pool, static_cast<float*>(b.y), static_cast<const float*>(b.x), n, t.C, t.HW,
                              st_.to == kF32Nhwc);
      break;
    }
    case Step::fallback: throw Error("internal: an fp32 step lowered as an int8 unit");
  }
}

// The int8 kernels of PlanOptions::isa: an int8 set by name (avx_vnni, avx512_vnni: tests and
// benchmarks) with the best fp32 set, else the fp32 set's own int8 path.
void choose_kernels(Impl& m, const std::string& isa) {
  const Int8Kernels* named = nullptr;
  for (Int8Isa s : {Int8Isa::avx_vnni, Int8Isa::avx512_vnni})
    if (isa == int8_isa_name(s)) {
      if (!int8_isa_supported(s)) throw Error("isa: " + isa + " is not on this CPU");
      named = &int8_kernels(s);
    }
  const Isa set = named ? best_isa() : resolve_isa_option(isa);  // "": EMBER_ISA, else the best
  m.fk = &kernels_for(set);
  m.k = named ? named : &int8_kernels_for(set);
}

// The steps as a graph: value v (a tensor in one form) is tensor v; an fp32 step is its model node
// (channel-last where it runs so), every other step an Int8Unit node named by its ops.
nn::Graph lowered_graph(const std::shared_ptr<const Impl>& m) {
  nn::Graph g;
  g.where = m->g().where;
  g.tensors.resize(m->vals.size());
  g.tensors[0].dims = m->g().tensors[0].dims;
  for (size_t i = 0; i < m->steps.size(); ++i) {
    const Step& st = m->steps[i];
    nn::Node n;
    if (st.kind == Step::fallback) {
      const nn::Node& src = m->g().nodes[size_t(st.node)];
      n.spec = src.spec, n.label = src.label, n.param_prefix = src.param_prefix, n.layout = src.layout, n.make = src.make;
      n.source = st.node;
      n.in = st.ins;
    } else {
      auto s = std::make_shared<LayerSpec>();
      s->kind = LayerKind::DropPath;  // an op table entry without parameters (its layer is the unit's own)
      if (st.node >= 0) s->name = m->g().nodes[size_t(st.node)].spec->name;
      n.own = s, n.spec = s.get();
      n.make = [m, i](const LayerSpec& spec) { return std::make_unique<Int8Unit>(spec, m, int(i)); };
      for (const std::string& o : st.ops) n.kind_name += (n.kind_name.empty() ? "" : "+") + o;
      n.label = st.what;
      n.source = st.node;
      n.layout = st.layout == "nchw" ? nn::Layout::nchw : nn::Layout::nhwc;
      n.in = {st.in};
      if (st.res >= 0) n.in.push_back(st.res);
    }
    n.out = st.out;
    for (int t : n.in) g.tensors[size_t(t)].readers.push_back(int(g.nodes.size()));
    g.tensors[size_t(n.out)].producer = int(g.nodes.size());
    g.nodes.push_back(std::move(n));
  }
  if (nn::output(g) != m->ts[size_t(nn::output(m->g()))].buf[kF32Nchw])
    throw Error("internal: int8 plan: its last step does not write the fp32 output");
  nn::check(g);
  return g;
}
}  // namespace int8plan

using namespace int8plan;

namespace int8plan {
std::unique_ptr<Plan::Impl> compile_int8(const QuantizedWeights& q, const PlanOptions& options) {
  PlanOptions opt = options;
  if (opt.training) throw Error("int8 plan: an int8 plan runs inference only (PlanOptions::training false)");
  if (opt.dtype != DType::f32) throw Error("int8 plan: dtype must be f32 (its fp32 steps and its input and output)");
  if (opt.batch < 1) throw Error("int8 plan: batch must be >= 1, found " + std::to_string(opt.batch));
  if (opt.threads < 1) throw Error("int8 plan: threads must be >= 1, found " + std::to_string(opt.threads));
  opt.precision = Precision::int8;
  opt.fuse = false;  // the int8 steps are the units (their fusions made by the lowering)
  auto m = std::make_shared<Impl>();
  m->q = q;
  m->q.model.qat = {};  // the plan runs the file's int8 arithmetic, not a fake-quantized copy
  m->batch = opt.batch, m->threads = opt.threads;
  choose_kernels(*m, opt.isa);
  build_steps(*m);
  plan_impl::Lowered low{lowered_graph(m), m->fk, m, &m->q.values, &m->ng.params};
  return plan_impl::compile(m->q.model, opt, {}, &low);
}
}  // namespace int8plan

Plan::Plan(const QuantizedWeights& q, const PlanOptions& options) : Plan(int8plan::compile_int8(q, options)) {}

PlanOptions int8_plan_options(int batch, int threads, const std::string& isa, Denormals denormals) {
  PlanOptions o;
  o.batch = batch, o.threads = threads, o.isa = isa, o.denormals = denormals;
  o.training = false;
  o.precision = Precision::int8;
  return o;
}

const char* int8_path_name(const std::string& isa) {
  Impl m;
  choose_kernels(m, isa);
  return m.k->name;
}

std::string int8_summary(const QuantizedWeights& q, const std::string& isa) {
  Impl m;
  m.q = q;
  m.q.model.qat = {};
  choose_kernels(m, isa);
  build_steps(m);
  std::ostringstream os;
  for (const Step& st : m.steps) os << "  " << st.what << "\n";
  return os.str();
}

}  // namespace ember
