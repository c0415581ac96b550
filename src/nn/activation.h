// The graph layer of every activation (the one mechanism: a header in src/kernels/act/ with its
// formula and vector form, the kernel table's ActId, and an op file in src/nn/ops/ that builds its
// descriptor with act_op<ActId::name>). ReLU's output-only backward lets the plan run it in place;
// any activation is the epilogue of a fused conv2d+<act> unit (Layer::kernel_act).
#pragma once
#include <memory>
#include <vector>

#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

class ActLayer final : public Layer {
 public:
  ActLayer(const LayerSpec& s, ops::Act a) : Layer(s), act_(a) {}
  const ops::Act* kernel_act() const override { return &act_; }  // a fused conv2d+<act> unit's epilogue
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  bool grad_unused_at_zero_output(bool) const override { return act_info(act_).dead_at_zero; }  // y == 0: dx = 0
  bool backward_reads_inputs() const override { return ops::act_reads_input(act_); }
  bool backward_reads_output() const override { return !ops::act_reads_input(act_); }
  bool runs_in_place() const override { return !ops::act_reads_input(act_); }
  bool layout_agnostic() const override { return true; }  // elementwise
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::act_fwd<T>(e, act_, p<T>(b.y), p<T>(b.x), size_t(n) * in_.size());
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const void* from = ops::act_reads_input(act_) ? b.x : b.y;
      ops::act_bwd<T>(e, act_, p<T>(b.dx), p<T>(b.dy), p<T>(from), size_t(n) * in_.size());
    });
  }

 private:
  ops::Act act_;
};

template <ops::Act A>
std::unique_ptr<Layer> act_layer(const LayerSpec& s) {
  return std::make_unique<ActLayer>(s, A);
}

// The descriptor of activation A (its header in src/kernels/act/), with its own ONNX export and
// import. from: the node types its import maps (default: onnx[0]).
template <ops::Act A>
OpDesc act_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx,
              decltype(OpDesc::onnx_export) onnx_export, decltype(OpDesc::onnx_import) onnx_import,
              std::vector<const char*> from = {}) {
  OpDesc d = activation_op(kind, name, summary, std::move(onnx), act_layer<A>, onnx_export, onnx_import);
  d.onnx_from = std::move(from);
  return d;
}

}  // namespace ember::nn
