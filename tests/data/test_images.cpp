// Tests for CIFAR batches (src/data/cifar.cpp), PNG/JPEG decoding and resizing (image_codec.cpp)
// and image folders (image_folder.cpp): values and labels on generated data, PIL as an
// independent decoder when python3 has it, and every bad input the loaders must refuse in one line.
#include <spng.h>
#include <sys/sysmacros.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "data/idx_util.h"
#include "ember/loader.h"

namespace {

using ember::Image;

// ---- generated files ----

// One CIFAR record: label byte(s), then 3072 image bytes (a pattern seeded by the record).
Bytes cifar_records(int n, bool hundred, int seed) {
  Bytes b;
  for (int i = 0; i < n; ++i) {
    if (hundred) b.push_back(uint8_t((i * 7 + seed) % 20));  // coarse
    b.push_back(uint8_t((i * 3 + seed) % (hundred ? 100 : 10)));
    const Bytes px = pattern(3072, uint32_t(seed * 1000 + i));
    b.insert(b.end(), px.begin(), px.end());
  }
  return b;
}

// A smooth colour image [3, H, W] (JPEG keeps it close), shifted by `tone`.
Image smooth(int w, int h, int channels, int tone) {
  Image im{w, h, channels, Bytes(size_t(channels) * w * h)};
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) im.pixels[(size_t(c) * h + y) * w + x] = uint8_t((tone + 3 * x + 2 * y + 40 * c) % 256);
  return im;
}

Bytes png_of(const Image& im) {
  const std::string s = ember::encode_png(im.pixels.data(), im.channels, im.height, im.width, "test");
  return Bytes(s.begin(), s.end());
}

Bytes jpeg_of(const Image& im, int quality = 95) {
  Bytes inter(im.pixels.size());
  const size_t HW = size_t(im.width) * im.height;
  for (int c = 0; c < im.channels; ++c)
    for (size_t i = 0; i < HW; ++i) inter[i * im.channels + c] = im.pixels[c * HW + i];
  tjhandle h = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  const int rc = tjCompress2(h, inter.data(), im.width, 0, im.height, im.channels == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &len,
                             im.channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(h);
  Bytes out(buf, buf + len);
  tjFree(buf);
  tjDestroy(h);
  return out;
}

// A PNG header claiming w x h (RGB, 8 bits), CRC correct, and no image data.
Bytes png_header(uint32_t w, uint32_t h) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes chunk = {'I', 'H', 'D', 'R'};
  put_be32(chunk, w);
  put_be32(chunk, h);
  for (uint8_t v : {8, 2, 0, 0, 0}) chunk.push_back(v);
  put_be32(b, 13);
  b.insert(b.end(), chunk.begin(), chunk.end());
  put_be32(b, uint32_t(crc32(0, chunk.data(), uInt(chunk.size()))));
  return b;
}

int max_abs_diff(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size()) return 1 << 20;
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

class ImagesTest : public IdxTest {
 protected:
  void put(const std::string& rel, const Bytes& b) {
    fs::create_directories(path(rel).parent_path());
    write_raw(path(rel), b);
  }
  // A folder data set: classes a, b (train 3 each, test 2 each), PNG and JPEG mixed, 12x10 RGB.
  void small_folder(const std::string& root) {
    for (const char* split : {"train", "test"})
      for (int c = 0; c < 2; ++c)
        for (int i = 0; i < (split[1] == 'r' ? 3 : 2); ++i) {
          const Image im = smooth(12, 10, 3, 60 * c + 7 * i);
          const std::string base = root + "/" + split + "/" + char('a' + c) + "/" + std::to_string(i);
          put(base + (i % 2 ? ".jpg" : ".png"), i % 2 ? jpeg_of(im) : png_of(im));
        }
  }
};

// ---- CIFAR ----

TEST_F(ImagesTest, Cifar10ValuesLabelsAndLimit) {
  for (int i = 1; i <= 5; ++i) put("c/data_batch_" + std::to_string(i) + ".bin", cifar_records(4, false, i));
  put("c/test_batch.bin", cifar_records(3, false, 9));
  put("c/batches.meta.txt", Bytes({'a', '\n', 'b', '\n', 'c', '\n', 'd', '\n', 'e', '\n', 'f', '\n', 'g', '\n', 'h', '\n', 'i', '\n', 'j', '\n', '\n'}));
  ASSERT_TRUE(ember::is_cifar_dir(path("c")));
  const ember::TrainTest t = ember::load_cifar_dir(path("c"));
  ASSERT_EQ(t.train.count, 20);
  EXPECT_EQ(t.test.count, 3);
  EXPECT_EQ(t.train.channels, 3);
  EXPECT_EQ(t.train.rows, 32);
  EXPECT_EQ(t.train.num_classes, 10);
  ASSERT_EQ(t.train.class_names.size(), 10u);
  EXPECT_EQ(t.train.class_names[9], "j");
  // Record 2 of data_batch_3 is sample 4*2 + 2: label (2*3 + 3) % 10, pixels pattern(3072, 3002).
  EXPECT_EQ(t.train.labels[10], 9);
  const Bytes px = pattern(3072, 3002);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), t.train.images.begin() + 10 * 3072));
  const ember::TrainTest l = ember::load_cifar_dir(path("c"), true, 6, 1);
  ASSERT_EQ(l.train.count, 6);
  EXPECT_EQ(l.test.count, 1);
  EXPECT_TRUE(std::equal(l.train.images.begin(), l.train.images.end(), t.train.images.begin()));
}

TEST_F(ImagesTest, Cifar100FineAndCoarse) {
  put("c/train.bin", cifar_records(5, true, 1));
  put("c/test.bin", cifar_records(2, true, 2));
  const ember::TrainTest fine = ember::load_cifar_dir(path("c"), true), coarse = ember::load_cifar_dir(path("c"), false);
  EXPECT_EQ(fine.train.num_classes, 100);
  EXPECT_EQ(coarse.train.num_classes, 20);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(fine.train.labels[i], (i * 3 + 1) % 100);
    EXPECT_EQ(coarse.train.labels[i], (i * 7 + 1) % 20);
  }
  const Bytes px = pattern(3072, 1004);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), fine.train.images.begin() + 4 * 3072));
}

TEST_F(ImagesTest, CifarBadInput) {
  put("c/train.bin", cifar_records(2, true, 1));
  Bytes cut = cifar_records(2, true, 2);
  cut.pop_back();
  put("c/test.bin", cut);
  expect_msg(error_of([&] { ember::load_cifar_dir(path("c")); }), {path("c/test.bin").string(), "3074-byte", "record"});
  Bytes bad = cifar_records(2, false, 1);
  bad[3073] = 10;  // record 1's label
  for (int i = 1; i <= 5; ++i) put("d/data_batch_" + std::to_string(i) + ".bin", i == 4 ? bad : cifar_records(1, false, i));
  put("d/test_batch.bin", cifar_records(1, false, 7));
  expect_msg(error_of([&] { ember::load_cifar_dir(path("d")); }), {"data_batch_4.bin", "record 1", "label 10"});
  fs::remove(path("d/data_batch_2.bin"));
  expect_msg(error_of([&] { ember::load_cifar_dir(path("d")); }), {"data_batch_2.bin", "missing"});
  put("e/test_batch.bin", Bytes());
  for (int i = 1; i <= 5; ++i) put("e/data_batch_" + std::to_string(i) + ".bin", cifar_records(1, false, i));
  expect_msg(error_of([&] { ember::load_cifar_dir(path("e")); }), {"test_batch.bin", "size 0"});
  fs::remove(path("e/test_batch.bin"));
  ASSERT_EQ(::mkfifo(path("e/test_batch.bin").c_str(), 0600), 0);  // refused at once, never waited on
  expect_msg(error_of([&] { ember::load_cifar_dir(path("e")); }), {"test_batch.bin"});
}

// D9: a CIFAR file larger than the real one (a sparse 3 GB test_batch.bin was read whole, to 3 GB
// of memory, before the fix) is refused from its size, before anything is read or allocated.
TEST_F(ImagesTest, CifarFilesAreBoundedByTheRealSizes) {
  for (int i = 1; i <= 5; ++i) put("c/data_batch_" + std::to_string(i) + ".bin", cifar_records(1, false, i));
  put("c/test_batch.bin", Bytes());
  ASSERT_EQ(::truncate(path("c/test_batch.bin").c_str(), off_t(3073) * 976000), 0);  // 3 GB, sparse
  expect_msg(error_of([&] { ember::load_cifar_dir(path("c")); }), {"test_batch.bin", "more than 10000", "3073-byte"});
  ASSERT_EQ(::truncate(path("c/test_batch.bin").c_str(), off_t(3073) * 10001), 0);  // one record too many
  expect_msg(error_of([&] { ember::load_cifar_dir(path("c"), true, 0, 5); }), {"test_batch.bin", "more than 10000"});
  ASSERT_EQ(::truncate(path("c/test_batch.bin").c_str(), off_t(3073) * 10000), 0);  // the real size: read
  EXPECT_EQ(ember::load_cifar_dir(path("c")).test.count, 10000);
  put("h/train.bin", Bytes());  // CIFAR-100's train.bin holds 50,000
  ASSERT_EQ(::truncate(path("h/train.bin").c_str(), off_t(3074) * 50001), 0);
  put("h/test.bin", cifar_records(1, true, 1));
  expect_msg(error_of([&] { ember::load_cifar_dir(path("h")); }), {"train.bin", "more than 50000"});
}

// ---- decoding ----

TEST_F(ImagesTest, PngRoundTripsAndJpegStaysClose) {
  for (int c : {1, 3}) {
    const Image im = smooth(17, 9, c, 5);
    const Bytes png = png_of(im);
    const Image d = ember::decode_image(png.data(), png.size(), "x.png");
    EXPECT_EQ(d.width, 17);
    EXPECT_EQ(d.height, 9);
    EXPECT_EQ(d.channels, c);
    EXPECT_EQ(d.pixels, im.pixels);
    const Bytes jpg = jpeg_of(im, 98);
    const Image j = ember::decode_image(jpg.data(), jpg.size(), "x.jpg");
    EXPECT_EQ(j.channels, c);
    EXPECT_LE(max_abs_diff(j.pixels, im.pixels), 24);  // lossy, chroma subsampled
    const Image h = ember::read_image_header(jpg.data(), jpg.size(), "x.jpg");
    EXPECT_EQ(h.width, 17);
    EXPECT_TRUE(h.pixels.empty());
  }
}

TEST_F(ImagesTest, DecoderBadInput) {
  const Bytes png = png_of(smooth(20, 20, 3, 1)), jpg = jpeg_of(smooth(20, 20, 3, 1));
  auto msg = [](const Bytes& b) {
    return error_of([&] { ember::decode_image(b.data(), b.size(), "f/img.png"); });
  };
  expect_msg(msg(Bytes()), {"f/img.png", "0 bytes"});
  expect_msg(msg(Bytes(png.begin(), png.begin() + png.size() / 2)), {"f/img.png", "PNG"});
  expect_msg(msg(Bytes(jpg.begin(), jpg.begin() + jpg.size() / 2)), {"f/img.png", "JPEG"});
  Bytes flipped = png;
  flipped[40] ^= 0x55;  // inside IDAT: its CRC no longer matches
  expect_msg(msg(flipped), {"f/img.png", "PNG"});
  expect_msg(msg(Bytes({'h', 'e', 'l', 'l', 'o'})), {"f/img.png", "not a PNG or JPEG"});
  // A 100000 x 100000 header is refused before its 30 GB are allocated.
  const long before = peak_rss_kib();
  expect_msg(msg(png_header(100000, 100000)), {"f/img.png", "100000x100000"});
  EXPECT_LT(peak_rss_kib() - before, 64 * 1024);
}

// An RGBA PNG (written here by libspng's encoder) decodes to its RGB planes, alpha dropped.
TEST_F(ImagesTest, RgbaDropsAlpha) {
  const int w = 5, h = 4;
  Bytes inter(size_t(w) * h * 4);
  for (size_t i = 0; i < inter.size(); ++i) inter[i] = uint8_t(i * 37 + 11);
  spng_ctx* c = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ih{uint32_t(w), uint32_t(h), 8, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 0, 0, 0};
  spng_set_ihdr(c, &ih);
  ASSERT_EQ(spng_encode_image(c, inter.data(), inter.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  size_t len = 0;
  int e = 0;
  uint8_t* buf = static_cast<uint8_t*>(spng_get_png_buffer(c, &len, &e));
  spng_ctx_free(c);
  ASSERT_NE(buf, nullptr);
  const Image d = ember::decode_image(buf, len, "rgba.png");
  std::free(buf);
  ASSERT_EQ(d.channels, 3);
  for (int ch = 0; ch < 3; ++ch)
    for (int i = 0; i < w * h; ++i) EXPECT_EQ(d.pixels[size_t(ch) * w * h + i], inter[size_t(i) * 4 + ch]);
}

// ---- resizing ----

// Against a plain double-precision separable filter written here from PIL's definition.
TEST_F(ImagesTest, ResizeMatchesTheFilterDefinition) {
  const Image im{23, 17, 2, pattern(2 * 17 * 23, 5)};  // noise: every weight shows
  for (bool cubic : {false, true})
    for (auto [oh, ow] : {std::pair{8, 9}, std::pair{40, 31}, std::pair{17, 5}}) {
      Bytes out(size_t(2) * oh * ow);
      ember::resize_image(out.data(), oh, ow, im.pixels.data(), 2, 17, 23, cubic);
      auto filt = [&](double x) {
        x = std::fabs(x);
        if (!cubic) return x < 1 ? 1 - x : 0.0;
        return x < 1 ? (1.5 * x - 2.5) * x * x + 1 : x < 2 ? (((x - 5) * x + 8) * x - 4) * -0.5 : 0.0;
      };
      auto weights = [&](int in, int out_n, int o) {
        const double sc = double(in) / out_n, ss = std::max(sc, 1.0), sup = (cubic ? 2 : 1) * ss, ctr = (o + 0.5) * sc;
        std::vector<double> w(in, 0.0);
        double sum = 0;
        for (int i = std::max(int(ctr - sup + 0.5), 0); i < std::min(int(ctr + sup + 0.5), in); ++i) sum += w[i] = filt((i - ctr + 0.5) / ss);
        for (double& v : w) v /= sum;
        return w;
      };
      int worst = 0;
      for (int c = 0; c < 2; ++c)
        for (int y = 0; y < oh; ++y)
          for (int x = 0; x < ow; ++x) {
            const auto wy = weights(17, oh, y), wx = weights(23, ow, x);
            double acc = 0;
            for (int i = 0; i < 17; ++i)
              for (int j = 0; j < 23; ++j) acc += wy[i] * wx[j] * im.pixels[(size_t(c) * 17 + i) * 23 + j];
            const int want = int(std::clamp(std::lround(acc), 0L, 255L));
            worst = std::max(worst, std::abs(want - int(out[(size_t(c) * oh + y) * ow + x])));
          }
      EXPECT_LE(worst, 1) << (cubic ? "bicubic " : "bilinear ") << oh << "x" << ow;
    }
}

// D3: the resampler's buffer was source height x output width floats (4.8 GB for 1 x 2^26 pixels
// to 16 x 16); the strip resampler that replaced it (memory: ImageData.TallImageResizesInBounded
// Memory) computes weights too many to tabulate as it goes. A guard for that new path, not a
// reproducer (the old code passed it too): shrinking a tall strip by 200,000 is still PIL's
// filter, checked in double precision here.
TEST_F(ImagesTest, ResizeOfATallStripMatchesTheFilter) {
  const int H = 600000, oh = 3, ow = 2;
  const Bytes src = pattern(size_t(H), 11);
  for (bool cubic : {false, true}) {
    Bytes out(size_t(oh) * ow);
    ember::resize_image(out.data(), oh, ow, src.data(), 1, H, 1, cubic);
    for (int y = 0; y < oh; ++y) {
      const double sc = double(H) / oh, sup = (cubic ? 2 : 1) * sc, ctr = (y + 0.5) * sc;
      double acc = 0, sum = 0;
      for (int i = std::max(int(ctr - sup + 0.5), 0); i < std::min(int(ctr + sup + 0.5), H); ++i) {
        double x = std::fabs((i - ctr + 0.5) / sc);
        const double w = !cubic ? (x < 1 ? 1 - x : 0.0) : x < 1 ? (1.5 * x - 2.5) * x * x + 1 : x < 2 ? (((x - 5) * x + 8) * x - 4) * -0.5 : 0.0;
        acc += w * src[size_t(i)], sum += w;
      }
      for (int x = 0; x < ow; ++x) EXPECT_NEAR(int(out[size_t(y) * ow + x]), acc / sum, 1.0) << (cubic ? "bicubic " : "bilinear ") << y;
    }
  }
}

// ---- folders ----

TEST_F(ImagesTest, FolderLabelsPixelsAndSkips) {
  small_folder("f");
  put("f/train/a/README.txt", Bytes({'x'}));
  fs::create_directories(path("f/train/b/deeper/still"));
  put("f/train/b/deeper/still/9.png", png_of(smooth(12, 10, 3, 200)));
  fs::create_directory_symlink(path("f/train/a"), path("f/train/b/link"));  // not followed
  ASSERT_TRUE(ember::is_image_folder(path("f")));
  for (int threads : {1, 3}) {
    ember::FolderOptions o;
    o.threads = threads;
    ember::FolderReport rep;
    const ember::TrainTest t = ember::load_image_folder(path("f"), o, &rep);
    ASSERT_EQ(t.train.count, 7);
    EXPECT_EQ(t.test.count, 4);
    EXPECT_EQ(rep.skipped_train, 2);
    EXPECT_EQ(t.train.class_names, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(t.train.channels, 3);
    EXPECT_EQ(t.train.rows, 10);
    EXPECT_EQ(t.train.cols, 12);
    const std::vector<int> labels(t.train.labels.begin(), t.train.labels.end());
    EXPECT_EQ(labels, (std::vector<int>{0, 0, 0, 1, 1, 1, 1}));
    // Sorted paths: b/0.png, b/1.jpg, b/2.png, b/deeper/still/9.png. PNG samples are exact.
    const Image b2 = smooth(12, 10, 3, 60 + 14);
    EXPECT_TRUE(std::equal(b2.pixels.begin(), b2.pixels.end(), t.train.images.begin() + 5 * 360));
    const Image deep = smooth(12, 10, 3, 200);
    EXPECT_TRUE(std::equal(deep.pixels.begin(), deep.pixels.end(), t.train.images.begin() + 6 * 360));
  }
  ember::FolderOptions o;
  o.image_size = 8;
  const ember::TrainTest r = ember::load_image_folder(path("f"), o);
  EXPECT_EQ(r.train.rows, 8);
  Bytes want(3 * 64);
  const Image a0 = smooth(12, 10, 3, 0);
  ember::resize_image(want.data(), 8, 8, a0.pixels.data(), 3, 10, 12);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), r.train.images.begin()));
}

TEST_F(ImagesTest, FolderMixedGreyAndRgb) {
  small_folder("f");
  put("f/train/a/7.png", png_of(smooth(12, 10, 1, 33)));
  const ember::TrainTest t = ember::load_image_folder(path("f"), {});
  EXPECT_EQ(t.train.channels, 3);
  const Image g = smooth(12, 10, 1, 33);
  for (int c = 0; c < 3; ++c)  // a/7.png is the 4th train image: its grey plane in R, G and B
    EXPECT_TRUE(std::equal(g.pixels.begin(), g.pixels.end(), t.train.images.begin() + 3 * 360 + c * 120));
}

TEST_F(ImagesTest, FolderBadInput) {
  auto err = [&](const char* root) { return error_of([&] { ember::load_image_folder(path(root), {}); }); };
  small_folder("empty");
  fs::create_directories(path("empty/train/c"));
  expect_msg(err("empty"), {"empty/train/c", "no .png/.jpg/.jpeg images"});
  fs::create_directories(path("none/train"));
  fs::create_directories(path("none/test"));
  expect_msg(err("none"), {"none/train", "no class folders"});
  small_folder("extra");
  put("extra/test/zebra/0.png", png_of(smooth(12, 10, 3, 1)));
  expect_msg(err("extra"), {"zebra", "not among train's classes"});
  small_folder("zero");
  put("zero/train/b/5.png", Bytes());
  expect_msg(err("zero"), {"zero/train/b/5.png", "0 bytes"});
  small_folder("trunc");
  Bytes j = jpeg_of(smooth(12, 10, 3, 1));
  put("trunc/test/a/3.jpg", Bytes(j.begin(), j.begin() + j.size() * 2 / 3));
  expect_msg(err("trunc"), {"trunc/test/a/3.jpg", "JPEG"});
  small_folder("fake");
  put("fake/train/a/x.jpg", Bytes({'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'}));
  expect_msg(err("fake"), {"fake/train/a/x.jpg", "not a PNG or JPEG"});
  small_folder("sizes");
  put("sizes/train/b/5.png", png_of(smooth(13, 10, 3, 1)));
  // The library names FolderOptions' field and the folder as "image folder" (the CLI: its flags).
  expect_msg(err("sizes"), {"image folder '", "sizes/train/b/5.png", "13x10", "pass image_size to resize all"});
  EXPECT_EQ(err("sizes").find("--"), std::string::npos) << err("sizes");
  small_folder("loop");
  fs::create_symlink(path("loop/train/a/l.png"), path("loop/train/a/l.png"));
  expect_msg(err("loop"), {"loop/train/a/l.png"});
  small_folder("huge");
  put("huge/train/a/big.png", png_header(100000, 100000));
  expect_msg(err("huge"), {"huge/train/a/big.png", "100000x100000"});
  small_folder("dev");  // a link to a device, named as an image: refused at once, never read
  fs::create_symlink("/dev/zero", path("dev/train/a/z.png"));
  expect_msg(err("dev"), {"dev/train/a/z.png"});
  // D12: a FIFO named as an image was skipped as "not .png/.jpg" (failed before the fix): it is
  // refused naming it, never opened (opening it would wait for a writer). One not named as an
  // image is skipped and counted like any other such file.
  small_folder("fifo");
  ASSERT_EQ(::mkfifo(path("fifo/train/a/f.png").c_str(), 0600), 0);
  expect_msg(err("fifo"), {"fifo/train/a/f.png", "a FIFO named as an image"});
  fs::remove(path("fifo/train/a/f.png"));
  if (::geteuid() == 0) {  // only root makes device nodes: one like /dev/null, named as an image
    ASSERT_EQ(::mknod(path("fifo/train/a/d.png").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
    expect_msg(err("fifo"), {"fifo/train/a/d.png", "a device node named as an image"});
    fs::remove(path("fifo/train/a/d.png"));
  }
  ASSERT_EQ(::mkfifo(path("fifo/train/a/f.txt").c_str(), 0600), 0);
  ember::FolderReport rep;
  EXPECT_EQ(ember::load_image_folder(path("fifo"), {}, &rep).train.count, 6);
  EXPECT_EQ(rep.skipped_train, 1);
  small_folder("deep");
  std::string d = "deep/train/a";
  for (int i = 0; i < 10; ++i) d += "/n";
  put(d + "/0.png", png_of(smooth(12, 10, 3, 1)));
  expect_msg(err("deep"), {"nested more than 8"});
  small_folder("notest");
  fs::remove_all(path("notest/test"));
  expect_msg(err("notest"), {"no test/ or val/ folder"});
  if (::geteuid() != 0) {  // root reads anything
    small_folder("perm");
    ::chmod(path("perm/train/a/0.png").c_str(), 0);
    expect_msg(err("perm"), {"perm/train/a/0.png"});
  }
}

// Headers are read from a file's first 64 KiB, else from the whole file: a JPEG whose frame header
// comes after 120 KB of comment segments is read (sized from its header, decoded), and one whose
// bytes after those comments are cut is refused naming it, as before.
TEST_F(ImagesTest, FolderHeaderPastTheFirst64KiB) {
  small_folder("j");
  const Bytes plain = jpeg_of(smooth(12, 10, 3, 99));
  Bytes late(plain.begin(), plain.begin() + 2);  // SOI, then two 60,000-byte COM segments
  for (int k = 0; k < 2; ++k) {
    late.insert(late.end(), {0xff, 0xfe, uint8_t(60002 >> 8), uint8_t(60002 & 0xff)});
    late.insert(late.end(), 60000, uint8_t('c'));
  }
  late.insert(late.end(), plain.begin() + 2, plain.end());
  put("j/train/a/5.jpg", late);
  const ember::TrainTest t = ember::load_image_folder(path("j"), {});
  ASSERT_EQ(t.train.count, 7);
  const ember::Image want = ember::decode_image(plain.data(), plain.size(), "plain");
  EXPECT_TRUE(std::equal(want.pixels.begin(), want.pixels.end(), t.train.images.begin() + 3 * 360));  // a/0, a/1, a/2, a/5
  put("j/train/a/5.jpg", Bytes(late.begin(), late.begin() + 120100));
  expect_msg(error_of([&] { ember::load_image_folder(path("j"), {}); }), {"j/train/a/5.jpg", "JPEG"});
}

// A set that does not fit the cache is streamed: headers checked up front, the same labels, and
// each image decoded on demand equal to the cached one; a file spoiled after the listing is an
// Error from the loader naming it, not a crash.
TEST_F(ImagesTest, StreamedEqualsCached) {
  small_folder("f");
  put("f/train/b/9.png", png_of(smooth(12, 10, 1, 77)));  // grey among colour: replicated either way
  for (int size : {0, 6}) {
    ember::FolderOptions o;
    o.image_size = size;
    const ember::TrainTest cached = ember::load_image_folder(path("f"), o);
    o.cache_bytes = 100;
    ember::FolderReport rep;
    const ember::TrainTest s = ember::load_image_folder(path("f"), o, &rep);
    EXPECT_TRUE(rep.streamed);
    ASSERT_TRUE(s.train.streamed());
    EXPECT_FALSE(cached.train.streamed());
    EXPECT_TRUE(s.train.images.empty());
    EXPECT_EQ(s.train.labels, cached.train.labels);
    EXPECT_EQ(s.test.count, cached.test.count);
    EXPECT_EQ(s.train.channels, 3);
    Bytes scratch(s.train.image_elems());
    for (int64_t i = 0; i < s.train.count; ++i) {
      const uint8_t* a = s.train.image(i, scratch.data());
      EXPECT_TRUE(std::equal(a, a + scratch.size(), cached.train.images.begin() + i * int64_t(scratch.size()))) << i;
    }
  }
  ember::FolderOptions o;
  o.cache_bytes = 0;
  const ember::TrainTest s = ember::load_image_folder(path("f"), o);
  put("f/train/a/2.png", Bytes({'x'}));
  ember::BatchLoader loader(s.train, {}, 4, 2, 2, 1);
  std::vector<int64_t> order = {0, 1, 2, 3};
  loader.start(order.data(), 4, 0, 0, true);
  expect_msg(error_of([&] { loader.next(); }), {"f/train/a/2.png"});
  // A file whose header lies is refused up front, before training starts.
  put("f/train/a/2.png", png_header(100000, 100000));
  expect_msg(error_of([&] { ember::load_image_folder(path("f"), o); }), {"f/train/a/2.png", "100000x100000"});
}

// TinyImageNet's layout, read as it comes: wnids.txt (any order; classes sorted as ImageFolder
// would), train/<wnid>/images/*.JPEG, val/images labelled by val/val_annotations.txt.
TEST_F(ImagesTest, TinyImageNetLayout) {
  put("t/wnids.txt", Bytes({'n', '2', '\n', 'n', '1', '\n'}));
  for (const char* w : {"n1", "n2"})
    for (int i = 0; i < 2; ++i)
      put(std::string("t/train/") + w + "/images/" + w + "_" + char('0' + i) + ".JPEG", jpeg_of(smooth(16, 16, 3, i)));
  put("t/train/n1/n1_boxes.txt", Bytes({'0'}));
  put("t/val/images/val_0.JPEG", jpeg_of(smooth(16, 16, 3, 50)));
  put("t/val/images/val_1.JPEG", jpeg_of(smooth(16, 16, 3, 90)));
  const std::string ann = "val_1.JPEG\tn1\t0\t0\t10\t10\nval_0.JPEG\tn2\t1\t1\t5\t5\n";
  put("t/val/val_annotations.txt", Bytes(ann.begin(), ann.end()));
  ASSERT_TRUE(ember::is_image_folder(path("t")));
  ember::FolderReport rep;
  const ember::TrainTest t = ember::load_image_folder(path("t"), {}, &rep);
  EXPECT_EQ(t.train.class_names, (std::vector<std::string>{"n1", "n2"}));
  ASSERT_EQ(t.train.count, 4);
  EXPECT_EQ(rep.skipped_train, 1);
  EXPECT_EQ(std::vector<int>(t.train.labels.begin(), t.train.labels.end()), (std::vector<int>{0, 0, 1, 1}));
  ASSERT_EQ(t.test.count, 2);
  EXPECT_EQ(std::vector<int>(t.test.labels.begin(), t.test.labels.end()), (std::vector<int>{1, 0}));  // val_0, val_1
  const std::string bad = "val_0.JPEG\tn9\n";
  put("t/val/val_annotations.txt", Bytes(bad.begin(), bad.end()));
  expect_msg(error_of([&] { ember::load_image_folder(path("t"), {}); }), {"val_annotations.txt", "line 1"});
  // D12: an image listed twice doubled the test set (failed before the fix): refused naming the
  // file, the line and the image.
  const std::string twice = ann + "val_1.JPEG\tn2\t0\t0\t10\t10\n";
  put("t/val/val_annotations.txt", Bytes(twice.begin(), twice.end()));
  expect_msg(error_of([&] { ember::load_image_folder(path("t"), {}); }),
             {"val_annotations.txt", "line 3", "'val_1.JPEG' is listed again", "line 1"});
}

// PIL (python3-pil), an independent decoder and resizer, reads the same folder: labels from the
// sorted class folders and pixels (PNG exactly; JPEG within 1, both libjpeg-turbo; resize within 2).
TEST_F(ImagesTest, AgreesWithPil) {
  if (std::system("/usr/bin/python3 -c 'import PIL' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with PIL (python3-pil) not found: the independent decoder check did not run";
  small_folder("f");
  put("f/train/b/9.png", png_of(smooth(12, 10, 1, 77)));  // grey: PIL's convert("RGB") copies it
  for (int size : {0, 7}) {
    ember::FolderOptions o;
    o.image_size = size;
    const ember::TrainTest t = ember::load_image_folder(path("f"), o);
    const std::string out = path("pil.bin").string();
    const std::string py =
        "import sys,os\nfrom PIL import Image\nroot,out,s=sys.argv[1],sys.argv[2],int(sys.argv[3])\n"
        "cls=sorted(os.listdir(root+'/train'))\nf=open(out,'wb')\n"
        "for c in cls:\n  for n in sorted(os.listdir(root+'/train/'+c)):\n"
        "    im=Image.open(root+'/train/'+c+'/'+n).convert('RGB')\n"
        "    im=im.resize((s,s),Image.BILINEAR) if s else im\n"
        "    f.write(bytes([cls.index(c)]))\n    for b in im.split(): f.write(b.tobytes())\n";
    const std::string script = path("pil.py").string();
    write_raw(script, Bytes(py.begin(), py.end()));
    ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + path("f").string() + " " + out + " " + std::to_string(size)).c_str()), 0);
    const Bytes pil = read_file(out);
    const size_t per = t.train.image_elems();
    ASSERT_EQ(pil.size(), size_t(t.train.count) * (per + 1));
    int worst = 0;
    for (int64_t i = 0; i < t.train.count; ++i) {
      EXPECT_EQ(pil[i * (per + 1)], t.train.labels[i]);
      for (size_t k = 0; k < per; ++k)
        worst = std::max(worst, std::abs(int(pil[i * (per + 1) + 1 + k]) - int(t.train.images[i * per + k])));
    }
    EXPECT_LE(worst, size ? 2 : 1) << "image size " << size;
  }
}

}  // namespace
