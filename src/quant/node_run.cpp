// The fp32 nodes of int8 inference (node_run.h): the graph built as a plan builds it, without
// fusion, and one node's layer bound to caller buffers and run in eval mode.
#include "quant/node_run.h"

#include <algorithm>
#include <cstring>

#include "ember/error.h"

namespace ember::quant {

NodeGraph make_node_graph(const Model& model, int batch, int threads, const std::vector<bool>& nhwc) {
  NodeGraph ng;
  ng.batch = batch;
  ng.g = nn::resolve(model);
  ng.g.tensors[0].dims = {model.in_c, model.in_h, model.in_w};
  nn::infer(ng.g, DType::f32, batch);
  bool any = false;
  for (size_t i = 0; i < nhwc.size() && i < ng.g.nodes.size(); ++i) {
    const nn::Layer& l = *ng.g.nodes[i].layer;
    if (nhwc[i] && (l.runs_nhwc() || l.layout_agnostic())) ng.g.nodes[i].layout = nn::Layout::nhwc, any = true;
  }
  if (any) nn::infer(ng.g, DType::f32, batch);
  ng.params = nn::graph_params(ng.g);
  ng.first_param.assign(ng.g.nodes.size(), -1);
  for (size_t t = ng.params.size(); t-- > 0;) ng.first_param[size_t(ng.params[t].layer)] = int(t);
  for (nn::Node& n : ng.g.nodes) {
    n.layer->set_precision(Precision::fp32, false);
    n.layer->choose_algorithm(batch, threads, nullptr, false);  // weights as stored: no parameter versions here
    ng.ws_elems = std::max(ng.ws_elems, n.layer->workspace_elems(batch, threads));
    ng.idx_elems.push_back(n.layer->index_elems(batch));
    ng.saved_bytes.push_back(n.layer->saved_bytes(batch, threads, DType::f32));
  }
  return ng;
}

void run_node(const NodeGraph& ng, const ops::Exec& e, size_t i, const float* const* xs, float* y,
              const float* values, float* ws, int32_t* idx, void* saved, int n) {
  const nn::Node& node = ng.g.nodes[i];
  if (node.layer->aliases_input()) {  // a Flatten: the plan shares the storage, here it is copied
    const size_t count = size_t(n) * ng.g.tensors[size_t(node.out)].dims.size();
    if (y != xs[0]) std::memcpy(y, xs[0], count * sizeof(float));
    return;
  }
  nn::Bufs b{};
  b.dt = DType::f32;
  b.batch = ng.batch;
  b.nin = int(node.in.size());
  for (int j = 0; j < b.nin; ++j) b.xs[j] = xs[j];
  b.x = xs[0];
  b.y = y;
  // Weight, bias (in the op table's order), then BatchNorm's running statistics.
  for (size_t t = ng.first_param[i] < 0 ? ng.params.size() : size_t(ng.first_param[i]);
       t < ng.params.size() && size_t(ng.params[t].layer) == i; ++t) {
    const ParamInfo& p = ng.params[t];
    const float* v = values + p.offset;
    if (p.role == ParamRole::running_stat) {
      if (!b.rs) b.rs = v;
    } else if (!b.w) {
      b.w = v;
    } else if (!b.b) {
      b.b = v;
    }
  }
  b.ws = ws;
  b.idx = idx;
  b.saved = saved;
  b.train_mode = false;
  node.layer->forward(e, b, n);
}

}  // namespace ember::quant
