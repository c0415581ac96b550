// The input transforms of the binarized layers' training: deskew() (moment deskewing) makes a
// slanted stroke upright and centres the mass, mirror() flips rows, shift() moves the image with
// zeros shifted in, pool2x2() between layers equals a bit-by-bit count of the four pixels
// (any / majority), and space_to_depth() puts each 2x2 block's bits side by side, on odd sizes and
// wide pixels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ember/bitnet.h"
#include "ember/error.h"

namespace {

using namespace ember::bitnet;

struct Moments {
  double my = 0, mx = 0, slope = 0;  // centre of mass; cov(x, y) / var(y)
};
Moments moments(const std::vector<uint8_t>& px, int H, int W) {
  double t = 0, my = 0, mx = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) t += px[y * W + x], my += y * px[y * W + x], mx += x * px[y * W + x];
  my /= t, mx /= t;
  double vyy = 0, vxy = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) vyy += (y - my) * (y - my) * px[y * W + x], vxy += (y - my) * (x - mx) * px[y * W + x];
  return {my, mx, vxy / vyy};
}

TEST(BitnetPreprocess, DeskewMakesASlantedStrokeUpright) {
  const int H = 28, W = 28;
  std::vector<uint8_t> px(H * W, 0);
  for (int y = 6; y < 22; ++y)  // a stroke leaning right by 1 column per 2 rows, off centre
    for (int dx = 0; dx < 3; ++dx) px[y * W + 6 + y / 2 + dx] = 255;
  const Moments before = moments(px, H, W);
  ASSERT_GT(std::fabs(before.slope), 0.3);
  const std::vector<uint8_t> out = deskew(px.data(), H, W);
  const Moments after = moments(out, H, W);
  EXPECT_LT(std::fabs(after.slope), 0.05) << before.slope;
  EXPECT_NEAR(after.my, H / 2.0, 0.6);
  EXPECT_NEAR(after.mx, W / 2.0, 0.6);
  // Mass is kept (bilinear sampling of a stroke well inside the image).
  double a = 0, b = 0;
  for (int i = 0; i < H * W; ++i) a += px[i], b += out[i];
  EXPECT_NEAR(b / a, 1.0, 0.05);
}

TEST(BitnetPreprocess, DeskewKeepsACentredUprightImageAndABlankOne) {
  const int H = 10, W = 10;
  std::vector<uint8_t> px(H * W, 0), blank(H * W, 0);
  for (int y = 2; y < 8; ++y) px[y * W + 5] = 200, px[y * W + 4] = 200;  // centre of mass (4.5 + 0.5, 4.5 + 0.5)
  // The centre of mass of pixel centres (y, x) is (4.5, 4.5); deskew moves it to (5, 5): a shift by
  // half a pixel, so each output pixel is the mean of two input pixels.
  const std::vector<uint8_t> out = deskew(px.data(), H, W);
  const Moments m = moments(out, H, W);
  EXPECT_NEAR(m.slope, 0.0, 1e-9);
  EXPECT_NEAR(m.mx, 5.0, 1e-6);
  EXPECT_NEAR(m.my, 5.0, 1e-6);
  EXPECT_EQ(deskew(blank.data(), H, W), blank);
}

TEST(BitnetPreprocess, MirrorFlipsRows) {
  const int H = 3, W = 5;
  std::vector<uint8_t> px(H * W);
  for (int i = 0; i < H * W; ++i) px[i] = uint8_t(i * 7);
  const std::vector<uint8_t> m = mirror(px.data(), H, W);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) EXPECT_EQ(m[y * W + x], px[y * W + W - 1 - x]);
  EXPECT_EQ(mirror(m.data(), H, W), px);
}

TEST(BitnetPreprocess, ShiftMovesPixelsAndFillsZeros) {
  const int H = 4, W = 6;
  std::vector<uint8_t> px(H * W);
  for (int i = 0; i < H * W; ++i) px[i] = uint8_t(1 + i);
  for (auto [dy, dx] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{-1, 0}, std::pair{0, -1}, std::pair{2, -3},
                        std::pair{0, 0}, std::pair{4, 0}}) {
    const std::vector<uint8_t> s = shift(px.data(), H, W, dy, dx);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const int sy = y - dy, sx = x - dx;
        const int want = sy >= 0 && sy < H && sx >= 0 && sx < W ? px[sy * W + sx] : 0;
        EXPECT_EQ(s[y * W + x], want) << dy << "," << dx << " at " << y << "," << x;
      }
  }
}

int bit(const BitImage& im, int y, int x, int b) {
  const int pw = (im.B + 63) / 64;
  return int(im.bits[(size_t(y) * im.W + x) * pw + b / 64] >> (b % 64) & 1);
}

TEST(BitnetPreprocess, Pool2x2MatchesBitCounts) {
  for (int B : {1, 5, 64, 70, 130})
    for (auto [H, W] : {std::pair{4, 4}, std::pair{7, 5}, std::pair{26, 26}, std::pair{3, 9}})
      for (double density : {0.2, 0.5}) {
        const BitImage im = random_image(H, W, B, uint64_t(B * 1000 + H * 10 + W), density);
        EXPECT_EQ(pool2x2(im, LayerPool::none).bits, im.bits);
        for (LayerPool p : {LayerPool::any, LayerPool::majority}) {
          SCOPED_TRACE(std::string(pool_name(p)) + " B " + std::to_string(B) + " " + std::to_string(H) + "x" +
                       std::to_string(W));
          const BitImage r = pool2x2(im, p);
          ASSERT_EQ(r.H, H / 2);
          ASSERT_EQ(r.W, W / 2);
          ASSERT_EQ(r.B, B);
          int64_t ones = 0;
          for (int y = 0; y < r.H; ++y)
            for (int x = 0; x < r.W; ++x)
              for (int b = 0; b < B; ++b) {
                const int n = bit(im, 2 * y, 2 * x, b) + bit(im, 2 * y, 2 * x + 1, b) + bit(im, 2 * y + 1, 2 * x, b) +
                              bit(im, 2 * y + 1, 2 * x + 1, b);
                ASSERT_EQ(bit(r, y, x, b), p == LayerPool::any ? n >= 1 : n >= 2) << y << " " << x << " " << b;
                ones += bit(r, y, x, b);
              }
          const int pw = (B + 63) / 64;
          for (int i = 0; B % 64 && i < r.H * r.W; ++i)  // bits past B stay zero
            EXPECT_EQ(r.bits[size_t(i) * pw + pw - 1] >> (B % 64), 0u);
          if (r.H * r.W * B > 64) {
            EXPECT_GT(ones, 0);
          }
        }
      }
}

TEST(BitnetPreprocess, SpaceToDepthStacksEachBlock) {
  for (int B : {1, 5, 32, 64, 70})
    for (auto [H, W] : {std::pair{2, 2}, std::pair{7, 5}, std::pair{28, 28}, std::pair{3, 9}}) {
      SCOPED_TRACE("B " + std::to_string(B) + " " + std::to_string(H) + "x" + std::to_string(W));
      const BitImage im = random_image(H, W, B, uint64_t(B * 1000 + H * 10 + W), 0.4);
      const BitImage r = space_to_depth(im);
      ASSERT_EQ(r.H, H / 2);
      ASSERT_EQ(r.W, W / 2);
      ASSERT_EQ(r.B, 4 * B);
      for (int y = 0; y < r.H; ++y)
        for (int x = 0; x < r.W; ++x)
          for (int q = 0; q < 4; ++q)
            for (int b = 0; b < B; ++b)
              ASSERT_EQ(bit(r, y, x, q * B + b), bit(im, 2 * y + q / 2, 2 * x + q % 2, b)) << y << " " << x << " " << q;
      const int pw = (4 * B + 63) / 64;
      for (int i = 0; (4 * B) % 64 && i < r.H * r.W; ++i)  // bits past 4B stay zero
        EXPECT_EQ(r.bits[size_t(i) * pw + pw - 1] >> ((4 * B) % 64), 0u);
    }
  EXPECT_THROW(space_to_depth(random_image(1, 5, 3, 1)), ember::Error);
}

}  // namespace
