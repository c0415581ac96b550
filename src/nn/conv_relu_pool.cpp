// The fused conv2d (stride 1) -> relu -> maxpool2d 2x2/2 unit, the seed CNN's first layers: the
// plan fuses the three model layers when it finds them in a row (graph.cpp's fusion table); the
// kernels are ops/conv_fused.cpp's.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "nn/layers.h"
#include "nn/op_table.h"
#include "ops/conv_desc.h"

namespace ember::nn {

namespace {

// Conv2d (stride 1) -> ReLU -> MaxPool2d 2x2/2 as one unit (the plan fuses the three model
// layers when it finds them in a row): the conv output and the ReLU output are never stored.
class ConvReluPool final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    conv_out_ = conv_->infer(in);
    in_ = in;
    out_ = {conv_out_.c, conv_out_.h / 2, conv_out_.w / 2};
    return out_;
  }
  std::vector<std::vector<int>> param_shapes() const override { return conv_->param_shapes(); }
  bool grad_unused_at_zero_output(bool) const override { return true; }  // code -1: no gradient
  // bf16 products in forward (Kernels::conv_s1_relu_pool_bf16); the weight gradient from the
  // pooled gradient stays fp32 (C = 1: shape-bound, see docs/bf16.md).
  bool bf16_products() const override { return true; }
  bool bf16_backward_products() const override { return conv_->bf16_products(); }
  int fan_in() const override { return conv_->fan_in(); }
  int fan_out() const override { return conv_->fan_out(); }
  size_t workspace_elems(int batch, int threads) const override {
    return ops::conv_relu_pool_workspace(conv_shape(batch), threads);
  }
  std::string algorithm() const override { return "conv-relu-pool (fused direct kernels)"; }
  std::string weight_format() const override { return packed_elems_ ? "kernel-tiles" : "kcrs"; }
  std::vector<std::string> post_ops() const override { return {"bias", "relu", "maxpool2d"}; }
  // An inference plan's (pack) fused kernel reads its weights and bias packed once per parameter
  // change in its own layout (Kernels::conv_s1_relu_pool_pack); unpacked, the fast tables' kernels
  // arrange them per sample (the reference reads them as stored).
  void choose_algorithm(int batch, int, const Kernels* pack, bool bf16) override {
    packed_elems_ = pack ? ops::conv_relu_pool_pack_elems(*pack, conv_shape(batch), bf16) : 0;
  }
  size_t saved_bytes(int, int, DType dt) const override {
    return dt == DType::f32 ? WeightPack::bytes(packed_elems_) : 0;
  }
  std::string saved_what() const override { return "packed weight"; }
  size_t weight_bytes_packed_per_call(int batch, int, const Kernels& k, bool) const override {
    return k.gemm_packs && !packed_elems_ ? size_t(batch) * conv_->fan_in() * spec_.out * sizeof(float) : 0;
  }
  // One int8 window code per pooled value, packed four to an int32 index element.
  size_t index_elems(int batch) const override { return (size_t(batch) * out_.size() + 3) / 4; }
  double flops_per_sample() const override { return conv_->flops_per_sample(); }
  bool backward_reads_output() const override { return false; }  // the window codes
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const float* wpk = nullptr;
      if constexpr (std::is_same_v<T, float>)
        if (packed_elems_ && b.saved)
          wpk = pack_.get(b, [&](float* to) {
            ops::conv_relu_pool_pack(e, to, p<float>(b.w), p<float>(b.b), conv_shape(b.batch), p<float>(b.ws));
          });
      ops::conv_relu_pool_fwd<T>(e, p<T>(b.y), reinterpret_cast<int8_t*>(b.idx), p<T>(b.x), p<T>(b.w), p<T>(b.b),
                                 conv_shape(n), p<T>(b.ws), b.bg, !b.frozen, wpk);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::conv_relu_pool_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy),
                                 reinterpret_cast<const int8_t*>(b.idx), p<T>(b.x), p<T>(b.w), conv_shape(n), p<T>(b.ws));
    });
    if (b.bg && b.db)  // the background windows' bias gradient, from the Linear's backward
      for (int k = 0; k < out_.c; ++k) p<float>(b.db)[k] += b.bg->bias_grad[k];
  }
  // Whether a link (ops::Background) can carry this unit's background: groups 1, a padded input
  // of at most 64 x 64 and a kernel of at most 32 x 32 (the row bit masks), and a bias (without
  // one the background is 0 already).
  bool can_split_background() const override {
    return spec_.groups == 1 && spec_.bias && in_.h + 2 * spec_.pad_h <= 64 && in_.w + 2 * spec_.pad_w <= 64 &&
           spec_.kernel_h <= 32 && spec_.kernel_w <= 32;
  }

 private:
  ConvShape conv_shape(int n) const { return conv2d_shape(conv_->spec(), in_, conv_out_, n); }
  std::unique_ptr<Layer> conv_ = op_desc(LayerKind::Conv2d).make(spec_);  // conv2d's layer
  Dims conv_out_;
  size_t packed_elems_ = 0;  // floats of the packed weights (an inference plan's), 0: none
  WeightPack pack_;
};

}  // namespace

bool can_fuse_conv_relu_pool(const LayerSpec* l, size_t count, const Dims& in) {
  if (count < 3 || l[0].kind != LayerKind::Conv2d || l[1].kind != LayerKind::ReLU ||
      l[2].kind != LayerKind::MaxPool2d)
    return false;
  const LayerSpec &c = l[0], &m = l[2];
  const int P = out_size(in.h, c.kernel_h, 1, c.pad_h), Q = out_size(in.w, c.kernel_w, 1, c.pad_w);
  return c.stride_h == 1 && c.stride_w == 1 && m.kernel_h == 2 && m.kernel_w == 2 &&
         m.stride_h == 2 && m.stride_w == 2 && m.pad_h == 0 && m.pad_w == 0 && m.pad_h_end <= 0 && m.pad_w_end <= 0 &&
         P >= 2 && Q >= 2;
}

std::unique_ptr<Layer> make_conv_relu_pool(const LayerSpec& conv) {
  return std::make_unique<ConvReluPool>(conv);
}

}  // namespace ember::nn
