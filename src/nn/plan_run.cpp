// Running a compiled plan (plan.cpp compiles it): binding each unit's pointers, forward, the
// loss, backward (gradient sums, the bf16 flush count), the optimizer steps with the bf16 weight
// copy, and the checks on non-finite values. Nothing here allocates.
#include "ember/plan.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "core/rng.h"
#include "kernels/ref/ref_fake_quant.h"
#include "nn/plan_impl.h"

namespace ember {

using plan_impl::check_thawed;
using plan_impl::kNone;

namespace {
// Unit i's pointers; its input gradients go where dx_via says (directly or to scratch). rerun:
// first_nonfinite_output's second forward of a step, which must not update running statistics.
nn::Bufs bind(const Plan::Impl& m, size_t i, bool rerun = false) {
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
    if (q.role == ParamRole::running_stat) {  // BatchNorm2d's buffers, after its weight and bias
      if (b.rs) continue;
      b.rs = base + m.param_off + q.offset * m.esz;
      b.drs = base + m.grad_off + q.offset * m.esz;
      const bool fq = m.g.nodes[size_t(q.layer)].spec->kind == LayerKind::FakeQuant;
      const bool observing = !fq || m.model.qat.freeze_after < 0 || m.step < m.model.qat.freeze_after;
      const bool may_update = m.opt.training && m.train_mode && !m.frozen && !rerun && observing;
      b.rs_update = may_update ? base + m.param_off + q.offset * m.esz : nullptr;
      continue;
    }
    const bool second = q.layer != u.first, bias = t > 0 && m.params[t - 1].layer == q.layer;
    const void*& v = second ? (bias ? b.b2 : b.w2) : (bias ? b.b : b.w);
    void*& d = second ? (bias ? b.db2 : b.dw2) : (bias ? b.db : b.dw);
    const bool fq_w = m.wq_off != kNone && m.qat_weight[t];  // QAT: the layer reads the fake-quantized copy
    v = base + (fq_w ? m.wq_off : m.param_off) + q.offset * m.esz;
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
  b.param_version = (m.param_version << 32) + uint64_t(m.step);  // a step moves the weights too
  // The unit's random stream for this step: a hash of (seed, optimizer steps done, its first
  // node's model layer), so that nodes a pass inserts move no stream.
  uint64_t z = m.opt.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(m.step) + 1) * 0xC2B2AE3D27D4EB4Full ^ (uint64_t(m.g.nodes[size_t(u.first)].source) + 1) * 0x165667B19E3779F9ull;
  z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDull;
  // Sample i of this batch draws as sample sample0 + i of a whole batch would
  // (ref::drop_path_uniform hashes noise + golden * (i + 1)).
  b.noise = (z ^ (z >> 33)) + 0x9E3779B97F4A7C15ull * uint64_t(m.sample0);
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

template <class T>
void fake_quant_weights(Plan::Impl& m) {
  const T* w = m.at<T>(m.param_off);
  T* wq = m.at<T>(m.wq_off);
  const int bits = m.model.qat.weight_bits;
  for (size_t t = 0; t < m.params.size(); ++t) {
    if (!m.qat_weight[t]) continue;
    const ParamInfo& p = m.params[t];  // [K, ...]: per output channel
    const int K = p.shape[0];
    const size_t per = p.size / size_t(K);
    m.pool->run([&](int th) {
      const Range r = split_range(K, th, m.pool->size());
      for (int64_t k = r.begin; k < r.end; ++k)
        ref::fake_quant_channel<T>(wq + p.offset + size_t(k) * per, w + p.offset + size_t(k) * per, per, bits);
    });
  }
}

void check_training(const Plan::Impl& m, const char* what) {
  if (!m.opt.training) throw Error(std::string(what) + ": an inference plan (PlanOptions::training false) has no gradients");
}
// Labels need class scores: the output [classes].
void check_class_scores(const Plan& p, const Plan::Impl& m, const char* what) {
  if (!p.has_class_scores())
    throw Error(std::string(what) + ": class labels need the output [" + std::to_string(m.model.num_classes) +
                "] (class scores); this model outputs " + std::to_string(m.g.tensors[m.out_tensor()].dims.size()) +
                " values per sample");
}
// Whether L2 and weight decay apply to p: by role (weights, norm scales, layer scales), norm
// scales only with decay_norms.
bool decays(const OptimizerConfig& o, const ParamInfo& p) {
  return param_decays(p.role) && (o.decay_norms || p.role != ParamRole::norm_scale);
}
}  // namespace

void Plan::forward(int n) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  refresh_copy(m);
  plan_impl::refresh_qat_weights(m);
  const ops::Exec e = m.exec();
  for (size_t i = 0; i < m.us.size(); ++i)
    timed(m.prof, Phase::forward, int(i), [&] { m.us[i].layer->forward(e, bind(m, i), n); });
}

double Plan::loss(int n, bool grad, int mean_over) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  if (grad) check_training(m, "loss");
  if (mean_over != 0 && mean_over < n)
    throw Error("loss: mean_over " + std::to_string(mean_over) + " is below the batch's " + std::to_string(n) + " samples");
  const int N = mean_over != 0 ? mean_over : n;  // the gradient's divisor
  const int D = int(m.g.tensors[m.out_tensor()].dims.size());  // per-sample output elements
  if (!loss_takes_targets(m.model.loss)) check_class_scores(*this, m, "loss");
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = m.at<T>(m.act[m.out_tensor()]);
    T* dx = grad ? m.at<T>(m.grad[m.out_tensor()]) : nullptr;  // [n, D]
    const T* t = loss_takes_targets(m.model.loss) ? static_cast<const T*>(targets()) : nullptr;  // [n, D]
    switch (m.model.loss) {
      case LossKind::SoftmaxCrossEntropy: return ref::softmax_xent<T>(dx, x, lab, n, D, N);
      case LossKind::CrossEntropy: return ref::xent<T>(dx, x, lab, n, D, N);
      case LossKind::MSE: return ref::mse<T>(dx, x, t, n, D, N);
      case LossKind::L1: return ref::l1<T>(dx, x, t, n, D, N);
    }
    return 0.0;
  };
  return m.esz == 8 ? run(double{}) : run(float{});
}

int Plan::correct(int n) const {
  const FpModeScope fp = impl_->fp_scope();
  const Impl& m = *impl_;
  check_class_scores(*this, m, "correct");
  const int D = m.model.num_classes;
  const int32_t* lab = m.at<int32_t>(m.labels_off);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = m.at<T>(m.act[m.out_tensor()]);
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
  plan_impl::refresh_qat_weights(m, false);
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

void plan_impl::refresh_qat_weights(Plan::Impl& m, bool steps) {
  if (m.wq_off == kNone || ((!steps || m.wq_step == m.step) && m.wq_version == m.param_version)) return;
  if (m.esz == 8) fake_quant_weights<double>(m);
  else fake_quant_weights<float>(m);
  m.wq_version = m.param_version;
  if (steps) m.wq_step = m.step;
}

void Plan::backward(int n, GradsFinal on_final, void* ctx) {
  const FpModeScope fp = impl_->fp_scope();
  run_backward(*impl_, n, on_final, ctx, nullptr);
}

void Plan::set_flush_counting(bool on) { impl_->count_flush = on; }
Plan::FlushCount Plan::flush_count() const { return impl_->flush; }
void Plan::reset_flush_count() { impl_->flush = {}; }

namespace {
ops::AdamArgs adam_args(const OptimizerConfig& o, const ParamInfo& p, double lr, int64_t step) {
  const bool d = decays(o, p);
  const float l2 = d ? float(o.l2) : 0.f, wd = d ? float(o.weight_decay) : 0.f;
  return {float(lr), float(o.beta1), float(o.beta2), float(o.eps), l2, wd,
          float(1 - std::pow(o.beta1, double(step))), float(1 - std::pow(o.beta2, double(step)))};
}
}  // namespace

int Plan::backward_step(int n, double lr) {
  const FpModeScope fp = impl_->fp_scope();
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
    if (m.layer_unit[size_t(p.layer)] > m.side_unit || !param_trained(p.role)) continue;
    if (ops::adam_step(e, w + p.offset, s0 + p.offset, s1 + p.offset, g + p.offset, p.size,
                       adam_args(o, p, lr, m.step), wh ? wh + p.offset : nullptr) != 0)
      note_bad(int(t));
  }
  return first_bad.load() == INT_MAX ? -1 : first_bad.load();
}

namespace {
// Parameter t's update at optimizer step `step` (1-based), of its elements [lo, hi) (offsets inside
// the tensor); non-zero when their gradient held NaN/Inf.
size_t update_param(Plan::Impl& m, const ops::Exec& e, size_t t, double lr, int64_t step, size_t lo, size_t hi) {
  const OptimizerConfig& o = m.opt.optimizer;
  float* w = m.at<float>(m.param_off);
  float* g = m.at<float>(m.grad_off);
  float* s0 = m.state_count > 0 ? m.at<float>(m.state_off[0]) : nullptr;
  float* s1 = m.state_count > 1 ? m.at<float>(m.state_off[1]) : nullptr;
  uint16_t* wh = m.wh_off != kNone ? m.at<uint16_t>(m.wh_off) : nullptr;
  const ParamInfo& p = m.params[t];
  if (!param_trained(p.role)) return 0;      // running statistics: the optimizer never touches them
  const bool d = decays(o, p);
  const float l2 = d ? float(o.l2) : 0.f, wd = d ? float(o.weight_decay) : 0.f;
  const size_t off = p.offset + lo, len = hi - lo;
  if (o.kind == OptimizerKind::Adam || o.kind == OptimizerKind::AdamW)
    return ops::adam_step(e, w + off, s0 + off, s1 + off, g + off, len, adam_args(o, p, lr, step),
                          wh ? wh + off : nullptr);
  const ops::SgdArgs args{float(lr), float(o.momentum), l2, wd, o.kind == OptimizerKind::Nesterov,
                          o.kind != OptimizerKind::SGD};
  return ops::sgd_step(e, w + off, s0 ? s0 + off : nullptr, g + off, len, args, wh ? wh + off : nullptr);
}

void check_updatable(const Plan::Impl& m, const char* what) {
  if (m.esz != 4) throw Error(std::string(what) + ": only f32 plans train (f64 plans are for gradient checks)");
  check_thawed(m, what);
}
}  // namespace

int Plan::optimizer_step(double lr) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  check_updatable(m, "optimizer_step");
  const ops::Exec e = m.exec();
  ++m.step;
  int first_bad = -1;
  for (size_t t = 0; t < m.params.size(); ++t)
    timed(m.prof, Phase::optimizer, m.layer_unit[size_t(m.params[t].layer)], [&] {
      if (update_param(m, e, t, lr, m.step, 0, m.params[t].size) != 0 && first_bad < 0) first_bad = int(t);
    });
  return first_bad;
}

int Plan::update_elements(double lr, size_t begin, size_t end) {
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  check_updatable(m, "update_elements");
  if (begin > end || end > m.nparams)
    throw Error("update_elements: elements [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") are outside the plan's " + std::to_string(m.nparams));
  const ops::Exec e = m.exec();
  int first_bad = -1;
  for (size_t t = 0; t < m.params.size(); ++t) {
    const ParamInfo& p = m.params[t];
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.size);
    if (lo >= hi) continue;
    timed(m.prof, Phase::optimizer, m.layer_unit[size_t(p.layer)], [&] {
      if (update_param(m, e, t, lr, m.step + 1, lo - p.offset, hi - p.offset) != 0 && first_bad < 0) first_bad = int(t);
    });
  }
  return first_bad;
}

void Plan::finish_step() { ++impl_->step; }

void Plan::set_sample_offset(int64_t offset) { impl_->sample0 = offset; }

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
  const FpModeScope fp = impl_->fp_scope();
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
  const FpModeScope fp = impl_->fp_scope();
  Impl& m = *impl_;
  const ops::Exec e = m.exec();
  for (size_t i = 0; i < m.us.size(); ++i) {
    m.us[i].layer->forward(e, bind(m, i, true), n);  // running statistics stay as the step left them
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

}  // namespace ember
