// The QAT pass (Model::qat, docs/int8.md): a fakequant node after the producer of each tensor
// the model's QatSpec names ("input" or a layer's parameter prefix), which every reader of the
// tensor then reads; and which parameters the plan fake-quantizes (Conv2d and Linear weights).
#include <set>
#include <string>
#include <vector>

#include "ember/error.h"
#include "nn/graph.h"

namespace ember::nn {

namespace {
// The fakequant node of tensor `name`: parameters NAME.fake_quant.range and .observed.
Node fake_quant_node(const std::string& name) {
  auto s = std::make_shared<LayerSpec>();
  s->kind = LayerKind::FakeQuant;
  s->name = name + ".fake_quant";
  Node n;
  n.own = std::move(s);
  n.label = "fakequant of " + name;
  n.param_prefix = name + ".fake_quant";
  return n;
}
}  // namespace

void insert_fake_quant(Graph& g, const QatSpec& q) {
  std::set<std::string> seen;
  for (size_t k = 0; k < q.tensors.size(); ++k) {
    const std::string& name = q.tensors[k];
    const std::string where = g.where + ": qat.tensors[" + std::to_string(k) + "] \"" + name + "\"";
    if (!seen.insert(name).second) throw Error(where + ": listed twice");
    if (name == "input") {
      const std::vector<int> readers = g.tensors[0].readers;  // a copy: the insert grows g.tensors
      insert_reader(g, 0, fake_quant_node(name), readers);
      continue;
    }
    int producer = -1;
    for (size_t i = 0; i < g.nodes.size() && producer < 0; ++i)
      if (g.nodes[i].source >= 0 && g.nodes[i].param_prefix == name) producer = int(i);
    if (producer < 0) throw Error(where + ": names no layer (expected \"input\" or a layer's parameter prefix)");
    insert_after(g, producer, fake_quant_node(name));
  }
}

bool qat_weight(const Graph& g, const ParamInfo& p) {
  const LayerKind k = g.nodes[size_t(p.layer)].spec->kind;
  return (k == LayerKind::Conv2d || k == LayerKind::Linear) && p.role == ParamRole::weight;
}

}  // namespace ember::nn
