// An elementwise activation from its scalar formula, for an op that lives in one file (see
// src/nn/ops/mish.cpp): F gives f(x) and its derivative df(x) for float and double, and
// pointwise_layer<F> is its graph layer: y = f(x), dx = dy * df(x), split over the threads. The
// formula is the op's scalar reference and, compiled here, its kernel on every kernel set.
#pragma once
#include <memory>

#include "core/thread_pool.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

template <class F>
class PointwiseLayer final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  bool backward_reads_output() const override { return false; }
  double flops_per_sample() const override { return 0; }
  bool layout_agnostic() const override { return true; }  // elementwise
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      each(e, size_t(n) * in_.size(), [&](size_t i) { p<T>(b.y)[i] = F::f(p<T>(b.x)[i]); });
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      each(e, size_t(n) * in_.size(), [&](size_t i) { p<T>(b.dx)[i] = p<T>(b.dy)[i] * F::df(p<T>(b.x)[i]); });
    });
  }

 private:
  // fn(i) for i in [0, count), in one contiguous range per thread.
  template <class Fn>
  static void each(const ops::Exec& e, size_t count, Fn fn) {
    const int P = e.pool.size();
    e.pool.run([&](int t) {
      const Range r = split_range(int64_t(count), t, P);
      for (int64_t i = r.begin; i < r.end; ++i) fn(size_t(i));
    });
  }
};

template <class F>
std::unique_ptr<Layer> pointwise_layer(const LayerSpec& s) {
  return std::make_unique<PointwiseLayer<F>>(s);
}

// The descriptor of an activation made from formula F, with its own ONNX export and import.
template <class F>
OpDesc pointwise_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx,
                    decltype(OpDesc::onnx_export) onnx_export, decltype(OpDesc::onnx_import) onnx_import) {
  return activation_op(kind, name, summary, std::move(onnx), pointwise_layer<F>, onnx_export, onnx_import);
}

}  // namespace ember::nn
