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
#include "ember_support/files.h"

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

// Per output index o: its input window [lo, lo + len) and the weights' normaliser (PIL's
// precompute_coeffs). The weights are tabulated when the table is small, else computed as needed:
// shrinking 2^26 rows to 16 gives windows of millions of taps, and nothing may scale with them.
constexpr size_t kMaxTable = size_t(1) << 20;  // floats
struct Taps {
  int n = 0;                   // PIL's kernel size: the most taps an output uses
  double scale = 1, ss = 1;
  bool cubic = false;
  std::vector<int> lo, len;    // [out]
  std::vector<double> sum;     // [out]
  std::vector<float> table;    // [out, n], or empty
  double raw(int o, int i) const { return (cubic ? bicubic : bilinear)((i - (o + 0.5) * scale + 0.5) / ss); }
  float weight(int o, int k) const {
    if (!table.empty()) return table[size_t(o) * n + k];
    return float(sum[o] != 0 ? raw(o, lo[o] + k) / sum[o] : 0);
  }
};
Taps taps(int in, int out, bool cubic) {
  Taps t;
  t.scale = double(in) / out, t.ss = std::max(t.scale, 1.0), t.cubic = cubic;
  const double support = (cubic ? 2.0 : 1.0) * t.ss;
  t.n = int(std::ceil(support)) * 2 + 1;
  t.lo.resize(out), t.len.resize(out), t.sum.resize(out);
  for (int o = 0; o < out; ++o) {
    const double center = (o + 0.5) * t.scale;
    const int lo = std::max(int(center - support + 0.5), 0), hi = std::min(int(center + support + 0.5), in);
    double sum = 0;
    for (int i = lo; i < hi; ++i) sum += t.raw(o, i);
    t.lo[o] = lo, t.len[o] = std::clamp(hi - lo, 0, t.n), t.sum[o] = sum;
  }
  if (size_t(out) * size_t(t.n) > kMaxTable) return t;
  std::vector<float> w(size_t(out) * t.n, 0.f);
  for (int o = 0; o < out; ++o)
    for (int k = 0; k < t.len[o]; ++k) w[size_t(o) * t.n + k] = t.weight(o, k);
  t.table = std::move(w);
  return t;
}

// One row of a channel resampled along x: mid[ow].
void resample_row(float* mid, const uint8_t* row, const Taps& tx, int ow) {
  for (int x = 0; x < ow; ++x) {
    const uint8_t* s = row + tx.lo[x];
    float acc = 0;
    for (int k = 0; k < tx.len[x]; ++k) acc += tx.weight(x, k) * s[k];
    mid[x] = acc;
  }
}

}  // namespace

Image decode_image(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  return decode_any(data, size, name, max_pixels, false);
}
Image read_image_header(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels) {
  return decode_any(data, size, name, max_pixels, true);
}

// In strips: each source row is resampled along x once, then added, with its weight, into every
// output row whose window holds it (in increasing source order, so the sums are PIL's order). The
// buffers are one row and the output's size in floats, whatever the source's height.
void resize_image(uint8_t* dst, int oh, int ow, const uint8_t* src, int C, int H, int W, bool cubic) {
  if (oh == H && ow == W) {
    std::memcpy(dst, src, size_t(C) * H * W);
    return;
  }
  const Taps tx = taps(W, ow, cubic), ty = taps(H, oh, cubic);
  std::vector<float> mid(static_cast<size_t>(ow)), acc(static_cast<size_t>(oh) * ow);
  for (int c = 0; c < C; ++c) {
    const uint8_t* s = src + size_t(c) * H * W;
    std::fill(acc.begin(), acc.end(), 0.f);
    int first = 0;  // the first output row whose window has not ended
    for (int y = 0; y < H && first < oh; ++y) {
      while (first < oh && ty.lo[first] + ty.len[first] <= y) ++first;
      if (first == oh || ty.lo[first] > y) continue;  // no output row uses source row y
      resample_row(mid.data(), s + size_t(y) * W, tx, ow);
      for (int o = first; o < oh && ty.lo[o] <= y; ++o) {
        if (y >= ty.lo[o] + ty.len[o]) continue;
        const float w = ty.weight(o, y - ty.lo[o]);
        float* a = acc.data() + size_t(o) * ow;
        for (int x = 0; x < ow; ++x) a[x] += w * mid[x];
      }
    }
    uint8_t* d = dst + size_t(c) * oh * ow;
    for (size_t i = 0; i < acc.size(); ++i) d[i] = uint8_t(std::clamp(std::lround(acc[i]), 0L, 255L));
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
