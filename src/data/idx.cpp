// IDX (MNIST-format) reader: raw or gzip (detected by the 1f 8b signature), unsigned-byte data
// only, from a file or from memory. Every header field is checked against the (uncompressed)
// size before the payload is allocated, and a gzip stream must be complete and exact; any problem
// throws ember::Error with one line naming the file, the field, what was expected and what was found.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/error.h"

namespace ember {
namespace {

constexpr uint64_t kMaxPayload = uint64_t{1} << 32;  // 4 GiB cap on the product of the dims
constexpr uint64_t kGzipMinSize = 18;                // 10-byte header + 8-byte trailer
// A file read into memory may be at most this large: the largest header (20 bytes) plus the
// 4 GiB payload cap, plus room for gzip's worst case (stored blocks add 5 bytes per 64 KiB).
constexpr uint64_t kMaxFileSize = kMaxPayload + (uint64_t{1} << 26);
constexpr uint64_t kZChunk = uint64_t{1} << 30;      // zlib counts in unsigned ints
constexpr uint64_t kFirstChunk = uint64_t{1} << 16;  // gzip payload buffer: at least this first
constexpr uint8_t kNoBytes[1] = {0};                 // a valid pointer for empty input

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw Error(path + ": " + field + ": " + what);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08" PRIx32, v);
  return buf;
}

std::string hex8(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", v & 0xffu);
  return buf;
}

const char* type_name(unsigned code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint32_t le32(const unsigned char* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

struct FileCloser {
  void operator()(std::FILE* f) const { if (f) std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Reads the whole file into memory (at most kMaxFileSize bytes, checked before allocating),
// or throws naming the path and strerror.
std::vector<uint8_t> slurp(const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, "file", std::string("cannot open for reading: ") + std::strerror(errno));
  FilePtr fp(f);
  struct stat st {};
  if (fstat(fileno(f), &st) != 0)
    fail(path, "file", std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    fail(path, "file", std::string("expected a regular file, found a directory: ") + std::strerror(EISDIR));
  const uint64_t known = S_ISREG(st.st_mode) ? uint64_t(st.st_size) : 0;
  if (known > kMaxFileSize)
    fail(path, "size", "expected at most " + std::to_string(kMaxFileSize) +
                           " bytes (4 GiB payload cap + header and gzip overhead), found " +
                           std::to_string(known) + " (too large)");
  std::vector<uint8_t> bytes;
  bytes.reserve(known + 1);
  // Pipes and devices report no size: read in steps, under the same cap.
  uint64_t want = known ? known + 1 : (uint64_t{1} << 16);
  for (;;) {
    const size_t at = bytes.size();
    bytes.resize(at + want);
    const size_t got = std::fread(bytes.data() + at, 1, want, f);
    bytes.resize(at + got);
    if (got < want) break;
    if (bytes.size() > kMaxFileSize)
      fail(path, "size", "expected at most " + std::to_string(kMaxFileSize) +
                             " bytes (4 GiB payload cap + header and gzip overhead), found more"
                             " (too large)");
    want = std::min<uint64_t>(std::max<uint64_t>(bytes.size(), kFirstChunk), uint64_t{1} << 24);
  }
  if (std::ferror(f)) fail(path, "file", std::string("read error: ") + std::strerror(errno));
  return bytes;
}

// A byte source over memory: the bytes themselves, or the gzip stream they hold (every member,
// as zlib's gzread decodes them). read_exact throws on any short read or error.
class Source {
 public:
  Source(const std::string& name, const uint8_t* data, uint64_t size, bool gzip)
      : name_(name), data_(data), size_(size), gzip_(gzip) {
    if (!gzip_) return;
    std::memset(&z_, 0, sizeof z_);
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)
      fail(name_, "gzip stream", "cannot start decoding (zlib: out of memory)");
    live_ = true;
  }
  ~Source() {
    if (live_) inflateEnd(&z_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // Reads exactly n bytes into buf; `field` names what is being read for the error message.
  // `before` and `total` place this read inside a larger one (for the message only).
  void read_exact(void* buf, uint64_t n, const std::string& field, uint64_t before = 0,
                  uint64_t total = 0) {
    const uint64_t got = gzip_ ? inflate_into(static_cast<uint8_t*>(buf), n, field)
                               : copy_into(static_cast<uint8_t*>(buf), n);
    if (got < n) {
      fail(name_, field, "expected " + std::to_string(total ? total : n) + " bytes, found only " +
                             std::to_string(before + got) +
                             (gzip_ ? " (gzip stream ends early)" : " (file truncated)"));
    }
  }

  // For gzip: the stream must end right after the payload (and its CRC/length must verify).
  // The rest is decoded (and dropped) first, so corrupt data is reported as such, as gzread's
  // read-ahead did; the work is bounded by deflate's 1032:1 ratio on the input.
  void expect_end() {
    if (!gzip_) return;
    uint8_t sink[4096];
    uint64_t extra = 0;
    for (uint64_t got = 1; got != 0; extra += got) got = inflate_into(sink, sizeof sink, "gzip stream");
    if (extra != 0)
      fail(name_, "gzip stream", "expected the uncompressed data to end after the payload, "
                                 "found trailing bytes");
  }

 private:
  uint64_t copy_into(uint8_t* out, uint64_t n) {
    const uint64_t got = std::min(n, size_ - pos_);
    if (got) std::memcpy(out, data_ + pos_, got);
    pos_ += got;
    return got;
  }

  // Decodes up to n bytes; returns fewer only at the clean end of the last gzip member.
  uint64_t inflate_into(uint8_t* out, uint64_t n, const std::string& field) {
    uint64_t done = 0;
    while (done < n && !ended_) {
      if (z_.avail_in == 0 && pos_ < size_) {
        const uint64_t take = std::min(size_ - pos_, kZChunk);
        z_.next_in = const_cast<Bytef*>(data_ + pos_);
        z_.avail_in = static_cast<uInt>(take);
        pos_ += take;
      }
      const uint64_t want = std::min(n - done, kZChunk);
      z_.next_out = out + done;
      z_.avail_out = static_cast<uInt>(want);
      const int r = inflate(&z_, Z_NO_FLUSH);
      done += want - z_.avail_out;
      if (r == Z_STREAM_END) {
        // Another member may follow (1f 8b); anything else after a member is ignored, as gzread does.
        const uint64_t left = z_.avail_in + (size_ - pos_);
        const uint8_t* next = z_.avail_in ? z_.next_in : data_ + pos_;
        if (left >= 2 && next_byte(next, 0) == 0x1f && next_byte(next, 1) == 0x8b) {
          inflateReset(&z_);
        } else {
          ended_ = true;
        }
        continue;
      }
      if (r == Z_OK) continue;
      if (r == Z_BUF_ERROR && z_.avail_in == 0 && pos_ < size_) continue;  // refill, go on
      if (r == Z_BUF_ERROR)  // no progress possible and no input left
        fail(name_, "gzip stream", "expected complete gzip data (while reading " + field +
                                       "), found it truncated (zlib: unexpected end of file)");
      const std::string msg = z_.msg ? z_.msg : (r == Z_MEM_ERROR ? "out of memory" : "error");
      fail(name_, "gzip stream", "expected valid gzip data (while reading " + field +
                                     "), found corrupt data (zlib: " + msg + ")");
    }
    return done;
  }

  // Byte i after `next`, where the unread input may continue past zlib's window into data_.
  uint8_t next_byte(const uint8_t* next, uint64_t i) const {
    if (i < z_.avail_in) return next[i];
    return data_[pos_ + (i - z_.avail_in)];
  }

  std::string name_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  bool gzip_;
  bool live_ = false;
  bool ended_ = false;
  z_stream z_;
};

// The parser behind parse_idx and read_idx. With `owned` (the same bytes as data, size), a raw
// payload is moved out of it instead of copied.
IdxArray parse(const uint8_t* data, uint64_t size, const std::string& path,
               std::vector<uint8_t>* owned) {
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  uint32_t isize = 0;
  if (gzip) {
    if (size < kGzipMinSize)
      fail(path, "size", "expected at least " + std::to_string(kGzipMinSize) +
                             " bytes for a gzip file (header + trailer), found " +
                             std::to_string(size) + " (truncated gzip)");
    isize = le32(data + size - 4);
  }
  Source src(path, data, size, gzip);

  unsigned char m[4];
  src.read_exact(m, 4, "magic");
  uint32_t magic = be32(m);
  if (m[0] != 0 || m[1] != 0)
    fail(path, "magic", "expected 0x00000801..0x00000804 (unsigned-byte IDX, e.g. 0x00000803 "
                        "ubyte images or 0x00000801 ubyte labels), found " + hex32(magic));
  if (m[2] != 0x08)
    fail(path, "magic type code (byte 2)", "expected 0x08 (unsigned byte), found " + hex8(m[2]) +
                                               " (" + type_name(m[2]) + ") in magic " + hex32(magic));
  const unsigned rank = m[3];
  if (rank < 1 || rank > 4)
    fail(path, "magic rank (byte 3)", "expected 1..4, found " + std::to_string(rank) +
                                          " in magic " + hex32(magic));

  unsigned char d[16];
  src.read_exact(d, 4ull * rank, "dims");
  IdxArray out;
  uint64_t product = 1;
  std::string shape;
  for (unsigned i = 0; i < rank; ++i) {
    out.dims.push_back(be32(d + 4 * i));
    shape += (i ? " x " : "") + std::to_string(out.dims.back());
  }
  // The leading count may be 0 (callers decide); inner dims (rows, cols, ...) must be positive.
  for (unsigned i = 1; i < rank; ++i)
    if (out.dims[i] == 0)
      fail(path, "dims[" + std::to_string(i) + "]", "expected > 0, found 0 (dims " + shape + ")");
  for (unsigned i = 0; i < rank; ++i) {
    uint64_t v = static_cast<uint64_t>(out.dims[i]);
    // product <= 2^32 and v < 2^32 here, so the multiply cannot wrap; check the cap each step.
    if (v != 0 && product > kMaxPayload / v)
      fail(path, "dims", "expected a product of at most " + std::to_string(kMaxPayload) +
                             " bytes (4 GiB), found " + shape + " (too large)");
    product *= v;
  }
  const uint64_t header = 4 + 4ull * rank;
  const uint64_t total = header + product;

  if (gzip) {
    uint32_t want = static_cast<uint32_t>(total & 0xffffffffu);
    if (isize != want)
      fail(path, "gzip ISIZE", "expected " + std::to_string(want) + " (" + std::to_string(header) +
                                   "-byte header + " + shape + " = " + std::to_string(product) +
                                   " bytes, mod 2^32), found " + std::to_string(isize) +
                                   " (dims disagree with the data, or the gzip is truncated)");
    // The trailer can lie: the buffer starts at a guess from the compressed size and doubles only
    // as decoded data arrives (so at most twice what the stream really holds), never past the dims.
    uint64_t have = 0;
    while (have < product) {
      const uint64_t next = std::min(product, have ? 2 * have : std::max(kFirstChunk, 8 * size));
      out.data.resize(next);
      src.read_exact(out.data.data() + have, next - have, "data", have, product);
      have = next;
    }
    src.expect_end();
    return out;
  }
  if (size != total) {
    std::string which = size < total ? "truncated by " + std::to_string(total - size) + " bytes"
                                     : std::to_string(size - total) + " trailing bytes";
    fail(path, "size", "expected " + std::to_string(total) + " bytes (" + std::to_string(header) +
                           "-byte header + dims " + shape + "), found " + std::to_string(size) +
                           " (" + which + ")");
  }
  if (owned) {
    owned->erase(owned->begin(), owned->begin() + static_cast<std::ptrdiff_t>(header));
    out.data = std::move(*owned);
  } else {
    out.data.assign(data + header, data + size);
  }
  return out;
}

}  // namespace

IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name) {
  return parse(size ? data : kNoBytes, size, name, nullptr);
}

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = slurp(path);
  return parse(bytes.empty() ? kNoBytes : bytes.data(), bytes.size(), path, &bytes);
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes) {
  if (num_classes < 1 || num_classes > 256)
    throw Error(labels_path + ": num_classes: expected 1..256 for unsigned-byte labels, found " +
                std::to_string(num_classes));
  IdxArray img = read_idx(images_path);
  if (img.dims.size() != 3)
    fail(images_path, "magic rank",
         "expected 3 (0x00000803 ubyte images [N, rows, cols]), found " +
             std::to_string(img.dims.size()) + " (" + hex32(0x800u + img.dims.size()) + ")");
  IdxArray lab = read_idx(labels_path);
  if (lab.dims.size() != 1)
    fail(labels_path, "magic rank", "expected 1 (0x00000801 ubyte labels [N]), found " +
                                        std::to_string(lab.dims.size()) + " (" +
                                        hex32(0x800u + lab.dims.size()) + ")");
  const int64_t n = img.dims[0];
  if (n == 0) fail(images_path, "count", "expected at least 1 image, found 0 (zero images)");
  if (img.dims[1] > 4096 || img.dims[2] > 4096)
    fail(images_path, "rows/cols", "expected each <= 4096, found " + std::to_string(img.dims[1]) +
                                       " x " + std::to_string(img.dims[2]));
  if (lab.dims[0] != n)
    fail(labels_path, "count", "expected " + std::to_string(n) + " labels (the image count in " +
                                   images_path + "), found " + std::to_string(lab.dims[0]));
  for (size_t i = 0; i < lab.data.size(); ++i) {
    if (lab.data[i] >= num_classes)
      fail(labels_path, "label[" + std::to_string(i) + "]",
           "expected < " + std::to_string(num_classes) + " (num_classes), found " +
               std::to_string(lab.data[i]));
  }
  Dataset ds;
  ds.count = n;
  ds.rows = static_cast<int>(img.dims[1]);
  ds.cols = static_cast<int>(img.dims[2]);
  ds.num_classes = num_classes;
  ds.images = std::move(img.data);
  ds.labels = std::move(lab.data);
  return ds;
}

TrainTest load_mnist_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st))
    throw Error(dir + ": data directory: expected an existing directory, found nothing there" +
                (ec ? " (" + ec.message() + ")" : std::string()));
  if (!fs::is_directory(st))
    throw Error(dir + ": data directory: expected a directory, found a non-directory file");

  auto pick = [&](const std::string& name) {
    fs::path raw = fs::path(dir) / name;
    fs::path gz = fs::path(dir) / (name + ".gz");
    std::error_code e;
    if (fs::exists(raw, e)) return raw.string();
    if (fs::exists(gz, e)) return gz.string();
    throw Error(dir + ": data file " + name + ": expected " + name + " or " + name +
                ".gz in the directory, found neither");
  };
  const std::string tr_img = pick("train-images-idx3-ubyte");
  const std::string tr_lab = pick("train-labels-idx1-ubyte");
  const std::string te_img = pick("t10k-images-idx3-ubyte");
  const std::string te_lab = pick("t10k-labels-idx1-ubyte");
  TrainTest tt;
  tt.train = load_idx_dataset(tr_img, tr_lab, 10);
  tt.test = load_idx_dataset(te_img, te_lab, 10);
  if (tt.train.rows != tt.test.rows || tt.train.cols != tt.test.cols)
    throw Error(te_img + ": rows/cols: expected " + std::to_string(tt.train.rows) + " x " +
                std::to_string(tt.train.cols) + " (as in " + tr_img + "), found " +
                std::to_string(tt.test.rows) + " x " + std::to_string(tt.test.cols));
  return tt;
}

}  // namespace ember
