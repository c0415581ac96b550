// The fused layernorm (or layernorm2d) -> conv2d (or linear over channels) unit of ConvNeXt
// blocks: the normalised tensor lives in scratch (bf16 where the plan is), never in the arena's
// activations; the two layers are their op files'.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace ember::nn {

namespace {

// LayerNorm (either kind) -> a convolution that alone reads its output, as one unit that never
// stores the normalised tensor [N, C, H, W] in fp32: forward writes it to scratch and convolves it;
// backward recomputes it (the norm's forward again: the same bits, its mean and rstd rewritten
// with the same values) and runs the conv's backward, then the norm's, through scratch. The
// results are those of the two units; a training plan keeps one activation less per ConvNeXt
// block (16 MiB per stage-1 block of convnext-seed at batch 64) for one more pass over x.
// In a bf16 plan, where the norm writes bf16 and the conv reads it (LayerNorm over rows -> 1x1
// conv), the normalised tensor is stored in bf16 instead (half the bytes, kept in the saved
// buffer from forward to backward): the conv's GEMMs read it as their bf16 operand, and backward
// needs no recompute. The products are the same (the GEMMs round x to those bf16 values anyway).
class NormConv final : public Layer {
 public:
  NormConv(std::unique_ptr<Layer> norm, std::unique_ptr<Layer> conv)
      : Layer(norm->spec()), norm_(std::move(norm)), conv_(std::move(conv)) {}
  Dims infer(const Dims& in) override {
    in_ = in;
    mid_ = norm_->infer(in);
    return out_ = conv_->infer(mid_);
  }
  std::vector<std::vector<int>> param_shapes() const override {
    auto v = norm_->param_shapes();
    for (auto& s : conv_->param_shapes()) v.push_back(s);
    return v;
  }
  int fan_in() const override { return conv_->fan_in(); }
  int fan_out() const override { return conv_->fan_out(); }
  double flops_per_sample() const override { return conv_->flops_per_sample(); }
  bool bf16_products() const override { return conv_->bf16_products(); }
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override {
    conv_->choose_algorithm(batch, threads, pack, bf16);
  }
  std::string algorithm() const override { return conv_->algorithm(); }
  std::string weight_format() const override { return conv_->weight_format(); }
  std::vector<std::string> post_ops() const override { return conv_->post_ops(); }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return conv_->weight_bytes_packed_per_call(batch, threads, k, bf16);
  }
  void set_precision(Precision p, bool backward) override {
    bf16_ = p == Precision::bf16 && norm_->writes_bf16_output() && conv_->reads_bf16_input();
    keep_ = bf16_ && backward;
  }
  // [normalised: N x mid, fp32 only][its gradient: N x mid][the norm's or the conv's own scratch;
  // in bf16, also the norm's rows]. bf16 without backward: the bf16 tensor in the gradient's place.
  size_t workspace_elems(int batch, int threads) const override {
    size_t inner = std::max(norm_->workspace_elems(batch, threads), conv_->workspace_elems(batch, threads));
    if (bf16_) inner = std::max(inner, size_t(threads) * mid_.size());
    return mid_f32_elems(batch) + mid_elems(batch) + inner;
  }
  // The norm's own (mean and rstd), then in a bf16 training plan the bf16 normalised tensor.
  // ... and last the conv's packed weight (64-byte aligned).
  size_t saved_bytes(int batch, int threads, DType dt) const override {
    return conv_at(batch, dt) + conv_->saved_bytes(batch, threads, dt);
  }
  std::string saved_what() const override {
    return std::string(keep_ ? "bf16 normalised input, mean and rstd" : "mean and rstd") +
           (conv_->saved_bytes(1, 1, DType::f32) ? ", packed weight" : "");
  }
  bool backward_reads_output() const override { return false; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    Bufs nb, cb;
    split(b, &nb, &cb);
    if (bf16_) {  // set by the plan: a bf16 plan (Exec::bf16)
      cb.xh = mid_bf16(b);
      cb.x = cb.xs[0] = nullptr;
      norm_->forward_bf16(e, nb, n, const_cast<uint16_t*>(cb.xh), static_cast<float*>(nb.ws));
    } else {
      norm_->forward(e, nb, n);
    }
    conv_->forward(e, cb, n);
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    Bufs nb, cb;
    split(b, &nb, &cb);
    if (keep_) {
      cb.xh = mid_bf16(b);
      cb.x = cb.xs[0] = nullptr;
    } else {
      norm_->forward(e, nb, n);  // the normalised tensor again, for the conv's weight gradient
    }
    conv_->backward(e, cb, n);
    nb.dy = cb.dx;
    norm_->backward(e, nb, n);
  }

 private:
  size_t mid_elems(int batch) const { return (size_t(batch) * mid_.size() + 15) / 16 * 16; }  // 64-byte steps
  size_t mid_f32_elems(int batch) const { return bf16_ ? 0 : mid_elems(batch); }
  static size_t mid_bf16_at(size_t own) { return (own + 63) / 64 * 64; }
  size_t conv_at(int batch, DType dt) const {
    const size_t own = norm_->saved_bytes(batch, 1, dt);
    return (keep_ ? mid_bf16_at(own) + mid_elems(batch) * sizeof(uint16_t) + 63 : own + 63) / 64 * 64;
  }
  // Where the bf16 normalised tensor lives: the saved buffer (training), else the gradient's scratch.
  uint16_t* mid_bf16(const Bufs& b) const {
    if (keep_) return reinterpret_cast<uint16_t*>(static_cast<std::byte*>(b.saved) +
                                                  mid_bf16_at(norm_->saved_bytes(b.batch, 1, b.dt)));
    return reinterpret_cast<uint16_t*>(static_cast<std::byte*>(b.ws) + mid_f32_elems(b.batch) * esize(b.dt));
  }
  // The norm's and the conv's views of the unit's buffers.
  void split(const Bufs& b, Bufs* nb, Bufs* cb) const {
    std::byte* mid = static_cast<std::byte*>(b.ws);
    std::byte* dmid = mid + mid_f32_elems(b.batch) * esize(b.dt);
    std::byte* inner = dmid + mid_elems(b.batch) * esize(b.dt);
    *nb = b;
    nb->y = bf16_ ? nullptr : mid;
    nb->ws = inner;
    nb->w2 = nb->b2 = nullptr, nb->dw2 = nb->db2 = nullptr;
    nb->wh = nb->wh2 = nullptr;
    nb->xh = nullptr;
    *cb = b;
    cb->nin = 1;
    cb->x = cb->xs[0] = bf16_ ? nullptr : mid;
    cb->xh = nullptr;
    cb->dx = cb->dxs[0] = dmid;
    cb->w = b.w2, cb->b = b.b2, cb->dw = b.dw2, cb->db = b.db2;
    cb->w2 = cb->b2 = nullptr, cb->dw2 = cb->db2 = nullptr;
    cb->wh = b.wh2, cb->wh2 = nullptr;
    cb->ws = inner;
    cb->saved = conv_->saved_bytes(b.batch, 1, b.dt) ? static_cast<std::byte*>(b.saved) + conv_at(b.batch, b.dt) : nullptr;
    cb->idx = nullptr;
    cb->dx_unused_at_zero = false;
  }
  bool bf16_ = false, keep_ = false;
  std::unique_ptr<Layer> norm_, conv_;
  Dims mid_;
};

}  // namespace

bool can_fuse_norm_conv(const LayerSpec& norm, const LayerSpec& conv) {
  const bool is_norm = norm.kind == LayerKind::LayerNorm || norm.kind == LayerKind::LayerNorm2d;
  const bool is_conv = conv.kind == LayerKind::Conv2d || (conv.kind == LayerKind::Linear && conv.over_channels);
  return is_norm && norm.bias && is_conv;
}

std::unique_ptr<Layer> make_norm_conv(std::unique_ptr<Layer> norm, std::unique_ptr<Layer> conv) {
  return std::make_unique<NormConv>(std::move(norm), std::move(conv));
}

}  // namespace ember::nn
