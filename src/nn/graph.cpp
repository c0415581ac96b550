// The compile passes over the graph IR (graph.h): resolve, infer, fuse, prune_backward, place
// and lifetimes. Each is a plain function of its inputs, so each is tested alone; the plan
// (plan.cpp) runs them in order and binds the result to kernels.
#include "nn/graph.h"

#include "nn/op_table.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>

#include "ember/error.h"

namespace ember::nn {

namespace {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

// How many inputs a kind takes: exactly one, or (add, concat) 2 to kMaxInputs.
bool multi_input(LayerKind k) { return k == LayerKind::Add || k == LayerKind::Concat; }

std::string node_label(const LayerSpec& s, size_t i) {
  std::string l = "layers[" + std::to_string(i) + "] (" + layer_kind_name(s.kind);
  if (valid_name(s.name)) l += " \"" + s.name + "\"";  // a name that is not valid is not shown
  return l + ")";
}

// Checkpoints keep the optimizer's state as "optimizer.<state>.<parameter>": a layer's own
// parameters may not live there.
bool reserved_name(const std::string& s) { return s == "optimizer" || s.rfind("optimizer.", 0) == 0; }

// A layer's parameters are "NAME.weight" (an unnamed layer's: "INDEX.weight"): a name must not be
// reserved, nor the index of another, unnamed layer.
template <class Fail>
void check_name_is_free(const Model& m, size_t i, Fail&& fail) {
  const std::string& name = m.layers[i].name;
  if (reserved_name(name))
    fail("the name \"" + name + "\" is reserved: checkpoints keep the optimizer's state under \"optimizer.\"");
  if (name.size() > 9 || name.find_first_not_of("0123456789") != std::string::npos || (name.size() > 1 && name[0] == '0'))
    return;
  const size_t k = std::stoul(name);
  if (k != i && k < m.layers.size() && m.layers[k].name.empty())
    fail("the name \"" + name + "\" is the parameter prefix of unnamed " + node_label(m.layers[k], k) +
         " (its parameters are \"" + name + ".weight\", ...): the two would collide; choose another name");
}

}  // namespace

Graph resolve(const Model& m) {
  Graph g;
  g.where = m.source.empty() ? "model " + m.name : m.source;
  if (m.layers.empty()) throw Error(g.where + ": layers: the model has no layers");
  std::map<std::string, int> by_name;  // name -> tensor
  by_name["input"] = 0;
  g.tensors.resize(m.layers.size() + 1);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& s = m.layers[i];
    Node n;
    n.spec = &s;
    n.label = node_label(s, i);
    n.source = int(i);
    n.param_prefix = s.name.empty() ? std::to_string(i) : s.name;
    auto fail = [&](const std::string& msg) { throw Error(g.where + ": " + n.label + ": " + msg); };
    if (!s.name.empty()) {
      if (!valid_name(s.name))
        fail("a name is 1 to 128 letters, digits, '_', '.' or '-'");
      if (by_name.count(s.name))
        fail(s.name == "input" ? "\"input\" names the model's input; choose another name"
                               : "the name is used by an earlier layer too");
      check_name_is_free(m, i, fail);
    }
    if (s.inputs.empty()) {
      n.in.push_back(i == 0 ? 0 : g.nodes.back().out);  // the previous node's output, or the input
    } else {
      for (const std::string& name : s.inputs) {
        auto it = by_name.find(name);
        if (it == by_name.end())
          fail(valid_name(name) ? "input \"" + name + "\" names no earlier layer (inputs name earlier layers, or \"input\")"
                                : std::string("an input is not a layer name (1 to 128 letters, digits, '_', '.' or '-')"));
        n.in.push_back(it->second);
      }
    }
    const size_t count = n.in.size();
    if (multi_input(s.kind) ? count < 2 || count > size_t(kMaxInputs) : count != 1)
      fail(multi_input(s.kind) ? "expected 2 to " + std::to_string(kMaxInputs) + " inputs, found " + std::to_string(count)
                               : "expected one input, found " + std::to_string(count));
    for (int t : n.in) g.tensors[size_t(t)].readers.push_back(int(i));
    n.out = int(i) + 1;  // resolve numbers outputs in node order; passes append theirs
    g.tensors[size_t(n.out)].producer = int(i);
    if (!s.name.empty()) by_name[s.name] = n.out;
    g.nodes.push_back(std::move(n));
  }
  for (size_t i = 0; i + 1 < g.nodes.size(); ++i)
    if (g.tensors[size_t(g.nodes[i].out)].readers.empty())
      throw Error(g.where + ": " + g.nodes[i].label +
                  ": its output is never read (only the last layer's output may be left unread)");
  return g;
}

void infer(Graph& g, DType dt, int batch) {
  // The kernels index a batch of activations with int: it stays below 2^31 elements.
  const size_t max_elems = size_t(INT32_MAX) / size_t(batch);
  g.tensors[0].dtype = dt;
  g.tensors[0].layout = g.tensors[0].dims.flat() ? Layout::flat : Layout::nchw;
  const Dims& d = g.tensors[0].dims;
  if (d.size() > max_elems)
    throw Error(g.where + ": input: [" + std::to_string(d.c) + ", " + std::to_string(d.h) + ", " +
                std::to_string(d.w) + "] is too large for batch " + std::to_string(batch) + " (more than " +
                std::to_string(max_elems) + " elements per sample)");
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    std::vector<Dims> in;
    n.layer = n.make ? n.make(*n.spec) : make_layer(*n.spec);
    n.layer->set_layout(n.layout);
    for (size_t j = 0; j < n.in.size(); ++j) {
      const Tensor& x = g.tensors[size_t(n.in[j])];
      if (x.dtype != n.layer->input_dtype(int(j), dt))
        throw Error(g.where + ": " + n.label + ": input " + std::to_string(j) + " of another dtype than the layer reads");
      in.push_back(x.dims);
    }
    Tensor& out = g.tensors[size_t(n.out)];
    try {
      out.dims = n.layer->infer_inputs(in);
    } catch (const Error& e) {
      throw Error(g.where + ": " + n.label + ": " + e.what());
    }
    out.dtype = n.layer->output_dtype(dt);
    out.layout = out.dims.flat() ? Layout::flat : n.layout;
    if (out.dims.size() > max_elems)
      throw Error(g.where + ": " + n.label + ": activation too large for batch " + std::to_string(batch) +
                  " (more than " + std::to_string(max_elems) + " elements per sample)");
  }
}

std::vector<ParamInfo> graph_params(const Graph& g) {
  std::vector<ParamInfo> out;
  std::map<std::string, size_t> owner;  // parameter name -> node: two would save as one tensor
  size_t offset = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Layer& l = *g.nodes[i].layer;
    const auto shapes = l.param_shapes();
    const OpDesc& op = op_desc(g.nodes[i].spec->kind);
    const std::vector<OpParam> named = op.params ? op.params(*g.nodes[i].spec) : std::vector<OpParam>{};
    if (named.size() != shapes.size())
      throw Error("internal: op " + std::string(op.name) + " declares " + std::to_string(named.size()) +
                  " parameters, its layer " + std::to_string(shapes.size()));
    for (size_t t = 0; t < shapes.size(); ++t) {
      ParamInfo p;
      p.name = g.nodes[i].param_prefix + "." + named[t].name;
      p.role = named[t].role;
      const auto [it, fresh] = owner.emplace(p.name, i);
      if (!fresh)
        throw Error(g.where + ": " + g.nodes[i].label + ": its parameter \"" + p.name + "\" has the name of " +
                    g.nodes[it->second].label + "'s: choose another layer name");
      p.constant = l.param_constant(t, &p.value);
      p.shape = shapes[t];
      p.size = 1;
      for (int d : p.shape) p.size *= size_t(d);
      p.offset = offset;
      p.is_weight = param_decays(p.role);
      p.layer = int(i);
      p.fan_in = l.fan_in();
      p.fan_out = l.fan_out();
      offset += p.size;
      out.push_back(p);
    }
  }
  return out;
}

std::vector<bool> prune_backward(const Graph& g, std::vector<Unit>& units) {
  std::vector<bool> needs(g.tensors.size(), false);  // a parameter lies upstream
  for (Unit& u : units) {
    bool any = u.has_params;
    for (int t : u.in) any = any || needs[size_t(t)];
    needs[size_t(u.out)] = any;
    u.backward = any;
    u.dx.clear();
    for (int t : u.in) u.dx.push_back(needs[size_t(t)]);
  }
  needs[size_t(output(g))] = true;  // the loss writes the output's gradient
  return needs;
}

size_t place(std::vector<Block>& blocks) {
  constexpr size_t kAlign = 64;
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return blocks[a].bytes > blocks[b].bytes; });
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t i : order) {
    Block& b = blocks[i];
    if (b.bytes == 0) continue;
    const size_t bytes = (b.bytes + kAlign - 1) / kAlign * kAlign;
    // Busy ranges of the placed blocks alive at the same time, by offset; take the first gap.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed)
      if (blocks[j].first <= b.last && b.first <= blocks[j].last)
        busy.push_back({blocks[j].offset, blocks[j].offset + (blocks[j].bytes + kAlign - 1) / kAlign * kAlign});
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [lo, hi] : busy) {
      if (off + bytes <= lo) break;
      off = std::max(off, hi);
    }
    b.offset = off;
    total = std::max(total, off + bytes);
    placed.push_back(i);
  }
  return total;
}

namespace {
// Whether tensor t (a unit's output, fed to exactly one unit u that runs in place) can share its
// storage with u's output: not the model input, not an alias itself, and not read by its own
// producer's backward (the in-place write destroys it).
bool can_share_in_place(const Graph& g, const std::vector<Unit>& units, const std::vector<int>& unit_of,
                        const std::vector<int>& alias, int t) {
  const Tensor& x = g.tensors[size_t(t)];
  if (x.producer < 0 || x.readers.size() != 1 || alias[size_t(t)] != t) return false;
  const Unit& p = units[size_t(unit_of[size_t(x.producer)])];
  return p.out == t && !(p.backward && p.layer->backward_reads_output());
}
}  // namespace

Lifetimes lifetimes(const Graph& g, const std::vector<Unit>& units, const std::vector<bool>& needs_grad,
                    bool training, int batch, size_t elem_bytes) {
  const int U = int(units.size()), end = 2 * U;
  const size_t T = g.tensors.size();
  const size_t out_t = size_t(output(g));
  std::vector<int> unit_of(g.nodes.size());
  for (int u = 0; u < U; ++u)
    for (int k = units[size_t(u)].first; k <= units[size_t(u)].last; ++k) unit_of[size_t(k)] = u;
  Lifetimes lt;
  lt.alias.resize(T);
  lt.act.resize(T);
  lt.grad.resize(T);
  std::vector<int> grad_alias(T);
  for (size_t t = 0; t < T; ++t) lt.alias[t] = grad_alias[t] = int(t);
  for (const Node& n : g.nodes) {  // in node order: an input's alias is known before its readers'
    const size_t t = size_t(n.out);
    const Tensor& x = g.tensors[t];
    const Unit& u = units[size_t(unit_of[size_t(x.producer)])];
    if (u.out != int(t)) continue;
    const int in = u.in[0];
    if (u.layer->aliases_input()) {
      lt.alias[t] = lt.alias[size_t(in)];
      if (g.tensors[size_t(in)].readers.size() == 1 && needs_grad[size_t(in)]) grad_alias[t] = grad_alias[size_t(in)];
    } else if (u.layer->runs_in_place() && can_share_in_place(g, units, unit_of, lt.alias, in)) {
      lt.alias[t] = in;
    }
  }
  for (size_t t = 0; t < T; ++t) {  // each tensor's own interval, merged into its storage's
    const Tensor& x = g.tensors[t];
    const int prod = x.producer < 0 ? -1 : unit_of[size_t(x.producer)];
    if (prod >= 0 && units[size_t(prod)].out != int(t)) continue;  // inside a fused unit: never stored
    int first = prod < 0 ? 0 : prod, last = first;
    for (int r : x.readers) {
      const Unit& u = units[size_t(unit_of[size_t(r)])];
      last = std::max(last, unit_of[size_t(r)]);
      if (training && u.backward && u.layer->backward_reads_inputs()) last = std::max(last, end - unit_of[size_t(r)]);
    }
    if (training && prod >= 0 && units[size_t(prod)].backward && units[size_t(prod)].layer->backward_reads_output())
      last = std::max(last, end - prod);
    if (t == 0 || t == out_t) last = end;
    Block& a = lt.act[size_t(lt.alias[t])];
    const bool fresh = a.bytes == 0;
    a.bytes = std::max(a.bytes, size_t(batch) * x.dims.size() * (x.dtype == DType::u8 ? 1 : elem_bytes));
    a.first = fresh ? first : std::min(a.first, first);
    a.last = fresh ? last : std::max(a.last, last);
    if (!needs_grad[t]) continue;
    int gfirst = end;  // the first backward that writes it: its last reader's, or the loss
    for (int r : x.readers) gfirst = std::min(gfirst, end - unit_of[size_t(r)]);
    if (t == out_t) gfirst = U;
    const int glast = prod < 0 ? end : end - prod;
    Block& gb = lt.grad[size_t(grad_alias[t])];
    const bool gfresh = gb.bytes == 0;
    gb.bytes = std::max(gb.bytes, size_t(batch) * x.dims.size() * elem_bytes);
    gb.first = gfresh ? gfirst : std::min(gb.first, gfirst);
    gb.last = gfresh ? glast : std::max(gb.last, glast);
  }
  lt.grad_alias = std::move(grad_alias);
  return lt;
}

}  // namespace ember::nn
