// The plan: a model compiled for (batch, dtype, ISA, threads). Compile infers and checks shapes,
// places parameters, gradients, optimizer state, activations, activation gradients, saved
// indices and one shared scratch area in a single arena, and binds every layer's pointers.
// Steps then only run kernels: nothing is allocated after construction.
#include "ember/plan.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "core/arena.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "nn/graph.h"
#include "nn/layers.h"

namespace ember {

struct Plan::Impl {
  Model model;
  PlanOptions opt;
  const Kernels* k = nullptr;
  std::unique_ptr<ThreadPool> pool;
  Arena arena;
  size_t esz = 4;  // bytes per element
  nn::Graph g;                                   // nodes point into `model`
  std::vector<nn::Unit> us;                      // execution units, in order
  std::vector<size_t> act, grad;                 // per tensor, arena offsets (grad: kNone = none)
  std::vector<int> first_param;                  // per unit, index into params or -1
  std::vector<size_t> idx_off;                   // per unit, saved indices offset
  std::vector<size_t> saved_off;                 // per unit, its forward-to-backward state
  std::vector<bool> unused_at_zero;              // per tensor: its gradient is unused wherever it
                                                 // is 0 (and it has one reader)
  // Per unit and input: -1 writes the input's gradient directly (its first writer in backward
  // order), k >= 0 writes gradient scratch k, then adds it (a tensor read by several nodes).
  std::vector<std::vector<int>> dx_via;
  std::vector<size_t> dx_tmp;                    // gradient scratch offsets
  std::vector<ParamInfo> params;
  std::vector<LayerInfo> infos;
  std::vector<UnitInfo> units;
  std::vector<int> layer_unit;                   // per node, its unit
  // The background link (ops::Background) of a first conv unit and the Linear after its Flatten:
  // bg_unit[i] says whether unit i takes part (the conv and the Linear), both bound to `bg`.
  std::vector<bool> bg_unit;
  ops::Background bg{};
  // backward_step's overlap (Adam): the unit whose backward runs last takes, as side work, the
  // updates of every parameter of the later units, in chunks built once, in backward order.
  struct UpdateChunk {
    int param;
    size_t begin, end;
  };
  std::vector<UpdateChunk> side_chunks;
  int side_unit = -1;
  Profiler* prof = nullptr;
  // Plan::freeze: per unit, a Linear weight transposed to [in, out] (empty for other units).
  bool frozen = false;
  bool train_mode = true;                        // set from opt.training; Plan::set_train_mode
  std::vector<std::vector<float>> packed;
  size_t nparams = 0, param_off = 0, grad_off = 0, state_off[2] = {0, 0}, labels_off = 0, ws_off = 0;
  size_t ws_elems = 0, flow_bytes = 0;           // shared scratch; the liveness-placed area
  int state_count = 0;
  int64_t step = 0;
  // bf16 plans: every parameter rounded to bf16 (the GEMMs read the weights' copies), rewritten by
  // each optimizer update in its own pass, and from the masters before a forward or backward after
  // anything else may have written them (init_params, the non-const param_data()).
  size_t wh_off = SIZE_MAX;
  bool wh_stale = true;
  bool count_flush = false;                      // Plan::set_flush_counting
  Plan::FlushCount flush;
  std::vector<double> in_scale, in_shift;        // per input channel: x = u8 * scale + shift

  template <class T> T* at(size_t off) const { return arena.at<T>(off); }
  ops::Exec exec(const ops::SideWork* side = nullptr) const {
    return {*k, *pool, side, opt.precision == Precision::bf16};
  }
  size_t out_tensor() const { return g.tensors.size() - 1; }
  size_t tensor_bytes(size_t t) const { return size_t(opt.batch) * g.tensors[t].dims.size() * esz; }
};

namespace {
constexpr size_t kNone = SIZE_MAX;

void check_thawed(const Plan::Impl& m, const char* what) {
  if (m.frozen)
    throw Error(std::string(what) + ": the plan is frozen for inference (Plan::freeze); thaw() it "
                "before changing its parameters");
}

std::vector<int> dims_vec(const nn::Dims& d) {
  return d.flat() ? std::vector<int>{d.c} : std::vector<int>{d.c, d.h, d.w};
}

const Kernels& choose_kernels(const PlanOptions& opt) {
  const char* env = std::getenv("EMBER_ISA");
  const std::string text = !opt.isa.empty() ? opt.isa : (env ? env : "");
  Isa isa = resolve_isa(text, !opt.isa.empty() ? "isa" : "EMBER_ISA");
  if (opt.dtype == DType::f64) isa = Isa::scalar;  // f64 runs the scalar references only
  return kernels_for(isa);
}

// Passes 1 and 2 on `model`: the graph with its shapes, or an Error naming the node.
nn::Graph compiled_graph(const Model& model, DType dt, int batch) {
  nn::Graph g = nn::resolve(model);
  g.tensors[0].dims = {model.in_c, model.in_h, model.in_w};
  nn::infer(g, dt, batch);
  const nn::Dims out = g.tensors.back().dims;
  if (!out.flat() || out.c != model.num_classes)
    throw Error(g.where + ": the last layer must output [" + std::to_string(model.num_classes) +
                "] class scores, found " + (out.flat() ? "[" + std::to_string(out.c) + "]" :
                "an image; add flatten and linear layers"));
  return g;
}
}  // namespace

std::vector<ParamInfo> model_params(const Model& model) {
  return nn::graph_params(compiled_graph(model, DType::f32, 1));
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
  if (m.opt.precision == Precision::bf16) m.wh_off = a.reserve(m.nparams * sizeof(uint16_t));
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
    li.kind = layer_kind_name(n.spec->kind);
    li.name = n.spec->name;
    li.in_shape = dims_vec(m.g.tensors[size_t(n.in[0])].dims);
    li.out_shape = dims_vec(m.g.tensors[i + 1].dims);
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

Plan::Plan(const Model& model, const PlanOptions& opt) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = model;
  m.opt = opt;
  m.train_mode = opt.training;
  if (opt.batch < 1 || opt.batch > (1 << 20))
    throw Error("batch size: expected an integer in [1, 1048576], found " + std::to_string(opt.batch));
  if (opt.threads < 1 || opt.threads > 256)
    throw Error("threads: expected an integer in [1, 256], found " + std::to_string(opt.threads));
  if (opt.precision == Precision::bf16 && opt.dtype != DType::f32)
    throw Error("precision: bf16 needs an f32 plan (f64 plans run the scalar references in double)");
  m.k = &choose_kernels(opt);
  m.esz = opt.dtype == DType::f64 ? 8 : 4;
  m.g = compiled_graph(m.model, opt.dtype, opt.batch);          // passes 1-2
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
  for (nn::Unit& u : m.us) u.layer->set_precision(opt.precision, u.backward);
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
  m.pool = std::make_unique<ThreadPool>(opt.threads);
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
    if (m.layer_unit[size_t(m.params[t].layer)] > m.side_unit)
      for (size_t b = 0; b < m.params[t].size; b += kChunk)
        m.side_chunks.push_back({int(t), b, std::min(m.params[t].size, b + kChunk)});
}

Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

int Plan::batch() const { return impl_->opt.batch; }
int Plan::threads() const { return impl_->pool->size(); }
DType Plan::dtype() const { return impl_->opt.dtype; }
Precision Plan::precision() const { return impl_->opt.precision; }

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& text, const std::string& what) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  std::string shown;  // one line, however hostile the text
  for (char c : text.substr(0, 40)) shown += (c >= 32 && c < 127) ? c : '?';
  throw Error(what + ": expected fp32 or bf16, found '" + shown + (text.size() > 40 ? "...'" : "'"));
}
const char* Plan::isa_name() const { return ember::isa_name(impl_->k->isa); }
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
  auto of = [&](size_t t) {
    return t == 0 ? std::string(" (input batch)") : " (" + m.units[size_t(m.layer_unit[t - 1])].name + " output)";
  };
  for (size_t t = 0; t < T; ++t) {  // each storage once: an aliased tensor (Flatten) shares its input's
    if (t == 0 || m.act[t] != m.act[t - 1]) out.push_back({"activation " + std::to_string(t) + of(t), m.tensor_bytes(t)});
    if (m.grad[t] != kNone && (t + 1 == T || m.grad[t] != m.grad[t + 1]))
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
void* Plan::param_data() {
  check_thawed(*impl_, "param_data");
  impl_->wh_stale = true;  // the caller may write the masters: round them again before the next pass
  return impl_->at<std::byte>(impl_->param_off);
}
const void* Plan::param_data() const { return impl_->at<std::byte>(impl_->param_off); }

void Plan::freeze() {
  Impl& m = *impl_;
  m.packed.assign(m.us.size(), {});
  if (m.esz == 4 && m.opt.precision == Precision::fp32)  // a bf16 plan's Linear runs the bf16 GEMM instead
    for (size_t i = 0; i < m.us.size(); ++i) {
      const LayerSpec& s = *m.g.nodes[size_t(m.us[i].first)].spec;
      if (s.kind != LayerKind::Linear || s.over_channels || m.first_param[i] < 0) continue;
      const ParamInfo& p = m.params[m.first_param[i]];  // w[K, C]
      const int K = p.shape[0], C = p.shape[1];
      const float* w = m.at<float>(m.param_off) + p.offset;
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
const void* Plan::output() const { return impl_->at<std::byte>(impl_->act.back()); }  // [batch, classes]

void Plan::init_params(uint64_t seed) {
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
  Impl& m = *impl_;
  const size_t D = m.g.tensors[0].dims.size();
  const int C = m.model.in_c;
  const size_t plane = D / size_t(C);
  int32_t* lab = m.at<int32_t>(m.labels_off);
  // Without an affine: x = u8 * (1/255) exactly as before (a multiply, no add).
  auto convert = [&](auto* dst, const uint8_t* src) {
    using T = std::remove_pointer_t<decltype(dst)>;
    if (m.in_scale.empty()) {
      for (size_t d = 0; d < D; ++d) dst[d] = src[d] * (T(1) / T(255));
      return;
    }
    for (int c = 0; c < C; ++c) {
      const T a = T(m.in_scale[size_t(c)]), b = T(m.in_shift[size_t(c)]);
      for (size_t d = size_t(c) * plane; d < size_t(c + 1) * plane; ++d) dst[d] = src[d] * a + b;
    }
  };
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
  if (T == 1 || n < 4 * T) {
    rows(0, n);
    return;
  }
  m.pool->run([&](int t) {
    const Range r = split_range(n, t, T);
    rows(r.begin, r.end);
  });
}

namespace {
// Unit i's pointers; its input gradients go where dx_via says (directly or to scratch).
nn::Bufs bind(const Plan::Impl& m, size_t i) {
  nn::Bufs b{};
  const nn::Unit& u = m.us[i];
  b.dt = m.opt.dtype;
  b.batch = m.opt.batch;
  std::byte* base = m.arena.base();
  b.nin = int(u.in.size());
  for (size_t j = 0; j < u.in.size(); ++j) {
    const size_t t = size_t(u.in[j]);
    b.xs[j] = base + m.act[t];
    const int via = m.dx_via.empty() ? -1 : m.dx_via[i][j];
    b.dxs[j] = !u.backward || !u.dx[j] ? nullptr : via < 0 ? base + m.grad[t] : base + m.dx_tmp[size_t(via)];
  }
  b.x = b.xs[0];
  b.dx = b.dxs[0];
  b.y = base + m.act[size_t(u.out)];
  b.dy = m.grad[size_t(u.out)] != kNone ? base + m.grad[size_t(u.out)] : nullptr;
  // Each node's parameters, weight then bias: the unit's first node's in w, b; a second node's
  // (a fused LayerNorm -> conv) in w2, b2.
  for (size_t t = m.first_param[i] < 0 ? m.params.size() : size_t(m.first_param[i]);
       t < m.params.size() && m.layer_unit[size_t(m.params[t].layer)] == int(i); ++t) {
    const ParamInfo& q = m.params[t];
    const bool second = q.layer != u.first, bias = t > 0 && m.params[t - 1].layer == q.layer;
    const void*& v = second ? (bias ? b.b2 : b.w2) : (bias ? b.b : b.w);
    void*& d = second ? (bias ? b.db2 : b.dw2) : (bias ? b.db : b.dw);
    v = base + m.param_off + q.offset * m.esz;
    d = base + m.grad_off + q.offset * m.esz;
    if (!bias && m.wh_off != kNone) (second ? b.wh2 : b.wh) = m.at<uint16_t>(m.wh_off) + q.offset;
  }
  b.wt = m.frozen && !m.packed[i].empty() ? m.packed[i].data() : nullptr;
  b.ws = base + m.ws_off;
  b.idx = m.idx_off[i] != kNone ? reinterpret_cast<int32_t*>(base + m.idx_off[i]) : nullptr;
  b.saved = m.saved_off[i] != kNone ? base + m.saved_off[i] : nullptr;
  b.dx_unused_at_zero = b.nin == 1 && m.g.tensors[size_t(u.in[0])].readers.size() == 1 &&
                        m.unused_at_zero[size_t(u.in[0])];
  // Bound whether frozen or not: a frozen plan's conv forward writes the true activations and all
  // values 0, which tells the Linear (forward and a backward after it) there is nothing to add.
  b.bg = m.bg_unit[i] ? &m.bg : nullptr;
  b.frozen = m.frozen;
  b.train_mode = m.train_mode;
  // The unit's random stream for this step: a hash of (seed, optimizer steps done, its first node).
  uint64_t z = m.opt.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(m.step) + 1) * 0xC2B2AE3D27D4EB4Full ^ (uint64_t(u.first) + 1) * 0x165667B19E3779F9ull;
  z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDull;
  b.noise = z ^ (z >> 33);
  return b;
}

// Unit i's backward, then the sums of its input gradients that went to scratch.
void unit_backward(const Plan::Impl& m, const ops::Exec& e, size_t i, int n) {
  const nn::Bufs b = bind(m, i);
  m.us[i].layer->backward(e, b, n);
  for (size_t j = 0; j < m.us[i].in.size(); ++j) {
    if (!b.dxs[j] || m.dx_via[i][j] < 0) continue;
    const size_t t = size_t(m.us[i].in[j]), count = size_t(n) * m.g.tensors[t].dims.size();
    std::byte* base = m.arena.base();
    if (m.esz == 8) ops::copy_or_add<double>(e, reinterpret_cast<double*>(base + m.grad[t]), static_cast<const double*>(b.dxs[j]), count, true);
    else ops::copy_or_add<float>(e, reinterpret_cast<float*>(base + m.grad[t]), static_cast<const float*>(b.dxs[j]), count, true);
  }
}

// The bf16 weight copy from the masters, when something may have written them since.
void refresh_copy(Plan::Impl& m) {
  if (m.wh_off == kNone || !m.wh_stale) return;
  const float* w = m.at<float>(m.param_off);
  uint16_t* wh = m.at<uint16_t>(m.wh_off);
  m.pool->run([&](int t) {
    const Range r = split_range(int64_t(m.nparams), t, m.pool->size());
    if (r.end > r.begin) m.k->cvt_f32_bf16(wh + r.begin, w + r.begin, size_t(r.end - r.begin));
  });
  m.wh_stale = false;
}

void check_training(const Plan::Impl& m, const char* what) {
  if (!m.opt.training) throw Error(std::string(what) + ": an inference plan (PlanOptions::training false) has no gradients");
}
}  // namespace

void Plan::forward(int n) {
  Impl& m = *impl_;
  refresh_copy(m);
  const ops::Exec e = m.exec();
  for (size_t i = 0; i < m.us.size(); ++i)
    timed(m.prof, Phase::forward, int(i), [&] { m.us[i].layer->forward(e, bind(m, i), n); });
}

double Plan::loss(int n, bool grad) {
  Impl& m = *impl_;
  if (grad) check_training(m, "loss");
  const int D = m.model.num_classes;
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = m.at<T>(m.act.back());
    T* dx = grad ? m.at<T>(m.grad.back()) : nullptr;  // [n, classes]
    switch (m.model.loss) {
      case LossKind::SoftmaxCrossEntropy: return ref::softmax_xent<T>(dx, x, lab, n, D);
      case LossKind::CrossEntropy: return ref::xent<T>(dx, x, lab, n, D);
      case LossKind::MSE: return ref::mse<T>(dx, x, lab, n, D);
    }
    return 0.0;
  };
  return m.esz == 8 ? run(double{}) : run(float{});
}

int Plan::correct(int n) const {
  const Impl& m = *impl_;
  const int D = m.model.num_classes;
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = m.at<T>(m.act.back());
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      for (int d = 1; d < D; ++d)
        if (x[size_t(i) * D + d] > x[size_t(i) * D + best]) best = d;
      ok += best == lab[i];
    }
    return ok;
  };
  return m.esz == 8 ? run(double{}) : run(float{});
}

namespace {
// Adds to m.flush the values of unit i's output gradient (what its bf16 products read) that
// rounding to bf16 flushes to zero: non-zero, below 2^-126. Each thread counts a fixed slice.
void count_flush(Plan::Impl& m, size_t i, int n) {
  if (m.units[i].precision_bwd != Precision::bf16) return;
  const size_t t = size_t(m.us[i].out);
  if (m.grad[t] == kNone) return;
  const float* g = m.at<float>(m.grad[t]);
  const size_t count = size_t(n) * m.g.tensors[t].dims.size();
  std::atomic<int64_t> flushed{0};
  m.pool->run([&](int th) {
    const Range r = split_range(int64_t(count), th, m.pool->size());
    if (r.end > r.begin) flushed += int64_t(m.k->count_subnormal(g + r.begin, size_t(r.end - r.begin)));
  });
  m.flush.flushed += flushed.load();
  m.flush.checked += int64_t(count);
}

// Backward in reverse unit order, calling on_final after each unit with parameters. side (may
// be null): work the side unit's backward takes when a thread is free, the rest run after it.
void run_backward(Plan::Impl& m, int n, Plan::GradsFinal on_final, void* ctx, const ops::SideWork* side) {
  check_training(m, "backward");
  refresh_copy(m);
  const ops::Exec e = m.exec(), es = m.exec(side);
  for (size_t i = m.us.size(); i-- > 0;) {
    if (!m.us[i].backward) continue;
    const bool side_here = side && int(i) == m.side_unit;
    if (m.count_flush) count_flush(m, i, n);
    timed(m.prof, Phase::backward, int(i), [&] { unit_backward(m, side_here ? es : e, i, n); });
    if (side_here) m.pool->run([&](int) { while (side->take()) {} });  // what its op did not take
    if (on_final && m.first_param[i] >= 0) {
      int count = 0;
      for (size_t t = size_t(m.first_param[i]); t < m.params.size() && m.layer_unit[size_t(m.params[t].layer)] == int(i); ++t)
        ++count;
      on_final(ctx, m.first_param[i], count);
    }
  }
}
}  // namespace

void Plan::backward(int n, GradsFinal on_final, void* ctx) { run_backward(*impl_, n, on_final, ctx, nullptr); }

void Plan::set_flush_counting(bool on) { impl_->count_flush = on; }
Plan::FlushCount Plan::flush_count() const { return impl_->flush; }
void Plan::reset_flush_count() { impl_->flush = {}; }

namespace {
ops::AdamArgs adam_args(const OptimizerConfig& o, const ParamInfo& p, double lr, int64_t step) {
  const float l2 = p.is_weight ? float(o.l2) : 0.f, wd = p.is_weight ? float(o.weight_decay) : 0.f;
  return {float(lr), float(o.beta1), float(o.beta2), float(o.eps), l2, wd,
          float(1 - std::pow(o.beta1, double(step))), float(1 - std::pow(o.beta2, double(step)))};
}
}  // namespace

int Plan::backward_step(int n, double lr) {
  Impl& m = *impl_;
  if (m.esz != 4) throw Error("backward_step: only f32 plans train (f64 plans are for gradient checks)");
  check_thawed(m, "backward_step");
  const OptimizerConfig& o = m.opt.optimizer;
  const bool adam = o.kind == OptimizerKind::Adam || o.kind == OptimizerKind::AdamW;
  if (!adam || m.side_chunks.empty() || m.prof) {  // profiled: each update on its own row
    backward(n);
    return optimizer_step(lr);
  }
  ++m.step;
  float* w = m.at<float>(m.param_off);
  float* g = m.at<float>(m.grad_off);
  float* s0 = m.at<float>(m.state_off[0]);
  float* s1 = m.at<float>(m.state_off[1]);
  uint16_t* wh = m.wh_off != kNone ? m.at<uint16_t>(m.wh_off) : nullptr;
  std::atomic<int> first_bad{INT_MAX};
  auto note_bad = [&](int t) {
    for (int cur = first_bad.load(); t < cur && !first_bad.compare_exchange_weak(cur, t);) {}
  };
  auto run_chunk = [&](int c) {  // one thread, one chunk of one tensor: the kernel directly
    const Impl::UpdateChunk& ch = m.side_chunks[size_t(c)];
    const ParamInfo& p = m.params[size_t(ch.param)];
    const size_t off = p.offset + ch.begin, len = ch.end - ch.begin;
    const ops::AdamArgs args = adam_args(o, p, lr, m.step);
    const size_t bad = wh ? m.k->adam_bf16(w + off, s0 + off, s1 + off, g + off, len, args, wh + off)
                          : m.k->adam(w + off, s0 + off, s1 + off, g + off, len, args);
    if (bad != 0) note_bad(ch.param);
  };
  using RunChunk = decltype(run_chunk);
  std::atomic<int> next{0};
  // Chunks become side work as the hook reports their parameters final (they are listed in
  // backward order); the side unit's backward runs them between its own chunks of work.
  ops::SideWork side{0, [](void* f, int c) { (*static_cast<RunChunk*>(f))(c); }, &run_chunk, &next};
  struct Ready {
    const Impl* m;
    ops::SideWork* side;
  } ready{&m, &side};
  auto final_hook = [](void* c, int first, int count) {
    auto* r = static_cast<Ready*>(c);
    const auto& ch = r->m->side_chunks;
    while (size_t(r->side->chunks) < ch.size() && ch[size_t(r->side->chunks)].param >= first &&
           ch[size_t(r->side->chunks)].param < first + count)
      ++r->side->chunks;
  };
  run_backward(m, n, final_hook, &ready, &side);
  const ops::Exec e = m.exec();
  for (size_t t = 0; t < m.params.size(); ++t) {  // the last unit's own parameters
    const ParamInfo& p = m.params[t];
    if (m.layer_unit[size_t(p.layer)] > m.side_unit) continue;
    if (ops::adam_step(e, w + p.offset, s0 + p.offset, s1 + p.offset, g + p.offset, p.size,
                       adam_args(o, p, lr, m.step), wh ? wh + p.offset : nullptr) != 0)
      note_bad(int(t));
  }
  return first_bad.load() == INT_MAX ? -1 : first_bad.load();
}

int Plan::optimizer_step(double lr) {
  Impl& m = *impl_;
  if (m.esz != 4) throw Error("optimizer_step: only f32 plans train (f64 plans are for gradient checks)");
  check_thawed(m, "optimizer_step");
  const OptimizerConfig& o = m.opt.optimizer;
  const ops::Exec e = m.exec();
  ++m.step;
  float* w = m.at<float>(m.param_off);
  float* g = m.at<float>(m.grad_off);
  float* s0 = m.state_count > 0 ? m.at<float>(m.state_off[0]) : nullptr;
  float* s1 = m.state_count > 1 ? m.at<float>(m.state_off[1]) : nullptr;
  uint16_t* wh = m.wh_off != kNone ? m.at<uint16_t>(m.wh_off) : nullptr;
  int first_bad = -1;
  for (size_t t = 0; t < m.params.size(); ++t) timed(m.prof, Phase::optimizer, m.layer_unit[size_t(m.params[t].layer)], [&] {
    const ParamInfo& p = m.params[t];
    size_t bad;
    const float l2 = p.is_weight ? float(o.l2) : 0.f, wd = p.is_weight ? float(o.weight_decay) : 0.f;
    const size_t off = p.offset;
    if (o.kind == OptimizerKind::Adam || o.kind == OptimizerKind::AdamW) {
      bad = ops::adam_step(e, w + off, s0 + off, s1 + off, g + off, p.size, adam_args(o, p, lr, m.step),
                           wh ? wh + off : nullptr);
    } else {
      const ops::SgdArgs args{float(lr), float(o.momentum), l2, wd, o.kind == OptimizerKind::Nesterov,
                              o.kind != OptimizerKind::SGD};
      bad = ops::sgd_step(e, w + off, s0 ? s0 + off : nullptr, g + off, p.size, args, wh ? wh + off : nullptr);
    }
    if (bad != 0 && first_bad < 0) first_bad = int(t);
  });
  return first_bad;
}

const PlanOptions& Plan::options() const { return impl_->opt; }
int Plan::state_count() const { return impl_->state_count; }
const char* Plan::state_name(int s) const {
  const OptimizerKind k = impl_->opt.optimizer.kind;
  if (s < 0 || s >= impl_->state_count) return "";
  if (k == OptimizerKind::Adam || k == OptimizerKind::AdamW) return s == 0 ? "exp_avg" : "exp_avg_sq";
  return "momentum_buffer";
}
void* Plan::state_data(int s) {
  if (s < 0 || s >= impl_->state_count) throw Error("state_data: no optimizer state " + std::to_string(s));
  return impl_->at<std::byte>(impl_->state_off[s]);
}
int64_t Plan::optimizer_steps() const { return impl_->step; }
void Plan::set_optimizer_steps(int64_t t) {
  if (t < 0) throw Error("set_optimizer_steps: expected a count >= 0, found " + std::to_string(t));
  impl_->step = t;
}

int Plan::first_nonfinite_grad() {
  Impl& m = *impl_;
  if (m.esz != 4) throw Error("first_nonfinite_grad: f32 plans only");
  const ops::Exec e = m.exec();
  const float* g = m.at<float>(m.grad_off);
  if (ops::count_nonfinite(e, g, m.nparams) == 0) return -1;
  for (size_t t = 0; t < m.params.size(); ++t)  // the rare path: find which tensor
    if (m.k->count_nonfinite(g + m.params[t].offset, m.params[t].size) != 0) return int(t);
  return -1;
}

void Plan::set_train_mode(bool on) { impl_->train_mode = on; }
bool Plan::train_mode() const { return impl_->train_mode; }

int Plan::first_nonfinite_output(int n) {
  Impl& m = *impl_;
  const ops::Exec e = m.exec();
  for (size_t i = 0; i < m.us.size(); ++i) {
    m.us[i].layer->forward(e, bind(m, i), n);
    const size_t t = size_t(m.us[i].out);
    const size_t count = size_t(n) * m.g.tensors[t].dims.size();
    bool bad = false;
    if (m.esz == 8) {
      const double* y = m.at<double>(m.act[t]);
      for (size_t j = 0; j < count && !bad; ++j) bad = !std::isfinite(y[j]);
    } else {
      bad = m.k->count_nonfinite(m.at<float>(m.act[t]), count) != 0;
    }
    if (bad) return int(i);
  }
  return -1;
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
