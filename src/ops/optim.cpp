// Optimizer updates (PyTorch's formulas), split across the pool by element ranges. Coupled L2
// (l2) is added to the gradient; decoupled decay (wd) shrinks the weight; both 0 for biases.
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
void sgd_step(const Exec& e, float* w, float* buf, const float* g, size_t n, const SgdArgs& a) {
  over(e, n, [&](size_t b, size_t end) {
    for (size_t i = b; i < end; ++i) {
      float gi = g[i] + a.l2 * w[i];
      if (a.wd != 0.f) w[i] -= a.lr * a.wd * w[i];
      if (a.use_momentum) {
        buf[i] = a.momentum * buf[i] + gi;
        gi = a.nesterov ? gi + a.momentum * buf[i] : buf[i];
      }
      w[i] -= a.lr * gi;
    }
  });
}

// Adam / AdamW: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
// w -= lr/bias1 * m / (sqrt(v)/sqrt(bias2) + eps), after w -= lr * wd * w (AdamW).
void adam_step(const Exec& e, float* w, float* m, float* v, const float* g, size_t n,
               const AdamArgs& a) {
  const float step = a.lr / a.bias1, inv_sqrt_b2 = 1.f / std::sqrt(a.bias2);
  over(e, n, [&](size_t b, size_t end) {
    for (size_t i = b; i < end; ++i) {
      const float gi = g[i] + a.l2 * w[i];
      float wi = w[i] * (1.f - a.lr * a.wd);
      m[i] = a.beta1 * m[i] + (1.f - a.beta1) * gi;
      v[i] = a.beta2 * v[i] + (1.f - a.beta2) * gi * gi;
      wi -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_b2 + a.eps);
      w[i] = wi;
    }
  });
}

}  // namespace ember::ops
