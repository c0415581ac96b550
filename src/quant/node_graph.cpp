// A quantized model's graph (node_graph.h): built as a plan builds it, without fusion.
#include "quant/node_graph.h"

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

}  // namespace ember::quant
