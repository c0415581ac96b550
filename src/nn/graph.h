// The graph IR a plan is compiled from, and its compile passes, each a function with its own
// tests: resolve (names -> tensors) -> infer (shapes, dtypes) -> fuse (units, by pattern) ->
// prune_backward (what backward runs and which gradients exist) -> place (arena by liveness).
// Tensor 0 is the model input; tensor i + 1 is node i's output. Per-sample dims are [C, H, W].
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ember/model.h"
#include "ember/plan.h"
#include "nn/layers.h"

namespace ember::nn {

struct Tensor {
  Dims dims;
  DType dtype = DType::f32;
  int producer = -1;            // node index; -1 for the model input
  std::vector<int> readers;     // nodes that read it, in node order (a node reading it twice: twice)
};

struct Node {
  const LayerSpec* spec = nullptr;
  std::string label;            // for messages: "layers[3] (conv2d)" or "layers[3] (add \"b1\")"
  std::string param_prefix;     // "3" or the node's name: parameters are PREFIX.weight, PREFIX.bias
  std::vector<int> in;          // input tensors
  std::unique_ptr<Layer> layer; // made by infer
};

struct Graph {
  std::string where;            // the model file, or "model NAME"
  std::vector<Node> nodes;
  std::vector<Tensor> tensors;  // nodes.size() + 1
};

// Pass 1. Resolves each node's inputs (none: the previous node, or the model input for the
// first; a name: the node so named, or "input") and fills readers. Throws Error naming the node
// for: a duplicate or malformed name, an input that names no earlier node, the wrong number of
// inputs for the layer kind, and a node whose output nothing reads (other than the last).
Graph resolve(const Model& m);

// Pass 2. Makes each node's layer and infers every tensor's dims and dtype (all `dt` today; the
// slot is per tensor so that bf16 and int8 add cases, not structure). Errors name the node.
// batch: a batch of any tensor must stay below 2^31 elements (the kernels index it with int).
void infer(Graph& g, DType dt, int batch);

// The nodes' parameters (after infer, before fuse), tensor after tensor in node order, named
// PREFIX.weight and PREFIX.bias (PyTorch layouts), with offsets into one flat block.
std::vector<ParamInfo> graph_params(const Graph& g);

// A unit: consecutive nodes run as one layer (a fusion), or one node.
struct Unit {
  int first = 0, last = 0;      // nodes
  std::vector<int> in;          // input tensors (the first node's)
  int out = 0;                  // output tensor (last + 1)
  std::unique_ptr<Layer> layer; // the node's own layer, or the fused one
  std::string kinds;            // "conv2d+relu+maxpool2d"
  bool has_params = false;
  bool backward = false;        // set by prune_backward
  std::vector<bool> dx;         // per input: prune_backward says whether its gradient is needed
};

// Pass 3. Groups nodes into units. With `enabled`, every pattern in the fusion table that matches
// becomes one unit, where the pattern's inner outputs are read only by its next node:
// Conv2d (stride 1) -> ReLU -> MaxPool2d 2x2/2; and, in a `training` plan, LayerNorm (affine)
// -> Conv2d or Linear over channels (the normalised tensor is recomputed in backward instead of
// kept). Moves the nodes' layers into the units.
std::vector<Unit> fuse(Graph& g, bool enabled, bool training);

// Pass 4. A tensor needs a gradient when a parameter lies upstream of it; a unit runs backward
// when its output needs one. Returns per tensor whether its gradient buffer exists (the model's
// output always has one: the loss writes it).
std::vector<bool> prune_backward(const Graph& g, std::vector<Unit>& units);

// Pass 5's allocator: blocks with a size and a lifetime [first, last] in schedule steps get
// offsets (64-byte aligned) so that blocks alive at the same step never overlap; returns the
// bytes needed. Greedy: largest first, each at the lowest offset that fits.
struct Block {
  size_t bytes = 0;
  int first = 0, last = 0;
  size_t offset = 0;            // set by place
};
size_t place(std::vector<Block>& blocks);

// Lifetimes of activation and gradient buffers over the schedule: forward of unit u at step u,
// the loss at step U, backward of unit u at step 2U - u (U units). An activation lives from its
// producer to its last reader: the last forward that reads it, and in a training plan also the
// backward of each reader that reads its inputs and its producer's if that reads its output
// (Layer::backward_reads_*). Gradients live from the first backward that writes them to their
// producer's backward. The input and output tensors live throughout; tensors inside a fused
// unit are never stored (0 bytes). alias[t]: the tensor whose storage t shares (a Flatten's
// output is its input; an in-place ReLU's is its input where nothing else reads that), or t;
// grad_alias the same for gradients (Flatten, only where the input has no other reader).
// Blocks of non-root tensors stay empty.
struct Lifetimes {
  std::vector<int> alias, grad_alias;     // per tensor: whose activation / gradient storage it uses
  std::vector<Block> act, grad;           // per tensor (grad blocks of tensors without one: 0 bytes)
};
Lifetimes lifetimes(const Graph& g, const std::vector<Unit>& units, const std::vector<bool>& needs_grad,
                    bool training, int batch, size_t elem_bytes);

}  // namespace ember::nn
