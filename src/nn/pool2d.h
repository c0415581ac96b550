// The layer of the two window pools, maxpool2d and avgpool2d (their op files, src/nn/ops/):
// the window checks, the output size (padding after from padding_end: ONNX's asymmetric pads and
// ceil_mode), and the ops' max (argmax indices saved for backward; channel-last too) and mean.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/op_table.h"

namespace ember::nn {

class Pool2d final : public Layer {
 public:
  Pool2d(const LayerSpec& s, bool max) : Layer(s), max_(max) {}
  Dims infer(const Dims& in) override {
    const char* what = max_ ? "maxpool2d" : "avgpool2d";
    check_window(what, in, spec_);
    const int eh = pad_after_h(spec_), ew = pad_after_w(spec_);
    // Every window holds an input position: each padding below the kernel (PyTorch: at most half).
    if (std::max(spec_.pad_h, eh) >= spec_.kernel_h || std::max(spec_.pad_w, ew) >= spec_.kernel_w || eh < 0 || ew < 0)
      throw Error(std::string(what) + ": padding (before and after) must be less than the kernel");
    in_ = in;
    out_ = {in.c, int((int64_t{in.h} + spec_.pad_h + eh - spec_.kernel_h) / spec_.stride_h + 1),
            int((int64_t{in.w} + spec_.pad_w + ew - spec_.kernel_w) / spec_.stride_w + 1)};
    return out_;
  }
  ref::PoolShape shape(int n) const {
    return {n, in_.c, in_.h, in_.w, out_.h, out_.w, spec_.kernel_h, spec_.kernel_w,
            spec_.stride_h, spec_.stride_w, spec_.pad_h, spec_.pad_w, max_ || spec_.count_include_pad};
  }
  size_t index_elems(int batch) const override { return max_ ? size_t(batch) * out_.size() : 0; }
  // A max of 0 routes its gradient to an input that is 0 (padding never wins).
  bool grad_unused_at_zero_output(bool in) const override { return max_ && in; }
  bool backward_reads_inputs() const override { return false; }  // max: the saved indices
  bool backward_reads_output() const override { return false; }
  bool runs_nhwc() const override { return max_; }  // max: channel-last loops over windows of C runs
  void forward(const ops::Exec& e, const Bufs& b, int n) override {
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (max_) ops::maxpool2d_fwd<T>(e, p<T>(b.y), b.idx, p<T>(b.x), shape(n), nhwc());
      else ops::avgpool2d_fwd<T>(e, p<T>(b.y), p<T>(b.x), shape(n));
    });
  }
  void backward(const ops::Exec& e, const Bufs& b, int n) override {
    if (!b.dx) return;
    dispatch(b.dt, [&](auto tag) {
      using T = decltype(tag);
      if (max_) ops::maxpool2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), b.idx, shape(n), nhwc());
      else ops::avgpool2d_bwd<T>(e, p<T>(b.dx), p<T>(b.dy), shape(n));
    });
  }

 private:
  bool max_;
};

// MaxPool or AveragePool: kernel_shape, strides, pads [top, left, bottom, right] (the padding
// after from padding_end), and the average's count_include_pad.
inline std::string export_pool2d(OnnxOut& g, const std::string& x, const LayerSpec& s) {
  const bool mx = s.kind == LayerKind::MaxPool2d;
  std::vector<OnnxAttr> a{{"kernel_shape", {s.kernel_h, s.kernel_w}},
                          {"strides", {s.stride_h, s.stride_w}},
                          {"pads", {s.pad_h, s.pad_w, pad_after_h(s), pad_after_w(s)}}};
  if (!mx) a.push_back({"count_include_pad", s.count_include_pad ? 1 : 0});
  return g.op(mx ? "MaxPool" : "AveragePool", {g.img(x)}, a);
}

}  // namespace ember::nn
