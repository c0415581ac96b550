// The graph IR a plan is compiled from, and its compile passes, each a function with its own
// tests: resolve (names -> tensors) -> infer (shapes, dtypes) -> fuse (units, by pattern) ->
// prune_backward (what backward runs and which gradients exist) -> place (arena by liveness).
// Tensors are first-class: each node names its input and output tensor ids, each tensor its
// producer, readers, dims, dtype and layout. Tensor 0 is the model input; the last node's output
// is the model's. Other ids follow no order (a pass appends the tensors of the nodes it inserts).
#pragma once
#include <functional>
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
  Layout layout = Layout::nchw;
  int producer = -1;            // node index; -1 for the model input
  std::vector<int> readers;     // nodes that read it, in node order (a node reading it twice: twice)
};

// Nodes are kept in a topological order (the order they run in); a node's index is its place in
// that order (ParamInfo::layer, UnitInfo's layers and LayerInfo are indexed by it), equal to its
// model layer's index until a pass inserts or removes nodes.
struct Node {
  const LayerSpec* spec = nullptr; // into the Model, or into `own` (a node a pass made)
  std::shared_ptr<const LayerSpec> own;
  // A pass's own layer, not in the op table (identity_node); null: make_layer(*spec).
  std::function<std::unique_ptr<Layer>(const LayerSpec&)> make;
  std::string label;            // for messages: "layers[3] (conv2d)" or "layers[3] (add \"b1\")"
  std::string param_prefix;     // "3" or the node's name: parameters are PREFIX.weight, PREFIX.bias
  int source = -1;              // its model layer's index (the unit's random stream); -1: made by a pass
  Layout layout = Layout::nchw; // the layout of its image inputs and output (the layout pass's choice)
  std::string kind_name;        // a pass node's kind in unit names ("reorder"); empty: the spec's
  std::vector<int> in;          // input tensors
  int out = -1;                 // output tensor
  std::unique_ptr<Layer> layer; // made by infer
};

struct Graph {
  std::string where;            // the model file, or "model NAME"
  std::vector<Node> nodes;
  std::vector<Tensor> tensors;  // by id: 0 the input, one per node's output
};

// The model's output tensor: the last node's.
int output(const Graph& g);

// Checks the graph's invariants, throwing Error("internal: ...") naming the first broken one:
// tensor 0 is the input (no producer); every other tensor has exactly one producer, the node
// whose `out` it is; each tensor's readers are the nodes that list it in `in`, in node order;
// every node reads only the input or outputs of earlier nodes (topological order); every tensor
// but the output is read.
void check(const Graph& g);

// Graph edits for passes, each keeping producers and readers consistent (check() holds after
// them). A node made by a pass names its spec in `own`; `in` and `out` are filled here. The
// edited graph needs infer again (layers and dims of new nodes).
// insert_after: the new node (one input) reads node `node`'s output; every node that read it,
// and the model's output, become the new node's output (a new tensor id). Returns its index.
int insert_after(Graph& g, int node, Node n);
// replace_node: node `node` becomes n, reading the same inputs and writing the same tensor
// (n keeps the old node's label, parameter prefix and source where it sets none).
void replace_node(Graph& g, int node, Node n);
// remove_node: for a one-input node whose output has its input's shape: its readers read its
// input instead; its output tensor's id is freed (the ids above it move down by one). Removing
// the last node needs its input to be the node before's output.
void remove_node(Graph& g, int node);

// A node that converts its image input between nchw and nhwc (to: the output's layout); its
// gradient goes back the other way. The layout pass inserts it at the edges of nhwc clusters.
Node reorder_node(Layout to);
// Inserts n reading tensor t for the readers listed (nodes that read t; the others keep t): n goes
// right after t's producer (first for the input), the readers read n's output. Returns n's index.
int insert_reader(Graph& g, int t, Node n, const std::vector<int>& readers);

// A node that copies its input (y = x, dx = dy) and keeps the kernels around it as they were:
// its spec is droppath with p 0 (its name, no parameters), its layer its own (Node::make).
Node identity_node();

// The QAT pass (qat.cpp; Model::qat): after the producer of each tensor q names, a fakequant node
// that all the tensor's readers read instead. Throws Error naming a name that is no tensor or is
// listed twice. qat_weight: whether the plan fake-quantizes parameter p (a Conv2d or Linear weight).
void insert_fake_quant(Graph& g, const QatSpec& q);
bool qat_weight(const Graph& g, const ParamInfo& p);

// A pass: edits the graph after infer (it sees dims, dtypes and layouts). The plan checks the
// graph and runs infer again after its passes (plan_impl.h: plan_with_passes).
using GraphPass = std::function<void(Graph&)>;

// Pass 1. Resolves each node's inputs (none: the previous node, or the model input for the
// first; a name: the node so named, or "input") and fills readers. Throws Error naming the node
// for: a duplicate or malformed name, an input that names no earlier node, the wrong number of
// inputs for the layer kind, and a node whose output nothing reads (other than the last).
Graph resolve(const Model& m);

// Pass 2. Makes each node's layer and infers every tensor's dims, dtype (the layer's
// output_dtype of `dt`: dt, or u8 for an int8 plan's quantized tensors; each input must be the
// layer's input_dtype) and layout (flat where dims are [D], else nchw). Errors name the node. Passes that edit the graph run after it (they
// see shapes), then infer runs again (GraphPass, plan_impl.h).
// batch: a batch of any tensor must stay below 2^31 elements (the kernels index it with int).
void infer(Graph& g, DType dt, int batch);

// The layout pass (src/nn/layout.cpp), after infer: "nchw" leaves the graph as it is; "nhwc" runs
// every node channel-last whose layer can (Layer::runs_nhwc, and layout_agnostic nodes whose first
// image input is nhwc) and inserts reorder nodes where an image crosses between the two layouts
// (the model's input and an image output stay nchw); "auto" is nchw for now (nhwc measured faster
// at batch 64 but slower at batch 1: BENCHMARKS.md, issue 41). Returns the reorders it inserted.
// Needs infer again after it.
int choose_layouts(Graph& g, const std::string& choice);

// The nodes' parameters (after infer, before fuse), tensor after tensor in node order, named
// PREFIX.weight and PREFIX.bias (PyTorch layouts), with offsets into one flat block.
std::vector<ParamInfo> graph_params(const Graph& g);

// A unit: consecutive nodes run as one layer (a fusion), or one node.
struct Unit {
  int first = 0, last = 0;      // nodes
  std::vector<int> in;          // input tensors (the first node's)
  int out = 0;                  // output tensor (the last node's out)
  std::unique_ptr<Layer> layer; // the node's own layer, or the fused one
  std::string kinds;            // "conv2d+relu+maxpool2d"
  bool has_params = false;
  bool backward = false;        // set by prune_backward
  std::vector<bool> dx;         // per input: prune_backward says whether its gradient is needed
};

// Pass 3 (fusion.cpp). Groups nodes into units: with `enabled`, each run of nodes that a pattern
// of the fusion table matches (each node the one reader of the one before; the pattern's plans,
// training or inference, and layouts) becomes one unit: a channel-last 1x1 Conv2d -> an
// activation of the kernel table (one GEMM with a bias-and-activation epilogue, conv_act.cpp);
// Conv2d (stride 1) -> ReLU -> MaxPool2d 2x2/2 (conv_relu_pool.cpp); in a `training` plan,
// LayerNorm (affine) -> Conv2d or Linear over channels (the normalised tensor recomputed in
// backward instead of kept, norm_conv.cpp); in an inference plan, Conv2d -> BatchNorm2d (the
// eval-mode BN folded into the conv's weight and bias, conv_bn.cpp) [-> Add of an addend made
// before the unit (the unit's second input)] [-> an activation], the add and the activation the
// conv's post-ops. Moves the nodes' layers into the units.
std::vector<Unit> fuse(Graph& g, bool enabled, bool training);
// The fusion table as `ember info --ops` shows it: each pattern's kinds ("conv2d+relu+maxpool2d"),
// its plans ("training", "inference") and its layout ("nchw", "nhwc" or "either").
struct FusionInfo {
  std::string name;
  std::vector<std::string> plans;
  std::string layout;
};
std::vector<FusionInfo> fusion_infos();
// The units fuse would make (after infer): per unit, in node order, how many nodes it runs.
std::vector<int> fusion_groups(const Graph& g, bool enabled, bool training);

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
                    bool training, int batch, size_t elem_bytes);  // elem_bytes: of every tensor but a u8 one (1)

}  // namespace ember::nn
