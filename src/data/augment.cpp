// Per-sample augmentation on u8 planar images: zero padding + random crop (torchvision's
// RandomCrop(size, padding)), RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, ten tries then the
// centre, as torchvision), horizontal flip; the eval path's centre crop; --normalize parsing.
// Randomness per sample from Pcg32(seed, stream of (epoch, index)): thread-count independent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "ember/error.h"
#include "ember/loader.h"
#include "ember_support/files.h"

namespace ember {
namespace {
constexpr double kMinStd = 1e-6, kMaxStd = 1e6, kMaxMean = 1e6;  // documented in docs/data.md
}  // namespace

void parse_normalize(const std::string& text, int channels, Augment& a, const std::string& what) {
  a.mean.clear(), a.std.clear();
  if (text == "none") return;
  if (text == "imagenet") {
    if (channels != 3) throw Error(what + ": imagenet needs 3 channels, the data has " + std::to_string(channels));
    a.mean = {0.485, 0.456, 0.406}, a.std = {0.229, 0.224, 0.225};
    return;
  }
  std::vector<double> v;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t j = std::min(text.find(',', i), text.size());
    const std::string s = text.substr(i, j - i);
    char* end = nullptr;
    const double x = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(x))
      throw Error(what + ": expected none, imagenet, M,S or M1,..,S1,.. (one mean and std per channel), found '" +
                  one_line(text) + "'");
    v.push_back(x);
    i = j + 1;
  }
  if (v.size() != 2 && v.size() != size_t(2 * channels))
    throw Error(what + ": " + std::to_string(v.size()) + " numbers for data of " + std::to_string(channels) +
                (channels == 1 ? " channel: expected 2 (M,S)"
                               : " channels: expected 2 (M,S for all) or " + std::to_string(2 * channels) +
                                     " (a mean per channel, then a std per channel)"));
  const size_t per = v.size() / 2;
  for (int c = 0; c < channels; ++c) {
    a.mean.push_back(v[per == 1 ? 0 : size_t(c)]);
    a.std.push_back(v[per == 1 ? 1 : per + size_t(c)]);
    // 1/std scales the input: below kMinStd (or above kMaxStd) it is no normalisation but an overflow.
    if (!(a.std.back() >= kMinStd && a.std.back() <= kMaxStd) || std::fabs(a.mean.back()) > kMaxMean) {
      char found[96];
      std::snprintf(found, sizeof found, "mean %g, std %g", a.mean.back(), a.std.back());
      throw Error(what + ": expected a std in [1e-06, 1e+06] and a mean in [-1e+06, 1e+06], found " + found +
                  (channels > 1 ? " for channel " + std::to_string(c) : std::string()));
    }
  }
}

void input_affine(const Augment& a, std::vector<double>* scale, std::vector<double>* shift) {
  scale->clear(), shift->clear();
  for (size_t c = 0; c < a.mean.size(); ++c) {
    scale->push_back(1.0 / (255.0 * a.std[c]));
    shift->push_back(-a.mean[c] / a.std[c]);
  }
}

Size2 augmented_size(const Augment& a, int H, int W, const std::string& what) {
  if (a.crop == 0) return {H, W};
  if (!a.resized_crop && (a.crop > H + 2 * a.pad || a.crop > W + 2 * a.pad))
    throw Error(what + ": crop " + std::to_string(a.crop) + " is larger than the padded image " +
                std::to_string(W + 2 * a.pad) + "x" + std::to_string(H + 2 * a.pad));
  return {a.crop, a.crop};
}

namespace {

// dst[C, OH, OW] = the window at (y0, x0) of src padded by `pad` zeros, mirrored when flip. Each
// row: zeros, a copy of the part inside the image, zeros.
void crop(uint8_t* dst, const uint8_t* src, int C, int H, int W, int pad, Size2 o, int y0, int x0, bool flip) {
  const int xa = std::clamp(pad - x0, 0, o.w), xb = std::clamp(W + pad - x0, xa, o.w);  // inside: x in [xa, xb)
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < o.h; ++y) {
      uint8_t* d = dst + (size_t(c) * o.h + y) * o.w;
      const int sy = y0 + y - pad;
      if (sy < 0 || sy >= H) {
        std::memset(d, 0, size_t(o.w));
        continue;
      }
      std::memset(d, 0, size_t(xa));
      std::memcpy(d + xa, src + (size_t(c) * H + sy) * W + (x0 + xa - pad), size_t(xb - xa));
      std::memset(d + xb, 0, size_t(o.w - xb));
      if (flip) std::reverse(d, d + o.w);
    }
}

void mirror(uint8_t* img, int C, Size2 o) {
  for (int r = 0; r < C * o.h; ++r) std::reverse(img + size_t(r) * o.w, img + size_t(r + 1) * o.w);
}

// torchvision's RandomResizedCrop.get_params: (top, left, h, w).
void resized_window(Pcg32& rng, int H, int W, int* y, int* x, int* h, int* w) {
  const double area = double(H) * W, lr0 = std::log(3.0 / 4), lr1 = std::log(4.0 / 3);
  for (int t = 0; t < 10; ++t) {
    const double target = area * (0.08 + rng.uniform() * 0.92), ratio = std::exp(lr0 + rng.uniform() * (lr1 - lr0));
    const int cw = int(std::lround(std::sqrt(target * ratio))), ch = int(std::lround(std::sqrt(target / ratio)));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      *y = int(rng.below(uint32_t(H - ch + 1))), *x = int(rng.below(uint32_t(W - cw + 1))), *h = ch, *w = cw;
      return;
    }
  }
  const double in_ratio = double(W) / H;  // fallback: the centre, clamped to the ratio range
  *w = W, *h = H;
  if (in_ratio < 3.0 / 4) *h = int(std::lround(W / (3.0 / 4)));
  else if (in_ratio > 4.0 / 3) *w = int(std::lround(H * (4.0 / 3)));
  *y = (H - *h) / 2, *x = (W - *w) / 2;
}

}  // namespace

void augment_sample(uint8_t* dst, const uint8_t* src, int C, int H, int W, const Augment& a, Size2 o, bool train,
                    uint64_t seed, int epoch, int64_t index) {
  if (!train) {  // centre crop of the padded image
    crop(dst, src, C, H, W, a.pad, o, (H + 2 * a.pad - o.h) / 2, (W + 2 * a.pad - o.w) / 2, false);
    return;
  }
  Pcg32 rng(seed ^ 0xa5a5a5a5ULL, (uint64_t(uint32_t(epoch)) << 40) ^ uint64_t(index));
  if (a.resized_crop) {
    int y, x, h, w;
    resized_window(rng, H, W, &y, &x, &h, &w);
    std::vector<uint8_t> win(size_t(C) * h * w);
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < h; ++r)
        std::memcpy(win.data() + (size_t(c) * h + r) * w, src + (size_t(c) * H + y + r) * W + x, size_t(w));
    resize_image(dst, o.h, o.w, win.data(), C, h, w, false);
    if (a.flip && rng.below(2)) mirror(dst, C, o);
    return;
  }
  const int y0 = int(rng.below(uint32_t(H + 2 * a.pad - o.h + 1))), x0 = int(rng.below(uint32_t(W + 2 * a.pad - o.w + 1)));
  crop(dst, src, C, H, W, a.pad, o, y0, x0, a.flip && rng.below(2));
}

}  // namespace ember
