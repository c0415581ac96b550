// Op "fakequant": quantization-aware training's fake quantization of one tensor (docs/int8.md):
// y = the u8 round trip of x under the per-tensor range "range" [lo, hi] (the int8 path's
// arithmetic, ref_fake_quant.h), backward the straight-through estimator. A training forward
// observes the batch's range (moving average); the QAT pass (nn/qat.cpp) inserts one per tensor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/ref/ref_fake_quant.h"
#include "nn/layers.h"
#include "nn/op_table.h"
#include "quant/quant_math.h"

namespace ember::nn {

namespace {

// Parameters (running statistics, never trained): range [2] (lo, hi) and observed [] (batches
// seen; below 0.5: none, and the layer passes values through unchanged). Elementwise in any layout.
class FakeQuant final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override { return {{2}, {}}; }
  bool param_constant(size_t, double* v) const override { return *v = 0, true; }
  size_t workspace_elems(int, int threads) const override { return 2 * size_t(threads); }
  bool backward_reads_output() const override { return false; }
  bool layout_agnostic() const override { return true; }
  double flops_per_sample() const override { return 4.0 * double(in_.size()); }

  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t count = size_t(n) * in_.size();
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* x = p<T>(b.x);
      T* y = p<T>(b.y);
      const T* r = p<T>(b.rs);
      bool seen = r[2] >= T(0.5);
      double lo = double(r[0]), hi = double(r[1]);
      if (b.rs_update) {
        double blo, bhi;
        batch_range(e, x, count, p<T>(b.ws), &blo, &bhi);
        ref::observe_range(&lo, &hi, blo, bhi, !seen);
        T* u = p<T>(b.rs_update);
        u[0] = T(lo), u[1] = T(hi), u[2] += T(1);
        lo = double(u[0]), hi = double(u[1]), seen = true;
      }
      if (!seen) return copy(e, y, x, count);
      const QParams q = quant::qparams_for_range(lo, hi);
      over(e, count, [&](size_t a, size_t z) { ref::fake_quant_fwd<T>(y + a, x + a, z - a, q.scale, q.zero_point); });
    });
  }

  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t count = size_t(n) * in_.size();
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (b.drs)  // the range is not trained: its gradient is 0
        for (int k = 0; k < 3; ++k) p<T>(b.drs)[k] = T(0);
      if (!b.dx) return;
      const T* r = p<T>(b.rs);
      const T* dy = p<T>(b.dy);
      T* dx = p<T>(b.dx);
      if (!(r[2] >= T(0.5))) return copy(e, dx, dy, count);
      const QParams q = quant::qparams_for_range(double(r[0]), double(r[1]));
      over(e, count, [&](size_t a, size_t z) {
        ref::fake_quant_bwd<T>(dx + a, dy + a, p<T>(b.x) + a, z - a, q.scale, q.zero_point);
      });
    });
  }

 private:
  template <class F>
  static void over(const ops::Exec& e, size_t count, F&& fn) {
    const int parts = count < 16384 ? 1 : e.pool.size();
    if (parts == 1) return fn(size_t(0), count);
    e.pool.run([&](int t) {
      const Range r = split_range(int64_t(count), t, parts);
      if (r.end > r.begin) fn(size_t(r.begin), size_t(r.end));
    });
  }
  template <class T>
  static void copy(const ops::Exec& e, T* dst, const T* src, size_t count) {
    if (dst != src) over(e, count, [&](size_t a, size_t z) { std::copy(src + a, src + z, dst + a); });
  }
  // The finite values' [min, max] (0, 0 when none), per thread into ws, then combined.
  template <class T>
  static void batch_range(const ops::Exec& e, const T* x, size_t count, T* ws, double* lo, double* hi) {
    const int parts = count < 16384 ? 1 : e.pool.size();
    for (int t = 0; t < parts; ++t) ws[2 * t] = std::numeric_limits<T>::infinity(), ws[2 * t + 1] = -std::numeric_limits<T>::infinity();
    auto part = [&](int t) {
      const Range r = split_range(int64_t(count), t, parts);
      T a = ws[2 * t], z = ws[2 * t + 1];
      for (int64_t i = r.begin; i < r.end; ++i)
        if (std::isfinite(x[i])) a = std::min(a, x[i]), z = std::max(z, x[i]);
      ws[2 * t] = a, ws[2 * t + 1] = z;
    };
    if (parts == 1) part(0);
    else e.pool.run([&](int t) { if (t < parts) part(t); });
    *lo = std::numeric_limits<double>::infinity(), *hi = -std::numeric_limits<double>::infinity();
    for (int t = 0; t < parts; ++t) *lo = std::min(*lo, double(ws[2 * t])), *hi = std::max(*hi, double(ws[2 * t + 1]));
    if (*lo > *hi) *lo = *hi = 0;
  }
};

std::unique_ptr<Layer> make_fakequant(const LayerSpec& s) { return std::make_unique<FakeQuant>(s); }

std::vector<OpParam> fakequant_params(const LayerSpec&) {
  return {{"range", ParamRole::running_stat}, {"observed", ParamRole::running_stat}};
}

}  // namespace

const OpDesc& op_desc_fakequant() {
  static const OpDesc d = [] {
    OpDesc o = make_op(LayerKind::FakeQuant, "fakequant",
                       "quantization-aware training: the u8 round trip of a tensor under an observed range, straight-through backward");
    o.layouts = {"nchw", "flat", "nhwc"};
    o.dtypes = fp_dtypes();
    o.params = fakequant_params;
    o.make = make_fakequant;
    o.straight_through = true;
    o.example = example_model("fakequant", R"({"type": "fakequant"}, {"type": "conv2d", "out_channels": 4, "kernel": 5, "stride": 3}, )"
                                           R"({"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
    return o;
  }();
  return d;
}

}  // namespace ember::nn
