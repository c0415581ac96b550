// PNG (libspng) and JPEG (libjpeg-turbo's TurboJPEG API) decoding to planar u8, PNG and JPEG encoding,
// and separable resampling (bilinear / bicubic with PIL's kernels, widened when shrinking so it
// averages like PIL and torchvision do). Sizes come from the header and are checked against a
// pixel cap before anything is allocated; any decoder complaint, warnings included, is an Error.
#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/error.h"
#include "ember/files.h"

namespace ember {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(quote_path(name) + ": " + what);
}

void check_size(int64_t w, int64_t h, int64_t max_pixels, const std::string& name) {
  if (w < 1 || h < 1 || w * h > max_pixels)
    fail(name, "image size " + std::to_string(w) + "x" + std::to_string(h) + " is outside 1 .. " +
                   std::to_string(max_pixels) + " pixels");
}

// Planar [C, H, W] to interleaved [H, W, C] (what the encoders take).
std::vector<uint8_t> interleave(const uint8_t* planar, int C, int H, int W) {
  std::vector<uint8_t> px(size_t(H) * W * C);
  const size_t HW = size_t(H) * W;
  for (int c = 0; c < C; ++c)
    for (size_t i = 0; i < HW; ++i) px[i * C + c] = planar[c * HW + i];
  return px;
}

// Interleaved [H, W, C] to planar [C, H, W], keeping the first `keep` of `C` channels.
void to_planar(uint8_t* dst, const uint8_t* src, int H, int W, int C, int keep) {
  const size_t HW = size_t(H) * W;
  for (int c = 0; c < keep; ++c)
    for (size_t i = 0; i < HW; ++i) dst[c * HW + i] = src[i * C + c];
}

Image decode_png(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels, bool header_only) {
  struct Ctx {
    spng_ctx* c = spng_ctx_new(0);
    ~Ctx() { spng_ctx_free(c); }
  } ctx;
  if (!ctx.c) fail(name, "PNG decoder: out of memory");
  spng_set_crc_action(ctx.c, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  spng_set_chunk_limits(ctx.c, 1u << 24, 1u << 26);  // a text or ICC chunk cannot ask for more
  spng_set_png_buffer(ctx.c, data, size);
  spng_ihdr ihdr{};
  if (int e = spng_get_ihdr(ctx.c, &ihdr)) fail(name, std::string("PNG header: ") + spng_strerror(e));
  check_size(ihdr.width, ihdr.height, max_pixels, name);
  const bool grey = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE || ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
  Image im{int(ihdr.width), int(ihdr.height), grey ? 1 : 3, {}};
  if (header_only) return im;
  // Grey (with or without alpha) decodes as RGB8 and keeps R; colour as RGB8 (alpha dropped).
  size_t len = 0;
  if (int e = spng_decoded_image_size(ctx.c, SPNG_FMT_RGB8, &len)) fail(name, std::string("PNG: ") + spng_strerror(e));
  std::vector<uint8_t> rgb(len);
  if (int e = spng_decode_image(ctx.c, rgb.data(), len, SPNG_FMT_RGB8, 0))
    fail(name, std::string("PNG data: ") + spng_strerror(e));
  im.pixels.resize(size_t(im.channels) * im.width * im.height);
  to_planar(im.pixels.data(), rgb.data(), im.height, im.width, 3, im.channels);
  return im;
}

Image decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels, bool header_only) {
  struct Handle {
    tjhandle h = tjInitDecompress();
    ~Handle() { if (h) tjDestroy(h); }
  } tj;
  if (!tj.h) fail(name, "JPEG decoder: cannot start");
  int w = 0, h = 0, sub = 0, cs = 0;
  if (tjDecompressHeader3(tj.h, data, (unsigned long)size, &w, &h, &sub, &cs) != 0)
    fail(name, std::string("JPEG header: ") + tjGetErrorStr2(tj.h));
  check_size(w, h, max_pixels, name);
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) fail(name, "JPEG: CMYK images are not supported (convert to RGB)");
  Image im{w, h, cs == TJCS_GRAY ? 1 : 3, {}};
  if (header_only) return im;
  std::vector<uint8_t> px(size_t(w) * h * im.channels);
  // TJFLAG_STOPONWARNING: a truncated or damaged stream is refused, not decoded half grey.
  if (tjDecompress2(tj.h, data, (unsigned long)size, px.data(), w, 0, h, im.channels == 1 ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0)
    fail(name, std::string("JPEG data: ") + tjGetErrorStr2(tj.h));
  im.pixels.resize(px.size());
  to_planar(im.pixels.data(), px.data(), h, w, im.channels, im.channels);
  return im;
}

Image decode_any(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels, bool header_only) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size == 0) fail(name, "empty file (0 bytes)");
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return decode_png(data, size, name, max_pixels, header_only);
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
    return decode_jpeg(data, size, name, max_pixels, header_only);
  fail(name, "not a PNG or JPEG file (by its first bytes)");
}

// PIL's filters (Imaging/Resample.c): triangle, and Keys' cubic with a = -0.5.
double bilinear(double x) {
  x = std::fabs(x);
  return x < 1 ? 1 - x : 0;
}
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// Per output index, the first input index and the normalised weights (PIL's precompute_coeffs).
struct Taps {
  int n = 0;                  // taps per output
  std::vector<int> first;     // [out]
  std::vector<float> w;       // [out, n]
};
Taps taps(int in, int out, bool cubic) {
  const double scale = double(in) / out, ss = std::max(scale, 1.0);
  const double support = (cubic ? 2.0 : 1.0) * ss;
  Taps t;
  t.n = int(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.w.assign(size_t(out) * t.n, 0.f);
  for (int o = 0; o < out; ++o) {
    const double center = (o + 0.5) * scale;
    const int lo = std::max(int(center - support + 0.5), 0), hi = std::min(int(center + support + 0.5), in);
    double sum = 0;
    std::vector<double> w(size_t(hi - lo));
    for (int i = lo; i < hi; ++i) sum += w[i - lo] = (cubic ? bicubic : bilinear)((i - center + 0.5) / ss);
    t.first[o] = lo;
    for (int i = lo; i < hi && i - lo < t.n; ++i) t.w[size_t(o) * t.n + (i - lo)] = float(sum != 0 ? w[i - lo] / sum : 0);
  }
  return t;
}

}  // namespace

Image decode_image(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  return decode_any(data, size, name, max_pixels, false);
}
Image read_image_header(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  return decode_any(data, size, name, max_pixels, true);
}

void resize_image(uint8_t* dst, int oh, int ow, const uint8_t* src, int C, int H, int W, bool cubic) {
  if (oh == H && ow == W) {
    std::memcpy(dst, src, size_t(C) * H * W);
    return;
  }
  const Taps tx = taps(W, ow, cubic), ty = taps(H, oh, cubic);
  std::vector<float> mid(size_t(H) * ow);  // one channel, resized along rows
  for (int c = 0; c < C; ++c) {
    const uint8_t* s = src + size_t(c) * H * W;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < ow; ++x) {
        const int f = tx.first[x];
        const float* w = tx.w.data() + size_t(x) * tx.n;
        float acc = 0;
        for (int k = 0; k < tx.n && f + k < W; ++k) acc += w[k] * s[size_t(y) * W + f + k];
        mid[size_t(y) * ow + x] = acc;
      }
    uint8_t* d = dst + size_t(c) * oh * ow;
    for (int y = 0; y < oh; ++y) {
      const int f = ty.first[y];
      const float* w = ty.w.data() + size_t(y) * ty.n;
      for (int x = 0; x < ow; ++x) {
        float acc = 0;
        for (int k = 0; k < ty.n && f + k < H; ++k) acc += w[k] * mid[size_t(f + k) * ow + x];
        d[size_t(y) * ow + x] = uint8_t(std::clamp(std::lround(acc), 0L, 255L));
      }
    }
  }
}

std::string encode_jpeg(const uint8_t* planar, int C, int H, int W, int quality, const std::string& name) {
  if (C != 1 && C != 3) fail(name, "JPEG: " + std::to_string(C) + " channels (1 or 3 can be written)");
  std::vector<uint8_t> px = interleave(planar, C, H, W);
  struct Handle {
    tjhandle h = tjInitCompress();
    ~Handle() { if (h) tjDestroy(h); }
  } tj;
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  if (!tj.h || tjCompress2(tj.h, px.data(), W, 0, H, C == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &len, C == 1 ? TJSAMP_GRAY : TJSAMP_420,
                           quality, 0) != 0)
    fail(name, std::string("JPEG encoder: ") + (tj.h ? tjGetErrorStr2(tj.h) : "cannot start"));
  std::string out(reinterpret_cast<const char*>(buf), len);
  tjFree(buf);
  return out;
}

std::string encode_png(const uint8_t* planar, int C, int H, int W, const std::string& name) {
  if (C != 1 && C != 3) fail(name, "PNG: " + std::to_string(C) + " channels (1 or 3 can be written)");
  std::vector<uint8_t> px = interleave(planar, C, H, W);
  struct Ctx {
    spng_ctx* c = spng_ctx_new(SPNG_CTX_ENCODER);
    ~Ctx() { spng_ctx_free(c); }
  } ctx;
  if (!ctx.c) fail(name, "PNG encoder: out of memory");
  spng_set_option(ctx.c, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{uint32_t(W), uint32_t(H), 8, uint8_t(C == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR), 0, 0, 0};
  spng_set_ihdr(ctx.c, &ihdr);
  if (int e = spng_encode_image(ctx.c, px.data(), px.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE))
    fail(name, std::string("PNG encoder: ") + spng_strerror(e));
  size_t len = 0;
  int e = 0;
  void* buf = spng_get_png_buffer(ctx.c, &len, &e);
  if (!buf) fail(name, std::string("PNG encoder: ") + spng_strerror(e));
  std::string out(static_cast<const char*>(buf), len);
  std::free(buf);
  return out;
}

}  // namespace ember
