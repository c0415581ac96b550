// The inference plan's conv2d+batchnorm2d[+add][+<act>] unit: a Conv2d whose output only a
// BatchNorm2d reads runs once with the eval-mode BN folded into its weight and bias
// (ref::batchnorm_fold), refolded whenever the parameters may have changed (Bufs::param_version);
// a residual add (the unit's second input) and an activation after it are the conv's post-ops,
// applied per sample while its output is in cache (ops::ConvPost). In train mode the BN runs
// unfolded (batch statistics), then the post-ops. Either layout (a channel-last plan's unit runs nhwc).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/ref/ref_batchnorm.h"
#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

namespace {

class ConvBatchNorm final : public Layer {
 public:
  ConvBatchNorm(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> bn, bool residual, std::unique_ptr<Layer> act)
      : Layer(conv->spec()), conv_(std::move(conv)), bn_(std::move(bn)), act_layer_(std::move(act)), residual_(residual) {
    if (act_layer_) act_ = *act_layer_->kernel_act();
  }
  Dims infer_inputs(const std::vector<Dims>& in) override {
    if (in.size() != (residual_ ? 2u : 1u)) throw Error("internal: conv2d+batchnorm2d+add takes the conv's input and the residual");
    return infer(in[0]);
  }
  Dims infer(const Dims& in) override {
    in_ = in;
    out_ = conv_->infer(in);
    bn_->infer(out_);
    per_ = size_t(in.c / spec_.groups) * spec_.kernel_h * spec_.kernel_w;
    return out_;
  }
  std::vector<std::vector<int>> param_shapes() const override {
    auto v = conv_->param_shapes();
    for (auto& s : bn_->param_shapes()) v.push_back(s);
    return v;
  }
  int fan_in() const override { return conv_->fan_in(); }
  int fan_out() const override { return conv_->fan_out(); }
  size_t workspace_elems(int batch, int threads) const override { return conv_->workspace_elems(batch, threads); }
  // The conv's packed weight (of the fold), the folded weight [K, per] and bias [K] (64-byte
  // steps), then the BN's mean and rstd (train mode runs it unfolded).
  size_t saved_bytes(int batch, int threads, DType dt) const override {
    return conv_bytes(batch, threads, dt) + fold_elems() * esize(dt) + bn_->saved_bytes(batch, threads, dt);
  }
  std::string saved_what() const override { return "folded and packed weight and bias"; }
  void set_precision(Precision p, bool backward) override { conv_->set_precision(p, backward); }
  void choose_algorithm(int batch, int threads, const Kernels* pack, bool bf16) override {
    threads_ = threads;
    conv_->choose_algorithm(batch, threads, pack, bf16);
  }
  std::string algorithm() const override { return conv_->algorithm(); }
  std::string weight_format() const override { return conv_->weight_format(); }
  std::vector<std::string> post_ops() const override {
    std::vector<std::string> v{"batchnorm2d-fold", "bias"};
    if (residual_) v.push_back("add");
    if (act_layer_) v.push_back(layer_kind_name(act_layer_->spec().kind));
    return v;
  }
  size_t weight_bytes_packed_per_call(int batch, int threads, const Kernels& k, bool bf16) const override {
    return conv_->weight_bytes_packed_per_call(batch, threads, k, bf16);
  }
  // The model's operations (the BN's too), so that rates compare with the unfused plan's.
  double flops_per_sample() const override { return conv_->flops_per_sample() + bn_->flops_per_sample(); }
  bool bf16_products() const override { return conv_->bf16_products(); }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }

  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    if (b.train_mode) return unfolded(e, b, n);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      T* wf = fold_at<T>(b);
      if (folded_ != b.param_version) fold<T>(e, b, wf);
      folded_ = b.param_version;
      Bufs cb = conv_bufs(b);
      cb.saved = b.saved;  // the conv's packed weight first
      cb.w = wf;
      cb.b = wf + bias_at();
      cb.wh = nullptr;  // a bf16 plan's GEMM rounds the folded weight as it packs it
      cb.post_residual = residual_ ? b.xs[1] : nullptr;
      cb.post_act = act_layer_ ? &act_ : nullptr;
      conv_->forward(e, cb, n);
    });
  }
  void backward(const ops::Exec&, const Bufs&, int) override {
    throw Error("internal: conv2d+batchnorm2d runs in inference plans only (no backward)");
  }

 private:
  static size_t esize(DType dt) { return dt == DType::f64 ? 8 : 4; }
  size_t conv_bytes(int batch, int threads, DType dt) const { return (conv_->saved_bytes(batch, threads, dt) + 63) / 64 * 64; }
  template <class T>
  T* fold_at(const Bufs& b) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(b.saved) + conv_bytes(b.batch, threads_, b.dt));
  }
  size_t bias_at() const { return (size_t(spec_.out) * per_ + 15) / 16 * 16; }
  size_t fold_elems() const { return bias_at() + (size_t(spec_.out) + 15) / 16 * 16; }

  // The folded weight at out, its bias at out + bias_at(), from b's parameters (w, b: the conv's;
  // w2, b2: the BN's affine, null without; rs: its running statistics), channels split over the pool.
  template <class T>
  void fold(const ops::Exec& e, const Bufs& b, T* out) const {
    const int K = spec_.out;
    const bool affine = bn_->spec().bias;
    auto run = [&](int k0, int k1) {
      ref::batchnorm_fold<T>(out, out + bias_at(), p<T>(b.w), p<T>(b.b), affine ? p<T>(b.w2) : nullptr,
                             affine ? p<T>(b.b2) : nullptr, p<T>(b.rs), K, per_, bn_->spec().eps, k0, k1);
    };
    if (e.pool.size() == 1 || size_t(K) * per_ < (size_t(1) << 14)) return run(0, K);
    e.pool.run([&](int t) {
      const Range r = split_range(K, t, e.pool.size());
      if (r.end > r.begin) run(int(r.begin), int(r.end));
    });
  }
  // The conv's view of the unit's buffers (its own parameters in w, b).
  static Bufs conv_bufs(const Bufs& b) {
    Bufs cb = b;
    cb.w2 = cb.b2 = nullptr;
    cb.wh2 = nullptr;
    cb.wt = nullptr;
    cb.rs = nullptr, cb.rs_update = nullptr;
    cb.saved = nullptr;
    return cb;
  }
  // Train mode: the conv into y, then the BN over y in place (batch statistics), then the post-ops.
  void unfolded(const ops::Exec& e, const Bufs& b, int n) {
    Bufs cb = conv_bufs(b);
    cb.nin = 1;
    conv_->forward(e, cb, n);
    Bufs nb = b;
    nb.saved = reinterpret_cast<std::byte*>(fold_at<std::byte>(b)) + fold_elems() * esize(b.dt);
    nb.x = nb.xs[0] = b.y;
    nb.w = b.w2, nb.b = b.b2;
    nb.w2 = nb.b2 = nullptr;
    nb.wh = nb.wh2 = nullptr;
    nb.wt = nullptr;
    nb.nin = 1;
    bn_->forward(e, nb, n);
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      ops::post_ops_fwd<T>(e, p<T>(b.y), {residual_ ? p<T>(b.xs[1]) : nullptr, act_layer_ ? &act_ : nullptr},
                           size_t(n) * out_.size());
    });
  }

  std::unique_ptr<Layer> conv_, bn_, act_layer_;
  bool residual_;
  ops::Act act_{};
  size_t per_ = 0;  // weights per output channel: C / groups x R x S
  uint64_t folded_ = ~uint64_t(0);  // the param_version the saved fold was made from (none yet)
  int threads_ = 1;                  // the plan's (the conv's saved size reads it)
};

}  // namespace

bool can_fuse_conv_bn(const LayerSpec& conv, const LayerSpec& bn) {
  return conv.kind == LayerKind::Conv2d && bn.kind == LayerKind::BatchNorm2d;
}

std::unique_ptr<Layer> make_conv_bn(std::unique_ptr<Layer> conv, std::unique_ptr<Layer> bn, bool residual,
                                    std::unique_ptr<Layer> act) {
  return std::make_unique<ConvBatchNorm>(std::move(conv), std::move(bn), residual, std::move(act));
}

}  // namespace ember::nn
