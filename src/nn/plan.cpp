// The plan: a model compiled for (batch, dtype, ISA, threads). Compile infers and checks shapes,
// places parameters, gradients, optimizer state, activations, activation gradients, saved
// indices and one shared scratch area in a single arena. Steps (plan_run.cpp) then only bind
// pointers and run kernels: nothing is allocated after construction.
#include "ember/plan.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <type_traits>

#include "core/arena.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/ref/ref.h"
#include "nn/graph.h"
#include "nn/layers.h"
#include "nn/input_u8.h"
#include "nn/plan_impl.h"

namespace ember {


using plan_impl::check_thawed;
using plan_impl::kNone;

namespace {

std::vector<int> dims_vec(const nn::Dims& d) {
  return d.flat() ? std::vector<int>{d.c} : std::vector<int>{d.c, d.h, d.w};
}
std::string shape_text(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

const Kernels& choose_kernels(const PlanOptions& opt) {
  Isa isa = resolve_isa_option(opt.isa);
  if (opt.dtype == DType::f64) isa = Isa::scalar;  // f64 runs the scalar references only
  return kernels_for(isa);
}

// Passes 1 and 2 on `model`, then the graph passes (each checked; infer again after them): the
// graph with its shapes, or an Error naming the node.
// A training plan's loss needs: class scores [classes] for the cross-entropies; any output for
// MSE and L1 (their targets take the output's shape).
void check_output_fits_loss(const nn::Graph& g, const Model& model) {
  const nn::Dims out = g.tensors[size_t(nn::output(g))].dims;
  if (loss_takes_targets(model.loss) || (out.flat() && out.c == model.num_classes)) return;
  throw Error(g.where + ": the loss " + loss_kind_name(model.loss) + " needs the last layer to output [" +
              std::to_string(model.num_classes) + "] class scores, found " +
              (out.flat() ? "[" + std::to_string(out.c) + "]" : "an image [" + std::to_string(out.c) + ", " +
              std::to_string(out.h) + ", " + std::to_string(out.w) + "]; add flatten and linear layers, or use "
              "the loss mse or l1 with targets of the output's shape"));
}

nn::Graph compiled_graph(const Model& model, DType dt, int batch, bool training,
                         const std::vector<nn::GraphPass>& passes = {}, const std::string& layout = "nchw") {
  nn::Graph g = nn::resolve(model);
  g.tensors[0].dims = {model.in_c, model.in_h, model.in_w};
  nn::infer(g, dt, batch);
  if (model.qat.on()) {  // the QAT pass: fakequant nodes (nn/qat.cpp)
    nn::insert_fake_quant(g, model.qat);
    nn::check(g);
    nn::infer(g, dt, batch);
  }
  for (const nn::GraphPass& pass : passes) {
    pass(g);
    nn::check(g);
  }
  if (!passes.empty()) nn::infer(g, dt, batch);
  if (nn::choose_layouts(g, layout) > 0 || layout == "nhwc") {  // the layout pass, then infer again
    nn::check(g);
    nn::infer(g, dt, batch);
  }
  if (training) check_output_fits_loss(g, model);
  return g;
}
}  // namespace

std::vector<ParamInfo> model_params(const Model& model) {
  return nn::graph_params(compiled_graph(model, DType::f32, 1, false));
}
std::vector<int> model_output_dims(const Model& model) {
  const nn::Graph g = compiled_graph(model, DType::f32, 1, false);
  return dims_vec(g.tensors[size_t(nn::output(g))].dims);
}

namespace {
// Gradient routing: per unit and input, write directly or through scratch (see Impl::dx_via);
// returns how many scratch buffers one unit needs at most.
int route_gradients(Plan::Impl& m) {
  std::vector<bool> written(m.g.tensors.size(), false);
  int most = 0;
  m.dx_via.assign(m.us.size(), {});
  for (size_t u = m.us.size(); u-- > 0;) {
    const nn::Unit& unit = m.us[u];
    int k = 0;
    for (size_t j = 0; j < unit.in.size(); ++j) {
      const size_t t = size_t(unit.in[j]);
      const bool need = unit.backward && unit.dx[j];
      m.dx_via[u].push_back(!need || !written[t] ? -1 : k++);
      if (need) written[t] = true;
    }
    most = std::max(most, k);
  }
  return most;
}

// Pass 5: parameters, gradients, optimizer state and labels first, then activations, activation
// gradients and gradient scratch placed by liveness in one area, then per-unit buffers.
void place_buffers(Plan::Impl& m, const std::vector<bool>& needs_grad) {
  const int N = m.opt.batch;
  Arena& a = m.arena;
  m.param_off = a.reserve(m.nparams * m.esz);
  m.grad_off = a.reserve(m.nparams * m.esz);
  for (int s = 0; s < m.state_count; ++s) m.state_off[s] = a.reserve(m.nparams * m.esz);
  m.labels_off = a.reserve(size_t(N) * sizeof(int32_t));
  if (loss_takes_targets(m.model.loss)) m.targets_off = a.reserve(m.tensor_bytes(m.out_tensor()));
  if (m.opt.precision == Precision::bf16) m.wh_off = a.reserve(m.nparams * sizeof(uint16_t));
  if (m.model.qat.on()) {  // QAT: the fake-quantized weights the layers read (the masters stay)
    m.wq_off = a.reserve(m.nparams * m.esz);
    for (const ParamInfo& p : m.params) m.qat_weight.push_back(nn::qat_weight(m.g, p));
  }
  nn::Lifetimes lt = nn::lifetimes(m.g, m.us, needs_grad, m.opt.training, N, m.esz);
  const size_t T = m.g.tensors.size();
  std::vector<nn::Block> blocks;
  for (size_t t = 0; t < T; ++t) blocks.push_back(lt.act[t]);
  for (size_t t = 0; t < T; ++t) blocks.push_back(lt.grad[t]);
  const int scratch = route_gradients(m);
  size_t tmp_bytes = 0;
  for (size_t t = 0; t < T; ++t)
    if (needs_grad[t] && m.g.tensors[t].readers.size() > 1) tmp_bytes = std::max(tmp_bytes, m.tensor_bytes(t));
  for (int k = 0; k < scratch; ++k) blocks.push_back({tmp_bytes, int(m.us.size()), 2 * int(m.us.size()), 0});
  m.flow_bytes = nn::place(blocks);
  const size_t flow = a.reserve(m.flow_bytes);
  m.act.assign(T, kNone);
  m.grad.assign(T, kNone);
  for (size_t t = 0; t < T; ++t) {
    m.act[t] = flow + blocks[size_t(lt.alias[t])].offset;
    if (needs_grad[t]) m.grad[t] = flow + blocks[T + size_t(lt.grad_alias[t])].offset;
  }
  for (int k = 0; k < scratch; ++k) m.dx_tmp.push_back(flow + blocks[2 * T + size_t(k)].offset);
  const size_t U = m.us.size();
  m.idx_off.assign(U, kNone);
  m.saved_off.assign(U, kNone);
  m.unused_at_zero.assign(T, false);
  for (size_t i = 0; i < U; ++i) {
    const nn::Unit& u = m.us[i];
    const size_t in0 = size_t(u.in[0]);
    m.unused_at_zero[size_t(u.out)] = u.in.size() == 1 && u.layer->grad_unused_at_zero_output(m.unused_at_zero[in0]);
    if (size_t n = u.layer->index_elems(N)) m.idx_off[i] = a.reserve(n * sizeof(int32_t));
    if (size_t n = u.layer->saved_bytes(N, m.opt.threads, m.opt.dtype)) m.saved_off[i] = a.reserve(n);
    m.ws_elems = std::max(m.ws_elems, u.layer->workspace_elems(N, m.opt.threads));
  }
  m.ws_off = a.reserve(m.ws_elems * m.esz);
}

// The background link, found by its pattern: unit 0 a fused conv that needs no input gradient,
// whose output only unit 1, a Flatten, reads, whose output only unit 2, a Linear that may run
// sparse, reads (f32 plans of fp32 precision; a kernel table that takes the sparse path: not AVX2's).
size_t link_background(Plan::Impl& m, size_t* value, size_t* grad, size_t* fold) {
  m.bg_unit.assign(m.us.size(), false);
  const auto& u = m.us;
  auto only_reader = [&](size_t t, int node) { return m.g.tensors[t].readers == std::vector<int>{node}; };
  if (!m.opt.split_background || m.opt.dtype != DType::f32 || m.opt.precision != Precision::fp32 || u.size() < 3 || !u[0].layer->can_split_background() ||
      m.grad[size_t(u[0].in[0])] != kNone || !u[1].layer->aliases_input() || !only_reader(size_t(u[0].out), u[1].first) ||
      m.g.nodes[size_t(u[2].first)].spec->kind != LayerKind::Linear || m.g.nodes[size_t(u[2].first)].spec->over_channels ||
      !only_reader(size_t(u[1].out), u[2].first) ||
      m.saved_off[2] == kNone || m.k->linear_sp_max_density <= 0)
    return kNone;
  m.bg_unit[0] = m.bg_unit[2] = true;
  const nn::Dims& d = m.g.tensors[size_t(u[0].out)].dims;
  m.bg.channels = d.c;
  m.bg.positions = d.h * d.w;
  const int K = m.g.tensors[size_t(u[2].out)].dims.c;
  Arena& a = m.arena;
  const size_t mask = a.reserve(size_t(m.opt.batch) * m.bg.positions * sizeof(float));
  *value = a.reserve(size_t(m.bg.channels) * sizeof(float));
  *grad = a.reserve(size_t(m.bg.channels) * sizeof(float));
  *fold = a.reserve(size_t(K) * m.bg.positions * sizeof(float));
  return mask;
}

void describe(Plan::Impl& m) {
  const size_t L = m.g.nodes.size();
  for (size_t i = 0; i < L; ++i) {  // per node, from its own layer (before fusion takes it)
    const nn::Node& n = m.g.nodes[i];
    LayerInfo li;
    li.kind = !n.kind_name.empty() ? n.kind_name : layer_kind_name(n.spec->kind);
    li.name = n.spec->name;
    li.in_shape = dims_vec(m.g.tensors[size_t(n.in[0])].dims);
    li.out_shape = dims_vec(m.g.tensors[size_t(n.out)].dims);
    for (auto& s : n.layer->param_shapes()) {
      size_t c = 1;
      for (int d : s) c *= size_t(d);
      li.params += c;
    }
    li.flops_fwd = n.layer->flops_per_sample();
    m.infos.push_back(li);
  }
}

void describe_units(Plan::Impl& m) {
  for (size_t i = 0; i < m.us.size(); ++i) {
    const nn::Unit& u = m.us[i];
    UnitInfo info;
    info.first_layer = u.first;
    info.last_layer = u.last;
    info.name = u.kinds + " (" + std::to_string(u.first) + (u.last > u.first ? "-" + std::to_string(u.last) : "") + ")";
    const double fw = u.layer->flops_per_sample();  // already 2 per multiply-add
    info.flops_fwd = fw;
    info.algorithm = u.layer->algorithm();
    info.workspace_bytes = u.layer->workspace_elems(m.opt.batch, m.opt.threads) * m.esz;
    info.layout_in = nn::layout_name(m.g.tensors[size_t(u.in[0])].layout);
    info.layout_out = nn::layout_name(m.g.tensors[size_t(u.out)].layout);
    const bool bf16 = m.opt.precision == Precision::bf16 && u.layer->bf16_products();
    if (u.layer->describe_unit(&info)) {  // an int8 plan's unit
      m.units.push_back(info);
      continue;
    }
    for (size_t a = 0, b; a <= u.kinds.size(); a = b + 1) {
      b = std::min(u.kinds.find('+', a), u.kinds.size());
      info.ops.push_back(u.kinds.substr(a, b - a));
    }
    info.dtype = m.opt.dtype == DType::f64 ? "f64" : bf16 ? "bf16" : "f32";
    info.weight_format = u.has_params ? u.layer->weight_format() : "";
    if (u.has_params && info.weight_format.empty()) info.weight_format = "as stored";
    info.post_ops = u.layer->post_ops();
    info.weight_bytes_packed_per_call = m.opt.dtype == DType::f64 ? 0 :
        u.layer->weight_bytes_packed_per_call(m.opt.batch, m.opt.threads, *m.k, m.opt.precision == Precision::bf16);
    if (m.opt.precision == Precision::bf16 && u.layer->bf16_products()) info.precision = Precision::bf16;
    if (m.opt.precision == Precision::bf16 && u.layer->bf16_backward_products()) info.precision_bwd = Precision::bf16;
    if (u.backward) {
      bool any_dx = false;
      for (size_t j = 0; j < u.in.size(); ++j) any_dx = any_dx || u.dx[j];
      info.flops_bwd = fw * (u.has_params + any_dx);
    }
    m.units.push_back(info);
  }
}
}  // namespace

namespace {
// An int8 plan's fp32 nodes' parameters: the quantized file's fp32 values, by name.
void copy_values(Plan::Impl& m, const plan_impl::Lowered& low) {
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : *low.params) by_name[p.name] = &p;
  float* dst = m.at<float>(m.param_off);
  for (const ParamInfo& p : m.params) {
    const auto f = by_name.find(p.name);
    if (f == by_name.end() || f->second->size != p.size || f->second->offset + p.size > low.values->size())
      throw Error("internal: int8 plan: the fp32 parameter " + p.name + " is not in the quantized model's values");
    std::memcpy(dst + p.offset, low.values->data() + f->second->offset, p.size * sizeof(float));
  }
}
}  // namespace

namespace plan_impl {
std::unique_ptr<Plan::Impl> compile(const Model& model, const PlanOptions& opt, const std::vector<nn::GraphPass>& passes,
                                    Lowered* lowered) {
  auto impl = std::make_unique<Plan::Impl>();
  Plan::Impl& m = *impl;
  m.model = model;
  m.opt = opt;
  m.train_mode = opt.training;
  if (opt.batch < 1 || opt.batch > (1 << 20))
    throw Error("batch size: expected an integer in [1, 1048576], found " + std::to_string(opt.batch));
  if (opt.threads < 1 || opt.threads > 256)
    throw Error("threads: expected an integer in [1, 256], found " + std::to_string(opt.threads));
  if (opt.precision == Precision::bf16 && opt.dtype != DType::f32)
    throw Error("precision: bf16 needs an f32 plan (f64 plans run the scalar references in double)");
  if (opt.precision == Precision::bf16 && model.qat.on())
    throw Error("precision: bf16 plans do not run quantization-aware training (the model has \"qat\"): use fp32");
  if (opt.precision == Precision::int8 && !lowered)
    throw Error("precision: an int8 plan is made from a quantized model (Plan(QuantizedWeights, options): ember quantize)");
  m.k = lowered ? lowered->k : &choose_kernels(opt);
  m.esz = opt.dtype == DType::f64 ? 8 : 4;
  // bf16 plans stay nchw (their channel-last kernels are left for later: issue 41).
  const std::string layout = opt.layout.empty() ? "auto" : opt.layout;
  if (layout != "auto" && layout != "nchw" && layout != "nhwc")
    throw Error("layout: expected auto, nchw or nhwc, found '" + layout + "'");
  if (lowered) {  // an int8 plan: its graph is made (infer makes the layers)
    m.lowered = lowered->keep;
    m.g = std::move(lowered->g);
    nn::infer(m.g, opt.dtype, opt.batch);
  } else {
    m.g = compiled_graph(m.model, opt.dtype, opt.batch, opt.training, passes,  // passes 1-2 (and graph passes)
                         opt.precision == Precision::bf16 ? "nchw" : layout);
  }
  m.params = nn::graph_params(m.g);
  for (const ParamInfo& p : m.params) m.nparams += p.size;
  describe(m);
  m.us = nn::fuse(m.g, opt.fuse, opt.training);                                // pass 3
  m.layer_unit.assign(m.g.nodes.size(), 0);
  for (size_t i = 0; i < m.us.size(); ++i)
    for (int l = m.us[i].first; l <= m.us[i].last; ++l) m.layer_unit[size_t(l)] = int(i);
  std::vector<bool> needs_grad = nn::prune_backward(m.g, m.us);  // pass 4
  if (!opt.training) {
    for (nn::Unit& u : m.us) u.backward = false, u.dx.assign(u.in.size(), false);
    needs_grad.assign(needs_grad.size(), false);
  }
  for (nn::Unit& u : m.us) {
    u.layer->set_precision(opt.precision == Precision::int8 ? Precision::fp32 : opt.precision, u.backward);
    // f32 plans pack each weight once per parameter change: an inference plan once, a training
    // plan once per step (the optimizer's step moves Bufs::param_version), not once per call.
    const bool pack = opt.dtype == DType::f32;
    u.layer->choose_algorithm(opt.batch, opt.threads, pack ? m.k : nullptr, opt.precision == Precision::bf16);
  }
  m.first_param.assign(m.us.size(), -1);
  for (size_t t = m.params.size(); t-- > 0;) m.first_param[size_t(m.layer_unit[size_t(m.params[t].layer)])] = int(t);
  const OptimizerKind ok = opt.optimizer.kind;
  m.state_count = !opt.training ? 0 : (ok == OptimizerKind::Adam || ok == OptimizerKind::AdamW) ? 2
                  : (ok == OptimizerKind::Momentum || ok == OptimizerKind::Nesterov) ? 1 : 0;
  place_buffers(m, needs_grad);                                  // pass 5
  size_t bg_value = 0, bg_grad = 0, bg_fold = 0;
  const size_t bg_mask = link_background(m, &bg_value, &bg_grad, &bg_fold);
  Arena& a = m.arena;
  if (a.size() > opt.max_arena_bytes) {
    size_t big = 0;
    for (size_t i = 1; i < m.params.size(); ++i)
      if (m.params[i].size > m.params[big].size) big = i;
    throw Error(m.g.where + ": needs " + std::to_string(a.size() >> 20) + " MiB for batch " +
                std::to_string(opt.batch) + ", more than the " + std::to_string(opt.max_arena_bytes >> 20) +
                " MiB limit (largest tensor: " +
                (m.params.empty() ? std::string("none") : m.params[big].name + ", " +
                 std::to_string(m.params[big].size) + " elements") + ")");
  }
  try {
    a.allocate();
  } catch (const std::bad_alloc&) {
    throw Error(m.g.where + ": cannot allocate " + std::to_string(a.size() >> 20) + " MiB for the plan");
  }
  m.pool = std::make_unique<ThreadPool>(opt.threads, opt.denormals == Denormals::flush);
  if (lowered) copy_values(m, *lowered);
  if (bg_mask != kNone) {
    m.bg.mask = a.at<float>(bg_mask);
    m.bg.value = a.at<float>(bg_value);
    m.bg.bias_grad = a.at<float>(bg_grad);
    m.bg.fold = a.at<float>(bg_fold);
  }
  describe_units(m);
  for (size_t i = 0; i < m.us.size() && m.side_unit < 0; ++i)
    if (m.us[i].backward) m.side_unit = int(i);
  constexpr size_t kChunk = 32768;  // elements per side chunk (multiple of 16)
  for (size_t t = m.params.size(); t-- > 0;)  // in backward order: the last unit's first
    if (m.layer_unit[size_t(m.params[t].layer)] > m.side_unit && param_trained(m.params[t].role))
      for (size_t b = 0; b < m.params[t].size; b += kChunk)
        m.side_chunks.push_back({int(t), b, std::min(m.params[t].size, b + kChunk)});
  return impl;
}

Plan plan_with_passes(const Model& model, const PlanOptions& opt, const std::vector<nn::GraphPass>& passes) {
  return Plan(compile(model, opt, passes));
}
}  // namespace plan_impl

Plan::Plan(const Model& model, const PlanOptions& opt) : Plan(plan_impl::compile(model, opt, {})) {}
Plan::Plan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

int Plan::batch() const { return impl_->opt.batch; }
int Plan::threads() const { return impl_->pool->size(); }
DType Plan::dtype() const { return impl_->opt.dtype; }
Precision Plan::precision() const { return impl_->opt.precision; }

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : p == Precision::int8 ? "int8" : "fp32"; }

namespace {
// "WHAT: expected EXPECTED, found 'TEXT'", TEXT on one line however hostile (40 characters).
[[noreturn]] void bad_name(const std::string& what, const char* expected, const std::string& text) {
  std::string shown;
  for (char c : text.substr(0, 40)) shown += (c >= 32 && c < 127) ? c : '?';
  throw Error(what + ": expected " + expected + ", found '" + shown + (text.size() > 40 ? "...'" : "'"));
}
}  // namespace

Precision parse_precision(const std::string& text, const std::string& what) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  bad_name(what, "fp32 or bf16", text);
}

const char* denormals_name(Denormals d) { return d == Denormals::keep ? "keep" : "flush"; }

Denormals parse_denormals(const std::string& text, const std::string& what) {
  if (text == "flush") return Denormals::flush;
  if (text == "keep") return Denormals::keep;
  bad_name(what, "flush or keep", text);
}
const char* Plan::isa_name() const { return ember::isa_name(impl_->k->isa); }
bool Plan::bf16_emulated() const { return impl_->opt.precision == Precision::bf16 && impl_->k->bf16_rate < 2; }
const Model& Plan::model() const { return impl_->model; }
size_t Plan::arena_bytes() const { return impl_->arena.size(); }
const std::vector<ParamInfo>& Plan::params() const { return impl_->params; }
const std::vector<LayerInfo>& Plan::layers() const { return impl_->infos; }
size_t Plan::param_count() const { return impl_->nparams; }
const std::vector<UnitInfo>& Plan::units() const { return impl_->units; }
Profiler* Plan::profiler() const { return impl_->prof; }
void Plan::set_profiler(Profiler* p) {
  impl_->prof = p;
  impl_->pool->set_profiler(p);
}

std::vector<BufferInfo> Plan::buffers() const {
  const Impl& m = *impl_;
  const size_t N = size_t(m.opt.batch), T = m.g.tensors.size();
  std::vector<BufferInfo> out;
  out.push_back({"parameters", m.nparams * m.esz});
  if (m.opt.training) out.push_back({"parameter gradients", m.nparams * m.esz});
  for (int s = 0; s < m.state_count; ++s)
    out.push_back({std::string("optimizer state ") + (s == 0 ? "1" : "2"), m.nparams * m.esz});
  out.push_back({"labels", N * sizeof(int32_t)});
  if (m.wh_off != kNone) out.push_back({"bf16 copy of the parameters", m.nparams * sizeof(uint16_t)});
  if (m.wq_off != kNone) out.push_back({"QAT: fake-quantized weights", m.nparams * m.esz});
  auto of = [&](size_t t) {
    const int p = m.g.tensors[t].producer;
    return p < 0 ? std::string(" (input batch)") : " (" + m.units[size_t(m.layer_unit[size_t(p)])].name + " output)";
  };
  std::vector<size_t> order{0};  // the tensors in the order they are written: the input, then by node
  for (const nn::Node& n : m.g.nodes) order.push_back(size_t(n.out));
  for (size_t i = 0; i < T; ++i) {  // each storage once: an aliased tensor (Flatten) shares its input's
    const size_t t = order[i];
    if (i == 0 || m.act[t] != m.act[order[i - 1]]) out.push_back({"activation " + std::to_string(t) + of(t), m.tensor_bytes(t)});
    if (m.grad[t] != kNone && (i + 1 == T || m.grad[t] != m.grad[order[i + 1]]))
      out.push_back({"activation gradient " + std::to_string(t) + of(t), m.tensor_bytes(t)});
  }
  for (size_t k = 0; k < m.dx_tmp.size(); ++k) {
    size_t most = 0;
    for (size_t t = 0; t < T; ++t)
      if (m.grad[t] != kNone && m.g.tensors[t].readers.size() > 1) most = std::max(most, m.tensor_bytes(t));
    out.push_back({"gradient sum scratch " + std::to_string(k + 1), most});
  }
  out.push_back({"(the activations and gradients above share " + std::to_string(m.flow_bytes) +
                 " bytes, placed by lifetime)", 0});
  for (size_t i = 0; i < m.us.size(); ++i) {
    if (size_t n = m.us[i].layer->index_elems(int(N)))
      out.push_back({"saved indices of " + m.units[i].name, n * sizeof(int32_t)});
    if (size_t n = m.us[i].layer->saved_bytes(int(N), m.opt.threads, m.opt.dtype))
      out.push_back({m.us[i].layer->saved_what() + " of " + m.units[i].name, n});
  }
  if (m.bg.mask) {
    const size_t K = size_t(m.g.tensors[size_t(m.us[2].out)].dims.c), P2 = size_t(m.bg.positions);
    out.push_back({"background link of " + m.units[0].name + " and " + m.units[2].name,
                   (N * P2 + 2 * size_t(m.bg.channels) + K * P2) * sizeof(float)});
  }
  out.push_back({"shared scratch", m.ws_elems * m.esz});
  std::stable_sort(out.begin(), out.end(), [](const BufferInfo& a, const BufferInfo& b) { return a.bytes > b.bytes; });
  return out;
}
void* Plan::input() { return impl_->at<std::byte>(impl_->act[0]); }
int32_t* Plan::labels() { return impl_->at<int32_t>(impl_->labels_off); }
void* Plan::targets() {
  const Impl& m = *impl_;
  if (m.targets_off == kNone)
    throw Error(std::string("targets: the loss ") + loss_kind_name(m.model.loss) + " takes class labels (Plan::labels)");
  return m.at<std::byte>(m.targets_off);
}
void Plan::one_hot_targets(int n) {
  Impl& m = *impl_;
  if (!has_class_scores())
    throw Error(m.g.where + ": class labels as targets need the output [" + std::to_string(m.model.num_classes) +
                "], found [" + shape_text(output_dims()) + "]; give targets of the output's shape");
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  const int D = m.model.num_classes;
  if (m.esz == 8) ref::one_hot(static_cast<double*>(targets()), lab, n, D);
  else ref::one_hot(static_cast<float*>(targets()), lab, n, D);
}
bool Plan::has_class_scores() const {
  const nn::Dims out = impl_->g.tensors[impl_->out_tensor()].dims;
  return out.flat() && out.c == impl_->model.num_classes;
}
std::vector<int> Plan::output_dims() const { return dims_vec(impl_->g.tensors[impl_->out_tensor()].dims); }
void* Plan::param_data() {
  check_thawed(*impl_, "param_data");
  impl_->wh_stale = true;  // the caller may write the masters: round them again before the next pass
  ++impl_->param_version;  // and fold conv2d+batchnorm2d again
  return impl_->at<std::byte>(impl_->param_off);
}
const void* Plan::param_data() const { return impl_->at<std::byte>(impl_->param_off); }

void Plan::freeze() {
  Impl& m = *impl_;
  plan_impl::refresh_qat_weights(m);
  m.packed.assign(m.us.size(), {});
  if (m.esz == 4 && m.opt.precision == Precision::fp32)  // a bf16 plan's Linear runs the bf16 GEMM instead
    for (size_t i = 0; i < m.us.size(); ++i) {
      const LayerSpec& s = *m.g.nodes[size_t(m.us[i].first)].spec;
      if (s.kind != LayerKind::Linear || s.over_channels || m.first_param[i] < 0) continue;
      const ParamInfo& p = m.params[m.first_param[i]];  // w[K, C]
      const int K = p.shape[0], C = p.shape[1];
      const float* w = m.at<float>(m.wq_off != kNone ? m.wq_off : m.param_off) + p.offset;  // QAT: the copy
      std::vector<float>& wt = m.packed[i];
      wt.resize(p.size);
      for (int k = 0; k < K; ++k)
        for (int c = 0; c < C; ++c) wt[size_t(c) * K + k] = w[size_t(k) * C + c];
    }
  m.frozen = true;
}
void Plan::thaw() {
  impl_->frozen = false;
  impl_->packed.clear();
}
bool Plan::frozen() const { return impl_->frozen; }
void* Plan::grad_data() { return impl_->at<std::byte>(impl_->grad_off); }
const void* Plan::output() const { return impl_->at<std::byte>(impl_->act[impl_->out_tensor()]); }  // [batch, output_dims()]

void Plan::init_params(uint64_t seed) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  check_thawed(m, "init_params");
  for (size_t t = 0; t < m.params.size(); ++t) {
    const ParamInfo& p = m.params[t];
    Pcg32 rng(seed, t + 1);
    const Init init = m.g.nodes[size_t(p.layer)].spec->init.value_or(m.model.init);
    for (size_t i = 0; i < p.size; ++i) {
      double v = p.constant ? p.value : 0;
      if (p.is_weight && !p.constant) {
        switch (init) {
          case Init::Kaiming: v = rng.normal() * std::sqrt(2.0 / p.fan_in); break;
          case Init::Xavier: v = (2 * rng.uniform() - 1) * std::sqrt(6.0 / (p.fan_in + p.fan_out)); break;
          case Init::Torch: v = (2 * rng.uniform() - 1) / std::sqrt(double(p.fan_in)); break;
          case Init::TruncNormal:
            do v = 0.02 * rng.normal(); while (std::abs(v) > 2);
            break;
        }
      }
      if (m.esz == 8) m.at<double>(m.param_off)[p.offset + i] = v;
      else m.at<float>(m.param_off)[p.offset + i] = float(v);
    }
  }
  for (int s = 0; s < m.state_count; ++s) std::memset(m.at<std::byte>(m.state_off[s]), 0, m.nparams * m.esz);
  m.step = 0;
  m.wh_stale = true;
  ++m.param_version;
}

void Plan::set_input_affine(const std::vector<double>& scale, const std::vector<double>& shift) {
  Impl& m = *impl_;
  const int C = m.model.in_c;
  if ((!scale.empty() && int(scale.size()) != C) || scale.size() != shift.size())
    throw Error("input normalisation: " + std::to_string(scale.size()) + " scales and " + std::to_string(shift.size()) +
                " shifts for " + std::to_string(C) + " input channels");
  m.in_scale = scale, m.in_shift = shift;
}

void Plan::gather_u8(const uint8_t* images, const uint8_t* labels, const int64_t* index, int n) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  const size_t D = m.g.tensors[0].dims.size();
  const int C = m.model.in_c;
  const size_t plane = D / size_t(C);
  int32_t* lab = m.at<int32_t>(m.labels_off);
  auto convert = [&](auto* dst, const uint8_t* src) { nn::u8_to_input(dst, src, D, plane, m.in_scale, m.in_shift); };
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* src = images + size_t(index[i]) * D;
      if (m.esz == 8) convert(m.at<double>(m.act[0]) + size_t(i) * D, src);
      else convert(m.at<float>(m.act[0]) + size_t(i) * D, src);
      lab[i] = labels[index[i]];
    }
  };
  // Split over the pool (each sample is converted alone: the same values for any thread count):
  // the source images are random lines of the data set, mostly cache misses.
  const int T = m.pool->size();
  if (T == 1 || n < 4 * T) rows(0, n);
  else
    m.pool->run([&](int t) {
      const Range r = split_range(n, t, T);
      rows(r.begin, r.end);
    });
  if (loss_takes_targets(m.model.loss) && has_class_scores()) one_hot_targets(n);
}

double Plan::flops_per_sample(bool training) const {
  const Impl& m = *impl_;
  double f = 0;
  for (size_t i = 0; i < m.us.size(); ++i) {
    f += m.units[i].flops_fwd;  // 2 per multiply-add, layers with weights
    if (training) f += m.units[i].flops_bwd;  // weight and input gradients this plan computes
  }
  return f;
}

std::string Plan::summary() const {
  const Impl& m = *impl_;
  std::ostringstream os;
  auto shape = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  os << "model " << m.model.name << ": input " << shape(dims_vec(m.g.tensors[0].dims)) << ", "
     << m.nparams << " parameters, loss " << loss_kind_name(m.model.loss) << "\n";
  for (size_t i = 0; i < m.infos.size(); ++i) {
    const LayerInfo& li = m.infos[i];
    char line[160];
    const std::string kind = li.name.empty() ? li.kind : li.kind + " " + li.name.substr(0, 40);
    std::snprintf(line, sizeof line, "  %2zu %-10s %-16s -> %-16s %9zu params %8.3f MFLOP/sample\n", i,
                  kind.c_str(), shape(li.in_shape).c_str(), shape(li.out_shape).c_str(), li.params,
                  li.flops_fwd / 1e6);
    os << line;
  }
  return os.str();
}

}  // namespace ember
