// The fp32 nodes of int8 inference: a model's graph (resolved and inferred) whose layers run one
// node at a time on caller buffers: the int8 plan runs its fp32 nodes so (LayerNorm, GELU, ...)
// between a dequantize and a quantize. Calibration reads the graph's tensors and parameters here
// and runs an inference plan with observer nodes (calibrate.cpp).
#pragma once
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "ember/plan.h"
#include "kernels/kernels.h"
#include "nn/graph.h"

namespace ember::quant {

struct NodeGraph {
  nn::Graph g;
  int batch = 1;                        // compiled for (saved state is laid out for it)
  std::vector<ParamInfo> params;        // graph_params(g): offsets into the fp32 values
  std::vector<int> first_param;         // per node: index into params, or -1
  size_t ws_elems = 0;                  // the largest fp32 scratch any node needs
  std::vector<size_t> idx_elems, saved_bytes;  // per node
};

// Resolves and infers `model` for `batch` (NCHW); nodes for which nhwc(node) holds run channel-last
// where their layer can (Layer::runs_nhwc or layout_agnostic): infer then runs again. Each layer is
// prepared for inference (fp32, its algorithm chosen for batch and threads).
NodeGraph make_node_graph(const Model& model, int batch, int threads, const std::vector<bool>& nhwc = {});

// Runs node i's layer in eval mode: xs its inputs, y its output (f32, the node's layout),
// values the fp32 parameters, ws/idx/saved scratch of the sizes above. n samples.
void run_node(const NodeGraph& ng, const ops::Exec& e, size_t i, const float* const* xs, float* y,
              const float* values, float* ws, int32_t* idx, void* saved, int n);

}  // namespace ember::quant
