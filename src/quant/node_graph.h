// A quantized model's graph as the int8 lowering reads it (resolved and inferred, the nodes the
// lowering runs fp32 channel-last where they can), with its parameters' offsets into the fp32
// values: the lowering (int8_plan.cpp), calibration (calibrate.cpp) and the file reader use it.
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

}  // namespace ember::quant
