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

// MaxPool / AveragePool (opsets 1 to 21): kernel_shape, strides, pads or auto_pad (asymmetric:
// padding_end), ceil_mode (as padding after: max-pool padding never wins, the average's divisor
// counts the input only unless count_include_pad); each pad below the kernel; no dilations; the
// Indices output and its storage_order only when nothing reads them; count_include_pad (0, ONNX's
// default: avgpool2d's count_include_pad false).
inline bool import_pool2d(OnnxIn& g, int i) {
  const bool max = g.op_type(i) == "MaxPool";
  const OnnxValue& x = g.tensor(i, 0);
  const bool one_d = x.lay == OnnxLayout::NCL;  // [N, C, L]: a 1 x k window on ember's [C, 1, L]
  const std::string at = g.where(i);
  if (x.lay != OnnxLayout::NCHW && !one_d) throw Error(at + ": expected an [N, C, H, W] or [N, C, L] input (not channels-last, not [N, D])");
  const OnnxAttrs& a = g.attrs(i);
  if (max) a.only({"kernel_shape", "strides", "pads", "ceil_mode", "dilations", "auto_pad", "storage_order"});
  else a.only({"kernel_shape", "strides", "pads", "ceil_mode", "dilations", "auto_pad", "count_include_pad"});
  const auto k = g.window_ints(a, "kernel_shape", {}, one_d), st = g.window_ints(a, "strides", {1, 1}, one_d);
  if (k.size() != 2 || st.size() != 2) throw Error(at + ": attributes kernel_shape and strides must be " + (one_d ? "1-D" : "2-D"));
  if (!onnx_all_are(a.ints("dilations", {1, 1}), 1))
    throw Error(at + ": attribute dilations " + onnx_ints_str(a.ints("dilations", {})) + " is not supported (ember's pools have no dilation)");
  if (g.output_read(i, 1)) throw Error(at + ": the Indices output is not supported");
  g.check_strides(i, st, one_d);
  for (int64_t v : k)
    if (v < 1 || v > 65536) throw Error(at + ": attribute kernel_shape " + onnx_win_str(k, one_d) + ": each size must be in 1..65536");
  bool overhang = false;  // ceil_mode's last window past the pads
  const std::vector<int64_t> pads = g.window_pads(i, a, x.d, k, st, one_d, &overhang);
  for (size_t d = 0; d < 4; ++d)
    if (pads[d] >= k[d % 2])
      throw Error(at + ": pads " + onnx_win_str(pads, one_d) + " reach the kernel " + onnx_win_str(k, one_d) +
                  " (a window of padding only; ember's pools pad less than the kernel)");
  const bool no_pads = onnx_all_are(pads, 0), include = a.i("count_include_pad", 0) != 0;
  if (!max && include && overhang)  // ONNX divides such a window by its part inside the pads
    throw Error(at + ": count_include_pad 1 with ceil_mode windows past the pads is not supported");
  LayerSpec s;
  s.count_include_pad = max || no_pads || include;  // no pads: either
  s.kind = max ? LayerKind::MaxPool2d : LayerKind::AvgPool2d;
  s.kernel_h = int(k[0]), s.kernel_w = int(k[1]), s.stride_h = int(st[0]), s.stride_w = int(st[1]);
  s.pad_h = int(pads[0]), s.pad_w = int(pads[1]);
  if (pads[2] != pads[0] || pads[3] != pads[1]) s.pad_h_end = int(pads[2]), s.pad_w_end = int(pads[3]);
  const int64_t Ho = (x.d.h + pads[0] + pads[2] - k[0]) / st[0] + 1, Wo = (x.d.w + pads[1] + pads[3] - k[1]) / st[1] + 1;
  if (Ho < 1 || Wo < 1) throw Error(at + ": the window does not fit the input");
  g.set(i, 0, g.emit_layer(s, {&x}, "", {x.d.c, int(Ho), int(Wo)}, x.lay));
  return true;
}

}  // namespace ember::nn
