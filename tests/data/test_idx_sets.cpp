// Tests for the IDX data-set loaders (src/data/idx.cpp): images and labels checked against each
// other before decoding, `limit`, the MNIST directory loader (missing files, symlink loops,
// limits, gzip and raw mixed) and the real MNIST files when present.
#include "data/idx_util.h"

namespace {

// ---- bad input: data sets ----

TEST_F(IdxTest, CountMismatch) {
  const std::string ip = write_pair("a", 12, false).first;
  const std::string lp = write_pair("b", 11, true).second;
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, lp, 10); }),
             {ip, lp, "count", "12", "11"});
}

// Both headers are checked before either payload is decoded: a count mismatch is reported even
// when the images' payload is truncated (raw) or corrupt (gzip).
TEST_F(IdxTest, CountMismatchBeforeDecoding) {
  const std::string lp = write_pair("b", 11, false).second;
  auto raw = path("cut-images-idx3-ubyte");
  Bytes idx = idx_bytes({12, 3, 2}, pattern(72));
  write_raw(raw, Bytes(idx.begin(), idx.end() - 30));
  expect_msg(error_of([&] { ember::load_idx_dataset(raw.string(), lp, 10); }),
             {lp, "count", "expected 12", "found 11"});
  // Stored blocks (5-byte block header after the 10-byte gzip header): a payload byte flipped,
  // so the header decodes and the CRC check at the end fails.
  Bytes gz = gz_of(idx_bytes({12, 3, 2}, pattern(72)), "wb0");
  gz[10 + 5 + 16 + 10] ^= 0xFF;
  auto bad = path("corrupt-images-idx3-ubyte.gz");
  write_raw(bad, gz);
  expect_msg(error_of([&] { ember::read_idx(bad.string()); }), {bad.string(), "corrupt"});
  expect_msg(error_of([&] { ember::load_idx_dataset(bad.string(), lp, 10); }),
             {lp, "count", "expected 12", "found 11"});
}

// limit = N keeps the first N images and labels, equal to the first N of the full load; 0 and
// limit >= count keep all; a negative limit is refused.
TEST_F(IdxTest, LimitKeepsTheFirstItems) {
  for (bool gz : {false, true}) {
    const auto files = write_pair(gz ? "gz" : "raw", 13, gz);  // not a structured binding:
    const std::string &ip = files.first, &lp = files.second;   // clang 14 cannot capture those
    const ember::Dataset full = ember::load_idx_dataset(ip, lp, 10);
    const ember::Dataset five = ember::load_idx_dataset(ip, lp, 10, 5);
    EXPECT_EQ(five.count, 5);
    EXPECT_EQ(five.rows, 3);
    EXPECT_EQ(five.cols, 2);
    EXPECT_EQ(five.images, Bytes(full.images.begin(), full.images.begin() + 30));
    EXPECT_EQ(five.labels, Bytes(full.labels.begin(), full.labels.begin() + 5));
    for (int64_t all : {int64_t{0}, int64_t{13}, int64_t{1000}}) {
      const ember::Dataset d = ember::load_idx_dataset(ip, lp, 10, all);
      EXPECT_EQ(d.count, 13);
      EXPECT_EQ(d.images, full.images);
      EXPECT_EQ(d.labels, full.labels);
    }
    expect_msg(error_of([&] { ember::load_idx_dataset(ip, lp, 10, -1); }),
               {ip, "limit", ">= 0", "found -1"});
  }
}

// With a limit only the kept part is decoded: a gzip file whose later part is corrupt or cut
// off, or a label past the limit out of range, loads; a raw file's size is still checked exactly.
TEST_F(IdxTest, LimitIgnoresACorruptTail) {
  const uint32_t n = 200;
  Bytes pixels = pattern(size_t{n} * 784, 8);
  for (auto& v : pixels) v >>= 4;  // compressible: Huffman-coded blocks, not stored ones
  Bytes gz = gz_of(idx_bytes({n, 28, 28}, pixels));
  ASSERT_GT(gz.size(), 20000u);
  for (size_t i = gz.size() * 9 / 10; i < gz.size() * 9 / 10 + 16; ++i) gz[i] ^= 0xA5;
  auto corrupt = path("corrupt-images-idx3-ubyte.gz"), cut = path("cut-images-idx3-ubyte.gz");
  write_raw(corrupt, gz);
  write_raw(cut, Bytes(gz.begin(), gz.begin() + long(gz.size() / 2)));
  Bytes lab(n, 3);
  lab[150] = 77;
  auto lp = path("labels-idx1-ubyte");
  write_raw(lp, idx_bytes({n}, lab));
  for (const auto& ip : {corrupt, cut}) {
    expect_msg(error_of([&] { ember::load_idx_dataset(ip.string(), lp.string(), 10); }),
               {lp.string(), "label[150]", "found 77"});
    expect_msg(error_of([&] { ember::read_idx(ip.string()); }), {ip.string(), "gzip stream"});
    const ember::Dataset d = ember::load_idx_dataset(ip.string(), lp.string(), 10, 5);
    EXPECT_EQ(d.count, 5);
    EXPECT_EQ(d.images, Bytes(pixels.begin(), pixels.begin() + 5 * 784));
    EXPECT_EQ(d.labels, Bytes(5, 3));
  }
  auto short_labels = path("short-labels-idx1-ubyte");
  Bytes lb = idx_bytes({n}, lab);
  write_raw(short_labels, Bytes(lb.begin(), lb.end() - 1));
  expect_msg(
      error_of([&] { ember::load_idx_dataset(corrupt.string(), short_labels.string(), 10, 5); }),
      {short_labels.string(), "size", "truncated by 1 bytes"});
}

TEST_F(IdxTest, LabelOutOfRange) {
  Bytes lab = {0, 1, 2, 3, 9, 10, 200, 4};
  const auto files = write_pair("bad", 8, false, &lab);  // not a structured binding: clang 14
  const std::string &ip = files.first, &lp = files.second;  // cannot capture those in lambdas
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, lp, 10); }),
             {lp, "label[5]", "< 10", "found 10"});
  // With enough classes the same file is fine... up to the 200.
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, lp, 100); }),
             {lp, "label[6]", "< 100", "found 200"});
}

TEST_F(IdxTest, ZeroImages) {
  auto ip = path("empty-images-idx3-ubyte"), lp = path("empty-labels-idx1-ubyte");
  write_raw(ip, idx_bytes({0, 28, 28}, {}));
  write_raw(lp, idx_bytes({0}, {}));
  expect_msg(error_of([&] { ember::load_idx_dataset(ip.string(), lp.string(), 10); }),
             {ip.string(), "count", "zero images"});
}

TEST_F(IdxTest, ImagesAndLabelsWrongRank) {
  const auto files = write_pair("ok", 4, false);
  const std::string &ip = files.first, &lp = files.second;
  // Labels passed as images and vice versa.
  expect_msg(error_of([&] { ember::load_idx_dataset(lp, ip, 10); }), {lp, "rank", "expected 3"});
  auto r2 = path("rank2-labels");
  write_raw(r2, idx_bytes({4, 1}, Bytes{1, 2, 3, 4}));
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, r2.string(), 10); }),
             {r2.string(), "rank", "expected 1"});
}

TEST_F(IdxTest, ImageSideTooLarge) {
  auto ip = path("wide-images"), lp = path("wide-labels");
  write_raw(ip, idx_bytes({1, 1, 5000}, pattern(5000)));
  write_raw(lp, idx_bytes({1}, Bytes{0}));
  expect_msg(error_of([&] { ember::load_idx_dataset(ip.string(), lp.string(), 10); }),
             {ip.string(), "rows/cols", "4096", "5000"});
}

// ---- MNIST directory ----

TEST_F(IdxTest, MnistDirMissingDirectory) {
  auto d = path("not-there");
  expect_msg(error_of([&] { ember::load_mnist_dir(d.string()); }),
             {d.string(), "directory"});
}

TEST_F(IdxTest, MnistDirMissingFile) {
  write_pair("train", 6, false);
  write_pair("t10k", 3, true);
  fs::remove(path("t10k-labels-idx1-ubyte.gz"));
  expect_msg(error_of([&] { ember::load_mnist_dir(dir_.string()); }),
             {dir_.string(), "t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz", "neither"});
}

// A symlink loop (or a dangling symlink) in the directory is there, so it is reported with its
// reason, not as a missing file.
TEST_F(IdxTest, MnistDirSymlinkLoopOrDangling) {
  write_pair("train", 6, false);
  write_pair("t10k", 3, false);
  auto img = path("train-images-idx3-ubyte");
  fs::remove(img);
  fs::create_symlink(img.filename(), img);  // points at itself
  std::string msg = error_of([&] { ember::load_mnist_dir(dir_.string()); });
  expect_msg(msg, {img.string(), "symlink loop"});
  EXPECT_EQ(msg.find("neither"), std::string::npos) << msg;
  fs::remove(img);
  fs::create_symlink("no-such-target", img);
  msg = error_of([&] { ember::load_mnist_dir(dir_.string()); });
  expect_msg(msg, {img.string(), "dangling"});
  EXPECT_EQ(msg.find("neither"), std::string::npos) << msg;
}

TEST_F(IdxTest, MnistDirLimits) {
  write_pair("train", 6, false);
  write_pair("t10k", 3, true);
  const ember::TrainTest full = ember::load_mnist_dir(dir_.string());
  const ember::TrainTest tt = ember::load_mnist_dir(dir_.string(), 4, 2);
  EXPECT_EQ(tt.train.count, 4);
  EXPECT_EQ(tt.test.count, 2);
  EXPECT_EQ(tt.train.images, Bytes(full.train.images.begin(), full.train.images.begin() + 24));
  EXPECT_EQ(tt.test.labels, Bytes(full.test.labels.begin(), full.test.labels.begin() + 2));
  EXPECT_EQ(ember::load_mnist_dir(dir_.string(), 0, 100).test.count, 3);
}

TEST_F(IdxTest, MnistDirMixOfGzipAndRaw) {
  write_pair("train", 6, false);  // raw train files
  write_pair("t10k", 3, true);    // gzipped test files
  ember::TrainTest tt = ember::load_mnist_dir(dir_.string());
  EXPECT_EQ(tt.train.count, 6);
  EXPECT_EQ(tt.test.count, 3);
  EXPECT_EQ(tt.train.rows, 3);
  EXPECT_EQ(tt.test.cols, 2);
  EXPECT_EQ(tt.test.images, pattern(18, 3));
  // A raw file wins over a .gz of the same name: a broken .gz next to it is never opened.
  write_raw(path("train-images-idx3-ubyte.gz"), Bytes{0x1f, 0x8b, 1, 2, 3});
  EXPECT_EQ(ember::load_mnist_dir(dir_.string()).train.count, 6);
}

TEST(IdxMnist, RealMnistFiles) {
  const char* env = std::getenv("EMBER_MNIST_DIR");
  std::string dir = env && *env ? env : EMBER_SOURCE_DIR "/../shared/data/mnist";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "MNIST not found at " << dir
                                           << " (set EMBER_MNIST_DIR to run this test)";
  ember::TrainTest tt = ember::load_mnist_dir(dir);
  EXPECT_EQ(tt.train.count, 60000);
  EXPECT_EQ(tt.test.count, 10000);
  for (const ember::Dataset* d : {&tt.train, &tt.test}) {
    EXPECT_EQ(d->rows, 28);
    EXPECT_EQ(d->cols, 28);
    EXPECT_EQ(d->images.size(), size_t(d->count) * 28 * 28);
    EXPECT_EQ(d->labels.size(), size_t(d->count));
  }
  std::array<int, 10> hist{};
  for (uint8_t l : tt.train.labels) hist.at(l)++;
  for (int c = 0; c < 10; ++c) {
    EXPECT_GE(hist[c], 5000) << "class " << c;
    EXPECT_LE(hist[c], 7000) << "class " << c;
  }
}

}  // namespace
