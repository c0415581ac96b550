// The layout pass (issue 41): which nodes run their images channel-last, and the reorder nodes at
// the edges of those clusters. As XNNPACK's subgraph rewrite and Inductor's layout optimisation do:
// each node says what it can run (Layer::runs_nhwc, layout_agnostic), the pass picks, then inserts
// one reorder per tensor and layout its readers need.
#include <algorithm>
#include <string>
#include <string_view>

#include "ember/error.h"
#include "nn/graph.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

bool image(const Tensor& t) { return !t.dims.flat(); }

// Whether the node's op declares channel-last (its descriptor's layouts: the truth the layers
// refine for their shapes, Layer::runs_nhwc); a pass's own node (no spec) says by its layer alone.
bool declares_nhwc(const Node& n) {
  return !n.spec || op_declares_layout(n.spec->kind, "nhwc");
}

// Picks each node's layout in node order: nhwc where the layer runs it, the layout of its inputs
// for an agnostic layer (nhwc when any image input is), else nchw.
void pick(Graph& g) {
  g.tensors[0].layout = image(g.tensors[0]) ? Layout::nchw : Layout::flat;
  for (Node& n : g.nodes) {
    bool nhwc_in = false;
    for (int t : n.in) nhwc_in = nhwc_in || g.tensors[size_t(t)].layout == Layout::nhwc;
    const Layer& l = *n.layer;
    const bool can = l.runs_nhwc() || (l.layout_agnostic() && nhwc_in);
    n.layout = can && declares_nhwc(n) ? Layout::nhwc : Layout::nchw;
    Tensor& out = g.tensors[size_t(n.out)];
    out.layout = image(out) ? n.layout : Layout::flat;
  }
}

// The first image tensor some reader (not a reorder of it) reads in the other layout, with those
// readers; false when there is none.
bool find_crossing(const Graph& g, int* tensor, Layout* to, std::vector<int>* readers) {
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& x = g.tensors[t];
    if (!image(x)) continue;
    for (int r : x.readers) {
      const Layout want = g.nodes[size_t(r)].layout;
      if (want == x.layout || !g.nodes[size_t(r)].kind_name.empty()) continue;  // kind_name: a reorder
      readers->clear();
      for (int q : x.readers)
        if (g.nodes[size_t(q)].layout == want && g.nodes[size_t(q)].kind_name.empty() &&
            (readers->empty() || readers->back() != q))
          readers->push_back(q);
      *tensor = int(t), *to = want;
      return true;
    }
  }
  return false;
}

}  // namespace

int choose_layouts(Graph& g, const std::string& choice) {
  if (choice != "auto" && choice != "nchw" && choice != "nhwc")
    throw Error("layout: expected auto, nchw or nhwc, found '" + choice + "'");
  // auto: nchw until channel-last plans are measured faster (BENCHMARKS.md, issue 41).
  if (choice != "nhwc") return 0;
  pick(g);
  int inserted = 0, t = 0;
  Layout to = Layout::nchw;
  std::vector<int> readers;
  while (find_crossing(g, &t, &to, &readers)) {
    const int at = insert_reader(g, t, reorder_node(to), readers);
    g.tensors[size_t(g.nodes[size_t(at)].out)].layout = to;
    ++inserted;
  }
  const int out = output(g);
  if (g.tensors[size_t(out)].layout == Layout::nhwc) {  // the model's output image stays nchw
    const int at = insert_after(g, int(g.nodes.size()) - 1, reorder_node(Layout::nchw));
    g.tensors[size_t(g.nodes[size_t(at)].out)].layout = Layout::nchw;
    ++inserted;
  }
  return inserted;
}

}  // namespace ember::nn
