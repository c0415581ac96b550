// Graph edits for passes (graph.h): insert_after, replace_node, remove_node, and check(), the
// invariants every pass keeps, and the identity node passes (and their tests) insert. Edits
// change nodes' `in` and `out`, then relink() derives each tensor's producer and readers again
// from them, so the two can never disagree.
#include "nn/graph.h"

#include <string>

#include "ember/error.h"
#include "ops/conv_nhwc.h"

namespace ember::nn {

const char* layout_name(Layout l) {
  return l == Layout::flat ? "flat" : l == Layout::nhwc ? "nhwc" : "nchw";
}

namespace {

// y = x, dx = dy: copies (nothing where the plan runs it in place), reads nothing in backward,
// and passes on where its input's gradient is unused (at zeros), so the layers around it run
// exactly the kernels they would without it.
class Identity final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool grad_unused_at_zero_output(bool in) const override { return in; }
  bool runs_in_place() const override { return true; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override { copy(e, b.dt, b.y, b.x, n); }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (b.dx) copy(e, b.dt, b.dx, b.dy, n);
  }

 private:
  void copy(const ops::Exec& e, DType dt, void* dst, const void* src, int n) const {
    if (dst == src) return;
    dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      ops::copy_or_add<T>(e, p<T>(dst), static_cast<const T*>(src), size_t(n) * in_.size(), false);
    });
  }
};

std::unique_ptr<Layer> make_identity(const LayerSpec& s) { return std::make_unique<Identity>(s); }

// [N, C, H, W] <-> [N, H, W, C]: to nhwc where its layout (the output's, set_layout) is nhwc;
// backward converts the gradient the other way. Reads nothing in backward.
class Reorder final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override { run(e, b.dt, b.y, b.x, n, nhwc()); }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (b.dx) run(e, b.dt, b.dx, b.dy, n, !nhwc());
  }

 private:
  void run(const ops::Exec& e, DType dt, void* dst, const void* src, int n, bool to_nhwc) const {
    dispatch(dt, [&](auto tag) {
      using T = decltype(tag);
      ops::reorder<T>(e, p<T>(dst), static_cast<const T*>(src), n, in_.c, in_.h * in_.w, to_nhwc);
    });
  }
};

std::unique_ptr<Layer> make_reorder(const LayerSpec& s) { return std::make_unique<Reorder>(s); }

}  // namespace

Node identity_node() {
  auto s = std::make_shared<LayerSpec>();
  s->kind = LayerKind::DropPath;  // the op table's entry for its name and (no) parameters
  s->drop_prob = 0;
  Node n;
  n.own = std::move(s);
  n.make = make_identity;
  n.label = "identity";
  return n;
}

Node reorder_node(Layout to) {
  Node n = identity_node();
  n.make = make_reorder;
  n.layout = to;
  n.kind_name = "reorder";
  n.label = std::string("reorder to ") + layout_name(to);
  return n;
}

int output(const Graph& g) { return g.nodes.empty() ? 0 : g.nodes.back().out; }

namespace {

[[noreturn]] void fail(const Graph& g, const std::string& msg) { throw Error("internal: " + g.where + ": " + msg); }

// Each tensor's producer and readers, from the nodes (readers in node order).
void relink(Graph& g) {
  for (Tensor& t : g.tensors) t.producer = -1, t.readers.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int t : g.nodes[i].in) g.tensors[size_t(t)].readers.push_back(int(i));
    g.tensors[size_t(g.nodes[i].out)].producer = int(i);
  }
}

void check_index(const Graph& g, int node, const char* what) {
  if (node < 0 || size_t(node) >= g.nodes.size())
    fail(g, std::string(what) + ": no node " + std::to_string(node) + " (" + std::to_string(g.nodes.size()) + " nodes)");
}

// A node a pass made: its spec is its own.
void adopt(const Graph& g, Node& n, const char* what) {
  if (!n.own) fail(g, std::string(what) + ": the new node has no spec of its own (Node::own)");
  n.spec = n.own.get();
  if (n.label.empty()) n.label = std::string("pass node (") + layer_kind_name(n.spec->kind) + ")";
}

}  // namespace

void check(const Graph& g) {
  const size_t T = g.tensors.size();
  if (T == 0 || g.nodes.empty()) fail(g, "a graph has an input and at least one node");
  std::vector<int> producer(T, -1);
  std::vector<std::vector<int>> readers(T);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.spec) fail(g, "node " + std::to_string(i) + " has no spec");
    for (int t : n.in) {
      if (t < 0 || size_t(t) >= T) fail(g, n.label + ": reads tensor " + std::to_string(t) + ", which does not exist");
      if (t != 0 && producer[size_t(t)] < 0)
        fail(g, n.label + ": reads tensor " + std::to_string(t) + " before a node writes it (not in topological order)");
      readers[size_t(t)].push_back(int(i));
    }
    if (n.out <= 0 || size_t(n.out) >= T) fail(g, n.label + ": writes tensor " + std::to_string(n.out) + ", which is not a node output id");
    if (producer[size_t(n.out)] >= 0)
      fail(g, n.label + ": writes tensor " + std::to_string(n.out) + ", which " + g.nodes[size_t(producer[size_t(n.out)])].label + " writes too");
    producer[size_t(n.out)] = int(i);
  }
  for (size_t t = 0; t < T; ++t) {
    const Tensor& x = g.tensors[t];
    if (t != 0 && producer[t] < 0) fail(g, "tensor " + std::to_string(t) + " has no producer");
    if (x.producer != producer[t])
      fail(g, "tensor " + std::to_string(t) + " names producer " + std::to_string(x.producer) + ", not " + std::to_string(producer[t]));
    if (x.readers != readers[t]) fail(g, "tensor " + std::to_string(t) + "'s readers are not the nodes that read it");
    if (readers[t].empty() && int(t) != output(g)) fail(g, "tensor " + std::to_string(t) + " is never read");
  }
}

int insert_after(Graph& g, int node, Node n) {
  check_index(g, node, "insert_after");
  adopt(g, n, "insert_after");
  const int old = g.nodes[size_t(node)].out, fresh = int(g.tensors.size());
  g.tensors.emplace_back();
  for (Node& r : g.nodes)
    for (int& t : r.in)
      if (t == old) t = fresh;
  n.in = {old};
  n.out = fresh;
  g.nodes.insert(g.nodes.begin() + node + 1, std::move(n));
  relink(g);
  return node + 1;
}

int insert_reader(Graph& g, int t, Node n, const std::vector<int>& readers) {
  if (t < 0 || size_t(t) >= g.tensors.size()) fail(g, "insert_reader: no tensor " + std::to_string(t));
  adopt(g, n, "insert_reader");
  const int at = g.tensors[size_t(t)].producer + 1, fresh = int(g.tensors.size());
  g.tensors.emplace_back();
  for (int r : readers) {
    check_index(g, r, "insert_reader");
    for (int& x : g.nodes[size_t(r)].in)
      if (x == t) x = fresh;
  }
  n.in = {t};
  n.out = fresh;
  g.nodes.insert(g.nodes.begin() + at, std::move(n));
  relink(g);
  return at;
}

void replace_node(Graph& g, int node, Node n) {
  check_index(g, node, "replace_node");
  const bool labelled = !n.label.empty();
  adopt(g, n, "replace_node");
  Node& old = g.nodes[size_t(node)];
  if (!labelled) n.label = old.label;
  if (n.param_prefix.empty()) n.param_prefix = old.param_prefix;
  n.in = old.in;
  n.out = old.out;
  if (n.source < 0) n.source = old.source;
  old = std::move(n);
  relink(g);
}

void remove_node(Graph& g, int node) {
  check_index(g, node, "remove_node");
  const Node& n = g.nodes[size_t(node)];
  if (n.in.size() != 1) fail(g, "remove_node: " + n.label + " has " + std::to_string(n.in.size()) + " inputs, not one");
  const int in = n.in[0], gone = n.out;
  const Tensor &a = g.tensors[size_t(in)], &b = g.tensors[size_t(gone)];
  if (a.dims.c != b.dims.c || a.dims.h != b.dims.h || a.dims.w != b.dims.w)
    fail(g, "remove_node: " + n.label + " changes its input's shape");
  if (size_t(node) + 1 == g.nodes.size() && (node == 0 || g.nodes[size_t(node) - 1].out != in))
    fail(g, "remove_node: " + n.label + " is the last node and its input is not the node before's output");
  if (g.nodes.size() == 1) fail(g, "remove_node: " + n.label + " is the only node");
  g.nodes.erase(g.nodes.begin() + node);
  g.tensors.erase(g.tensors.begin() + gone);
  const int target = in > gone ? in - 1 : in;
  auto renumber = [&](int& t) { t = t == gone ? target : t > gone ? t - 1 : t; };
  for (Node& r : g.nodes) {
    for (int& t : r.in) renumber(t);
    renumber(r.out);
  }
  relink(g);
}

}  // namespace ember::nn
