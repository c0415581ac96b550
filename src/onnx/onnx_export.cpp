// ONNX export: walks the model's graph (after shape inference) and writes one or a few ONNX nodes
// per ember node, opset 17, weights as initializers under their parameter names, a symbolic
// batch dim. Tensors are [N, C, H, W] (rank 4) until a Flatten or Linear makes them [N, D].
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/onnx.h"
#include "ember/version.h"
#include "ember_support/files.h"
#include "nn/graph.h"
#include "nn/op_table.h"
#include "onnx/onnx_export.h"

namespace ember {
namespace {

namespace pb = ember_onnx;
using nn::Dims;
using onnx::ExportHook;
using onnx::Writer;

// One ONNX value per ember tensor: its name and rank (4: [N, C, H, W]; 2: [N, D]).
struct Value {
  std::string name;
  int rank = 4;
};

void attr(pb::NodeProto* n, const std::string& name, int64_t v) {
  pb::AttributeProto* a = n->add_attribute();
  a->set_name(name), a->set_type(pb::AttributeProto::INT), a->set_i(v);
}
void attr(pb::NodeProto* n, const std::string& name, float v) {
  pb::AttributeProto* a = n->add_attribute();
  a->set_name(name), a->set_type(pb::AttributeProto::FLOAT), a->set_f(v);
}
void attr(pb::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  pb::AttributeProto* a = n->add_attribute();
  a->set_name(name), a->set_type(pb::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void value_info(pb::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
  v->set_name(name);
  pb::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(pb::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// An op's own export (the op table's onnx_export) writes through this: nodes named after the layer.
class TableOut final : public nn::OnnxOut {
 public:
  TableOut(Writer& w, const std::string& name) : w_(w), name_(name) {}
  std::string op(const std::string& type, std::vector<std::string> in) override { return w_.op(type, std::move(in), name_); }
  std::string scalar(float v) override { return w_.scalar(v); }

 private:
  Writer& w_;
  const std::string& name_;
};

// Exports one graph; `weights` maps each parameter name to its data in the plan.
class Exporter {
 public:
  Exporter(const nn::Graph& g, const std::map<std::string, const float*>& weights, pb::GraphProto* out,
           ExportHook* hook)
      : g_(g), w_(weights), W_(out), hook_(hook) {}

  void run() {
    vals_.assign(g_.tensors.size(), {});
    vals_[0] = {seen("input", "input"), 4};
    std::vector<bool> folded(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (folded[i]) continue;
      if (const int bn = folded_batchnorm(i); bn >= 0) {  // conv -> batchnorm2d: one Conv with the eval-mode BN folded in
        Value v = conv(int(i), vals_[size_t(g_.nodes[i].in[0])], bn);
        v.name = seen(g_.nodes[size_t(bn)].param_prefix, v.name);
        vals_[size_t(g_.nodes[size_t(bn)].out)] = vals_[size_t(g_.nodes[i].out)] = v;
        folded[size_t(bn)] = true;
        continue;
      }
      Value v = node(int(i));
      v.name = seen(g_.nodes[i].param_prefix, v.name);
      vals_[size_t(g_.nodes[i].out)] = v;
    }
    const Value& last = vals_[size_t(nn::output(g_))];
    std::string y = last.name;
    // A vector output leaves as [N, D]; an image (a feature map) as [N, C, H, W].
    if (last.rank == 4 && g_.tensors[size_t(nn::output(g_))].dims.flat()) y = W_.op("Flatten", {y}, "output");
    W_.node("Identity", {y}, {"output"}, "output");
  }

 private:
  const float* param(int i, const std::string& what) const {
    auto it = w_.find(g_.nodes[size_t(i)].param_prefix + "." + what);
    if (it == w_.end()) throw Error("export: " + g_.nodes[size_t(i)].label + ": no parameter " + what);
    return it->second;
  }
  std::string seen(const std::string& key, const std::string& name) { return hook_ ? hook_->tensor(W_, key, name) : name; }
  // A Conv's or Linear's weight or bias: the hook's value, else the fp32 initializer.
  std::string wparam(int i, const std::string& what, std::vector<int64_t> dims) {
    std::string v = hook_ ? hook_->param(W_, g_.nodes[size_t(i)].param_prefix, what, dims) : std::string();
    return v.empty() ? init(i, what, std::move(dims)) : v;
  }
  std::string init(int i, const std::string& what, std::vector<int64_t> dims) {
    size_t n = 1;
    for (int64_t d : dims) n *= size_t(d);
    return W_.floats(g_.nodes[size_t(i)].param_prefix + "." + what, dims, param(i, what), n);
  }
  std::string flat(const Value& v, const std::string& name) {
    return v.rank == 2 ? v.name : W_.op("Flatten", {v.name}, name);
  }
  // [N, D] as the image [N, D, 1, 1] that ember sees (for ops that need rank 4).
  std::string img(const Value& v, const std::string& name) {
    return v.rank == 4 ? v.name : W_.op("Unsqueeze", {v.name, W_.ints("axes", {2, 3})}, name);
  }
  Dims in_dims(int i, int k = 0) const { return g_.tensors[size_t(g_.nodes[size_t(i)].in[size_t(k)])].dims; }
  Dims out_dims(int i) const { return g_.tensors[size_t(g_.nodes[size_t(i)].out)].dims; }

  Value node(int i) {
    const nn::Node& nd = g_.nodes[size_t(i)];
    const LayerSpec& s = *nd.spec;
    const Value x = vals_[size_t(nd.in[0])];
    const std::string nm = nd.param_prefix;
    if (const auto own = nn::op_desc(s.kind).onnx_export) {
      TableOut out(W_, nm);
      return {own(out, x.name, s), x.rank};
    }
    switch (s.kind) {
      case LayerKind::Conv2d: return conv(i, x);
      case LayerKind::Linear: return linear(i, x);
      case LayerKind::MaxPool2d:
      case LayerKind::AvgPool2d: {
        const bool mx = s.kind == LayerKind::MaxPool2d;
        const std::string v = img(x, nm);
        const std::string y = W_.fresh(nm + (mx ? "_maxpool" : "_avgpool"));
        pb::NodeProto* n = W_.node(mx ? "MaxPool" : "AveragePool", {v}, {y}, nm);
        attr(n, "kernel_shape", std::vector<int64_t>{s.kernel_h, s.kernel_w});
        attr(n, "strides", std::vector<int64_t>{s.stride_h, s.stride_w});
        attr(n, "pads", std::vector<int64_t>{s.pad_h, s.pad_w, s.pad_h_end < 0 ? s.pad_h : s.pad_h_end,
                                             s.pad_w_end < 0 ? s.pad_w : s.pad_w_end});
        if (!mx) attr(n, "count_include_pad", int64_t(s.count_include_pad ? 1 : 0));
        return {y, 4};
      }
      case LayerKind::Flatten: return {flat(x, nm), 2};
      case LayerKind::Softmax: {
        pb::NodeProto* n = W_.node("Softmax", {flat(x, nm)}, {W_.fresh(nm + "_softmax")}, nm);
        attr(n, "axis", int64_t(1));
        return {n->output(0), 2};
      }
      case LayerKind::Add:
      case LayerKind::Concat: return join(i);
      case LayerKind::LayerNorm: return layernorm(i, x);
      case LayerKind::LayerNorm2d: return layernorm2d(i, x);
      case LayerKind::BatchNorm2d: return batchnorm(i, x);
      case LayerKind::GlobalAvgPool: return {W_.op("GlobalAveragePool", {img(x, nm)}, nm), 4};
      case LayerKind::LayerScale: {
        const int C = in_dims(i).c;
        std::vector<int64_t> shape = x.rank == 4 ? std::vector<int64_t>{C, 1, 1} : std::vector<int64_t>{C};
        const std::string w = W_.floats(nm + ".layer_scale", shape, param(i, "layer_scale"), size_t(C));
        return {W_.op("Mul", {x.name, w}, nm), x.rank};
      }
      case LayerKind::ZeroPad2d: {
        const std::string pads = W_.ints("pads", {0, 0, s.pad_h, s.pad_w, 0, 0, s.pad_h, s.pad_w});
        return {W_.op("Pad", {img(x, nm), pads}, nm), 4};
      }
      case LayerKind::DropPath: return {W_.op("Identity", {x.name}, nm), x.rank};  // eval mode
      default: break;  // the ops that bring their own export (OpDesc::onnx_export)
    }
    throw Error("export: " + nd.label + ": no ONNX mapping for " + layer_kind_name(s.kind));
  }

  // The batchnorm2d node that is the only reader of conv2d node i's output, exported folded into
  // it as one Conv (PyTorch's eval-mode export does the same), or -1. A Conv with the hook's
  // weights folds only the batchnorm2d they already carry (ExportHook::folded_bn).
  int folded_batchnorm(size_t i) const {
    if (g_.nodes[i].spec->kind != LayerKind::Conv2d) return -1;
    const std::string& nm = g_.nodes[i].param_prefix;
    const std::string carried = hook_ && hook_->keeps_weights(nm) ? hook_->folded_bn(nm) : "";
    const auto& r = g_.tensors[size_t(g_.nodes[i].out)].readers;
    const int bn = r.size() == 1 && g_.nodes[size_t(r[0])].spec->kind == LayerKind::BatchNorm2d ? r[0] : -1;
    if (!carried.empty() && (bn < 0 || g_.nodes[size_t(bn)].param_prefix != carried))
      throw Error("export: layer '" + nm + "': its weights carry batchnorm2d '" + carried + "', which is not the only reader of its output");
    if (hook_ && hook_->keeps_weights(nm) && carried.empty()) return -1;
    return bn;
  }

  // Conv; with bn >= 0 (a batchnorm2d node after it), the eval-mode BN folded in: per output
  // channel k, a = gamma / sqrt(var + eps), weight a w, bias a (b - mean) + beta (in double).
  Value conv(int i, const Value& x, int bn = -1) {
    const LayerSpec& s = *g_.nodes[size_t(i)].spec;
    const Dims d = in_dims(i);
    const std::string nm = g_.nodes[size_t(i)].param_prefix;
    const std::vector<int64_t> wdims{s.out, d.c / s.groups, s.kernel_h, s.kernel_w};
    std::vector<std::string> in{img(x, nm)};
    const bool carried = bn >= 0 && hook_ && hook_->keeps_weights(nm);  // the hook's weight and bias carry the BN
    if (bn < 0 || carried) {
      in.push_back(wparam(i, "weight", wdims));
      if (s.bias || carried) in.push_back(wparam(i, "bias", {s.out}));
    } else {
      const LayerSpec& b = *g_.nodes[size_t(bn)].spec;
      const size_t K = size_t(s.out), per = size_t(d.c / s.groups) * s.kernel_h * s.kernel_w;
      const float *w = param(i, "weight"), *mean = param(bn, "running_mean"), *var = param(bn, "running_var");
      std::vector<float> fw(K * per), fb(K);
      for (size_t k = 0; k < K; ++k) {
        const double a = (b.bias ? double(param(bn, "weight")[k]) : 1.0) / std::sqrt(double(var[k]) + b.eps);
        for (size_t j = 0; j < per; ++j) fw[k * per + j] = float(a * w[k * per + j]);
        fb[k] = float(a * ((s.bias ? double(param(i, "bias")[k]) : 0.0) - mean[k]) + (b.bias ? double(param(bn, "bias")[k]) : 0.0));
      }
      in.push_back(W_.floats(nm + ".weight", wdims, fw.data(), fw.size()));
      in.push_back(W_.floats(nm + ".bias", {s.out}, fb.data(), fb.size()));
    }
    const int ph = s.same ? s.kernel_h / 2 : s.pad_h, pw = s.same ? s.kernel_w / 2 : s.pad_w;
    pb::NodeProto* n = W_.node("Conv", in, {W_.fresh(nm + "_conv")}, nm);
    attr(n, "kernel_shape", std::vector<int64_t>{s.kernel_h, s.kernel_w});
    attr(n, "strides", std::vector<int64_t>{s.stride_h, s.stride_w});
    attr(n, "pads", std::vector<int64_t>{ph, pw, ph, pw});
    attr(n, "group", int64_t(s.groups));
    return {n->output(0), 4};
  }

  // Linear: Gemm on [N, D]; over channels: a 1x1 Conv with the weight [K, C] seen as [K, C, 1, 1].
  Value linear(int i, const Value& x) {
    const LayerSpec& s = *g_.nodes[size_t(i)].spec;
    const std::string nm = g_.nodes[size_t(i)].param_prefix;
    const Dims d = in_dims(i);
    if (s.over_channels) {
      std::vector<std::string> in{img(x, nm), wparam(i, "weight", {s.out, d.c, 1, 1})};
      if (s.bias) in.push_back(wparam(i, "bias", {s.out}));
      pb::NodeProto* n = W_.node("Conv", in, {W_.fresh(nm + "_linear")}, nm);
      attr(n, "kernel_shape", std::vector<int64_t>{1, 1});
      return {n->output(0), 4};
    }
    std::vector<std::string> in{flat(x, nm), wparam(i, "weight", {s.out, int64_t(d.size())})};
    if (s.bias) in.push_back(wparam(i, "bias", {s.out}));
    pb::NodeProto* n = W_.node("Gemm", in, {W_.fresh(nm + "_gemm")}, nm);
    attr(n, "transB", int64_t(1));
    return {n->output(0), 2};
  }

  Value join(int i) {
    const nn::Node& nd = g_.nodes[size_t(i)];
    int rank = 4;
    for (int t : nd.in) rank = std::min(rank, vals_[size_t(t)].rank);
    std::vector<std::string> in;
    for (int t : nd.in) in.push_back(rank == 2 ? flat(vals_[size_t(t)], nd.param_prefix) : vals_[size_t(t)].name);
    if (nd.spec->kind == LayerKind::Add) return {W_.op("Sum", in, nd.param_prefix), rank};
    pb::NodeProto* n = W_.node("Concat", in, {W_.fresh(nd.param_prefix + "_concat")}, nd.param_prefix);
    attr(n, "axis", int64_t(1));
    return {n->output(0), rank};
  }

  // LayerNormalization over the trailing dims ember normalises; without an affine transform the
  // scale is ones and the bias zeros.
  std::string ln(int i, const std::string& x, int64_t axis, std::vector<int64_t> shape) {
    const LayerSpec& s = *g_.nodes[size_t(i)].spec;
    const std::string nm = g_.nodes[size_t(i)].param_prefix;
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    std::vector<std::string> in{x};
    if (s.bias) {
      in.push_back(init(i, "weight", shape)), in.push_back(init(i, "bias", shape));
    } else {
      const std::vector<float> one(n, 1.f), zero(n, 0.f);
      in.push_back(W_.floats(W_.fresh(nm + ".ones"), shape, one.data(), n));
      in.push_back(W_.floats(W_.fresh(nm + ".zeros"), shape, zero.data(), n));
    }
    pb::NodeProto* node = W_.node("LayerNormalization", in, {W_.fresh(nm + "_ln")}, nm);
    attr(node, "axis", axis);
    attr(node, "epsilon", float(s.eps));
    return node->output(0);
  }
  Value layernorm(int i, const Value& x) {
    const LayerSpec& s = *g_.nodes[size_t(i)].spec;
    const Dims d = in_dims(i);
    if (d.flat() && s.norm_dims != 3) return {ln(i, flat(x, g_.nodes[size_t(i)].param_prefix), 1, {d.c}), 2};
    const int k = s.norm_dims ? s.norm_dims : 3;
    const int64_t all[3] = {d.c, d.h, d.w};
    const std::string v = img(x, g_.nodes[size_t(i)].param_prefix);
    return {ln(i, v, 4 - k, std::vector<int64_t>(all + 3 - k, all + 3)), 4};
  }
  // torchvision's LayerNorm2d: to channels-last, LayerNormalization over C, back.
  Value layernorm2d(int i, const Value& x) {
    const std::string nm = g_.nodes[size_t(i)].param_prefix;
    const std::string v = img(x, nm);
    pb::NodeProto* t = W_.node("Transpose", {v}, {W_.fresh(nm + "_nhwc")}, nm);
    attr(t, "perm", std::vector<int64_t>{0, 2, 3, 1});
    const std::string y = ln(i, t->output(0), -1, {in_dims(i).c});
    pb::NodeProto* b = W_.node("Transpose", {y}, {W_.fresh(nm + "_nchw")}, nm);
    attr(b, "perm", std::vector<int64_t>{0, 3, 1, 2});
    return {b->output(0), 4};
  }

  // BatchNorm2d as the eval-mode model: BatchNormalization (X, scale, B, the running mean and
  // var); without an affine transform the scale is ones and B zeros. num_batches_tracked stays out.
  Value batchnorm(int i, const Value& x) {
    const LayerSpec& s = *g_.nodes[size_t(i)].spec;
    const std::string nm = g_.nodes[size_t(i)].param_prefix;
    const int C = in_dims(i).c;
    std::vector<std::string> in{x.name};
    if (s.bias) {
      in.push_back(init(i, "weight", {C})), in.push_back(init(i, "bias", {C}));
    } else {
      const std::vector<float> one(size_t(C), 1.f), zero(size_t(C), 0.f);
      in.push_back(W_.floats(W_.fresh(nm + ".ones"), {C}, one.data(), size_t(C)));
      in.push_back(W_.floats(W_.fresh(nm + ".zeros"), {C}, zero.data(), size_t(C)));
    }
    in.push_back(init(i, "running_mean", {C})), in.push_back(init(i, "running_var", {C}));
    pb::NodeProto* node = W_.node("BatchNormalization", in, {W_.fresh(nm + "_bn")}, nm);
    attr(node, "epsilon", float(s.eps));
    attr(node, "momentum", float(1 - s.momentum));  // ONNX's momentum weighs the running value
    return {node->output(0), x.rank};
  }

  const nn::Graph& g_;
  const std::map<std::string, const float*>& w_;
  Writer W_;
  ExportHook* hook_;
  std::vector<Value> vals_;
};

}  // namespace

namespace onnx {

std::string export_model_bytes(const Model& m, const std::map<std::string, const float*>& weights, ExportHook* hook,
                               const std::string& doc) {
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {m.in_c, m.in_h, m.in_w};
  nn::infer(g, DType::f32, 1);
  pb::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("ember");
  model.set_producer_version(kVersion);
  model.set_doc_string(doc);
  pb::OperatorSetIdProto* op = model.add_opset_import();
  op->set_domain("");
  op->set_version(kOnnxOpset);
  pb::StringStringEntryProto* meta = model.add_metadata_props();
  meta->set_key("ember_model");
  meta->set_value(model_to_json(m));
  pb::GraphProto* graph = model.mutable_graph();
  graph->set_name(m.name);
  value_info(graph->add_input(), "input", {m.in_c, m.in_h, m.in_w});
  Exporter(g, weights, graph, hook).run();
  const nn::Dims out = g.tensors[size_t(nn::output(g))].dims;
  value_info(graph->add_output(), "output", out.flat() ? std::vector<int64_t>{out.c} : std::vector<int64_t>{out.c, out.h, out.w});
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw Error("export: the model is too large for one ONNX file (2 GiB)");
  return bytes;
}

}  // namespace onnx

std::string onnx_export_bytes(const Plan& plan) {
  if (plan.dtype() != DType::f32) throw Error("export: only f32 plans can be exported");
  const Model& m = plan.model();
  std::map<std::string, const float*> weights;
  const float* base = static_cast<const float*>(plan.param_data());
  for (const ParamInfo& p : plan.params()) weights[p.name] = base + p.offset;
  return onnx::export_model_bytes(m, weights, nullptr,
                                  "ember model " + m.name + ": the output is the last layer's (logits before the loss)");
}

void export_onnx(const Plan& plan, const std::string& path) {
  const std::string bytes = onnx_export_bytes(plan);
  write_file_atomic(path, {bytes});
}

bool is_onnx_path(const std::string& path) { return path.size() > 5 && path.ends_with(".onnx"); }

}  // namespace ember
