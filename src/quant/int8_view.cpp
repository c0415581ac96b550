// The int8 plan's arithmetic as a QDQ export states it (qdq_export_view), what its lowering decides
// (int8_node_paths, int8_u8_tensors, int8_qat_tensors) and
// the quantized file's checks against what the plan and the export compute (quant/int8_check.h),
// both from the plan's steps without its packed weights or buffers (int8_plan_impl.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "ember/error.h"
#include "ember/quant.h"
#include "quant/int8_check.h"
#include "quant/int8_plan_impl.h"
#include "quant/quant_math.h"

namespace ember {
using namespace int8plan;

namespace {
// Node i's quantized layer l as the QDQ export writes it: with the BatchNorm2d its requantization
// carries folded in (true; not where a weight of -128 would need negating), else its bias in
// units of the input scale the plan uses (a max-pool's: its input's).
bool view_layer(const Impl& m, size_t i, QuantLayer* l) {
  const float s_in = m.ts[size_t(m.g().nodes[i].in[0])].qp.scale;
  std::vector<double> a, c;
  if (m.bn_of[i] >= 0) {
    const std::vector<int32_t> bias = requant_bias(m, int(i), *l, s_in, &a, &c);
    if (fold_affine(l, a, bias)) return true;
  }
  if (l->has_bias) l->bias = requant_bias(m, int(i), *l, s_in, &a, &c, false);
  return false;
}

QdqExport export_view(const Impl& m) {
  QdqExport v;
  v.q = m.q;
  v.q.acts.clear();
  for (size_t t = 0; t < m.ts.size(); ++t)
    if (m.ts[t].buf[kU8] >= 0) v.q.acts[m.name(t)] = m.ts[t].qp;
  for (size_t i = 0; i < m.g().nodes.size(); ++i) {
    const nn::Node& n = m.g().nodes[i];
    auto l = std::find_if(v.q.layers.begin(), v.q.layers.end(), [&](const QuantLayer& x) { return x.prefix == n.param_prefix; });
    if (l == v.q.layers.end()) continue;
    if (m.role[i] != Role::gemm && m.role[i] != Role::dw) {  // runs fp32 on its dequantized values: so written
      v.q.layers.erase(l);
      continue;
    }
    if (view_layer(m, i, &*l)) v.folded_bn[n.param_prefix] = m.g().nodes[size_t(m.bn_of[i])].param_prefix;
  }
  return v;
}

// An Impl of q with steps and checks only (no packed weights, no arena).
std::unique_ptr<Impl> analysed(QuantizedWeights q, const std::string& where, bool file_checks = false,
                               bool quantizing = false) {
  auto m = std::make_unique<Impl>();
  m->q = std::move(q);
  m->where = where;
  m->pack = false;
  m->file_checks = file_checks;
  m->quantizing = quantizing;
  build_steps(*m);
  return m;
}
}  // namespace

QdqExport qdq_export_view(const QuantizedWeights& q) { return export_view(*analysed(q, "export")); }

namespace quant {
QuantizedWeights checked_for_int8(QuantizedWeights q, const std::string& where) {
  const std::unique_ptr<Impl> m = analysed(std::move(q), where, true);
  for (size_t i = 0; i < m->g().nodes.size(); ++i) {  // what the export writes: as the export checks it
    const QuantLayer* l = m->role[i] == Role::gemm || m->role[i] == Role::dw ? m->q.layer(m->g().nodes[i].param_prefix) : nullptr;
    if (!l) continue;
    QuantLayer v = *l;
    view_layer(*m, i, &v);
    const int in = m->g().nodes[i].in[0];
    if (const Problem e = layer_problem(v, m->ts[size_t(in)].qp.scale, act_scale_name(m->name(size_t(in))))) fail(*m, e);
  }
  return std::move(m->q);
}

std::map<std::string, std::string> u8_passthrough(const QuantizedWeights& q) {
  const std::unique_ptr<Impl> m = analysed(q, "int8 plan", false, true);
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < m->g().nodes.size(); ++i) {
    if (!exact_u8(m->role[i])) continue;
    const std::string in = m->name(size_t(m->g().nodes[i].in[0]));
    const auto up = out.find(in);  // a chain keeps its first tensor's
    out[m->name(size_t(m->g().nodes[i].out))] = up == out.end() ? in : up->second;
  }
  return out;
}
}  // namespace quant

// The file's own pair at the output of each exact u8 op (ReLU, max-pool, flatten on u8) must
// be the QParams the plan keeps there, its input's: it would have no effect otherwise.
void int8plan::check_exact_u8_outputs(const Impl& m) {
  for (size_t i = 0; i < m.g().nodes.size(); ++i) {
    if (!exact_u8(m.role[i])) continue;
    const nn::Node& n = m.g().nodes[i];
    const std::string t = m.name(size_t(n.out)), in = m.name(size_t(n.in[0]));
    const auto own = m.q.acts.find(t);
    const QParams kept = m.ts[size_t(n.out)].qp;
    if (own == m.q.acts.end() || (own->second.scale == kept.scale && own->second.zero_point == kept.zero_point)) continue;
    fail(m, {own->second.scale != kept.scale ? quant::act_scale_name(t) : quant::act_zp_name(t),
             "scale " + quant::scale_text(own->second.scale) + ", zero point " + std::to_string(own->second.zero_point) +
                 ": expected its input's (" + quant::act_scale_name(in) + " " + quant::scale_text(kept.scale) + ", " +
                 quant::act_zp_name(in) + " " + std::to_string(kept.zero_point) + "): the int8 plan runs " + n.label +
                 " exactly on u8 values, so its output keeps its input's scale and zero point (as ember quantize writes"
                 " it: quantize the fp32 weights again)"});
  }
}

std::vector<std::string> int8_node_paths(const QuantizedWeights& q) {
  const std::unique_ptr<Impl> m = analysed(q, "int8 plan");
  std::vector<std::string> out;
  for (Role r : m->role)
    out.push_back(r == Role::fallback ? "fp32" : r == Role::fused || r == Role::flatten8 ? "int8 (fused)" : "int8");
  return out;
}

std::vector<std::string> int8_u8_tensors(const QuantizedWeights& q) {
  const std::unique_ptr<Impl> m = analysed(q, "int8 plan");
  std::vector<std::string> out;
  for (size_t t = 0; t < m->ts.size(); ++t)
    if (m->ts[t].buf[kU8] >= 0) out.push_back(m->name(t));
  return out;
}

std::vector<std::string> int8_qat_tensors(const QuantizedWeights& q) {
  const std::unique_ptr<Impl> m = analysed(q, "int8 plan");
  std::vector<std::string> out;
  for (size_t t = 0; t < m->ts.size(); ++t) {
    if (m->ts[t].buf[kU8] < 0) continue;
    const int p = m->g().tensors[t].producer;
    if (p < 0 || !exact_u8(m->role[size_t(p)])) out.push_back(m->name(t));
  }
  return out;
}

}  // namespace ember
