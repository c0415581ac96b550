// `ember train` on generated image data sets: CIFAR-10 binary batches, a folder of grey PNGs, a
// TinyImageNet-shaped tree of JPEGs with convnext-seed and its recipe's augmentation (and
// --show-batch), a resume mid-epoch with augmentation that ends bit-identical, and the one-line
// refusals of bad flags and bad files.
#include <sys/resource.h>
#include <turbojpeg.h>


#include "cli/cli_util.h"
#include "ember/data.h"

namespace {

// Class c of n classes: a bright square at its own place on a dim noisy background.
Bytes sample_image(int C, int H, int W, int cls, int n, uint32_t seed) {
  Bytes b(size_t(C) * H * W);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = uint8_t(20 + (x >> 27));
  }
  const int side = std::max(2, H / 3), y0 = (cls * (H - side)) / std::max(1, n - 1), x0 = W - side - y0 * (W - side) / H;
  for (int c = 0; c < C; ++c)
    for (int y = y0; y < y0 + side && y < H; ++y)
      for (int xx = std::max(0, x0); xx < x0 + side && xx < W; ++xx) b[(size_t(c) * H + y) * W + xx] = uint8_t(200 + 20 * c);
  return b;
}

Bytes as_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes jpeg(const Bytes& planar, int C, int H, int W) {
  Bytes inter(planar.size());
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < H * W; ++i) inter[size_t(i) * C + c] = planar[size_t(c) * H * W + i];
  tjhandle h = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  EXPECT_EQ(tjCompress2(h, inter.data(), W, 0, H, C == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &len, C == 1 ? TJSAMP_GRAY : TJSAMP_444, 92, 0), 0);
  Bytes out(buf, buf + len);
  tjFree(buf);
  tjDestroy(h);
  return out;
}

// The peak-RSS bound of the memory tests, in MiB: 1 GiB, as the issue asks; under a sanitizer the
// ember binary carries shadow memory (TSan about 4x what it touches), so 3 GiB there, which the
// unfixed loader (4.7 GB on the tall image before its shadow) still exceeds.
constexpr double kPeakMiB = kSanitizedBuild ? 3072 : 1024;

// A grey 8-bit PNG of w x h pixels of one value, deflated with zlib a megabyte of rows at a time:
// a few hundred KB on disk even at 2^26 pixels (the encoder would hold every pixel).
Bytes flat_png(uint32_t w, uint32_t h, uint8_t value) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&](const char* type, const Bytes& data) {
    Bytes c(type, type + 4);
    c.insert(c.end(), data.begin(), data.end());
    put_be32(out, uint32_t(data.size()));
    out.insert(out.end(), c.begin(), c.end());
    put_be32(out, uint32_t(crc32(0, c.data(), uInt(c.size()))));
  };
  Bytes ihdr;
  put_be32(ihdr, w), put_be32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});  // 8-bit grey
  chunk("IHDR", ihdr);
  Bytes row(size_t(w) + 1, value), rows, idat, buf(size_t(1) << 20);
  row[0] = 0;  // filter: none
  const uint32_t per = std::max<uint32_t>(1, uint32_t((size_t(1) << 20) / row.size()));
  for (uint32_t i = 0; i < per; ++i) rows.insert(rows.end(), row.begin(), row.end());
  z_stream z{};
  EXPECT_EQ(deflateInit(&z, Z_BEST_SPEED), Z_OK);
  for (uint32_t y = 0; y < h;) {
    const uint32_t n = std::min(per, h - y);
    y += n;
    z.next_in = rows.data(), z.avail_in = uInt(size_t(n) * row.size());
    do {
      z.next_out = buf.data(), z.avail_out = uInt(buf.size());
      deflate(&z, y == h ? Z_FINISH : Z_NO_FLUSH);
      idat.insert(idat.end(), buf.data(), buf.data() + (buf.size() - z.avail_out));
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  chunk("IDAT", idat);
  chunk("IEND", {});
  return out;
}

class ImageData : public Cli {
 protected:
  // run_peak under a 300 s timeout (decoding 2^26 one-pixel rows takes a while on a loaded
  // machine), the peak in MiB.
  Result run_peak_mib(const std::string& args, double* peak_mib) {
    long kb = -1;
    Result r = run_peak(args, &kb, 300);
    *peak_mib = double(kb) / 1024;
    return r;
  }
  // Two classes of small grey PNGs, `train` and `test` per class, for the large files to join.
  fs::path small_pngs(int train, int test) {
    const fs::path d = tmp_ / "big";
    for (const char* split : {"train", "test"})
      for (int c = 0; c < 2; ++c) {
        fs::create_directories(d / split / ("c" + std::to_string(c)));
        for (int i = 0; i < (split[1] == 'r' ? train : test); ++i) {
          const Bytes px = sample_image(1, 16, 16, c, 2, uint32_t(i * 2 + c));
          write_bytes(d / split / ("c" + std::to_string(c)) / ("0" + std::to_string(i) + ".png"),
                      as_bytes(ember::encode_png(px.data(), 1, 16, 16, "t")));
        }
      }
    return d;
  }
  fs::path cifar10(int train, int test) {
    const fs::path d = tmp_ / "cifar";
    fs::create_directories(d);
    auto batch = [&](int n, uint32_t seed) {
      Bytes b;
      for (int i = 0; i < n; ++i) {
        const int cls = int((seed * 31 + uint32_t(i) * 7) % 10);
        b.push_back(uint8_t(cls));
        const Bytes px = sample_image(3, 32, 32, cls, 10, seed * 1000 + uint32_t(i));
        b.insert(b.end(), px.begin(), px.end());
      }
      return b;
    };
    for (int k = 1; k <= 5; ++k) write_bytes(d / ("data_batch_" + std::to_string(k) + ".bin"), batch(train / 5, uint32_t(k)));
    write_bytes(d / "test_batch.bin", batch(test, 99));
    return d;
  }
  fs::path png_folder() {
    const fs::path d = tmp_ / "pngs";
    for (const char* split : {"train", "test"})
      for (int c = 0; c < 3; ++c) {
        const fs::path cd = d / split / ("class" + std::to_string(c));
        fs::create_directories(cd);
        for (int i = 0; i < (split[1] == 'r' ? 40 : 10); ++i) {
          const int s = 18 + i % 5;  // sizes differ: --image-size makes them one
          const Bytes px = sample_image(1, s, s, c, 3, uint32_t(i * 3 + c + (split[1] == 'r' ? 0 : 500)));
          write_bytes(cd / (std::to_string(i) + ".png"), as_bytes(ember::encode_png(px.data(), 1, s, s, "t")));
        }
      }
    return d;
  }
  fs::path tiny_tree(int classes, int per_class, int val) {
    const fs::path d = tmp_ / "tiny";
    std::string wnids, ann;
    for (int c = 0; c < classes; ++c) {
      const std::string w = "n0" + std::to_string(1000 + 37 * (classes - c));  // wnids.txt not sorted
      wnids += w + "\n";
      fs::create_directories(d / "train" / w / "images");
      write_text(d / "train" / w / (w + "_boxes.txt"), "x\n");
      for (int i = 0; i < per_class; ++i)
        write_bytes(d / "train" / w / "images" / (w + "_" + std::to_string(i) + ".JPEG"),
                    jpeg(sample_image(3, 64, 64, c, classes, uint32_t(c * 100 + i)), 3, 64, 64));
      for (int i = 0; i < val; ++i) {
        const std::string f = "val_" + std::to_string(c * val + i) + ".JPEG";
        fs::create_directories(d / "val" / "images");
        write_bytes(d / "val" / "images" / f, jpeg(sample_image(3, 64, 64, c, classes, uint32_t(7000 + c * 10 + i)), 3, 64, 64));
        ann += f + "\t" + w + "\t0\t0\t63\t63\n";
      }
    }
    write_text(d / "wnids.txt", wnids);
    write_text(d / "val" / "val_annotations.txt", ann);
    return d;
  }
};

TEST_F(ImageData, TrainsOnCifar10) {
  const fs::path d = cifar10(300, 60);
  const Result r = run("train --model mnist-cnn --data " + quote(d.string()) + " --epochs 3 --threads 2");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("input [1, 28, 28] set to the data's [3, 32, 32]"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("(300 train / 60 test)"), std::string::npos) << r.out;
  EXPECT_GT(final_accuracy(r.out, "final test accuracy "), 50.0) << r.out;  // chance: 10 %
}

TEST_F(ImageData, TrainsOnAFolderOfGreyPngs) {
  const fs::path d = png_folder();
  write_text(d / "train" / "class1" / "notes.txt", "not an image");
  const Result r = run("train --model mnist-cnn --data " + quote(d.string()) + " --image-size 16 --epochs 4 --batch-size 16 --threads 2");
  const Result cubic = run("train --model mnist-cnn --data " + quote(d.string()) + " --image-size 16 --resize bicubic --epochs 4 --batch-size 16 --threads 2");
  ASSERT_EQ(cubic.code, 0) << cubic.err;
  EXPECT_NE(cubic.out, r.out);  // other pixels, another run
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("skipped 1 train and 0 test files"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1, 16, 16]"), std::string::npos) << r.err;
  EXPECT_GT(final_accuracy(r.out, "final test accuracy "), 66.0) << r.out;  // chance: 33 %
  // Streamed from disk (--cache-mb 0), the same run gives the same weights, byte for byte.
  const fs::path w1 = tmp_ / "cached.safetensors", w2 = tmp_ / "streamed.safetensors";
  const std::string again = "train --model mnist-cnn --data " + quote(d.string()) + " --image-size 16 --epochs 1 --batch-size 16 --threads 2 --flip";
  ASSERT_EQ(run(again + " --save " + quote(w1.string())).code, 0);
  const Result s = run(again + " --cache-mb 0 --save " + quote(w2.string()));
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.err.find("read from disk"), std::string::npos) << s.err;
  EXPECT_EQ(read_text(w1), read_text(w2));
  // Without --image-size the differing sizes are refused, naming a file and the flag.
  expect_one_line_error(run("train --model mnist-cnn --data " + quote(d.string()) + " --epochs 1"), {"pngs/train/class0/1.png", "--image-size"});
}

// convnext-seed from a TinyImageNet-shaped tree: its recipe pads by 4, crops 64 and flips; the
// batch grid shows what it trains on.
TEST_F(ImageData, ConvNextSeedOnATinyImageNetTree) {
  const fs::path d = tiny_tree(4, 8, 2), grid = tmp_ / "grid.png";
  const Result r = run("train --model convnext-seed --data " + quote(d.string()) + " --epochs 1 --batch-size 16 --threads 2 --show-batch " +
                       quote(grid.string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(32 train / 8 test)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("final test accuracy"), std::string::npos) << r.out;
  const Bytes png = read_bytes(grid);
  const ember::Image im = ember::decode_image(png.data(), png.size(), grid.string());
  EXPECT_EQ(im.width, 4 * 66 - 2);  // 16 images of 64x64 in a 4 x 4 grid, 2-pixel gaps
  EXPECT_EQ(im.channels, 3);
  // The padded crop shows: some image has a zero row or column at its border.
  int zero_edges = 0;
  for (int k = 0; k < 16; ++k) {
    const int y0 = (k / 4) * 66, x0 = (k % 4) * 66;
    bool top = true, left = true;
    for (int t = 0; t < 64; ++t) {
      top = top && im.pixels[size_t(y0) * im.width + x0 + t] == 0;
      left = left && im.pixels[size_t(y0 + t) * im.width + x0] == 0;
    }
    zero_edges += top || left;
  }
  EXPECT_GT(zero_edges, 0);
  const Result plain = run("train --model convnext-seed --data " + quote(d.string()) + " --epochs 1 --batch-size 16 --threads 2 --no-augment --show-batch " +
                           quote(grid.string()));
  ASSERT_EQ(plain.code, 0) << plain.err;
}

// Stopped mid-epoch and resumed, a run with crops and flips ends with the same weights, byte for
// byte, as one never stopped: each sample's augmentation depends on (seed, epoch, sample) only.
TEST_F(ImageData, ResumeWithAugmentationIsBitIdentical) {
  const fs::path d = cifar10(200, 20), ref = tmp_ / "ref.safetensors", out = tmp_ / "out.safetensors";
  const std::string ck = (tmp_ / "ck").string();
  const std::string base = "train --model mnist-mlp --data " + quote(d.string()) + " --crop 28 --pad 2 --flip --normalize 0.5,0.25 --batch-size 16 --threads 2 --quiet";
  ASSERT_EQ(run(base + " --epochs 2 --save " + quote(ref.string())).code, 0);
  const Result first = run(base + " --epochs 1 --checkpoint-every 5 --checkpoint-dir " + quote(ck));
  ASSERT_EQ(first.code, 0) << first.err;
  const Result fin = run("train --resume " + quote(ck) + " --epochs 2 --quiet --save " + quote(out.string()));
  ASSERT_EQ(fin.code, 0) << fin.err;
  EXPECT_EQ(read_text(out), read_text(ref)) << "resumed weights differ";
  expect_one_line_error(run("train --resume " + quote(ck) + " --crop 24"), {"--crop", "cannot be changed"});
}

TEST_F(ImageData, BadFlagsAndFiles) {
  const fs::path d = png_folder();
  const std::string data = " --data " + quote(d.string()) + " --image-size 16 --epochs 1";
  expect_one_line_error(run("train" + data + " --data-format bmp"), {"--data-format", "bmp"});
  expect_one_line_error(run("train" + data + " --label medium"), {"--label", "medium"});
  expect_one_line_error(run("train" + data + " --resize lanczos"), {"--resize", "lanczos"});
  expect_one_line_error(run("train" + data + " --normalize 1,2,3"), {"--normalize", "3 numbers"});
  expect_one_line_error(run("train" + data + " --normalize imagenet"), {"--normalize", "3 channels"});
  expect_one_line_error(run("train" + data + " --crop 40"), {"--crop", "larger than the padded image"});
  expect_one_line_error(run("train" + data + " --resized-crop"), {"--resized-crop", "--crop"});
  expect_one_line_error(run("train" + data + " --data-format tinyimagenet"), {"wnids.txt"});
  expect_one_line_error(run("train" + data + " --data-format cifar"), {"data_batch_1.bin", "missing"});
  // A corrupt image: refused before anything is written, the run directory not made.
  const Bytes good = read_bytes(d / "test" / "class2" / "3.png");
  write_bytes(d / "test" / "class2" / "3.png", Bytes(good.begin(), good.begin() + long(good.size() / 2)));
  const fs::path out = tmp_ / "run";
  expect_one_line_error(run("train" + data + " --out " + quote(out.string())), {"pngs/test/class2/3.png", "PNG"});
  EXPECT_FALSE(fs::exists(out));
  expect_one_line_error(run("train" + data + " --show-batch /dev/null"), {"--show-batch", "/dev/null"});
}

// D3: one 1 x 2^26 grey PNG (a few hundred KB) resized to 16 x 16 took 4.8 GB and 31 s before the
// fix (the resampler's buffer was height x 16 floats); it trains now, under 1 GB.
TEST_F(ImageData, TallImageResizesInBoundedMemory) {
  const fs::path d = small_pngs(3, 1);
  write_bytes(d / "train" / "c0" / "tall.png", flat_png(1, uint32_t(1) << 26, 100));
  double peak = 0;
  const Result r = run_peak_mib("train --model mnist-mlp --data " + quote(d.string()) +
                                " --image-size 16 --epochs 1 --batch-size 4 --threads 2 --cache-mb 1",
                            &peak);
  ASSERT_EQ(r.code, 0) << r.cmd << "\n" << r.err;
  EXPECT_NE(r.out.find("(7 train / 2 test)"), std::string::npos) << r.out;
  EXPECT_LT(peak, kPeakMiB) << "peak RSS " << peak << " MiB";
}

// D2: a 16x16 first image then 24 hard links to one 8192x8192 PNG: every image was decoded (5 GB)
// before the sizes were compared (failed before the fix). The headers show it: refused at once,
// naming the first large file, in bounded memory.
TEST_F(ImageData, ManyLargeImagesAreCheckedFromTheirHeaders) {
  const fs::path d = small_pngs(1, 1), big = tmp_ / "large.png";
  write_bytes(big, flat_png(8192, 8192, 50));
  for (int i = 1; i <= 24; ++i) fs::create_hard_link(big, d / "train" / "c0" / ("1" + std::to_string(100 + i) + ".png"));
  double peak = 0;
  const Result r = run_peak_mib("train --model mnist-mlp --data " + quote(d.string()) + " --epochs 1 --threads 2", &peak);
  expect_one_line_error(r, {"big/train/c0/1101.png", "8192x8192", "the first one", "16x16", "--image-size"});
  EXPECT_LT(peak, kPeakMiB) << "peak RSS " << peak << " MiB";  // 24 decoded would be 1.5 GB: the headers told
  // Resized, they pass the header checks and are decoded a few at a time within the decoding
  // budget, whatever --threads says: under 1 GB + --cache-mb (8 threads held 2+ GB before).
  for (int i = 7; i <= 24; ++i) fs::remove(d / "train" / "c0" / ("1" + std::to_string(100 + i) + ".png"));
  const Result ok = run_peak_mib("train --model mnist-mlp --data " + quote(d.string()) +
                                 " --image-size 16 --epochs 1 --batch-size 2 --threads 8 --cache-mb 1",
                             &peak);
  ASSERT_EQ(ok.code, 0) << ok.cmd << "\n" << ok.err;
  EXPECT_NE(ok.out.find("(8 train / 2 test)"), std::string::npos) << ok.out;
  EXPECT_LT(peak, kPeakMiB + 1) << "peak RSS " << peak << " MiB";
}

// D9: a 3 GB sparse test_batch.bin was read whole (3 GB of memory) before the fix: refused from
// its size, naming it and the record count a CIFAR-10 batch holds.
TEST_F(ImageData, OversizedCifarBatchIsRefusedFromItsSize) {
  const fs::path d = cifar10(50, 10);
  ASSERT_EQ(::truncate((d / "test_batch.bin").c_str(), off_t(3073) * 976000), 0);
  double peak = 0;
  const Result r = run_peak_mib("train --model mnist-mlp --data " + quote(d.string()) + " --epochs 1", &peak);
  expect_one_line_error(r, {"test_batch.bin", "more than 10000"});
  EXPECT_LT(peak, kPeakMiB) << "peak RSS " << peak << " MiB";
}

// D12: flags whose wrong values were taken silently or blamed on something else (each failed
// before the fix): one line naming the flag.
TEST_F(ImageData, MisleadingFlagValuesAreRefusedNamingTheFlag) {
  const fs::path d = png_folder();
  const std::string data = " --data " + quote(d.string()) + " --image-size 16 --epochs 1";
  expect_one_line_error(run("train" + data + " --normalize 0.5,1e-300"), {"--normalize", "std", "1e-300"});
  expect_one_line_error(run("train" + data + " --normalize 0.5,inf"), {"--normalize"});
  expect_one_line_error(run("train" + data + " --pad -1"), {"--pad", "-1"});
  expect_one_line_error(run("train" + data + " --cache-mb -1"), {"--cache-mb", "-1"});
  expect_one_line_error(run("train" + data + " --crop -1"), {"--crop", "-1"});
  expect_one_line_error(run("train" + data + " --label coarse"), {"--label", "CIFAR-100", "image folder"});
  expect_one_line_error(run("train --data " + quote(cifar10(10, 2).string()) + " --epochs 1 --label coarse"), {"--label", "CIFAR-10"});
  // "3 numbers for 1 channels (expected 2 or 2)" said nothing clear.
  const Result three = run("train" + data + " --normalize 1,2,3");
  expect_one_line_error(three, {"--normalize", "3 numbers", "1 channel", "expected 2"});
  EXPECT_EQ(three.err.find("2 or 2"), std::string::npos) << three.err;
}

// D12: images too small for a ConvNeXt were reported as "conv2d needs an image input [C, H, W],
// found [160]" (before the fix): the message says the images are too small and what it needs.
TEST_F(ImageData, ImagesTooSmallForTheModelSaySo) {
  const fs::path d = png_folder();
  const Result r = run("train --model convnext-seed --data " + quote(d.string()) + " --image-size 8 --epochs 1 --no-augment");
  expect_one_line_error(r, {"--data", "8x8", "too small for model convnext-seed", "at least"});
  EXPECT_EQ(r.err.find("conv2d needs"), std::string::npos) << r.err;
}

// D12: `ember bench --data-folder` errors named --data (before the fix).
TEST_F(ImageData, BenchDataFolderErrorsNameTheFlag) {
  const fs::path d = tmp_ / "not-a-folder";
  fs::create_directories(d / "train");
  const Result r = run("bench --workloads data-decode --threads 1 --data-folder " + quote(d.string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--data-folder '"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--data '"), std::string::npos) << r.err;
}

}  // namespace
