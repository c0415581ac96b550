// The channel-last conv2d+<activation> unit: an nhwc 1x1 Conv2d whose output only an elementwise
// activation of the kernel table reads (ReLU, GELU, GELU-tanh, HardSwish, SiLU, FastSwish, ...)
// runs as one GEMM with a bias-and-activation epilogue per row chunk (ops::linear_act_fwd); its
// backward applies the activation's derivative to dy in place, then the conv's GEMMs (the unfused bits).
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "nn/activation.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

class ConvAct final : public Layer {
 public:
  ConvAct(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> act, ops::Act a)
      : Layer(conv->spec()), conv_(std::move(conv)), act_layer_(std::move(act)), act_(a) {
    layout_ = Layout::nhwc;
  }
  Dims infer(const Dims& in) override {
    in_ = in;
    out_ = conv_->infer(in);
    act_layer_->infer(out_);
    return out_;
  }
  std::vector<std::vector<int>> param_shapes() const override { return conv_->param_shapes(); }
  int fan_in() const override { return conv_->fan_in(); }
  int fan_out() const override { return conv_->fan_out(); }
  size_t workspace_elems(int batch, int threads) const override { return conv_->workspace_elems(batch, threads); }
  // The pre-activation where the derivative reads it (GELU, SiLU, ...: the unfused plan keeps it
  // as the tensor between the nodes); ReLU, Sigmoid and Tanh read the output.
  // Then the conv's (its packed weight), 64-byte aligned.
  size_t saved_bytes(int batch, int threads, DType dt) const override {
    return z_bytes(batch, dt) + conv_->saved_bytes(batch, threads, dt);
  }
  std::string saved_what() const override { return keeps_input() ? "pre-activation" : "packed weight"; }
  void set_precision(Precision p, bool backward) override {
    backward_ = backward;
    conv_->set_precision(p, backward);
  }
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override { conv_->choose_algorithm(batch, threads, pack, bf16); }
  std::string algorithm() const override { return conv_->algorithm(); }
  std::string weight_format() const override { return conv_->weight_format(); }
  std::vector<std::string> post_ops() const override {
    std::vector<std::string> v = conv_->post_ops();
    v.push_back(layer_kind_name(act_layer_->spec().kind));
    return v;
  }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return conv_->weight_bytes_packed_per_call(batch, threads, k, bf16);
  }
  double flops_per_sample() const override { return conv_->flops_per_sample() + act_layer_->flops_per_sample(); }
  bool bf16_products() const override { return conv_->bf16_products(); }
  bool grad_unused_at_zero_output(bool in) const override { return act_layer_->grad_unused_at_zero_output(in); }
  bool backward_reads_inputs() const override { return true; }
  bool backward_reads_output() const override { return !ops::act_reads_input(act_); }
  bool runs_nhwc() const override { return true; }

  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* z = keeps_input() ? p<T>(b.saved) : nullptr;
      const int rows = n * in_.h * in_.w;
      Bufs cb = b;  // the conv's saved buffer (its packed weight) after z
      cb.saved = b.saved ? static_cast<std::byte*>(b.saved) + z_bytes(b.batch, b.dt) : nullptr;
      if (!z && conv_->takes_post_act()) {  // the packed conv applies the activation in its store
        cb.post_act = &act_;
        return conv_->forward(e, cb, n);
      }
      if constexpr (std::is_same_v<T, float>)
        if (!e.bf16 && ops::linear_act_chunked(rows, out_.c, e.pool.size()))
          return ops::linear_act_fwd(e, act_, p<T>(b.y), z, p<T>(b.x), p<T>(b.w), p<T>(b.b), rows, in_.c, out_.c);
      cb.y = z ? z : b.y;  // the two nodes in turn: the activation in place where z is not kept
      conv_->forward(e, cb, n);
      ops::act_fwd<T>(e, act_, p<T>(b.y), z ? z : p<T>(b.y), count(n));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      // dz (the gradient at the pre-activation) over dy, elementwise: the unit's output gradient
      // is read by nothing after this backward (its block's lifetime ends here), so the unit
      // needs no buffer for the unfused plan's gradient tensor between the two nodes.
      T* dz = const_cast<T*>(p<T>(b.dy));
      const T* from = keeps_input() ? p<T>(b.saved) : p<T>(b.y);
      ops::act_bwd<T>(e, act_, dz, p<T>(b.dy), from, count(n));
      Bufs cb = b;
      cb.dy = dz;
      conv_->backward(e, cb, n);
    });
  }

 private:
  size_t count(int batch) const { return size_t(batch) * out_.size(); }
  size_t z_bytes(int batch, DType dt) const {
    return keeps_input() ? (count(batch) * (dt == DType::f64 ? 8 : 4) + 63) / 64 * 64 : 0;
  }
  bool keeps_input() const { return backward_ && ops::act_reads_input(act_); }

  std::unique_ptr<Layer> conv_, act_layer_;
  ops::Act act_;
  bool backward_ = true;
};

}  // namespace

bool can_fuse_conv_act(const LayerSpec& conv, const Layer& act, Layout layout) {
  const bool pointwise = conv.kind == LayerKind::Conv2d && conv.kernel_h == 1 && conv.kernel_w == 1 &&
                         conv.stride_h == 1 && conv.stride_w == 1 && conv.pad_h == 0 && conv.pad_w == 0 &&
                         conv.groups == 1;
  return layout == Layout::nhwc && pointwise && act.kernel_act() != nullptr;
}

std::unique_ptr<Layer> make_conv_act(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> act) {
  const ops::Act a = *act->kernel_act();
  return std::make_unique<ConvAct>(std::move(conv), std::move(act), a);
}

}  // namespace ember::nn
