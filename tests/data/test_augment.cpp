// Tests for the augmentation (src/data/augment.cpp) and the background BatchLoader (loader.cpp):
// crops and flips against a plain reference written here, the eval path's centre crop, the same
// bits for any number of loader threads, epochs restarted mid-way, --normalize parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "core/rng.h"
#include "ember/error.h"
#include "ember/loader.h"

namespace {

using ember::Augment;
using Bytes = std::vector<uint8_t>;

ember::Dataset numbered(int n, int C, int H, int W) {
  ember::Dataset d;
  d.count = n, d.channels = C, d.rows = H, d.cols = W, d.num_classes = 10;
  d.images.resize(size_t(n) * C * H * W);
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = uint8_t(1 + (i * 7) % 251);  // never 0
  for (int i = 0; i < n; ++i) d.labels.push_back(uint8_t(i % 10));
  return d;
}

// The pixel at (c, y, x) of the padded image, 0 in the border.
int padded_at(const ember::Dataset& d, int64_t i, int c, int y, int x, int pad) {
  y -= pad, x -= pad;
  if (y < 0 || y >= d.rows || x < 0 || x >= d.cols) return 0;
  return d.images[((size_t(i) * d.channels + c) * d.rows + y) * d.cols + x];
}

// Every random crop is some window of the padded image, maybe mirrored; over many samples every
// offset and both flips turn up; the same (seed, epoch, index) gives the same crop.
TEST(Augment, RandomCropIsAWindowOfThePaddedImage) {
  const ember::Dataset d = numbered(200, 2, 6, 7);
  Augment a;
  a.crop = 5, a.pad = 2, a.flip = true;
  const int S = ember::augmented_size(a, 6, 7, "--crop").h;
  ASSERT_EQ(S, 5);
  std::set<std::tuple<int, int, bool>> seen;
  for (int64_t i = 0; i < d.count; ++i) {
    Bytes out(size_t(2) * S * S), again(out.size());
    const uint8_t* src = d.images.data() + size_t(i) * d.image_elems();
    ember::augment_sample(out.data(), src, 2, 6, 7, a, {S, S}, true, 42, 3, i);
    ember::augment_sample(again.data(), src, 2, 6, 7, a, {S, S}, true, 42, 3, i);
    EXPECT_EQ(out, again);
    bool found = false;
    for (int y0 = 0; y0 <= 6 + 4 - S && !found; ++y0)
      for (int x0 = 0; x0 <= 7 + 4 - S && !found; ++x0)
        for (bool flip : {false, true}) {
          bool same = true;
          for (int c = 0; c < 2 && same; ++c)
            for (int y = 0; y < S && same; ++y)
              for (int x = 0; x < S && same; ++x)
                same = out[(size_t(c) * S + y) * S + x] == padded_at(d, i, c, y0 + y, x0 + (flip ? S - 1 - x : x), 2);
          if (same) {
            seen.insert({y0, x0, flip});
            found = true;
            break;
          }
        }
    EXPECT_TRUE(found) << "sample " << i;
  }
  EXPECT_GE(seen.size(), 60u);  // 6 x 7 offsets x 2 flips = 84 possible
}

TEST(Augment, EvalIsTheCentreCrop) {
  const ember::Dataset d = numbered(1, 3, 9, 9);
  Augment a;
  a.crop = 5, a.flip = true;
  Bytes out(3 * 25);
  ember::augment_sample(out.data(), d.images.data(), 3, 9, 9, a, {5, 5}, false, 1, 0, 0);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 5; ++x) EXPECT_EQ(out[(size_t(c) * 5 + y) * 5 + x], padded_at(d, 0, c, y + 2, x + 2, 0));
}

TEST(Augment, ResizedCropStaysInsideAndVaries) {
  const ember::Dataset d = numbered(64, 1, 16, 16);
  Augment a;
  a.crop = 8, a.resized_crop = true;
  std::set<Bytes> distinct;
  for (int64_t i = 0; i < 64; ++i) {
    Bytes out(64);
    ember::augment_sample(out.data(), d.images.data(), 1, 16, 16, a, {8, 8}, true, 5, 0, i);  // the same image each time
    for (uint8_t v : out) EXPECT_GT(v, 0);  // no zero border: the window lies inside the image
    distinct.insert(out);
  }
  EXPECT_GT(distinct.size(), 50u);
}

TEST(Augment, CropLargerThanThePaddedImageIsRefused) {
  Augment a;
  a.crop = 12, a.pad = 1;
  EXPECT_THROW(ember::augmented_size(a, 9, 9, "--crop"), ember::Error);
  a.crop = 11;
  EXPECT_EQ(ember::augmented_size(a, 9, 9, "--crop").w, 11);
  a.crop = 0;  // the image's own size, padded crop or not
  EXPECT_EQ(ember::augmented_size(a, 9, 8, "--crop").h, 9);
  EXPECT_EQ(ember::augmented_size(a, 9, 8, "--crop").w, 8);
}

TEST(Augment, NormalizeParsing) {
  Augment a;
  ember::parse_normalize("imagenet", 3, a, "--normalize");
  EXPECT_DOUBLE_EQ(a.mean[1], 0.456);
  EXPECT_DOUBLE_EQ(a.std[2], 0.225);
  ember::parse_normalize("0.5,0.25", 3, a, "--normalize");
  EXPECT_EQ(a.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  ember::parse_normalize("1,2,3,4,5,6", 3, a, "--normalize");
  EXPECT_EQ(a.std, (std::vector<double>{4, 5, 6}));
  std::vector<double> scale, shift;
  ember::input_affine(a, &scale, &shift);
  EXPECT_DOUBLE_EQ(scale[0], 1.0 / (255.0 * 4));
  EXPECT_DOUBLE_EQ(shift[2], -3.0 / 6);
  ember::parse_normalize("none", 3, a, "--normalize");
  EXPECT_TRUE(a.mean.empty());
  for (const char* bad : {"imagenet", "1,2,3", "0.5,0", "x,1", "0.5,nan", ""})
    EXPECT_THROW(ember::parse_normalize(bad, std::string(bad) == "imagenet" ? 1 : 3, a, "--normalize"), ember::Error) << bad;
}

// All batches of two epochs through 1 and 3 loader threads, depth 1 and 4: identical bytes, each
// sample as augment_sample makes it alone; an epoch started at batch 2 gives the same batches 2...
TEST(BatchLoader, SameBitsForAnyThreadCountAndRestart) {
  const ember::Dataset d = numbered(70, 3, 8, 8);
  Augment a;
  a.crop = 6, a.pad = 1, a.flip = true;
  std::vector<int64_t> order(70);
  std::iota(order.begin(), order.end(), 0);
  ember::Pcg32 rng(9, 1);
  for (int i = 69; i > 0; --i) std::swap(order[i], order[rng.below(uint32_t(i + 1))]);
  auto run = [&](int threads, int depth, int64_t first) {
    ember::BatchLoader l(d, a, 16, threads, depth, 7);
    std::vector<Bytes> out;
    for (int epoch = 0; epoch < 2; ++epoch) {
      l.start(order.data(), 70, epoch, first, true);
      for (ember::BatchLoader::Batch b; (b = l.next()).n > 0;) {
        out.emplace_back(b.images, b.images + size_t(b.n) * 108);
        out.back().insert(out.back().end(), b.labels, b.labels + b.n);
      }
    }
    return out;
  };
  const auto one = run(1, 1, 0);
  ASSERT_EQ(one.size(), 10u);  // 5 batches (16, 16, 16, 16, 6) per epoch
  EXPECT_EQ(one, run(3, 4, 0));
  EXPECT_EQ(one[4].size(), 6u * 109);
  Bytes want(108);
  ember::augment_sample(want.data(), d.images.data() + size_t(order[17]) * 192, 3, 8, 8, a, {6, 6}, true, 7, 0, order[17]);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), one[1].begin() + 108));
  EXPECT_EQ(one[1][16 * 108 + 1], d.labels[size_t(order[17])]);
  const auto late = run(2, 2, 2);
  ASSERT_EQ(late.size(), 6u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(late[size_t(k)], one[size_t(k + 2)]);
    EXPECT_EQ(late[size_t(k + 3)], one[size_t(k + 7)]);
  }
  // Abandoning an epoch half-way and starting another is safe (no batch of the old one leaks).
  ember::BatchLoader l(d, a, 16, 2, 3, 7);
  l.start(order.data(), 70, 0, 0, true);
  l.next();
  l.start(order.data(), 70, 1, 0, true);
  const ember::BatchLoader::Batch b = l.next();
  EXPECT_TRUE(std::equal(b.images, b.images + 16 * 108, one[5].begin()));
}

}  // namespace
