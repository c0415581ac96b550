// Binarized layers: shape checks, random weights and images, the thermometer encoding, and the
// brute-force oracle, which recomputes the whole forward pass bit by bit for every weight change.
// Deliberately independent of the fast path: no popcount, no masks, no kernel table.
#include <algorithm>
#include <cmath>
#include <random>

#include "bitnet/internal.h"
#include "ember/error.h"

namespace ember::bitnet {

const char* kind_name(WeightKind k) { return k == WeightKind::binary ? "binary" : "ternary"; }

void validate(const LayerShape& s, const std::string& what) {
  auto check = [&](const char* field, int v, int lo, int hi) {
    if (v < lo || v > hi)
      throw Error(what + ": " + field + ": expected an integer in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], found " + std::to_string(v));
  };
  check("H", s.H, 3, 256);
  check("W", s.W, 3, 256);
  check("B (bits per pixel)", s.B, 1, 4096);
  check("O (channels)", s.O, 1, 4096);
  check("C (classes)", s.C, 2, 64);
  check("S (segments per side)", s.S, 1, std::min(kMaxS, std::min(s.H - 2, s.W - 2)));
}

Layer join_layers(const std::vector<Layer>& parts) {
  if (parts.empty()) throw Error("join_layers: expected at least one layer");
  LayerShape s = parts[0].shape;
  s.O = 0;
  for (const Layer& p : parts) {
    const LayerShape& q = p.shape;
    if (q.H != s.H || q.W != s.W || q.B != s.B || q.S != s.S || q.C != s.C || q.kind != s.kind)
      throw Error("join_layers: the layers differ in H, W, B, S, C or weight kind");
    s.O += q.O;
  }
  validate(s, "join_layers");
  Layer L;
  L.shape = s;
  const bool ternary = s.kind == WeightKind::ternary;
  for (const Layer& p : parts) {  // conv rows [O, K]: the parts' rows one after the other
    L.conv_sign.insert(L.conv_sign.end(), p.conv_sign.begin(), p.conv_sign.end());
    if (ternary) L.conv_mask.insert(L.conv_mask.end(), p.conv_mask.begin(), p.conv_mask.end());
  }
  // head rows [C, S*S, head_words]: part p's channel j becomes channel (sum of earlier O) + j
  const int Hw = s.head_words();
  L.head_sign.assign(size_t(s.C) * s.segments() * Hw, 0);
  if (ternary) L.head_mask.assign(L.head_sign.size(), 0);
  int base = 0;
  for (const Layer& p : parts) {
    const int pw = p.shape.head_words();
    for (size_t r = 0; r < size_t(s.C) * s.segments(); ++r)
      for (int j = 0; j < p.shape.O; ++j) {
        const uint64_t bit = uint64_t(1) << ((base + j) % 64);
        const size_t at = r * Hw + (base + j) / 64, from = r * pw + j / 64;
        if ((p.head_sign[from] >> (j % 64)) & 1) L.head_sign[at] |= bit;
        if (ternary && ((p.head_mask[from] >> (j % 64)) & 1)) L.head_mask[at] |= bit;
      }
    base += p.shape.O;
  }
  return L;
}

Layer random_layer(const LayerShape& s, uint64_t seed) {
  validate(s);
  Layer L;
  L.shape = s;
  std::mt19937_64 g(seed);
  const int K = s.K(), N = s.N(), Hw = s.head_words();
  L.conv_sign.assign(size_t(s.O) * K, 0);
  L.head_sign.assign(size_t(s.C) * s.segments() * Hw, 0);
  if (s.kind == WeightKind::ternary) {
    L.conv_mask.assign(L.conv_sign.size(), 0);
    L.head_mask.assign(L.head_sign.size(), 0);
  }
  if (s.kind == WeightKind::binary) {  // whole random words, bits past N (or O) cleared
    for (int o = 0; o < s.O; ++o)
      for (int w = 0; w * 64 < N; ++w)
        L.conv_sign[size_t(o) * K + w] = g() & (N - w * 64 >= 64 ? ~uint64_t(0) : (uint64_t(1) << (N - w * 64)) - 1);
    for (size_t r = 0; r < size_t(s.C) * s.segments(); ++r)
      for (int w = 0; w < Hw; ++w)
        L.head_sign[r * Hw + w] = g() & (s.O - w * 64 >= 64 ? ~uint64_t(0) : (uint64_t(1) << (s.O - w * 64)) - 1);
    return L;
  }
  for (int o = 0; o < s.O; ++o)
    for (int i = 0; i < N; ++i) set_conv_state(L, o, i, int(g() % 3));
  for (int c = 0; c < s.C; ++c)
    for (int sg = 0; sg < s.segments(); ++sg)
      for (int j = 0; j < s.O; ++j)
        set_head_state(L, c, sg, j, int(g() % 3));
  return L;
}

BitImage random_image(int H, int W, int B, uint64_t seed, double density) {
  BitImage im{H, W, B, {}};
  const int pw = (B + 63) / 64;
  im.bits.assign(size_t(H) * W * pw, 0);
  std::mt19937_64 g(seed);
  std::bernoulli_distribution d(density);
  for (int p = 0; p < H * W; ++p)
    for (int b = 0; b < B; ++b)
      if (d(g)) im.bits[size_t(p) * pw + b / 64] |= uint64_t(1) << (b % 64);
  return im;
}

BitImage encode_thermometer(const uint8_t* pixels, int H, int W, int B) {
  BitImage im{H, W, B, {}};
  const int pw = (B + 63) / 64;
  im.bits.assign(size_t(H) * W * pw, 0);
  for (int p = 0; p < H * W; ++p)
    for (int b = 0; b < B; ++b)  // v > (b + 0.5) * 256 / B, in integers
      if (2 * B * int(pixels[p]) > (2 * b + 1) * 256) im.bits[size_t(p) * pw + b / 64] |= uint64_t(1) << (b % 64);
  return im;
}

std::vector<uint8_t> box_blur(const uint8_t* pixels, int H, int W, int r) {
  std::vector<uint8_t> out(size_t(H) * W);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      int sum = 0, n = 0;
      for (int v = std::max(0, y - r); v <= std::min(H - 1, y + r); ++v)
        for (int u = std::max(0, x - r); u <= std::min(W - 1, x + r); ++u) sum += pixels[v * W + u], ++n;
      out[size_t(y) * W + x] = uint8_t(sum / n);
    }
  return out;
}

std::vector<uint8_t> deskew(const uint8_t* px, int H, int W) {
  double t = 0, my = 0, mx = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) t += px[y * W + x], my += double(y) * px[y * W + x], mx += double(x) * px[y * W + x];
  std::vector<uint8_t> out(px, px + size_t(H) * W);
  if (t == 0) return out;
  my /= t, mx /= t;
  double vyy = 0, vxy = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) vyy += (y - my) * (y - my) * px[y * W + x], vxy += (y - my) * (x - mx) * px[y * W + x];
  const double alpha = vyy > 0 ? vxy / vyy : 0, cy = H / 2.0, cx = W / 2.0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      // output (y, x) samples the input at the centre of mass plus the sheared offset
      const double iy = my + (y - cy), ix = mx + alpha * (y - cy) + (x - cx);
      const int y0 = int(std::floor(iy)), x0 = int(std::floor(ix));
      const double fy = iy - y0, fx = ix - x0;
      double v = 0;
      for (int q = 0; q < 4; ++q) {
        const int yy = y0 + q / 2, xx = x0 + q % 2;
        if (yy >= 0 && yy < H && xx >= 0 && xx < W) v += (q / 2 ? fy : 1 - fy) * (q % 2 ? fx : 1 - fx) * px[yy * W + xx];
      }
      out[size_t(y) * W + x] = uint8_t(std::min(255.0, v + 0.5));
    }
  return out;
}

std::vector<uint8_t> mirror(const uint8_t* px, int H, int W) {
  std::vector<uint8_t> out(size_t(H) * W);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) out[size_t(y) * W + x] = px[y * W + (W - 1 - x)];
  return out;
}

std::vector<uint8_t> shift(const uint8_t* px, int H, int W, int dy, int dx) {
  std::vector<uint8_t> out(size_t(H) * W, 0);
  for (int y = std::max(0, dy); y < std::min(H, H + dy); ++y)
    for (int x = std::max(0, dx); x < std::min(W, W + dx); ++x) out[size_t(y) * W + x] = px[(y - dy) * W + (x - dx)];
  return out;
}

const char* pool_name(LayerPool p) { return p == LayerPool::none ? "none" : p == LayerPool::any ? "any" : "majority"; }

BitImage pool2x2(const BitImage& a, LayerPool p) {
  if (p == LayerPool::none) return a;
  BitImage r{a.H / 2, a.W / 2, a.B, {}};
  const int pw = (a.B + 63) / 64;
  r.bits.assign(size_t(r.H) * r.W * pw, 0);
  for (int y = 0; y < r.H; ++y)
    for (int x = 0; x < r.W; ++x)
      for (int w = 0; w < pw; ++w) {
        uint64_t v[4];
        for (int q = 0; q < 4; ++q) v[q] = a.bits[(size_t(2 * y + q / 2) * a.W + 2 * x + q % 2) * pw + w];
        r.bits[(size_t(y) * r.W + x) * pw + w] =
            p == LayerPool::any ? v[0] | v[1] | v[2] | v[3]
                                : (v[0] & (v[1] | v[2] | v[3])) | (v[1] & (v[2] | v[3])) | (v[2] & v[3]);
      }
  return r;
}

BitImage concat_pixels(const BitImage& a, const BitImage& b) {
  if (a.H != b.H || a.W != b.W) throw Error("concat_pixels: images differ in size");
  BitImage r{a.H, a.W, a.B + b.B, {}};
  const int aw = (a.B + 63) / 64, bw = (b.B + 63) / 64, rw = (r.B + 63) / 64;
  r.bits.assign(size_t(a.H) * a.W * rw, 0);
  for (int p = 0; p < a.H * a.W; ++p) {
    uint64_t* dst = r.bits.data() + size_t(p) * rw;
    for (int w = 0; w < aw; ++w) dst[w] = a.bits[size_t(p) * aw + w];
    for (int i = 0; i < b.B; ++i)
      if (b.bits[size_t(p) * bw + i / 64] >> (i % 64) & 1) dst[(a.B + i) / 64] |= uint64_t(1) << ((a.B + i) % 64);
  }
  return r;
}

BitImage space_to_depth(const BitImage& im) {
  if (im.H < 2 || im.W < 2) throw Error("space_to_depth: the image is smaller than 2x2");
  BitImage r{im.H / 2, im.W / 2, 4 * im.B, {}};
  const int pw = (im.B + 63) / 64, rw = (r.B + 63) / 64;
  r.bits.assign(size_t(r.H) * r.W * rw, 0);
  for (int y = 0; y < r.H; ++y)
    for (int x = 0; x < r.W; ++x) {
      uint64_t* dst = r.bits.data() + (size_t(y) * r.W + x) * rw;
      for (int q = 0; q < 4; ++q) {  // (dy, dx) = (0,0), (0,1), (1,0), (1,1)
        const uint64_t* src = im.bits.data() + (size_t(2 * y + q / 2) * im.W + 2 * x + q % 2) * pw;
        for (int i = 0; i < im.B; ++i)
          if (src[i / 64] >> (i % 64) & 1) dst[(q * im.B + i) / 64] |= uint64_t(1) << ((q * im.B + i) % 64);
      }
    }
  return r;
}

BitImage append_position_bits(const BitImage& im, int bits, uint64_t seed) {
  if (bits <= 0) return im;
  BitImage r{im.H, im.W, im.B + bits, {}};
  const int pw = (im.B + 63) / 64, rw = (r.B + 63) / 64;
  r.bits.assign(size_t(im.H) * im.W * rw, 0);
  for (int p = 0; p < im.H * im.W; ++p) {
    for (int w = 0; w < pw; ++w) r.bits[size_t(p) * rw + w] = im.bits[size_t(p) * pw + w];
    uint64_t h = seed * 0x9E3779B97F4A7C15ull + uint64_t(p) * 0xBF58476D1CE4E5B9ull;
    for (int b = 0; b < bits; ++b) {
      if (b % 64 == 0) {  // splitmix64 step
        h += 0x9E3779B97F4A7C15ull;
        uint64_t z = h;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h = z ^ (z >> 31);
      }
      const int bit = im.B + b;
      if (h >> (b % 64) & 1) r.bits[size_t(p) * rw + bit / 64] |= uint64_t(1) << (bit % 64);
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Weight states (shared with the fast path and training).

int conv_state(const Layer& L, int o, int i) {
  const size_t w = size_t(o) * L.shape.K() + i / 64;
  const int sign = int(L.conv_sign[w] >> (i % 64) & 1);
  if (L.shape.kind == WeightKind::binary) return sign;
  return (L.conv_mask[w] >> (i % 64) & 1) ? 1 + sign : 0;
}
static void set_state_bits(uint64_t* sign, uint64_t* mask, int bit, int state, WeightKind kind) {
  const uint64_t b = uint64_t(1) << (bit % 64);
  sign[bit / 64] &= ~b;
  if (kind == WeightKind::binary) {
    if (state) sign[bit / 64] |= b;
    return;
  }
  mask[bit / 64] &= ~b;
  if (state >= 1) mask[bit / 64] |= b;
  if (state == 2) sign[bit / 64] |= b;
}
void set_conv_state(Layer& L, int o, int i, int state) {
  const size_t row = size_t(o) * L.shape.K();
  set_state_bits(L.conv_sign.data() + row, L.conv_mask.empty() ? nullptr : L.conv_mask.data() + row, i, state,
                 L.shape.kind);
}
int head_state(const Layer& L, int c, int sg, int j) {
  const size_t w = (size_t(c) * L.shape.segments() + sg) * L.shape.head_words() + j / 64;
  const int sign = int(L.head_sign[w] >> (j % 64) & 1);
  if (L.shape.kind == WeightKind::binary) return sign;
  return (L.head_mask[w] >> (j % 64) & 1) ? 1 + sign : 0;
}
void set_head_state(Layer& L, int c, int sg, int j, int state) {
  const size_t row = (size_t(c) * L.shape.segments() + sg) * L.shape.head_words();
  set_state_bits(L.head_sign.data() + row, L.head_mask.empty() ? nullptr : L.head_mask.data() + row, j, state,
                 L.shape.kind);
}

SegmentGrid segment_grid(const LayerShape& s) {
  SegmentGrid g;
  const int Pr = s.H - 2, Pc = s.W - 2;
  g.seg_of.resize(size_t(Pr) * Pc);
  g.size.assign(s.segments(), 0);
  for (int y = 0; y < Pr; ++y)
    for (int x = 0; x < Pc; ++x) {
      // segment row i holds rows [i*Pr/S, (i+1)*Pr/S): the i with i*Pr/S <= y < (i+1)*Pr/S
      int si = 0, sj = 0;
      while ((si + 1) * Pr / s.S <= y) ++si;
      while ((sj + 1) * Pc / s.S <= x) ++sj;
      g.seg_of[size_t(y) * Pc + x] = si * s.S + sj;
      ++g.size[si * s.S + sj];
    }
  return g;
}

// ---------------------------------------------------------------------------------------------
// The oracle.

namespace {

int image_bit(const BitImage& im, int y, int x, int b) {
  const int pw = (im.B + 63) / 64;
  return int(im.bits[(size_t(y) * im.W + x) * pw + b / 64] >> (b % 64) & 1);
}

}  // namespace

int64_t reference_loss(const Layer& L, const BitImage& img, int label, std::vector<int64_t>* act_out) {
  const LayerShape& s = L.shape;
  if (img.H != s.H || img.W != s.W || img.B != s.B) throw Error("reference_loss: image shape differs from the layer's");
  const int Pr = s.H - 2, Pc = s.W - 2, N = s.N(), T = s.conv_threshold();
  const SegmentGrid g = segment_grid(s);
  std::vector<int> fired(size_t(s.segments()) * s.O, 0);
  for (int o = 0; o < s.O; ++o)
    for (int y = 0; y < Pr; ++y)
      for (int x = 0; x < Pc; ++x) {
        int bma = 0;
        for (int i = 0; i < N; ++i) {
          const int pix = i / s.B, b = i % s.B;
          bma += contrib(s.kind, conv_state(L, o, i), image_bit(img, y + pix / 3, x + pix % 3, b));
        }
        if (bma > T) ++fired[size_t(g.seg_of[size_t(y) * Pc + x]) * s.O + o];
      }
  int64_t loss = 0;
  if (act_out) act_out->assign(s.C, 0);
  for (int c = 0; c < s.C; ++c) {
    int64_t act = 0;
    for (int sg = 0; sg < s.segments(); ++sg)
      for (int o = 0; o < s.O; ++o) {
        const int z = 2 * fired[size_t(sg) * s.O + o] > g.size[sg] ? 1 : 0;
        act += contrib(s.kind, head_state(L, c, sg, o), z);
      }
    if (act_out) (*act_out)[c] = act;
    const int64_t e = act - (c == label ? s.head_target() : 0);
    loss += e * e;
  }
  return loss;
}

DenseDeltas oracle_deltas(const Layer& layer, const BitImage& img, int label, int64_t threshold) {
  const LayerShape& s = layer.shape;
  const int A = s.alts(), states = s.kind == WeightKind::binary ? 2 : 3;
  Layer L = layer;
  DenseDeltas d;
  d.loss = reference_loss(L, img, label);
  auto keep = [&](int64_t v) { return v > threshold || v < -threshold ? v : 0; };
  d.conv.assign(size_t(s.conv_weights()) * A, 0);
  for (int o = 0; o < s.O; ++o)
    for (int i = 0; i < s.N(); ++i) {
      const int cur = conv_state(L, o, i);
      for (int a = 0; a < A; ++a) {
        set_conv_state(L, o, i, (cur + 1 + a) % states);
        d.conv[(size_t(o) * s.N() + i) * A + a] = keep(reference_loss(L, img, label) - d.loss);
      }
      set_conv_state(L, o, i, cur);
    }
  d.head.assign(size_t(s.head_weights()) * A, 0);
  for (int c = 0; c < s.C; ++c)
    for (int sg = 0; sg < s.segments(); ++sg)
      for (int j = 0; j < s.O; ++j) {
        const int cur = head_state(L, c, sg, j);
        for (int a = 0; a < A; ++a) {
          set_head_state(L, c, sg, j, (cur + 1 + a) % states);
          d.head[((size_t(c) * s.segments() + sg) * s.O + j) * A + a] = keep(reference_loss(L, img, label) - d.loss);
        }
        set_head_state(L, c, sg, j, cur);
      }
  return d;
}

}  // namespace ember::bitnet
