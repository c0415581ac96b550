// One image's u8 pixels as a model's input, the one rule every path shares (Plan::gather_u8, the
// int8 plan's, calibration's): x = u8 / 255 (a multiply by 1/255), or with a per-channel affine
// (mean/std normalisation folded in, set_input_affine) x = u8 * scale[c] + shift[c].
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember::nn {

// dst, src: [C, H, W] with plane = H * W, D = C * plane elements.
template <class T>
void u8_to_input(T* dst, const uint8_t* src, size_t D, size_t plane, const std::vector<double>& scale,
                 const std::vector<double>& shift) {
  if (scale.empty()) {
    for (size_t d = 0; d < D; ++d) dst[d] = src[d] * (T(1) / T(255));
    return;
  }
  for (size_t c = 0; c * plane < D; ++c) {
    const T a = T(scale[c]), b = T(shift[c]);
    for (size_t d = c * plane; d < (c + 1) * plane; ++d) dst[d] = src[d] * a + b;
  }
}

}  // namespace ember::nn
