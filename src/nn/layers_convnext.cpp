// The ConvNeXt layers as graph nodes: LayerNorm over trailing per-sample dims (per-element affine,
// PyTorch's nn.LayerNorm(shape)), LayerNorm2d over channels at each position (torchvision's),
// global average pooling (AdaptiveAvgPool2d(1)), layer scale (torchvision's CNBlock.layer_scale,
// shape [C, 1, 1]) and zero padding. Each runs an op of ops/norm.h.
#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include "ember/error.h"
#include "nn/layers.h"
#include "ops/norm.h"

namespace ember::nn {

namespace {

size_t esize(DType dt) { return dt == DType::f64 ? 8 : 4; }

// LayerNorm over the last norm_dims of the sample's dims (flat: [D]; images: [C, H, W], so 1 is
// [W], 2 is [H, W], 3 or 0 the whole sample). Rows: batch x the leading dims. Saves mean, rstd.
class LayerNorm final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    // dims 3 takes a flat [D] as the image [D, 1, 1] (a stage of 1x1 keeps PyTorch's [C, 1, 1]).
    const int rank = in.flat() && spec_.norm_dims != 3 ? 1 : 3, k = spec_.norm_dims ? spec_.norm_dims : rank;
    if (k > rank) throw Error("layernorm: dims " + std::to_string(k) + " is more than the input's " + std::to_string(rank));
    const int d3[3] = {in.c, in.h, in.w};
    shape_.assign(d3 + (rank == 1 ? 0 : 3 - k), d3 + (rank == 1 ? 1 : 3));
    D_ = 1;
    for (int x : shape_) D_ *= x;
    lead_ = int(in.size() / size_t(D_));
    return in_ = out_ = in;
  }
  std::vector<std::vector<int>> param_shapes() const override {
    if (!spec_.bias) return {};
    return {shape_, shape_};
  }
  bool param_constant(size_t t, double* v) const override { return *v = t == 0 ? 1 : 0, true; }
  // Channel-last over the whole image sample: the same rows, the affine parameters [C, H, W]
  // permuted to [H, W, C] in scratch (and their gradients back).
  bool runs_nhwc() const override { return shape_.size() == 3 && !in_.flat(); }
  size_t workspace_elems(int, int threads) const override {
    return ops::layernorm_workspace(D_, threads) + (nhwc() ? 4 * size_t(D_) : 0);
  }
  size_t saved_bytes(int batch, int, DType dt) const override { return 2 * size_t(batch) * lead_ * esize(dt); }
  std::string saved_what() const override { return "mean and rstd"; }
  bool backward_reads_output() const override { return false; }
  bool writes_bf16_output() const override { return true; }
  void forward_bf16(const ops::Exec& e, const Bufs& b, int n, uint16_t* yh, float* rows) override {
    float* mean = p<float>(b.saved);
    ops::layernorm_fwd_bf16(e, yh, mean, mean + rows_max(b), p<float>(b.x), p<float>(b.w), p<float>(b.b), n * lead_,
                            D_, float(spec_.eps), rows);
  }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const int R = n * lead_, Rmax = rows_max(b);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* mean = p<T>(b.saved);
      const T *w = p<T>(b.w), *bias = p<T>(b.b);
      if (nhwc() && w) {
        T* wp = p<T>(b.ws) + ops::layernorm_workspace(D_, e.pool.size());
        permute(e, wp, w, true), permute(e, wp + D_, bias, true);
        w = wp, bias = wp + D_;
      }
      ops::layernorm_fwd<T>(e, p<T>(b.y), mean, mean + Rmax, p<T>(b.x), w, bias, R, D_, T(spec_.eps));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const int R = n * lead_, Rmax = rows_max(b);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* mean = p<T>(b.saved);
      const T* w = p<T>(b.w);
      T *dw = p<T>(b.dw), *db = p<T>(b.db);
      T* wp = p<T>(b.ws) + ops::layernorm_workspace(D_, e.pool.size());
      const bool permuted = nhwc() && w;
      if (permuted) permute(e, wp, w, true), w = wp, dw = dw ? wp + 2 * D_ : nullptr, db = db ? wp + 3 * D_ : nullptr;
      ops::layernorm_bwd<T>(e, p<T>(b.dx), dw, db, p<T>(b.dy), p<T>(b.x), mean, mean + Rmax, w, R, D_, p<T>(b.ws));
      if (permuted && dw) permute(e, p<T>(b.dw), dw, false);
      if (permuted && db) permute(e, p<T>(b.db), db, false);
    });
  }

 private:
  // [C, H, W] -> [H, W, C] (to_hwc), or back: every forward of a channel-last plan (the weights
  // move in training), so fp32 takes the kernel table's blocked transpose (a plain loop scatters
  // with stride C: at batch 1 it cost more than the normalisation itself); f64 the loop.
  template <class T>
  void permute(const ops::Exec& e, T* dst, const T* src, bool to_hwc) const {
    const int C = in_.c, HW = in_.h * in_.w;
    if constexpr (std::is_same_v<T, float>) {
      if (to_hwc) e.k.transpose(dst, size_t(C), src, size_t(HW), C, HW);
      else e.k.transpose(dst, size_t(HW), src, size_t(C), HW, C);
      return;
    }
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < HW; ++i) {
        if (to_hwc) dst[size_t(i) * C + c] = src[size_t(c) * HW + i];
        else dst[size_t(c) * HW + i] = src[size_t(i) * C + c];
      }
  }
  int rows_max(const Bufs& b) const { return b.batch * lead_; }
  std::vector<int> shape_;
  int D_ = 1, lead_ = 1;
};

// torchvision's LayerNorm2d: over C at each position of [C, H, W]; weight and bias [C].
class LayerNorm2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override {
    if (!spec_.bias) return {};
    return {{in_.c}, {in_.c}};
  }
  bool param_constant(size_t t, double* v) const override { return *v = t == 0 ? 1 : 0, true; }
  size_t workspace_elems(int, int threads) const override { return ops::layernorm_workspace(in_.c, threads); }
  size_t saved_bytes(int batch, int, DType dt) const override { return 2 * size_t(batch) * in_.h * in_.w * esize(dt); }
  std::string saved_what() const override { return "mean and rstd"; }
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return true; }  // channel-last: a LayerNorm over rows of C
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t half = size_t(b.batch) * in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* mean = p<T>(b.saved);
      if (nhwc())
        return ops::layernorm_fwd<T>(e, p<T>(b.y), mean, mean + half, p<T>(b.x), p<T>(b.w), p<T>(b.b),
                                     n * in_.h * in_.w, in_.c, T(spec_.eps));
      ops::layernorm2d_fwd<T>(e, p<T>(b.y), mean, mean + half, p<T>(b.x), p<T>(b.w), p<T>(b.b), n, in_.c,
                              in_.h * in_.w, T(spec_.eps));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const size_t half = size_t(b.batch) * in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      const T* mean = p<T>(b.saved);
      if (nhwc())
        return ops::layernorm_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), mean, mean + half,
                                     p<T>(b.w), n * in_.h * in_.w, in_.c, p<T>(b.ws));
      ops::layernorm2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.db), p<T>(b.dy), p<T>(b.x), mean, mean + half,
                              p<T>(b.w), n, in_.c, in_.h * in_.w, p<T>(b.ws));
    });
  }
};

// AdaptiveAvgPool2d(1): [C, H, W] -> [C] (a flat [C, 1, 1]).
class GlobalAvgPool final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = {in.c, 1, 1};
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return true; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (nhwc()) return nhwc_fwd<T>(e, p<T>(b.y), p<T>(b.x), n);
      ops::global_avgpool_fwd<T>(e, p<T>(b.y), p<T>(b.x), n, in_.c, in_.h * in_.w);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (nhwc()) return nhwc_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), n);
      ops::global_avgpool_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), n, in_.c, in_.h * in_.w);
    });
  }

 private:
  // Channel-last: y[n, c] = the sum over positions of x[n, hw, c] (in position order) / HW;
  // dx[n, hw, c] = dy[n, c] / HW. Split over samples.
  template <class T>
  void nhwc_fwd(const ops::Exec& e, T* y, const T* x, int n) const {
    const int C = in_.c, HW = in_.h * in_.w;
    e.pool.run([&](int t) {
      const Range r = split_range(n, t, e.pool.size());
      for (int64_t i = r.begin; i < r.end; ++i) {
        T* yi = y + i * C;
        std::fill(yi, yi + C, T(0));
        for (int j = 0; j < HW; ++j)
          for (int c = 0; c < C; ++c) yi[c] += x[(size_t(i) * HW + j) * C + c];
        for (int c = 0; c < C; ++c) yi[c] /= T(HW);
      }
    });
  }
  template <class T>
  void nhwc_bwd(const ops::Exec& e, T* dx, const T* dy, int n) const {
    const int C = in_.c, HW = in_.h * in_.w;
    e.pool.run([&](int t) {
      const Range r = split_range(n, t, e.pool.size());
      for (int64_t i = r.begin; i < r.end; ++i)
        for (int j = 0; j < HW; ++j)
          for (int c = 0; c < C; ++c) dx[(size_t(i) * HW + j) * C + c] = dy[i * C + c] / T(HW);
    });
  }
};

// y = x * s[c], s of shape [C, 1, 1] named "layer_scale" (torchvision's CNBlock).
class LayerScale final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override { return in_ = out_ = in; }
  std::vector<std::vector<int>> param_shapes() const override { return {{in_.c, 1, 1}}; }
  bool param_constant(size_t, double* v) const override { return *v = spec_.scale_init, true; }
  bool backward_reads_output() const override { return false; }
  size_t workspace_elems(int, int threads) const override { return size_t(in_.c) * size_t(threads); }
  // Channel-last, [N, HW, C] is [N * HW, C, 1]: the same op over rows of C.
  bool runs_nhwc() const override { return true; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    const int rows = nhwc() ? n * in_.h * in_.w : n, HW = nhwc() ? 1 : in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::channel_scale_fwd<T>(e, p<T>(b.y), p<T>(b.x), p<T>(b.w), rows, in_.c, HW);
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    const int rows = nhwc() ? n * in_.h * in_.w : n, HW = nhwc() ? 1 : in_.h * in_.w;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::channel_scale_bwd<T>(e, p<T>(b.dx), p<T>(b.dw), p<T>(b.dy), p<T>(b.x), p<T>(b.w), rows, in_.c, HW,
                                p<T>(b.ws));
    });
  }
};

// Stochastic depth (torchvision's StochasticDepth(p, "row")): in train mode each sample is
// dropped (scale 0) with probability p, else scaled by 1 / (1 - p); in eval mode the identity.
// Runs in place; backward reads only the saved per-sample scales.
class DropPath final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    if (!(spec_.drop_prob >= 0 && spec_.drop_prob < 1))
      throw Error("droppath: p must be in [0, 1), found " + std::to_string(spec_.drop_prob));
    return in_ = out_ = in;
  }
  size_t saved_bytes(int batch, int, DType dt) const override { return size_t(batch) * esize(dt); }
  std::string saved_what() const override { return "sample scales"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool runs_in_place() const override { return true; }
  bool layout_agnostic() const override { return true; }  // per sample
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* scale = p<T>(b.saved);
      if (b.train_mode && spec_.drop_prob > 0) ref::drop_path_scales<T>(scale, b.noise, n, spec_.drop_prob);
      else std::fill(scale, scale + n, T(1));
      ops::sample_scale<T>(e, p<T>(b.y), p<T>(b.x), scale, n, in_.size());
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::sample_scale<T>(e, p<T>(b.dx), p<T>(b.dy), p<T>(b.saved), n, in_.size());
    });
  }
};

// nn.ZeroPad2d((w, w, h, h)): [C, H, W] -> [C, H + 2h, W + 2w].
class ZeroPad2d final : public Layer {
 public:
  using Layer::Layer;
  Dims infer(const Dims& in) override {
    in_ = in;
    return out_ = {in.c, in.h + 2 * spec_.pad_h, in.w + 2 * spec_.pad_w};
  }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  ref::ZeroPad2d shape(int n) const { return {n, in_.c, in_.h, in_.w, spec_.pad_h, spec_.pad_h, spec_.pad_w, spec_.pad_w}; }
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::zero_pad_fwd<T>(e, p<T>(b.y), p<T>(b.x), shape(n));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::zero_pad_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), shape(n));
    });
  }
};

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
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override { conv_->choose_algorithm(batch, threads, pack, bf16); }
  std::string algorithm() const override { return conv_->algorithm(); }
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
  size_t saved_bytes(int batch, int threads, DType dt) const override {
    const size_t own = norm_->saved_bytes(batch, threads, dt);
    return keep_ ? mid_bf16_at(own) + mid_elems(batch) * sizeof(uint16_t) : own;
  }
  std::string saved_what() const override { return keep_ ? "bf16 normalised input, mean and rstd" : "mean and rstd"; }
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
    cb->saved = nullptr;
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

std::unique_ptr<Layer> make_convnext_layer(const LayerSpec& s) {
  switch (s.kind) {
    case LayerKind::LayerNorm: return std::make_unique<LayerNorm>(s);
    case LayerKind::LayerNorm2d: return std::make_unique<LayerNorm2d>(s);
    case LayerKind::GlobalAvgPool: return std::make_unique<GlobalAvgPool>(s);
    case LayerKind::LayerScale: return std::make_unique<LayerScale>(s);
    case LayerKind::ZeroPad2d: return std::make_unique<ZeroPad2d>(s);
    case LayerKind::DropPath: return std::make_unique<DropPath>(s);
    default: return nullptr;
  }
}

}  // namespace ember::nn
