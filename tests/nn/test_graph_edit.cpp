// Graph edits (src/nn/graph_edit.cpp): insert_after, replace_node and remove_node keep producers,
// readers and the output consistent (check() says so, and says when they are not); and a pass
// that inserts an identity node after every unit changes no bit of a training run (mnist-cnn,
// convnext-fashion, a residual graph with stochastic depth).
#include <cstring>
#include <memory>

#include "ember/ember.h"
#include "nn/graph.h"
#include "nn/plan_impl.h"
#include "nn/plan_util.h"

namespace ember::test {
namespace {

using nn::identity_node;

// input -> conv "a" -> relu "r" -> conv -> add(r, .) -> flatten -> linear.
Model branchy() {
  Model m;
  m.name = "branchy";
  m.in_c = 1, m.in_h = 8, m.in_w = 8;
  m.conv2d(2, 3, 1, 1).named("a").relu().named("r");
  m.conv2d(2, 3, 1, 1).named("b");
  m.add({"r", "b"}).named("sum");
  m.flatten().linear(10).named("fc");
  return m;
}

nn::Graph inferred(const Model& m) {
  nn::Graph g = nn::resolve(m);
  g.tensors[0].dims = {m.in_c, m.in_h, m.in_w};
  nn::infer(g, DType::f32, 2);
  return g;
}

std::string check_error(const nn::Graph& g) {
  try {
    nn::check(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GraphEdit, ResolvedGraphsPassCheckAndCarryLayouts) {
  const Model m = branchy();
  const nn::Graph g = inferred(m);
  nn::check(g);
  EXPECT_EQ(nn::output(g), g.nodes.back().out);
  EXPECT_EQ(g.tensors[size_t(g.nodes[0].out)].layout, nn::Layout::nchw);
  EXPECT_EQ(g.tensors[size_t(g.nodes[4].out)].layout, nn::Layout::flat);  // flatten
  EXPECT_EQ(g.tensors[size_t(nn::output(g))].layout, nn::Layout::flat);
  EXPECT_STREQ(nn::layout_name(nn::Layout::flat), "flat");
}

TEST(GraphEdit, InsertAfterRewiresEveryReaderToTheNewOutput) {
  const Model m = branchy();
  nn::Graph g = inferred(m);
  const int r = g.nodes[1].out;  // relu "r": read by conv "b" and by the add
  ASSERT_EQ(g.tensors[size_t(r)].readers, (std::vector<int>{2, 3}));
  const int id = nn::insert_after(g, 1, identity_node());
  EXPECT_EQ(id, 2);
  nn::check(g);
  const int fresh = g.nodes[2].out;
  EXPECT_EQ(fresh, 7);  // a new id, not the node's position
  EXPECT_EQ(g.nodes[2].in, std::vector<int>{r});
  EXPECT_EQ(g.tensors[size_t(r)].readers, std::vector<int>{2});
  EXPECT_EQ(g.tensors[size_t(fresh)].readers, (std::vector<int>{3, 4}));
  EXPECT_EQ(g.nodes[4].in, (std::vector<int>{fresh, g.nodes[3].out}));
  EXPECT_EQ(g.tensors[size_t(fresh)].producer, 2);
  // After the last node: the new node's output is the model's.
  nn::insert_after(g, int(g.nodes.size()) - 1, identity_node());
  nn::check(g);
  EXPECT_EQ(g.nodes.back().spec->kind, LayerKind::DropPath);
  EXPECT_EQ(nn::output(g), g.nodes.back().out);
  nn::infer(g, DType::f32, 2);  // layers and dims for the new nodes
  EXPECT_EQ(g.tensors[size_t(fresh)].dims.c, 2);
  EXPECT_EQ(g.tensors[size_t(nn::output(g))].dims.c, 10);
}

TEST(GraphEdit, RemoveUndoesInsertAndReplaceKeepsTheWiring) {
  const Model m = branchy();
  nn::Graph g = inferred(m);
  std::vector<std::vector<int>> ins;
  for (const nn::Node& n : g.nodes) ins.push_back(n.in);
  const size_t T = g.tensors.size();
  nn::insert_after(g, 1, identity_node());
  nn::insert_after(g, int(g.nodes.size()) - 1, identity_node());
  nn::infer(g, DType::f32, 2);
  nn::remove_node(g, int(g.nodes.size()) - 1);
  nn::remove_node(g, 2);
  nn::check(g);
  ASSERT_EQ(g.tensors.size(), T);
  for (size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(g.nodes[i].in, ins[i]) << i;
  // Replace the relu by an identity: same inputs, same output id, the old label.
  const int out = g.nodes[1].out;
  nn::replace_node(g, 1, identity_node());
  nn::check(g);
  EXPECT_EQ(g.nodes[1].out, out);
  EXPECT_EQ(g.nodes[1].spec->kind, LayerKind::DropPath);
  // A node that is not shape-preserving, or has two inputs, cannot be removed.
  EXPECT_EQ(check_error(g), "(no error)");
  EXPECT_THROW(nn::remove_node(g, 0), Error);   // conv 1 -> 2 channels
  EXPECT_THROW(nn::remove_node(g, 3), Error);   // the add
  EXPECT_THROW(nn::insert_after(g, 9, identity_node()), Error);
  nn::Node bare;  // a pass's node needs a spec of its own
  EXPECT_THROW(nn::insert_after(g, 0, std::move(bare)), Error);
}

TEST(GraphEdit, CheckNamesEachBrokenInvariant) {
  const Model m = branchy();
  auto broken = [&](auto edit) {
    nn::Graph g = inferred(m);
    edit(g);
    return check_error(g);
  };
  EXPECT_EQ(broken([](nn::Graph&) {}), "(no error)");
  EXPECT_NE(broken([](nn::Graph& g) { g.tensors[2].producer = 0; }).find("names producer"), std::string::npos);
  EXPECT_NE(broken([](nn::Graph& g) { g.tensors[2].readers.push_back(5); }).find("readers"), std::string::npos);
  EXPECT_NE(broken([](nn::Graph& g) { g.nodes[1].in = {4}; }).find("topological"), std::string::npos);
  EXPECT_NE(broken([](nn::Graph& g) { g.nodes[2].out = g.nodes[1].out; }).find("writes too"), std::string::npos);
  EXPECT_NE(broken([](nn::Graph& g) { g.nodes[0].in = {99}; }).find("does not exist"), std::string::npos);
  EXPECT_NE(broken([](nn::Graph& g) { g.tensors.emplace_back(); }).find("no producer"), std::string::npos);
}

// The test pass: an identity after the last node of every unit fuse would make. Not inside a
// fusion (conv+relu+pool, norm+conv): that would split the pattern and run other kernels.
nn::GraphPass identity_pass(const PlanOptions& o) {
  return [o](nn::Graph& g) {
    const std::vector<int> groups = nn::fusion_groups(g, o.fuse, o.training);
    int last = -1;
    std::vector<int> ends;
    for (int count : groups) ends.push_back(last += count);
    for (size_t k = ends.size(); k-- > 0;) nn::insert_after(g, ends[k], identity_node());
  };
}

// Trains `steps` steps of batch o.batch on synthetic data; returns the parameters, the Adam
// state and the last loss.
std::vector<float> train(const Model& model, const PlanOptions& o, bool with_pass, int steps, size_t* units) {
  Plan p = with_pass ? plan_impl::plan_with_passes(model, o, {identity_pass(o)}) : Plan(model, o);
  *units = p.units().size();
  p.init_params(3);
  const Dataset d = synthetic(64, 5);
  std::vector<int64_t> index(size_t(o.batch));
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < o.batch; ++i) index[size_t(i)] = (s * o.batch + i * 5) % d.count;
    p.gather_u8(d.images.data(), d.labels.data(), index.data(), o.batch);
    p.forward(o.batch);
    p.loss(o.batch, true);
    EXPECT_LT(p.backward_step(o.batch, 1e-3), 0);
  }
  const float* w = static_cast<const float*>(p.param_data());
  std::vector<float> out(w, w + p.param_count());
  for (int s = 0; s < p.state_count(); ++s) {
    const float* st = static_cast<const float*>(p.state_data(s));
    out.insert(out.end(), st, st + p.param_count());
  }
  p.forward(o.batch);
  out.push_back(float(p.loss(o.batch, false)));
  return out;
}

void expect_same_bits(const Model& m, PlanOptions o, int steps) {
  size_t u0 = 0, u1 = 0;
  const std::vector<float> a = train(m, o, false, steps, &u0), b = train(m, o, true, steps, &u1);
  EXPECT_EQ(u1, 2 * u0) << m.name << ": one identity unit after each unit";
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << m.name;
}

TEST(GraphEdit, AnIdentityAfterEveryUnitChangesNoBitOfTraining) {
  PlanOptions o;
  o.batch = 8;
  o.threads = 2;
  // The background link is a pattern over units 0-2 (fused conv, flatten, linear) that an
  // identity between them would break, as it would a fusion: both plans run without it.
  o.split_background = false;
  expect_same_bits(builtin_model("mnist-cnn"), o, 3);
  o.optimizer.kind = OptimizerKind::AdamW;
  o.optimizer.weight_decay = 0.05;
  expect_same_bits(builtin_model("convnext-fashion"), o, 2);
  Model r;  // stochastic depth: the inserted nodes move no unit's random stream
  r.name = "stochastic";
  r.in_c = 1, r.in_h = r.in_w = 28;
  r.conv2d(4, 3, 1, 1).relu().named("r").conv2d(4, 3, 1, 1).drop_path(0.5).named("dp");
  r.add({"r", "dp"}).flatten().linear(10);
  expect_same_bits(r, o, 3);
}

TEST(GraphEdit, PlansWithIdentitiesDescribeTheirNodes) {
  PlanOptions o;
  o.batch = 2;
  const Model m = builtin_model("mnist-cnn");
  Plan a(m, o), b = plan_impl::plan_with_passes(m, o, {identity_pass(o)});
  EXPECT_EQ(b.layers().size(), a.layers().size() + a.units().size());
  EXPECT_EQ(b.params().size(), a.params().size());
  for (size_t i = 0; i < a.params().size(); ++i) EXPECT_EQ(b.params()[i].name, a.params()[i].name);
  EXPECT_EQ(b.units()[1].name, "droppath (3)");
  EXPECT_NE(b.summary().find("droppath"), std::string::npos);
  EXPECT_FALSE(b.buffers().empty());
}

}  // namespace
}  // namespace ember::test
