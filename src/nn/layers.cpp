// What the layers share: the shape checks their infer() runs (messages say what was expected and
// what was found; the plan prefixes them with the model file and the layer index) and the
// factory that asks the op table for an op's layer. Each op's layer is in its file, src/nn/ops/.
#include "nn/layers.h"
#include "nn/op_table.h"

#include <cstdint>
#include <string>

#include "ember/error.h"

namespace ember::nn {

std::string dims_str(const Dims& d) {
  return d.flat() ? "[" + std::to_string(d.c) + "]"
                  : "[" + std::to_string(d.c) + ", " + std::to_string(d.h) + ", " + std::to_string(d.w) + "]";
}

void check_index(const char* layer, const char* what, int64_t v) {
  constexpr int64_t kMaxIndex = INT32_MAX;  // the kernels index per-sample buffers with int
  if (v > kMaxIndex)
    throw Error(std::string(layer) + ": " + what + " " + std::to_string(v) + " is more than " +
                std::to_string(kMaxIndex) + " (too large)");
}

void check_window(const char* what, const Dims& in, const LayerSpec& s) {
  // A flat [D] is a [D, 1, 1] image: a window fits it only through padding (a 'same' 7x7 conv at
  // a stage of 1x1, as convnext-fashion's last).
  if (in.flat() && in.c > 0 && (1 + 2 * s.pad_h < s.kernel_h || 1 + 2 * s.pad_w < s.kernel_w))
    throw Error(std::string(what) + " needs an image input [C, H, W], found " + dims_str(in));
  if (s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 || s.pad_h < 0 || s.pad_w < 0)
    throw Error(std::string(what) + ": kernel and stride must be >= 1 and padding >= 0");
  const int64_t hp = int64_t{in.h} + s.pad_h + pad_after_h(s), wp = int64_t{in.w} + s.pad_w + pad_after_w(s);
  if (hp < s.kernel_h || wp < s.kernel_w)
    throw Error(std::string(what) + ": kernel " + std::to_string(s.kernel_h) + "x" +
                std::to_string(s.kernel_w) + " is larger than the padded input " + dims_str(in));
  check_index(what, "padded input size (C x H x W with padding)", int64_t{in.c} * hp * wp);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& s) {
  const OpDesc& d = op_desc(s.kind);
  if (!d.make) throw Error(std::string("internal: op ") + d.name + " has no layer");
  return d.make(s);
}

}  // namespace ember::nn
