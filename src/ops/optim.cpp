// Optimizer updates (PyTorch's formulas), split across the pool by element ranges. Coupled L2
// (l2) is added to the gradient; decoupled decay (wd) shrinks the weight; both 0 for biases.
#include <atomic>
#include <cmath>

#include "ops/ops.h"

namespace ember::ops {

namespace {
template <class F>
void over(const Exec& e, size_t n, F&& fn) {
  if (e.pool.size() == 1 || n < 32768) {
    fn(size_t(0), n);
    return;
  }
  e.pool.run([&](int t) {
    const Range r = split_range_aligned((int64_t)n, t, e.pool.size(), 16);
    if (r.end > r.begin) fn(size_t(r.begin), size_t(r.end));
  });
}
}  // namespace

// buf = momentum * buf + g'; step = nesterov ? g' + momentum * buf : buf; w -= lr * step,
// where g' = g + l2 * w; plain SGD when !use_momentum.
size_t sgd_step(const Exec& e, float* w, float* buf, const float* g, size_t n, const SgdArgs& a, uint16_t* wh) {
  std::atomic<size_t> nonfinite{0};
  over(e, n, [&](size_t b, size_t end) {
    size_t bad = 0;
    for (size_t i = b; i < end; ++i) {
      bad += !std::isfinite(g[i]);
      float gi = g[i] + a.l2 * w[i];
      if (a.wd != 0.f) w[i] -= a.lr * a.wd * w[i];
      if (a.use_momentum) {
        buf[i] = a.momentum * buf[i] + gi;
        gi = a.nesterov ? gi + a.momentum * buf[i] : buf[i];
      }
      w[i] -= a.lr * gi;
    }
    if (wh) e.k.cvt_f32_bf16(wh + b, w + b, end - b);
    nonfinite += bad;
  });
  return nonfinite.load();
}

// Adam / AdamW (formulas in kernels.h, AdamFn), through the kernel table.
size_t adam_step(const Exec& e, float* w, float* m, float* v, const float* g, size_t n,
                 const AdamArgs& a, uint16_t* wh) {
  std::atomic<size_t> nonfinite{0};
  over(e, n, [&](size_t b, size_t end) {
    nonfinite += wh ? e.k.adam_bf16(w + b, m + b, v + b, g + b, end - b, a, wh + b)
                    : e.k.adam(w + b, m + b, v + b, g + b, end - b, a);
  });
  return nonfinite.load();
}

// Non-finite values in x[0..n), counted over the same ranges the optimizer updates.
size_t count_nonfinite(const Exec& e, const float* x, size_t n) {
  std::atomic<size_t> total{0};
  over(e, n, [&](size_t b, size_t end) { total += e.k.count_nonfinite(x + b, end - b); });
  return total.load();
}

}  // namespace ember::ops
