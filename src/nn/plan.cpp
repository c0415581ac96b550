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

#include "core/arena.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "nn/layers.h"

namespace ember {

struct Plan::Impl {
  Model model;
  PlanOptions opt;
  const Kernels* k = nullptr;
  std::unique_ptr<ThreadPool> pool;
  Arena arena;
  size_t esz = 4;  // bytes per element
  // Execution units: model layers, or several fused into one (unit_first: its first model layer).
  std::vector<std::unique_ptr<nn::Layer>> layers;
  std::vector<int> unit_first;
  std::vector<nn::Dims> dims;                    // dims[i]: input of unit i; dims[L]: output
  std::vector<size_t> act, grad;                 // per boundary, arena offsets (grad: SIZE_MAX = none)
  std::vector<int> first_param;                  // per layer, index into params or -1
  std::vector<size_t> idx_off;                   // per layer, saved indices offset
  std::vector<size_t> saved_off;                 // per layer, its forward-to-backward state
  std::vector<bool> unused_at_zero;              // per boundary i: unit i's input gradient is
                                                 // unused wherever that input is 0
  std::vector<bool> run_backward;
  std::vector<ParamInfo> params;
  std::vector<LayerInfo> infos;
  std::vector<UnitInfo> units;
  std::vector<int> layer_unit;                   // per model layer, its unit
  // The background link (ops::Background) of a first conv unit and the Linear after its Flatten:
  // bg_unit[i] says whether unit i takes part (the conv and the Linear), both bound to `bg`.
  std::vector<bool> bg_unit;
  ops::Background bg{};
  // backward_step's overlap (Adam): the unit whose backward runs last takes, as side work, the
  // updates of every parameter of the later units, in chunks built once.
  struct UpdateChunk {
    int param;
    size_t begin, end;
  };
  std::vector<UpdateChunk> side_chunks;
  int side_unit = -1;
  Profiler* prof = nullptr;
  // Plan::freeze: per unit, a Linear weight transposed to [in, out] (empty for other units).
  bool frozen = false;
  std::vector<std::vector<float>> packed;
  size_t nparams = 0, param_off = 0, grad_off = 0, state_off[2] = {0, 0}, labels_off = 0, ws_off = 0;
  int state_count = 0;
  int64_t step = 0;

  template <class T> T* at(size_t off) const { return arena.at<T>(off); }
  ops::Exec exec() const { return {*k, *pool}; }
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
}  // namespace

std::vector<ParamInfo> model_params(const Model& model) {
  std::vector<ParamInfo> out;
  nn::Dims d{model.in_c, model.in_h, model.in_w};
  const std::string where = model.source.empty() ? "model " + model.name : model.source;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    auto layer = nn::make_layer(model.layers[i]);
    try {
      d = layer->infer(d);
    } catch (const Error& e) {
      throw Error(where + ": layers[" + std::to_string(i) + "] (" + layer_kind_name(model.layers[i].kind) + "): " + e.what());
    }
    const auto shapes = layer->param_shapes();
    for (size_t t = 0; t < shapes.size(); ++t) {
      ParamInfo p;
      p.name = std::to_string(i) + (t == 0 ? ".weight" : ".bias");  // as the plan names them
      p.shape = shapes[t];
      p.size = 1;
      for (int x : p.shape) p.size *= size_t(x);
      p.layer = int(i);
      out.push_back(p);
    }
  }
  return out;
}

Plan::Plan(const Model& model, const PlanOptions& opt) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = model;
  m.opt = opt;
  if (opt.batch < 1 || opt.batch > (1 << 20))
    throw Error("--batch-size: expected an integer in [1, 1048576], found " + std::to_string(opt.batch));
  if (opt.threads < 1 || opt.threads > 256)
    throw Error("--threads: expected an integer in [1, 256], found " + std::to_string(opt.threads));
  Isa isa = best_isa();
  const char* env = std::getenv("EMBER_ISA");
  const std::string isa_text = !opt.isa.empty() ? opt.isa : (env ? env : "");
  const char* isa_source = !opt.isa.empty() ? "--isa" : "EMBER_ISA";
  if (!isa_text.empty()) {
    if (!parse_isa(isa_text, &isa))
      throw Error(std::string(isa_source) + ": expected scalar, avx2 or avx512, found '" + isa_text + "'");
    if (!isa_supported(isa))
      throw Error(std::string(isa_source) + ": this CPU does not support " + isa_text +
                  " (best available: " + ember::isa_name(best_isa()) + ")");
  }
  if (opt.dtype == DType::f64) isa = Isa::scalar;  // f64 runs the scalar references only
  m.k = &kernels_for(isa);
  m.esz = opt.dtype == DType::f64 ? 8 : 4;
  const std::string where = model.source.empty() ? "model " + model.name : model.source;
  if (model.layers.empty()) throw Error(where + ": layers: the model has no layers");

  // Shapes, layer by layer.
  const int N = opt.batch;
  std::vector<std::unique_ptr<nn::Layer>> mlayers;  // one per model layer
  std::vector<nn::Dims> mdims{{model.in_c, model.in_h, model.in_w}};
  // Activations are indexed with int by the kernels: a batch of them stays below 2^31 elements.
  const size_t max_act = size_t(INT32_MAX) / size_t(N);
  if (mdims[0].size() > max_act)
    throw Error(where + ": input: [" + std::to_string(model.in_c) + ", " + std::to_string(model.in_h) +
                ", " + std::to_string(model.in_w) + "] is too large for batch " + std::to_string(N) +
                " (more than " + std::to_string(max_act) + " elements per sample)");
  for (size_t i = 0; i < model.layers.size(); ++i) {
    mlayers.push_back(nn::make_layer(model.layers[i]));
    try {
      mdims.push_back(mlayers.back()->infer(mdims.back()));
    } catch (const Error& e) {
      throw Error(where + ": layers[" + std::to_string(i) + "] (" +
                  layer_kind_name(model.layers[i].kind) + "): " + e.what());
    }
    if (mdims.back().size() > max_act)
      throw Error(where + ": layers[" + std::to_string(i) + "]: activation too large for batch " +
                  std::to_string(N));
  }
  const nn::Dims out = mdims.back();
  if (!out.flat() || out.c != model.num_classes)
    throw Error(where + ": the last layer must output [" + std::to_string(model.num_classes) +
                "] class scores, found " + (out.flat() ? "[" + std::to_string(out.c) + "]" :
                "an image; add flatten and linear layers"));

  // Parameters: one flat block, tensor after tensor, named by model layer.
  std::vector<int> model_first_param(mlayers.size(), -1);
  for (size_t i = 0; i < mlayers.size(); ++i) {
    auto shapes = mlayers[i]->param_shapes();
    if (!shapes.empty()) model_first_param[i] = int(m.params.size());
    for (size_t t = 0; t < shapes.size(); ++t) {
      ParamInfo p;
      p.name = std::to_string(i) + (t == 0 ? ".weight" : ".bias");  // PyTorch Sequential names
      p.shape = shapes[t];
      p.size = 1;
      for (int d : p.shape) p.size *= size_t(d);
      p.offset = m.nparams;
      p.is_weight = t == 0;
      p.layer = int(i);
      p.fan_in = mlayers[i]->fan_in();
      p.fan_out = mlayers[i]->fan_out();
      m.nparams += p.size;
      m.params.push_back(p);
    }
  }
  // Execution units: fuse Conv2d -> ReLU -> MaxPool2d runs (f32 and f64 alike), else one each.
  m.dims.push_back(mdims[0]);
  for (size_t i = 0; i < mlayers.size();) {
    const bool fuse = opt.fuse && nn::can_fuse_conv_relu_pool(&model.layers[i], model.layers.size() - i, mdims[i]);
    const size_t count = fuse ? 3 : 1;
    m.layers.push_back(fuse ? nn::make_conv_relu_pool(model.layers[i]) : std::move(mlayers[i]));
    if (fuse) m.layers.back()->infer(mdims[i]);
    m.unit_first.push_back(int(i));
    m.first_param.push_back(model_first_param[i]);
    m.dims.push_back(mdims[i + count]);
    i += count;
  }
  const size_t L = m.layers.size();
  // Which layers need backward and which boundaries need gradients: only what leads to a parameter.
  std::vector<bool> params_before(L + 1, false);
  for (size_t i = 0; i < L; ++i) params_before[i + 1] = params_before[i] || m.first_param[i] >= 0;
  m.run_backward.resize(L);
  for (size_t i = 0; i < L; ++i) m.run_backward[i] = params_before[i + 1];

  // Arena placement.
  const OptimizerKind ok = opt.optimizer.kind;
  m.state_count = (ok == OptimizerKind::Adam || ok == OptimizerKind::AdamW) ? 2
                  : (ok == OptimizerKind::Momentum || ok == OptimizerKind::Nesterov) ? 1 : 0;
  Arena& a = m.arena;
  m.param_off = a.reserve(m.nparams * m.esz);
  m.grad_off = a.reserve(m.nparams * m.esz);
  for (int s = 0; s < m.state_count; ++s) m.state_off[s] = a.reserve(m.nparams * m.esz);
  m.labels_off = a.reserve(size_t(N) * sizeof(int32_t));
  m.act.assign(L + 1, kNone);
  m.grad.assign(L + 1, kNone);
  m.act[0] = a.reserve(size_t(N) * m.dims[0].size() * m.esz);
  m.grad[L] = kNone;
  for (size_t i = 0; i < L; ++i) {
    const bool alias = m.layers[i]->aliases_input();
    m.act[i + 1] = alias ? m.act[i] : a.reserve(size_t(N) * m.dims[i + 1].size() * m.esz);
  }
  for (size_t i = L + 1; i-- > 0;) {
    const bool needed = i == L || params_before[i];
    if (!needed) continue;
    if (i < L && m.layers[i]->aliases_input() && m.grad[i + 1] != kNone) m.grad[i] = m.grad[i + 1];
    else m.grad[i] = a.reserve(size_t(N) * m.dims[i].size() * m.esz);
  }
  m.idx_off.assign(L, kNone);
  m.saved_off.assign(L, kNone);
  m.unused_at_zero.assign(L + 1, false);
  size_t ws = 0;
  for (size_t i = 0; i < L; ++i) {
    m.unused_at_zero[i + 1] = m.layers[i]->grad_unused_at_zero_output(m.unused_at_zero[i]);
    if (size_t n = m.layers[i]->index_elems(N)) m.idx_off[i] = a.reserve(n * sizeof(int32_t));
    if (size_t n = m.layers[i]->saved_bytes(N, opt.threads, opt.dtype)) m.saved_off[i] = a.reserve(n);
    ws = std::max(ws, m.layers[i]->workspace_elems(N, opt.threads));
  }
  m.ws_off = a.reserve(ws * m.esz);
  // The background link: unit 0 a fused conv that needs no input gradient, then a Flatten, then a
  // Linear that may run sparse (f32, a kernel table that takes the sparse path: not AVX2's).
  m.bg_unit.assign(L, false);
  size_t bg_mask = kNone, bg_value = kNone, bg_grad = kNone, bg_fold = kNone;
  if (opt.split_background && opt.dtype == DType::f32 && L >= 3 && m.layers[0]->can_split_background() &&
      m.grad[0] == kNone && m.layers[1]->aliases_input() && m.model.layers[m.unit_first[2]].kind == LayerKind::Linear &&
      m.saved_off[2] != kNone && m.k->linear_sp_max_density > 0) {
    m.bg_unit[0] = m.bg_unit[2] = true;
    m.bg.channels = m.dims[1].c;
    m.bg.positions = m.dims[1].h * m.dims[1].w;
    const int K = m.dims[3].c;
    bg_mask = a.reserve(size_t(N) * m.bg.positions * sizeof(float));
    bg_value = a.reserve(size_t(m.bg.channels) * sizeof(float));
    bg_grad = a.reserve(size_t(m.bg.channels) * sizeof(float));
    bg_fold = a.reserve(size_t(K) * m.bg.positions * sizeof(float));
  }
  if (a.size() > opt.max_arena_bytes) {
    size_t big = 0;
    for (size_t i = 1; i < m.params.size(); ++i)
      if (m.params[i].size > m.params[big].size) big = i;
    throw Error(where + ": needs " + std::to_string(a.size() >> 20) + " MiB for batch " +
                std::to_string(N) + ", more than the " + std::to_string(opt.max_arena_bytes >> 20) +
                " MiB limit (largest tensor: " +
                (m.params.empty() ? std::string("none") : m.params[big].name + ", " +
                 std::to_string(m.params[big].size) + " elements") + ")");
  }
  try {
    a.allocate();
  } catch (const std::bad_alloc&) {
    throw Error(where + ": cannot allocate " + std::to_string(a.size() >> 20) + " MiB for the plan");
  }
  m.pool = std::make_unique<ThreadPool>(opt.threads);
  if (bg_mask != kNone) {
    m.bg.mask = a.at<float>(bg_mask);
    m.bg.value = a.at<float>(bg_value);
    m.bg.bias_grad = a.at<float>(bg_grad);
    m.bg.fold = a.at<float>(bg_fold);
  }

  for (size_t i = 0; i < model.layers.size(); ++i) {
    LayerInfo li;
    li.kind = layer_kind_name(model.layers[i].kind);
    li.in_shape = dims_vec(mdims[i]);
    li.out_shape = dims_vec(mdims[i + 1]);
    auto mi = nn::make_layer(model.layers[i]);
    mi->infer(mdims[i]);
    for (auto& s : mi->param_shapes()) {
      size_t n = 1;
      for (int d : s) n *= size_t(d);
      li.params += n;
    }
    li.flops_fwd = mi->flops_per_sample();
    m.infos.push_back(li);
  }
  m.layer_unit.assign(model.layers.size(), 0);
  for (size_t i = 0; i < L; ++i) {
    UnitInfo u;
    u.first_layer = m.unit_first[i];
    u.last_layer = i + 1 < L ? m.unit_first[i + 1] - 1 : int(model.layers.size()) - 1;
    for (int l = u.first_layer; l <= u.last_layer; ++l) {
      u.name += (l > u.first_layer ? "+" : "") + m.infos[size_t(l)].kind;
      m.layer_unit[size_t(l)] = int(i);
    }
    u.name += " (" + std::to_string(u.first_layer) +
              (u.last_layer > u.first_layer ? "-" + std::to_string(u.last_layer) : "") + ")";
    const double fw = m.layers[i]->flops_per_sample();  // already 2 per multiply-add
    u.flops_fwd = fw;
    if (m.run_backward[i]) u.flops_bwd = fw * ((m.first_param[i] >= 0) + (m.grad[i] != kNone));
    m.units.push_back(u);
  }
  for (size_t i = 0; i < L && m.side_unit < 0; ++i)
    if (m.run_backward[i]) m.side_unit = int(i);
  constexpr size_t kChunk = 32768;  // elements per side chunk (multiple of 16)
  for (size_t t = 0; t < m.params.size(); ++t)
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
  const size_t L = m.layers.size(), N = size_t(m.opt.batch);
  std::vector<BufferInfo> out;
  out.push_back({"parameters", m.nparams * m.esz});
  out.push_back({"parameter gradients", m.nparams * m.esz});
  for (int s = 0; s < m.state_count; ++s)
    out.push_back({std::string("optimizer state ") + (s == 0 ? "1" : "2"), m.nparams * m.esz});
  out.push_back({"labels", N * sizeof(int32_t)});
  for (size_t i = 0; i <= L; ++i) {
    const std::string of = i == 0 ? " (input batch)" : " (" + m.units[i - 1].name + " output)";
    if (i == 0 || m.act[i] != m.act[i - 1])
      out.push_back({"activation " + std::to_string(i) + of, N * m.dims[i].size() * m.esz});
    if (m.grad[i] != kNone && (i == L || m.grad[i] != m.grad[i + 1]))
      out.push_back({"activation gradient " + std::to_string(i) + of, N * m.dims[i].size() * m.esz});
  }
  for (size_t i = 0; i < L; ++i) {
    if (size_t n = m.layers[i]->index_elems(int(N)))
      out.push_back({"saved indices of " + m.units[i].name, n * sizeof(int32_t)});
    if (size_t n = m.layers[i]->saved_bytes(int(N), m.opt.threads, m.opt.dtype))
      out.push_back({"sparse-input state of " + m.units[i].name, n});
  }
  if (m.bg.mask) {
    const size_t K = size_t(m.dims[3].c), P2 = size_t(m.bg.positions);
    out.push_back({"background link of " + m.units[0].name + " and " + m.units[2].name,
                   (N * P2 + 2 * size_t(m.bg.channels) + K * P2) * sizeof(float)});
  }
  size_t ws = 0;
  for (size_t i = 0; i < L; ++i) ws = std::max(ws, m.layers[i]->workspace_elems(int(N), m.opt.threads));
  out.push_back({"shared scratch", ws * m.esz});
  std::stable_sort(out.begin(), out.end(), [](const BufferInfo& a, const BufferInfo& b) { return a.bytes > b.bytes; });
  return out;
}
void* Plan::input() { return impl_->at<std::byte>(impl_->act[0]); }
int32_t* Plan::labels() { return impl_->at<int32_t>(impl_->labels_off); }
void* Plan::param_data() {
  check_thawed(*impl_, "param_data");
  return impl_->at<std::byte>(impl_->param_off);
}
const void* Plan::param_data() const { return impl_->at<std::byte>(impl_->param_off); }

void Plan::freeze() {
  Impl& m = *impl_;
  m.packed.assign(m.layers.size(), {});
  if (m.esz == 4)
    for (size_t i = 0; i < m.layers.size(); ++i) {
      const LayerSpec& s = m.model.layers[m.unit_first[i]];
      if (s.kind != LayerKind::Linear || m.first_param[i] < 0) continue;
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
const void* Plan::output() const { return impl_->at<std::byte>(impl_->act.back()); }

void Plan::init_params(uint64_t seed) {
  Impl& m = *impl_;
  check_thawed(m, "init_params");
  for (size_t t = 0; t < m.params.size(); ++t) {
    const ParamInfo& p = m.params[t];
    Pcg32 rng(seed, t + 1);
    size_t layer = std::stoul(p.name.substr(0, p.name.find('.')));
    const Init init = m.model.layers[layer].init.value_or(m.model.init);
    for (size_t i = 0; i < p.size; ++i) {
      double v = 0;
      if (p.is_weight) {
        switch (init) {
          case Init::Kaiming: v = rng.normal() * std::sqrt(2.0 / p.fan_in); break;
          case Init::Xavier: v = (2 * rng.uniform() - 1) * std::sqrt(6.0 / (p.fan_in + p.fan_out)); break;
          case Init::Torch: v = (2 * rng.uniform() - 1) / std::sqrt(double(p.fan_in)); break;
        }
      }
      if (m.esz == 8) m.at<double>(m.param_off)[p.offset + i] = v;
      else m.at<float>(m.param_off)[p.offset + i] = float(v);
    }
  }
  for (int s = 0; s < m.state_count; ++s) std::memset(m.at<std::byte>(m.state_off[s]), 0, m.nparams * m.esz);
  m.step = 0;
}

void Plan::gather_u8(const uint8_t* images, const uint8_t* labels, const int64_t* index, int n) {
  Impl& m = *impl_;
  const size_t D = m.dims[0].size();
  int32_t* lab = m.at<int32_t>(m.labels_off);
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint8_t* src = images + size_t(index[i]) * D;
      if (m.esz == 8) {
        double* dst = m.at<double>(m.act[0]) + size_t(i) * D;
        for (size_t d = 0; d < D; ++d) dst[d] = src[d] * (1.0 / 255.0);
      } else {
        float* dst = m.at<float>(m.act[0]) + size_t(i) * D;
        for (size_t d = 0; d < D; ++d) dst[d] = src[d] * (1.0f / 255.0f);
      }
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
nn::Bufs bind(const Plan::Impl& m, size_t i) {
  nn::Bufs b{};
  b.dt = m.opt.dtype;
  std::byte* base = m.arena.base();
  b.x = base + m.act[i];
  b.y = base + m.act[i + 1];
  b.dx = m.grad[i] != kNone ? base + m.grad[i] : nullptr;
  b.dy = m.grad[i + 1] != kNone ? base + m.grad[i + 1] : nullptr;
  if (m.first_param[i] >= 0) {
    const ParamInfo& w = m.params[m.first_param[i]];
    b.w = base + m.param_off + w.offset * m.esz;
    b.dw = base + m.grad_off + w.offset * m.esz;
    if (m.model.layers[m.unit_first[i]].bias) {
      const ParamInfo& bi = m.params[m.first_param[i] + 1];
      b.b = base + m.param_off + bi.offset * m.esz;
      b.db = base + m.grad_off + bi.offset * m.esz;
    }
  }
  b.wt = m.frozen && !m.packed[i].empty() ? m.packed[i].data() : nullptr;
  b.ws = base + m.ws_off;
  b.idx = m.idx_off[i] != kNone ? reinterpret_cast<int32_t*>(base + m.idx_off[i]) : nullptr;
  b.saved = m.saved_off[i] != kNone ? base + m.saved_off[i] : nullptr;
  b.dx_unused_at_zero = m.unused_at_zero[i];
  // Bound whether frozen or not: a frozen plan's conv forward writes the true activations and all
  // values 0, which tells the Linear (forward and a backward after it) there is nothing to add.
  b.bg = m.bg_unit[i] ? &m.bg : nullptr;
  b.frozen = m.frozen;
  return b;
}
}  // namespace

void Plan::forward(int n) {
  Impl& m = *impl_;
  const ops::Exec e = m.exec();
  for (size_t i = 0; i < m.layers.size(); ++i)
    timed(m.prof, Phase::forward, int(i), [&] { m.layers[i]->forward(e, bind(m, i), n); });
}

double Plan::loss(int n, bool grad) {
  Impl& m = *impl_;
  const int D = m.model.num_classes;
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = m.at<T>(m.act.back());
    T* dx = grad ? m.at<T>(m.grad.back()) : nullptr;
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

void Plan::backward(int n) {
  Impl& m = *impl_;
  const ops::Exec e = m.exec();
  for (size_t i = m.layers.size(); i-- > 0;)
    if (m.run_backward[i])
      timed(m.prof, Phase::backward, int(i), [&] { m.layers[i]->backward(e, bind(m, i), n); });
}

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
  std::atomic<int> first_bad{INT_MAX};
  auto note_bad = [&](int t) {
    for (int cur = first_bad.load(); t < cur && !first_bad.compare_exchange_weak(cur, t);) {}
  };
  auto run_chunk = [&](int c) {  // one thread, one chunk of one tensor: the kernel directly
    const Impl::UpdateChunk& ch = m.side_chunks[size_t(c)];
    const ParamInfo& p = m.params[size_t(ch.param)];
    const size_t off = p.offset + ch.begin, len = ch.end - ch.begin;
    if (m.k->adam(w + off, s0 + off, s1 + off, g + off, len, adam_args(o, p, lr, m.step)) != 0) note_bad(ch.param);
  };
  using RunChunk = decltype(run_chunk);
  std::atomic<int> next{0};
  const ops::SideWork side{int(m.side_chunks.size()), [](void* f, int c) { (*static_cast<RunChunk*>(f))(c); },
                           &run_chunk, &next};
  const ops::Exec e = m.exec(), es{*m.k, *m.pool, &side};
  for (size_t i = m.layers.size(); i-- > 0;) {
    if (!m.run_backward[i]) continue;
    const bool last = int(i) == m.side_unit;  // the unit whose backward takes the side work
    m.layers[i]->backward(last ? es : e, bind(m, i), n);
    if (last) m.pool->run([&](int) { while (side.take()) {} });  // what its op did not take
  }
  for (size_t t = 0; t < m.params.size(); ++t) {  // the last unit's own parameters
    const ParamInfo& p = m.params[t];
    if (m.layer_unit[size_t(p.layer)] > m.side_unit) continue;
    if (ops::adam_step(e, w + p.offset, s0 + p.offset, s1 + p.offset, g + p.offset, p.size,
                       adam_args(o, p, lr, m.step)) != 0)
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
  int first_bad = -1;
  for (size_t t = 0; t < m.params.size(); ++t) timed(m.prof, Phase::optimizer, m.layer_unit[size_t(m.params[t].layer)], [&] {
    const ParamInfo& p = m.params[t];
    size_t bad;
    const float l2 = p.is_weight ? float(o.l2) : 0.f, wd = p.is_weight ? float(o.weight_decay) : 0.f;
    const size_t off = p.offset;
    if (o.kind == OptimizerKind::Adam || o.kind == OptimizerKind::AdamW) {
      bad = ops::adam_step(e, w + off, s0 + off, s1 + off, g + off, p.size, adam_args(o, p, lr, m.step));
    } else {
      const ops::SgdArgs args{float(lr), float(o.momentum), l2, wd, o.kind == OptimizerKind::Nesterov,
                              o.kind != OptimizerKind::SGD};
      bad = ops::sgd_step(e, w + off, s0 ? s0 + off : nullptr, g + off, p.size, args);
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

int Plan::first_nonfinite_output(int n) const {
  const Impl& m = *impl_;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const size_t count = size_t(n) * m.dims[i + 1].size();
    bool bad = false;
    if (m.esz == 8) {
      const double* y = m.at<double>(m.act[i + 1]);
      for (size_t j = 0; j < count && !bad; ++j) bad = !std::isfinite(y[j]);
    } else {
      bad = m.k->count_nonfinite(m.at<float>(m.act[i + 1]), count) != 0;
    }
    if (bad) return int(i);
  }
  return -1;
}

double Plan::flops_per_sample(bool training) const {
  const Impl& m = *impl_;
  double f = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const double fw = m.layers[i]->flops_per_sample();  // 2 per multiply-add, layers with weights
    f += fw;
    if (!training || !m.run_backward[i]) continue;
    if (m.first_param[i] >= 0) f += fw;   // weight gradient
    if (m.grad[i] != kNone) f += fw;      // input gradient
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
  os << "model " << m.model.name << ": input " << shape(dims_vec(m.dims[0])) << ", "
     << m.nparams << " parameters, loss " << loss_kind_name(m.model.loss) << "\n";
  for (size_t i = 0; i < m.infos.size(); ++i) {
    const LayerInfo& li = m.infos[i];
    char line[160];
    std::snprintf(line, sizeof line, "  %2zu %-10s %-16s -> %-16s %9zu params %8.3f MFLOP/sample\n", i,
                  li.kind.c_str(), shape(li.in_shape).c_str(), shape(li.out_shape).c_str(), li.params,
                  li.flops_fwd / 1e6);
    os << line;
  }
  return os.str();
}

}  // namespace ember
