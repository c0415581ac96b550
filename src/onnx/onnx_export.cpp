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
#include "kernels/ref/ref_batchnorm.h"

namespace ember {
namespace {

namespace pb = ember_onnx;
using nn::Dims;
using onnx::ExportHook;
using onnx::Writer;

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

// An op's export (the op table's onnx_export) writes one layer through this: nodes named after
// the layer (prefix), the ranks of the values it makes, and its parameters from the weights (or
// the overrides: a folded batchnorm2d's weight and bias).
class TableOut final : public nn::OnnxOut {
 public:
  TableOut(Writer& w, const nn::Graph& g, const nn::Node& node, const std::map<std::string, const float*>& weights,
           ExportHook* hook, std::map<std::string, int>& ranks, const std::vector<std::string>& in)
      : w_(w), g_(g), node_(node), weights_(weights), hook_(hook), ranks_(ranks), in_(in) {}
  std::string op(const std::string& type, std::vector<std::string> in, std::vector<nn::OnnxAttr> attrs, int rank) override {
    int r = rank;  // else the largest of its tensor inputs' (constants and weights have none)
    for (size_t k = 0; k < in.size() && !rank; ++k)
      if (const auto it = ranks_.find(in[k]); it != ranks_.end()) r = std::max(r, it->second);
    if (!r) r = 4;
    const std::string y = w_.fresh(node_.param_prefix + "_" + type);
    pb::NodeProto* n = w_.node(type, std::move(in), {y}, node_.param_prefix);
    for (const nn::OnnxAttr& a : attrs) {
      if (a.kind == nn::OnnxAttr::kInt) attr(n, a.name, a.i);
      else if (a.kind == nn::OnnxAttr::kFloat) attr(n, a.name, a.f);
      else attr(n, a.name, a.ints);
    }
    ranks_[y] = r;
    return y;
  }
  std::string scalar(float v) override { return w_.scalar(v); }
  std::string ints(std::vector<int64_t> v) override { return w_.ints(node_.param_prefix + "_ints", v); }
  std::string floats(const std::string& what, std::vector<int64_t> dims, const std::vector<float>& v) override {
    return w_.floats(w_.fresh(node_.param_prefix + "." + what), dims, v.data(), v.size());
  }
  std::string param(const std::string& what, std::vector<int64_t> dims) override {
    size_t n = 1;
    for (int64_t d : dims) n *= size_t(d);
    return w_.floats(node_.param_prefix + "." + what, dims, data(what), n);
  }
  std::string weight(const std::string& what, std::vector<int64_t> dims) override {
    std::string v = hook_ ? hook_->param(w_, node_.param_prefix, what, dims) : std::string();
    return v.empty() ? param(what, std::move(dims)) : v;
  }
  int rank(const std::string& v) const override {
    const auto it = ranks_.find(v);
    if (it == ranks_.end()) throw Error("internal: export: no rank for value '" + v + "'");
    return it->second;
  }
  int input_count() const override { return int(in_.size()); }
  const std::string& input(int k) const override { return in_[size_t(k)]; }
  Dims in_dims(int k) const override { return g_.tensors[size_t(node_.in[size_t(k)])].dims; }
  std::map<std::string, std::vector<float>> overrides;  // parameters by `what` the export reads instead

 private:
  const float* data(const std::string& what) const {
    if (const auto o = overrides.find(what); o != overrides.end()) return o->second.data();
    const auto it = weights_.find(node_.param_prefix + "." + what);
    if (it == weights_.end()) throw Error("export: " + node_.label + ": no parameter " + what);
    return it->second;
  }
  Writer& w_;
  const nn::Graph& g_;
  const nn::Node& node_;
  const std::map<std::string, const float*>& weights_;
  ExportHook* hook_;
  std::map<std::string, int>& ranks_;
  const std::vector<std::string>& in_;
};

// Exports one graph; `weights` maps each parameter name to its data in the plan. Each node is
// its op's export (the op table); a conv2d whose output only a batchnorm2d reads is exported as
// one Conv with the eval-mode BatchNorm folded into its weight and bias.
class Exporter {
 public:
  Exporter(const nn::Graph& g, const std::map<std::string, const float*>& weights, pb::GraphProto* out,
           ExportHook* hook)
      : g_(g), w_(weights), W_(out), hook_(hook) {}

  void run() {
    vals_.assign(g_.tensors.size(), {});
    vals_[0] = seen("input", "input");
    ranks_[vals_[0]] = 4;
    std::vector<bool> folded(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (folded[i]) continue;
      const int bn = folded_batchnorm(i);
      std::string v = node(int(i), bn);
      const size_t last = bn >= 0 ? size_t(bn) : i;
      v = seen(g_.nodes[last].param_prefix, v);
      vals_[size_t(g_.nodes[last].out)] = vals_[size_t(g_.nodes[i].out)] = v;
      if (bn >= 0) folded[size_t(bn)] = true;
    }
    std::string y = vals_[size_t(nn::output(g_))];
    // A vector output leaves as [N, D]; an image (a feature map) as [N, C, H, W].
    if (ranks_.at(y) == 4 && g_.tensors[size_t(nn::output(g_))].dims.flat()) y = W_.op("Flatten", {y}, "output");
    W_.node("Identity", {y}, {"output"}, "output");
  }

 private:
  // The hook's name for a value written under `name` (its readers read that instead), same rank.
  std::string seen(const std::string& key, const std::string& name) {
    if (!hook_) return name;
    const std::string v = hook_->tensor(W_, key, name);
    if (v != name) ranks_[v] = ranks_.count(name) ? ranks_[name] : 4;
    return v;
  }

  // Node i through its op's export; bn >= 0: the batchnorm2d node folded into conv2d node i.
  std::string node(int i, int bn) {
    const nn::Node& nd = g_.nodes[size_t(i)];
    LayerSpec s = *nd.spec;
    const auto own = nn::op_desc(s.kind).onnx_export;
    if (!own) throw Error("export: " + nd.label + ": no ONNX mapping for " + layer_kind_name(s.kind));
    std::vector<std::string> in;
    for (int t : nd.in) in.push_back(vals_[size_t(t)]);
    TableOut out(W_, g_, nd, w_, hook_, ranks_, in);
    const bool carried = bn >= 0 && hook_ && hook_->keeps_weights(nd.param_prefix);  // its weights carry the BN
    if (bn >= 0 && !carried) fold(i, bn, &out.overrides);
    if (bn >= 0) s.bias = true;
    return own(out, in[0], s);
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

  // The conv's weight and bias with the eval-mode BN of node bn folded in (ref::batchnorm_fold).
  void fold(int i, int bn, std::map<std::string, std::vector<float>>* to) const {
    const LayerSpec &s = *g_.nodes[size_t(i)].spec, &b = *g_.nodes[size_t(bn)].spec;
    const Dims d = g_.tensors[size_t(g_.nodes[size_t(i)].in[0])].dims;
    const int K = s.out;
    const size_t per = size_t(d.c / s.groups) * s.kernel_h * s.kernel_w;
    std::vector<float> run(2 * size_t(K));
    std::copy_n(param(bn, "running_mean"), K, run.begin());
    std::copy_n(param(bn, "running_var"), K, run.begin() + K);
    std::vector<float>& fw = (*to)["weight"];
    std::vector<float>& fb = (*to)["bias"];
    fw.resize(size_t(K) * per), fb.resize(size_t(K));
    ref::batchnorm_fold<float>(fw.data(), fb.data(), param(i, "weight"), s.bias ? param(i, "bias") : nullptr,
                               b.bias ? param(bn, "weight") : nullptr, b.bias ? param(bn, "bias") : nullptr, run.data(), K,
                               per, b.eps, 0, K);
  }
  const float* param(int i, const std::string& what) const {
    auto it = w_.find(g_.nodes[size_t(i)].param_prefix + "." + what);
    if (it == w_.end()) throw Error("export: " + g_.nodes[size_t(i)].label + ": no parameter " + what);
    return it->second;
  }

  const nn::Graph& g_;
  const std::map<std::string, const float*>& w_;
  Writer W_;
  ExportHook* hook_;
  std::vector<std::string> vals_;    // the ONNX value of each graph tensor
  std::map<std::string, int> ranks_;  // each value's rank: 2 ([N, D]) or 4 ([N, C, H, W])
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
