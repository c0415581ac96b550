// Pass 3, fuse: the fusion table (which runs of nodes become one unit: the pattern's kinds, its
// predicate on the nodes and their edges, the plans and layouts it applies in, the unit's layer)
// and the pass that walks the graph with it. Each fused unit's layer is its own file.
#include <memory>
#include <string>
#include <vector>

#include "nn/graph.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

// Which layout a fusion's nodes run: all nchw (flat counts as nchw), all nhwc, or one of either.
enum class FusionLayout { nchw, nhwc, either };

struct Fusion {
  const char* name;   // the unit's kinds, as `ember info` names it
  int nodes;          // consecutive nodes, each the one reader of the one before
  bool train, infer;  // the plans it applies in
  FusionLayout layout;
  bool (*match)(const Graph& g, size_t i);               // on nodes i .. i + nodes - 1
  std::unique_ptr<Layer> (*make)(Graph& g, size_t i);    // takes over the nodes' layers
  int join = -1;      // the position of a two-input add whose other addend a node before the unit
                      // made (the unit's second input), or -1
};

const LayerSpec& spec(const Graph& g, size_t i) { return *g.nodes[i].spec; }
std::unique_ptr<Layer> take(Graph& g, size_t i) { return std::move(g.nodes[i].layer); }
bool is_act(const Graph& g, size_t i) { return g.nodes[i].layer && g.nodes[i].layer->kernel_act(); }
bool is_add(const Graph& g, size_t i) { return spec(g, i).kind == LayerKind::Add; }
// conv2d -> batchnorm2d [-> add] [-> activation] (conv_bn.cpp): the fold and the post-ops.
template <bool kAdd, bool kAct>
bool conv_bn_post(const Graph& g, size_t i) {
  return can_fuse_conv_bn(spec(g, i), spec(g, i + 1)) && (!kAdd || is_add(g, i + 2)) &&
         (!kAct || is_act(g, i + (kAdd ? 3 : 2)));
}
template <bool kAdd, bool kAct>
std::unique_ptr<Layer> make_conv_bn_post(Graph& g, size_t i) {
  auto conv = take(g, i), bn = take(g, i + 1);
  return make_conv_bn(std::move(conv), std::move(bn), kAdd, kAct ? take(g, i + (kAdd ? 3 : 2)) : nullptr);
}

// In priority order: the first that matches at a node makes the unit.
const std::vector<Fusion>& fusion_table() {
  static const std::vector<Fusion> t = {
      // A channel-last 1x1 conv2d -> an activation of the kernel table: one GEMM with a bias and
      // activation epilogue (conv_act.cpp).
      {"conv2d+<act>", 2, true, true, FusionLayout::nhwc,
       [](const Graph& g, size_t i) { return can_fuse_conv_act(spec(g, i), *g.nodes[i + 1].layer, g.nodes[i].layout); },
       [](Graph& g, size_t i) { return make_conv_act(take(g, i), take(g, i + 1)); }},
      // conv2d (stride 1) -> relu -> maxpool2d 2x2/2: the conv and relu outputs never stored
      // (conv_relu_pool.cpp).
      {"conv2d+relu+maxpool2d", 3, true, true, FusionLayout::nchw,
       [](const Graph& g, size_t i) {
         const LayerSpec seq[3] = {spec(g, i), spec(g, i + 1), spec(g, i + 2)};
         return can_fuse_conv_relu_pool(seq, 3, g.tensors[size_t(g.nodes[i].in[0])].dims);
       },
       [](Graph& g, size_t i) { return make_conv_relu_pool(spec(g, i)); }},
      // layernorm (affine) -> conv2d or linear over channels: the normalised tensor recomputed in
      // backward instead of kept (norm_conv.cpp).
      {"layernorm+conv2d", 2, true, false, FusionLayout::nchw,
       [](const Graph& g, size_t i) { return can_fuse_norm_conv(spec(g, i), spec(g, i + 1)); },
       [](Graph& g, size_t i) { return make_norm_conv(take(g, i), take(g, i + 1)); }},
      // conv2d -> batchnorm2d [-> add] [-> activation]: the eval-mode BN folded into the conv's weight
      // and bias, the residual add and the activation its post-ops (conv_bn.cpp; ResNet's blocks).
      {"conv2d+batchnorm2d+add+<act>", 4, false, true, FusionLayout::either, conv_bn_post<true, true>,
       make_conv_bn_post<true, true>, 2},
      {"conv2d+batchnorm2d+add", 3, false, true, FusionLayout::either, conv_bn_post<true, false>,
       make_conv_bn_post<true, false>, 2},
      {"conv2d+batchnorm2d+<act>", 3, false, true, FusionLayout::either, conv_bn_post<false, true>,
       make_conv_bn_post<false, true>},
      {"conv2d+batchnorm2d", 2, false, true, FusionLayout::either, conv_bn_post<false, false>,
       make_conv_bn_post<false, false>},
  };
  return t;
}

// Whether node j reads node i's output alone, and nothing else reads that output.
bool only_reader_of(const Graph& g, size_t i, size_t j) {
  const int t = g.nodes[i].out;
  return g.nodes[j].in == std::vector<int>{t} && g.tensors[size_t(t)].readers.size() == 1;
}
// The other addend of add node j, which node i's output (read by j alone) enters, when a node before
// `first` (or the graph's input) made it, else -1.
int joined_addend(const Graph& g, size_t i, size_t j, size_t first) {
  const int t = g.nodes[i].out;
  const std::vector<int>& in = g.nodes[j].in;
  if (in.size() != 2 || g.tensors[size_t(t)].readers.size() != 1 || (in[0] == t) == (in[1] == t)) return -1;
  const int other = in[0] == t ? in[1] : in[0];
  const int prod = g.tensors[size_t(other)].producer;
  return prod < int(first) ? other : -1;
}

bool layouts_fit(const Graph& g, size_t i, const Fusion& f) {
  for (size_t k = i; k < i + size_t(f.nodes); ++k) {
    const Layout l = g.nodes[k].layout;
    if (l != g.nodes[i].layout) return false;
    if ((f.layout == FusionLayout::nchw && l == Layout::nhwc) || (f.layout == FusionLayout::nhwc && l != Layout::nhwc))
      return false;
  }
  return true;
}

// The fusion that makes the unit starting at node i, or null (the node runs alone).
const Fusion* fusion_at(const Graph& g, size_t i, bool training) {
  for (const Fusion& f : fusion_table()) {
    if (!(training ? f.train : f.infer) || i + size_t(f.nodes) > g.nodes.size()) continue;
    bool chain = true;
    for (size_t k = i + 1; k < i + size_t(f.nodes) && chain; ++k)
      chain = (int(k - i) == f.join ? joined_addend(g, k - 1, k, i) >= 0 : only_reader_of(g, k - 1, k)) &&
              g.nodes[k].layer && g.nodes[k].spec;
    if (chain && g.nodes[i].spec && layouts_fit(g, i, f) && f.match(g, i)) return &f;
  }
  return nullptr;
}

}  // namespace

std::vector<FusionInfo> fusion_infos() {
  std::vector<FusionInfo> out;
  for (const Fusion& f : fusion_table()) {
    FusionInfo i{f.name, {}, f.layout == FusionLayout::nchw ? "nchw" : f.layout == FusionLayout::nhwc ? "nhwc" : "either"};
    if (f.train) i.plans.push_back("training");
    if (f.infer) i.plans.push_back("inference");
    out.push_back(i);
  }
  return out;
}

std::vector<int> fusion_groups(const Graph& g, bool enabled, bool training) {
  std::vector<int> out;
  for (size_t i = 0; i < g.nodes.size(); i += size_t(out.back())) {
    const Fusion* f = enabled ? fusion_at(g, i, training) : nullptr;
    out.push_back(f ? f->nodes : 1);
  }
  return out;
}

std::vector<Unit> fuse(Graph& g, bool enabled, bool training) {
  std::vector<Unit> units;
  for (size_t i = 0; i < g.nodes.size();) {
    const Fusion* f = enabled ? fusion_at(g, i, training) : nullptr;
    const size_t count = f ? size_t(f->nodes) : 1;
    Unit u;
    u.first = int(i);
    u.last = int(i + count - 1);
    u.in = g.nodes[i].in;
    if (f && f->join >= 0) u.in.push_back(joined_addend(g, i + size_t(f->join) - 1, i + size_t(f->join), i));
    u.out = g.nodes[size_t(u.last)].out;
    u.layer = f ? f->make(g, i) : take(g, i);
    if (f) {
      std::vector<Dims> dims;
      for (int t : u.in) dims.push_back(g.tensors[size_t(t)].dims);
      u.layer->infer_inputs(dims);
    }
    for (size_t k = i; k < i + count; ++k) {
      const std::string kind = !g.nodes[k].kind_name.empty() ? g.nodes[k].kind_name : layer_kind_name(g.nodes[k].spec->kind);
      u.kinds += (k > i ? "+" : "") + kind;
      if (k != i) g.nodes[k].layer.reset();
    }
    u.has_params = !u.layer->param_shapes().empty();
    units.push_back(std::move(u));
    i += count;
  }
  return units;
}

}  // namespace ember::nn
