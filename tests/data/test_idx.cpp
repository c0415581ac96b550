// Tests for the IDX reader (src/data/idx.cpp): raw, gzip and multi-member gzip round trips, one
// test per kind of bad input (each checks the throw, the file name and the field in the one-line
// message), non-regular inputs (FIFO, device, symlink loop), memory bounds against lying headers
// and the in-memory entry point parse_idx. Data sets and the MNIST directory: test_idx_sets.cpp.
#include "alloc_hook.h"
#include "data/idx_util.h"

// The largest single heap allocation in this test binary, so a test can check that a lying header
// did not make the reader allocate what it claims.
static std::atomic<size_t> g_largest_alloc{0};
// When non-zero, an allocation of more bytes fails (std::bad_alloc), as on a machine without the
// memory: the loaders must then name what they were allocating.
static std::atomic<size_t> g_fail_above{0};
#if EMBER_TEST_CAN_HOOK_NEW
static void note_largest(size_t n) {
  if (const size_t cap = g_fail_above.load(std::memory_order_relaxed); cap && n > cap) throw std::bad_alloc();
  size_t seen = g_largest_alloc.load(std::memory_order_relaxed);
  while (n > seen && !g_largest_alloc.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}
EMBER_REPLACE_GLOBAL_NEW(note_largest)
#endif

namespace {

// ---- good input ----

TEST_F(IdxTest, RawRoundTrip) {
  Bytes payload = pattern(5 * 7 * 3);
  auto p = path("good.idx");
  write_raw(p, idx_bytes({5, 7, 3}, payload));
  ember::IdxArray a = ember::read_idx(p.string());
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 7, 3}));
  EXPECT_EQ(a.data, payload);
}

TEST_F(IdxTest, GzipRoundTripDetectedByContent) {
  Bytes payload = pattern(4 * 9 * 11, 7);
  // Named without ".gz": gzip is recognised by the 1f 8b signature, not the extension.
  auto p = path("good-compressed.idx");
  write_gz(p, idx_bytes({4, 9, 11}, payload));
  ember::IdxArray a = ember::read_idx(p.string());
  EXPECT_EQ(a.dims, (std::vector<int64_t>{4, 9, 11}));
  EXPECT_EQ(a.data, payload);

  auto q = path("labels.idx.gz");
  write_gz(q, idx_bytes({6}, Bytes{1, 2, 3, 4, 5, 6}));
  ember::IdxArray b = ember::read_idx(q.string());
  EXPECT_EQ(b.dims, (std::vector<int64_t>{6}));
  EXPECT_EQ(b.data, (Bytes{1, 2, 3, 4, 5, 6}));
}

TEST_F(IdxTest, RankFourAndZeroCountAreReadable) {
  auto p = path("r4.idx");
  write_raw(p, idx_bytes({2, 1, 3, 2}, pattern(12)));
  EXPECT_EQ(ember::read_idx(p.string()).dims, (std::vector<int64_t>{2, 1, 3, 2}));
  auto z = path("zero.idx");
  write_raw(z, idx_bytes({0, 28, 28}, {}));
  ember::IdxArray a = ember::read_idx(z.string());
  EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST_F(IdxTest, LoadDatasetRawAndGzip) {
  for (bool gz : {false, true}) {
    auto [ip, lp] = write_pair(gz ? "gz" : "raw", 13, gz);
    ember::Dataset d = ember::load_idx_dataset(ip, lp, 10);
    EXPECT_EQ(d.count, 13);
    EXPECT_EQ(d.rows, 3);
    EXPECT_EQ(d.cols, 2);
    EXPECT_EQ(d.num_classes, 10);
    EXPECT_EQ(d.images, pattern(13 * 6, 13));
    ASSERT_EQ(d.labels.size(), 13u);
    EXPECT_EQ(d.labels[12], 2);
  }
}

// ---- bad input: files ----

TEST_F(IdxTest, MissingFile) {
  auto p = path("no-such-file-idx3-ubyte");
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "file", "No such file or directory"});
}

TEST_F(IdxTest, UnreadableFile) {
  auto p = path("a-directory");
  fs::create_directories(p);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "file", "directory"});
}

// A FIFO with no writer must be refused at once (open_input opens it without blocking), never
// waited on: as an IDX file, as the images and as the labels of a data set, and in a directory.
TEST_F(IdxTest, FifoIsRefusedWithoutBlocking) {
  const auto files = write_pair("ok", 4, false);
  const std::string &ip = files.first, &lp = files.second;
  const std::string fifo = path("fifo-idx3-ubyte").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  expect_msg(error_of([&] { ember::read_idx(fifo); }), {fifo, "FIFO"});
  expect_msg(error_of([&] { ember::load_idx_dataset(fifo, lp, 10); }),
             {fifo, "images file", "FIFO"});
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, fifo, 10); }),
             {fifo, "labels file", "FIFO"});
  auto d = path("mnist");
  fs::create_directories(d);
  const std::string dfifo = (d / "t10k-labels-idx1-ubyte").string();
  ASSERT_EQ(::mkfifo(dfifo.c_str(), 0600), 0);
  fs::copy_file(ip, d / "train-images-idx3-ubyte");
  fs::copy_file(lp, d / "train-labels-idx1-ubyte");
  fs::copy_file(ip, d / "t10k-images-idx3-ubyte");
  expect_msg(error_of([&] { ember::load_mnist_dir(d.string()); }), {dfifo, "labels file", "FIFO"});
  EXPECT_LT(seconds_since(t0), 5.0) << "a FIFO was waited on";
}

// /dev/zero (endless, reports size 0) is refused as a device, directly or through a symlink,
// instead of being read until memory runs out.
TEST_F(IdxTest, DeviceIsRefusedEvenThroughASymlink) {
  if (!fs::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  const auto files = write_pair("ok", 4, false);
  const std::string& ip = files.first;
  auto link = path("zero-labels-idx1-ubyte");
  fs::create_symlink("/dev/zero", link);
  const long rss0 = peak_rss_kib();
  expect_msg(error_of([&] { ember::read_idx("/dev/zero"); }), {"/dev/zero", "character device"});
  expect_msg(error_of([&] { ember::load_idx_dataset(ip, link.string(), 10); }),
             {link.string(), "labels file", "character device"});
  EXPECT_LT(peak_rss_kib() - rss0, 100L * 1024) << "read from the device";
}

TEST_F(IdxTest, SymlinkLoopIsRefused) {
  auto p = path("loop-idx3-ubyte");
  fs::create_symlink(p.filename(), p);  // points at itself
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "symlink loop"});
}

// A control character in a path is escaped, so every message stays on one line.
TEST_F(IdxTest, PathWithNewlineGivesOneLine) {
  auto p = path("bad\nname");
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {"bad\\nname", "No such file"});
  Bytes b = idx_bytes({10, 4, 4}, pattern(150));
  write_raw(p, b);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {"bad\\nname: size", "truncated"});
}

TEST_F(IdxTest, WrongMagic) {
  auto p = path("train-images-idx3-ubyte");
  write_raw(p, idx_bytes({1, 2, 2}, pattern(4), 0x12345678u));
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "magic", "expected", "found 0x12345678"});
}

TEST_F(IdxTest, WrongTypeCode) {
  auto p = path("floats-idx3");
  write_raw(p, idx_bytes({1, 2, 2}, pattern(16), 0x00000D03u));  // float32 images
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "type code", "0x08", "found 0x0d", "float32"});
}

TEST_F(IdxTest, WrongRank) {
  for (uint32_t magic : {0x00000800u, 0x00000805u}) {
    auto p = path("rank-" + std::to_string(magic & 0xff));
    write_raw(p, idx_bytes({1, 1, 1, 1, 1}, pattern(1), magic));
    expect_msg(error_of([&] { ember::read_idx(p.string()); }),
               {p.string(), "rank", "1..4", "found " + std::to_string(magic & 0xff)});
  }
}

TEST_F(IdxTest, TooShortForMagic) {
  auto p = path("tiny");
  write_raw(p, Bytes{0, 0});
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "magic", "truncated"});
}

TEST_F(IdxTest, ZeroInnerDim) {
  auto p = path("zero-rows");
  write_raw(p, idx_bytes({3, 0, 28}, {}));
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "dims[1]", "found 0"});
}

TEST_F(IdxTest, DimsOverflow) {
  auto p = path("huge-idx4");
  write_raw(p, idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, pattern(16)));
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "dims", "4 GiB"});
  // Just over the cap: 65536 x 65537 bytes.
  auto q = path("over-cap-idx3");
  write_raw(q, idx_bytes({1, 65536, 65537}, pattern(16)));
  expect_msg(error_of([&] { ember::read_idx(q.string()); }), {q.string(), "dims", "4 GiB"});
}

TEST_F(IdxTest, RawTruncated) {
  auto p = path("short-idx3-ubyte");
  Bytes b = idx_bytes({10, 4, 4}, pattern(160));
  b.resize(b.size() - 7);
  write_raw(p, b);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "size", "expected 176", "found 169", "truncated"});
}

TEST_F(IdxTest, RawTrailingBytes) {
  auto p = path("long-idx3-ubyte");
  Bytes b = idx_bytes({10, 4, 4}, pattern(160));
  b.insert(b.end(), {1, 2, 3});
  write_raw(p, b);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "size", "expected 176", "found 179", "trailing"});
}

TEST_F(IdxTest, GzipDataShorterThanDims) {
  auto p = path("lies-idx3-ubyte.gz");
  // Header says 10 x 4 x 4 (160 data bytes) but only 100 follow: the decoder runs out.
  write_gz(p, idx_bytes({10, 4, 4}, pattern(100)));
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "data", "expected 160", "found only 100", "gzip stream ends early"});
}

TEST_F(IdxTest, GzipTooShort) {
  auto p = path("stub.gz");
  write_raw(p, Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3});
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "size", "18", "gzip"});
}

TEST_F(IdxTest, GzipCutInHalf) {
  auto good = path("good.gz");
  write_gz(good, idx_bytes({50, 8, 8}, pattern(3200)));
  Bytes gz = read_file(good);
  gz.resize(gz.size() / 2);
  auto p = path("half-idx3-ubyte.gz");
  write_raw(p, gz);
  // The stream stops mid-block: zlib runs out of input.
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "gzip", "truncated"});
}

TEST_F(IdxTest, GzipTruncatedStreamReportedByZlib) {
  // Stored blocks; cut the stream, then re-append a trailer whose ISIZE matches the header: the
  // truncation must be caught by zlib (Z_BUF_ERROR with no input left).
  Bytes idx = idx_bytes({50, 8, 8}, pattern(3200));
  auto good = path("stored.gz");
  write_gz(good, idx, "wb0");
  Bytes gz = read_file(good);
  Bytes trailer(gz.end() - 8, gz.end());
  gz.resize(gz.size() / 2);
  gz.insert(gz.end(), trailer.begin(), trailer.end());
  auto p = path("cut-idx3-ubyte.gz");
  write_raw(p, gz);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "gzip stream", "truncated", "unexpected end of file"});
}

TEST_F(IdxTest, GzipCorrupt) {
  // Compressible data (16 symbols) so the deflate stream is Huffman-coded, not stored blocks.
  Bytes payload = pattern(3200);
  for (auto& v : payload) v >>= 4;
  auto good = path("good.gz");
  write_gz(good, idx_bytes({50, 8, 8}, payload));
  Bytes gz = read_file(good);
  ASSERT_GT(gz.size(), 200u);
  ASSERT_LT(gz.size(), 2500u);
  for (size_t i = gz.size() / 2 - 8; i < gz.size() / 2 + 8; ++i) gz[i] ^= 0xA5;
  auto p = path("corrupt-idx3-ubyte.gz");
  write_raw(p, gz);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }), {p.string(), "gzip", "zlib"});
  // An invalid deflate block header (BFINAL=1, BTYPE=11) right after the 10-byte gzip header.
  Bytes bad = read_file(good);
  bad[10] = 0xFF;
  auto q = path("badblock-idx3-ubyte.gz");
  write_raw(q, bad);
  expect_msg(error_of([&] { ember::read_idx(q.string()); }),
             {q.string(), "gzip stream", "corrupt", "invalid block type"});
}

TEST_F(IdxTest, GzipBadCrc) {
  auto good = path("good.gz");
  write_gz(good, idx_bytes({5, 4, 4}, pattern(80)));
  Bytes gz = read_file(good);
  gz[gz.size() - 8] ^= 0xFF;  // first CRC32 byte of the trailer
  auto p = path("crc-idx3-ubyte.gz");
  write_raw(p, gz);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "gzip", "corrupt", "incorrect data check"});
}

TEST_F(IdxTest, GzipGarbageAfterStream) {
  auto good = path("good.gz");
  write_gz(good, idx_bytes({5, 4, 4}, pattern(80)));
  Bytes gz = read_file(good);
  gz.insert(gz.end(), {'j', 'u', 'n', 'k', '!', '!', '!'});
  auto p = path("junk-idx3-ubyte.gz");
  write_raw(p, gz);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "gzip stream", "7 trailing bytes", "trailing garbage"});
}

TEST_F(IdxTest, GzipExtraPayloadAfterData) {
  // Two gzip members: the IDX file, then another member of the same length. The last trailer's
  // ISIZE matches header + data, but the uncompressed stream goes on past the payload.
  Bytes idx = idx_bytes({5, 4, 4}, pattern(80));
  auto a = path("a.gz"), b = path("b.gz");
  write_gz(a, idx);
  write_gz(b, pattern(idx.size(), 99));
  Bytes gz = read_file(a), tail = read_file(b);
  gz.insert(gz.end(), tail.begin(), tail.end());
  auto p = path("two-members-idx3-ubyte.gz");
  write_raw(p, gz);
  expect_msg(error_of([&] { ember::read_idx(p.string()); }),
             {p.string(), "gzip stream", "trailing"});
}

// A valid file split into parts, each gzipped alone and concatenated (`cat a.gz b.gz`, which
// gzip -t accepts): one stream, the same as the raw file. Splits inside the dims and the payload.
TEST_F(IdxTest, MultiMemberGzipLoadsLikeTheRawFile) {
  Bytes payload = pattern(7 * 5 * 3, 21);
  Bytes idx = idx_bytes({7, 5, 3}, payload);
  const std::vector<std::vector<size_t>> cuts = {{7}, {16 + 40}, {3, 16, 60}};
  for (const auto& cut : cuts) {
    Bytes gz;
    size_t from = 0;
    for (size_t i = 0; i <= cut.size(); ++i) {
      const size_t to = i < cut.size() ? cut[i] : idx.size();
      Bytes part = gz_of(Bytes(idx.begin() + long(from), idx.begin() + long(to)));
      gz.insert(gz.end(), part.begin(), part.end());
      from = to;
    }
    auto p = path("multi-idx3-ubyte.gz");
    write_raw(p, gz);
    ember::IdxArray a = ember::read_idx(p.string());
    EXPECT_EQ(a.dims, (std::vector<int64_t>{7, 5, 3})) << cut.size() << " cuts";
    EXPECT_EQ(a.data, payload) << cut.size() << " cuts";
    EXPECT_EQ(ember::parse_idx(gz.data(), gz.size(), "mem").data, payload);
  }
  // Through the data set loader too, with the labels in two members.
  auto [ip, lp] = write_pair("raw", 9, false);
  Bytes lab = read_file(lp), lgz = gz_of(Bytes(lab.begin(), lab.begin() + 10));
  Bytes rest = gz_of(Bytes(lab.begin() + 10, lab.end()));
  lgz.insert(lgz.end(), rest.begin(), rest.end());
  auto lp2 = path("two-labels-idx1-ubyte.gz");
  write_raw(lp2, lgz);
  const ember::Dataset raw = ember::load_idx_dataset(ip, lp, 10);
  const ember::Dataset two = ember::load_idx_dataset(ip, lp2.string(), 10);
  EXPECT_EQ(two.labels, raw.labels);
  EXPECT_EQ(two.count, 9);
}

// ---- in memory: parse_idx ----

TEST_F(IdxTest, ParseIdxFromMemoryRawAndGzip) {
  Bytes payload = pattern(3 * 5 * 4, 11);
  Bytes raw = idx_bytes({3, 5, 4}, payload);
  ember::IdxArray a = ember::parse_idx(raw.data(), raw.size(), "mem:raw");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 5, 4}));
  EXPECT_EQ(a.data, payload);
  auto p = path("mem.gz");
  write_gz(p, raw);
  Bytes gz = read_file(p);
  ASSERT_EQ(gz[0], 0x1f);
  ember::IdxArray b = ember::parse_idx(gz.data(), gz.size(), "mem:gz");
  EXPECT_EQ(b.dims, a.dims);
  EXPECT_EQ(b.data, payload);
  // Members decode as one stream, as from a file: an empty member, then the whole file.
  write_gz(p, {});
  Bytes two = read_file(p);
  write_gz(p, idx_bytes({4}, Bytes{1, 2, 3, 4}));
  Bytes second = read_file(p);
  two.insert(two.end(), second.begin(), second.end());
  EXPECT_EQ(ember::parse_idx(two.data(), two.size(), "mem:two").data, (Bytes{1, 2, 3, 4}));
}

TEST_F(IdxTest, ParseIdxErrorsNameTheSource) {
  expect_msg(error_of([] { ember::parse_idx(nullptr, 0, "mem:empty"); }),
             {"mem:empty: magic", "expected 4 bytes, found only 0", "truncated"});
  Bytes b = idx_bytes({10, 4, 4}, pattern(160));
  b.resize(b.size() - 7);
  expect_msg(error_of([&] { ember::parse_idx(b.data(), b.size(), "upload #3"); }),
             {"upload #3: size", "expected 176", "found 169", "truncated"});
}

// The same bytes give the same message from memory (named as the path) as from the file.
TEST_F(IdxTest, ParseIdxSameMessagesAsReadIdx) {
  auto good = path("good.gz");
  write_gz(good, idx_bytes({5, 4, 4}, pattern(80)));
  Bytes crc = read_file(good);
  crc[crc.size() - 8] ^= 0xFF;
  Bytes stored = idx_bytes({50, 8, 8}, pattern(3200));
  write_gz(good, stored, "wb0");
  Bytes cut = read_file(good);
  Bytes trailer(cut.end() - 8, cut.end());
  cut.resize(cut.size() / 2);
  cut.insert(cut.end(), trailer.begin(), trailer.end());
  const std::vector<Bytes> bad = {idx_bytes({1, 2, 2}, pattern(4), 0x12345678u),
                                  idx_bytes({1, 2, 2}, pattern(16), 0x00000D03u),
                                  idx_bytes({3, 0, 28}, {}),
                                  idx_bytes({1, 65536, 65537}, pattern(16)),
                                  idx_bytes({10, 4, 4}, pattern(163)),
                                  Bytes{0, 0},
                                  crc,
                                  cut};
  for (size_t i = 0; i < bad.size(); ++i) {
    auto p = path("bad-" + std::to_string(i));
    write_raw(p, bad[i]);
    const std::string from_file = error_of([&] { ember::read_idx(p.string()); });
    const std::string from_mem =
        error_of([&] { ember::parse_idx(bad[i].data(), bad[i].size(), p.string()); });
    EXPECT_FALSE(from_file.empty()) << i;
    EXPECT_EQ(from_mem, from_file) << "case " << i;
  }
}

// A gzip whose dims claim the full 4 GiB and whose trailer is forged to agree: the reader must
// fail when the data runs out, having allocated about what was decoded, not 4 GiB.
TEST_F(IdxTest, GzipLyingTrailerDoesNotAllocateTheClaim) {
  Bytes idx = idx_bytes({1, 65536, 65536}, pattern(1000));  // product 2^32: at the cap
  auto p = path("liar.gz");
  write_gz(p, idx);
  Bytes gz = read_file(p);
  const uint32_t isize = 16;  // (16-byte header + 2^32) mod 2^32
  for (int i = 0; i < 4; ++i) gz[gz.size() - 4 + i] = uint8_t(isize >> (8 * i));
  if (!EMBER_TEST_CAN_HOOK_NEW) GTEST_SKIP() << "operator new cannot be replaced under TSan";
  g_largest_alloc.store(0);
  expect_msg(error_of([&] { ember::parse_idx(gz.data(), gz.size(), "liar"); }),
             {"liar: gzip stream", "incorrect length check"});
  EXPECT_LT(g_largest_alloc.load(), size_t{64} << 20) << "allocated what the header claimed";
}

// A header claiming 5,000,000 images of 28 x 28 (3.9 GB, under the 4 GiB cap) over 10 real
// images, gzip and raw: the error arrives without allocating the claim, alone and in a data set
// whose labels really are 5,000,000 (so the counts agree and the images are decoded).
TEST_F(IdxTest, HugeCountOverTinyDataDoesNotAllocateTheClaim) {
  const uint32_t n = 5000000;
  Bytes idx = idx_bytes({n, 28, 28}, pattern(10 * 28 * 28, 3));
  auto gp = path("claims-images-idx3-ubyte.gz"), rp = path("claims-images-idx3-ubyte");
  auto lp = path("many-labels-idx1-ubyte.gz");
  write_gz(gp, idx);
  write_raw(rp, idx);
  write_gz(lp, idx_bytes({n}, Bytes(n, 0)));  // a valid 5 MB file, about 5 KB compressed
  g_largest_alloc.store(0);
  const long rss0 = peak_rss_kib();
  const std::string want = "expected " + std::to_string(uint64_t{n} * 784);
  expect_msg(error_of([&] { ember::read_idx(gp.string()); }),
             {gp.string(), "data", want, "found only 7840", "ends early"});
  expect_msg(error_of([&] { ember::load_idx_dataset(gp.string(), lp.string(), 10); }),
             {gp.string(), "data", want, "found only 7840"});
  expect_msg(error_of([&] { ember::read_idx(rp.string()); }),
             {rp.string(), "size", "expected " + std::to_string(uint64_t{n} * 784 + 16),
              "truncated"});
  expect_msg(error_of([&] { ember::load_idx_dataset(rp.string(), lp.string(), 10); }),
             {rp.string(), "size", "truncated"});
  EXPECT_LT(peak_rss_kib() - rss0, 100L * 1024) << "peak RSS grew by the claim";
  if (EMBER_TEST_CAN_HOOK_NEW) {
    EXPECT_LT(g_largest_alloc.load(), size_t{16} << 20) << "allocated what the header claimed";
  }
}

// A raw file is not read whole: with a limit only the kept images are read (and allocated).
TEST_F(IdxTest, RawFileIsReadOnlyAsFarAsNeeded) {
  if (!EMBER_TEST_CAN_HOOK_NEW) GTEST_SKIP() << "operator new cannot be replaced under TSan";
  const uint32_t n = 2000;
  auto ip = path("big-images-idx3-ubyte"), lp = path("big-labels-idx1-ubyte");
  write_raw(ip, idx_bytes({n, 28, 28}, pattern(size_t{n} * 784, 5)));
  write_raw(lp, idx_bytes({n}, Bytes(n, 1)));
  g_largest_alloc.store(0);
  const ember::Dataset d = ember::load_idx_dataset(ip.string(), lp.string(), 10, 2);
  EXPECT_EQ(d.count, 2);
  EXPECT_EQ(d.images, pattern(2 * 784, 5));
  EXPECT_LT(g_largest_alloc.load(), size_t{64} << 10) << "read the whole 1.5 MB file";
}

// D9: an allocation that fails while loading data said "std::bad_alloc", naming nothing (failed
// before the fix): it names the file, what was being allocated and how many bytes.
TEST_F(IdxTest, AllocationFailuresNameTheFileAndTheBytes) {
  if (!EMBER_TEST_CAN_HOOK_NEW) GTEST_SKIP() << "operator new cannot be replaced under TSan";
  const uint32_t n = 2000;
  auto ip = path("big-images-idx3-ubyte"), lp = path("big-labels-idx1-ubyte"), gp = path("big-images-idx3-ubyte.gz");
  write_raw(ip, idx_bytes({n, 28, 28}, pattern(size_t{n} * 784, 5)));
  write_gz(gp, idx_bytes({n, 28, 28}, Bytes(size_t{n} * 784, 7)));  // compresses to a few KB
  write_raw(lp, idx_bytes({n}, Bytes(n, 1)));
  Bytes cifar;
  for (int i = 0; i < 400; ++i) {
    cifar.push_back(uint8_t(i % 10));
    const Bytes px = pattern(3072, uint32_t(i));
    cifar.insert(cifar.end(), px.begin(), px.end());
  }
  fs::create_directories(path("c"));
  for (int i = 1; i <= 5; ++i) write_raw(path("c/data_batch_" + std::to_string(i) + ".bin"), cifar);
  write_raw(path("c/test_batch.bin"), cifar);
  auto fails = [&](auto fn) {
    g_fail_above.store(size_t{1} << 20);  // 1 MiB: the 1.5 MB payloads cannot be had
    std::string msg = error_of(fn);
    g_fail_above.store(0);
    return msg;
  };
  expect_msg(fails([&] { ember::load_idx_dataset(ip.string(), lp.string(), 10); }),
             {ip.string(), "out of memory", std::to_string(size_t{n} * 784) + " bytes", "dims"});
  expect_msg(fails([&] { ember::read_idx(gp.string()); }), {gp.string(), "out of memory", "bytes for the decompressed data"});
  expect_msg(fails([&] { ember::load_cifar_dir(path("c").string()); }),
             {"c/data_batch_1.bin", "out of memory", std::to_string(400 * 3073) + " bytes", "400 records"});
}

}  // namespace
