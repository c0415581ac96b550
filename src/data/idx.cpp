// IDX (MNIST-format) reader: raw or gzip (detected by the 1f 8b signature), unsigned-byte data
// only, from a file (opened with open_input: regular files only, never blocking) or from memory.
// Headers are read first and every field is checked before the payload is decoded; raw files are
// read with pread, only the bytes needed; gzip may have several members and must be complete and
// exact when decoded to its end. Any problem throws ember::Error: one line naming file and field.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/alloc.h"
#include "ember/data.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace ember {
namespace {

constexpr uint64_t kMaxPayload = uint64_t{1} << 32;  // 4 GiB cap on the product of the dims
constexpr uint64_t kGzipMinSize = 18;                // 10-byte header + 8-byte trailer
// A gzip file read into memory may be at most this large: the largest header (20 bytes) plus the
// 4 GiB payload cap, plus room for gzip's worst case (stored blocks add 5 bytes per 64 KiB).
constexpr uint64_t kMaxFileSize = kMaxPayload + (uint64_t{1} << 26);
constexpr uint64_t kZChunk = uint64_t{1} << 30;      // zlib counts in unsigned ints
constexpr uint64_t kFirstChunk = uint64_t{1} << 16;  // gzip payload buffer: at least this first
constexpr int64_t kMaxSide = 4096;                   // rows and cols of a data set's images
constexpr uint8_t kNoBytes[1] = {0};                 // a valid pointer for empty input

// The path goes through one_line, so a name with control characters cannot break the line.
[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw Error(one_line(path) + ": " + field + ": " + what);
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

bool gzip_signature(const uint8_t* p, uint64_t size) {
  return size >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

// Reads n bytes at offset `at`; returns fewer only at the end of the file.
uint64_t pread_full(int fd, uint8_t* out, uint64_t n, uint64_t at, const std::string& path) {
  uint64_t done = 0;
  while (done < n) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n - done, kZChunk));
    const ssize_t r = ::pread(fd, out + done, step, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path, "file", std::string("read error: ") + std::strerror(errno));
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  return done;
}

// A compressed file, read whole (its fstat size, at most kMaxFileSize, checked before allocating).
std::vector<uint8_t> read_compressed(int fd, uint64_t size, const std::string& path) {
  if (size > kMaxFileSize)
    fail(path, "size", "expected at most " + std::to_string(kMaxFileSize) +
                           " bytes (4 GiB payload cap + header and gzip overhead), found " +
                           std::to_string(size) + " (too large)");
  std::vector<uint8_t> bytes;
  named_alloc(quote_path(path), "the compressed file", size, [&] { bytes.resize(size); });
  bytes.resize(pread_full(fd, bytes.data(), size, 0, path));  // a file that shrank: what is left
  return bytes;
}

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A byte source: raw bytes (in memory, or a file read with pread as needed: fd >= 0, data unused)
// or the gzip stream that in-memory bytes hold (every member in turn, as gzip -d decodes them).
// read_exact throws on any short read or error.
class Source {
 public:
  Source(const std::string& name, const uint8_t* data, uint64_t size, bool gzip, int fd)
      : name_(name), data_(data), size_(size), fd_(fd), gzip_(gzip) {
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

  // For gzip: the stream must end right after the payload (every member's CRC and length must
  // verify) and the file after its last member. The rest is decoded (and dropped) first, so
  // corrupt data is reported as such; the work is bounded by deflate's 1032:1 ratio on the input.
  void expect_end() {
    if (!gzip_) return;
    uint8_t sink[4096];
    uint64_t extra = 0;
    for (uint64_t got = 1; got != 0; extra += got) got = inflate_into(sink, sizeof sink, "gzip stream");
    if (extra != 0)
      fail(name_, "gzip stream", "expected the uncompressed data to end after the payload, "
                                 "found trailing bytes");
    if (junk_ != 0)
      fail(name_, "gzip stream", "expected the file to end after the last gzip member, found " +
                                     std::to_string(junk_) + " trailing bytes that are not a "
                                     "gzip member (trailing garbage)");
  }

 private:
  uint64_t copy_into(uint8_t* out, uint64_t n) {
    const uint64_t want = std::min(n, size_ - pos_);
    uint64_t got = want;
    if (fd_ >= 0) got = pread_full(fd_, out, want, pos_, name_);
    else if (want) std::memcpy(out, data_ + pos_, want);
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
        member_end();
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

  // At the end of a member: another member may follow (1f 8b); anything else ends the stream,
  // and its length is kept for expect_end (gzip -t warns about such trailing garbage).
  void member_end() {
    const uint64_t left = z_.avail_in + (size_ - pos_);
    const uint8_t* next = z_.avail_in ? z_.next_in : data_ + pos_;
    if (left >= 2 && next_byte(next, 0) == 0x1f && next_byte(next, 1) == 0x8b) {
      inflateReset(&z_);
    } else {
      ended_ = true;
      junk_ = left;
    }
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
  int fd_;
  bool gzip_;
  bool live_ = false;
  bool ended_ = false;
  uint64_t junk_ = 0;  // bytes after the last member
  z_stream z_;
};

// An IDX header: the dims and what they imply.
struct Header {
  std::vector<int64_t> dims;
  uint64_t bytes = 0;    // the header's own size: magic + 4 bytes per dim
  uint64_t product = 1;  // the payload's size: the product of the dims (at most 4 GiB)
  std::string shape;     // "N x rows x cols", for messages
};

// Reads and checks the magic; returns the rank.
unsigned read_magic(Source& src, const std::string& path) {
  unsigned char m[4];
  src.read_exact(m, 4, "magic");
  const uint32_t magic = be32(m);
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
  return rank;
}

Header read_header(Source& src, const std::string& path) {
  const unsigned rank = read_magic(src, path);
  unsigned char d[16];
  src.read_exact(d, 4ull * rank, "dims");
  Header h;
  h.bytes = 4 + 4ull * rank;
  for (unsigned i = 0; i < rank; ++i) {
    h.dims.push_back(be32(d + 4 * i));
    h.shape += (i ? " x " : "") + std::to_string(h.dims.back());
  }
  // The leading count may be 0 (callers decide); inner dims (rows, cols, ...) must be positive.
  for (unsigned i = 1; i < rank; ++i)
    if (h.dims[i] == 0)
      fail(path, "dims[" + std::to_string(i) + "]", "expected > 0, found 0 (dims " + h.shape + ")");
  for (unsigned i = 0; i < rank; ++i) {
    const uint64_t v = static_cast<uint64_t>(h.dims[i]);
    // product <= 2^32 and v < 2^32 here, so the multiply cannot wrap; check the cap each step.
    if (v != 0 && h.product > kMaxPayload / v)
      fail(path, "dims", "expected a product of at most " + std::to_string(kMaxPayload) +
                             " bytes (4 GiB), found " + h.shape + " (too large)");
    h.product *= v;
  }
  return h;
}

// One IDX input whose header has been read and checked, its payload not yet decoded: a file
// (a raw one is read with pread as needed, never whole; a gzip one is read into memory) or bytes
// in memory. The header can be looked at before deciding how much of the payload to decode.
class IdxInput {
 public:
  IdxInput(const std::string& path, const std::string& what) : name_(path) {
    fd_.fd = open_input(path, what, &size_);
    uint8_t sig[2] = {0, 0};
    if (size_ >= 2 && pread_full(fd_.fd, sig, 2, 0, path) == 2 && gzip_signature(sig, 2)) {
      compressed_ = read_compressed(fd_.fd, size_, path);
      start(compressed_.empty() ? kNoBytes : compressed_.data(), compressed_.size(), true, -1);
    } else {
      start(kNoBytes, size_, false, fd_.fd);
    }
  }
  IdxInput(const uint8_t* data, uint64_t size, const std::string& name) : name_(name) {
    start(data, size, gzip_signature(data, size), -1);
  }

  const Header& header() const { return h_; }

  // The first `items` entries along dims[0] (all of them when items >= dims[0]). All: a raw file
  // must be exactly header + payload, a gzip stream must end right after the payload. Fewer: a raw
  // file must still have the exact size, a gzip stream is decoded only as far as needed.
  std::vector<uint8_t> decode(uint64_t items) {
    const uint64_t count = static_cast<uint64_t>(h_.dims[0]);
    const bool all = items >= count;
    const uint64_t want = all ? h_.product : items * (h_.product / count);
    if (!gzip_) return decode_raw(want);
    std::vector<uint8_t> out = decode_gzip(want);
    if (all) src_->expect_end();
    return out;
  }

 private:
  void start(const uint8_t* data, uint64_t size, bool gzip, int fd) {
    size_ = size;
    gzip_ = gzip;
    if (gzip && size < kGzipMinSize)
      fail(name_, "size", "expected at least " + std::to_string(kGzipMinSize) +
                              " bytes for a gzip file (header + trailer), found " +
                              std::to_string(size) + " (truncated gzip)");
    src_.emplace(name_, data, size, gzip, fd);
    h_ = read_header(*src_, name_);
  }

  std::vector<uint8_t> decode_raw(uint64_t want) {
    const uint64_t total = h_.bytes + h_.product;
    if (size_ != total) {
      const std::string which = size_ < total
                                    ? "truncated by " + std::to_string(total - size_) + " bytes"
                                    : std::to_string(size_ - total) + " trailing bytes";
      fail(name_, "size", "expected " + std::to_string(total) + " bytes (" +
                              std::to_string(h_.bytes) + "-byte header + dims " + h_.shape +
                              "), found " + std::to_string(size_) + " (" + which + ")");
    }
    std::vector<uint8_t> out;
    named_alloc(quote_path(name_), "the data of dims " + h_.shape, want, [&] { out.resize(want); });
    src_->read_exact(out.data(), want, "data");
    return out;
  }

  // The header (and so the trailer) can lie: the buffer starts at a guess from the compressed
  // size and doubles only as decoded data arrives (so at most twice what the stream really
  // holds), never past `want`.
  std::vector<uint8_t> decode_gzip(uint64_t want) {
    std::vector<uint8_t> out;
    uint64_t have = 0;
    while (have < want) {
      const uint64_t next = std::min(want, have ? 2 * have : std::max(kFirstChunk, 8 * size_));
      named_alloc(quote_path(name_), "the decompressed data of dims " + h_.shape, next, [&] {
        out.reserve(next);  // exactly next: no vector growth slack past `want`
        out.resize(next);
      });
      src_->read_exact(out.data() + have, next - have, "data", have, want);
      have = next;
    }
    return out;
  }

  std::string name_;
  Fd fd_;
  std::vector<uint8_t> compressed_;
  uint64_t size_ = 0;
  bool gzip_ = false;
  std::optional<Source> src_;
  Header h_;
};

// Images [N, rows, cols] and labels [N]: ranks, a non-zero count, sides, equal counts.
void check_pair(const Header& img, const Header& lab, const std::string& images,
                const std::string& labels) {
  if (img.dims.size() != 3)
    fail(images, "magic rank",
         "expected 3 (0x00000803 ubyte images [N, rows, cols]), found " +
             std::to_string(img.dims.size()) + " (" + hex32(0x800u + img.dims.size()) + ")");
  if (lab.dims.size() != 1)
    fail(labels, "magic rank", "expected 1 (0x00000801 ubyte labels [N]), found " +
                                   std::to_string(lab.dims.size()) + " (" +
                                   hex32(0x800u + lab.dims.size()) + ")");
  const int64_t n = img.dims[0];
  if (n == 0) fail(images, "count", "expected at least 1 image, found 0 (zero images)");
  if (img.dims[1] > kMaxSide || img.dims[2] > kMaxSide)
    fail(images, "rows/cols",
         "expected each <= " + std::to_string(kMaxSide) + ", found " +
             std::to_string(img.dims[1]) + " x " + std::to_string(img.dims[2]));
  if (lab.dims[0] != n)
    fail(labels, "count", "expected " + std::to_string(n) + " labels (the image count in " +
                              one_line(images) + "), found " + std::to_string(lab.dims[0]));
}

void check_labels(const std::vector<uint8_t>& labels, int num_classes, const std::string& path) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes)
      fail(path, "label[" + std::to_string(i) + "]",
           "expected < " + std::to_string(num_classes) + " (num_classes), found " +
               std::to_string(labels[i]));
  }
}

// Why a present name cannot be used as a data file (lstat/stat's errno).
std::string unusable(int err) {
  if (err == ELOOP)
    return "expected a regular file, found a symlink loop (too many levels of symbolic links)";
  return std::string("cannot access it: ") + std::strerror(err);
}

// NAME or NAME.gz in dir, the raw one first. Only a name that is truly absent is skipped: one
// that is there but unusable (a symlink loop, a dangling symlink, no permission) is reported.
std::string pick(const std::string& dir, const std::string& name) {
  for (const std::string& file : {name, name + ".gz"}) {
    const std::string path = (std::filesystem::path(dir) / file).string();
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return path;  // open_input checks what it is
    const int err = errno;
    if (err != ENOENT) fail(path, "data file", unusable(err));
    if (::lstat(path.c_str(), &st) == 0)
      fail(path, "data file", "expected a regular file, found a symlink to nothing (dangling)");
  }
  throw Error(one_line(dir) + ": data file " + name + ": expected " + name + " or " + name +
              ".gz in the directory, found neither");
}

void check_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st))
    fail(dir, "data directory", "expected an existing directory, found nothing there" +
                                    (ec ? " (" + ec.message() + ")" : std::string()));
  if (!fs::is_directory(st))
    fail(dir, "data directory", "expected a directory, found a non-directory file");
}

}  // namespace

IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name) {
  IdxInput in(size ? data : kNoBytes, size, name);
  IdxArray out;
  out.dims = in.header().dims;
  out.data = in.decode(static_cast<uint64_t>(out.dims[0]));
  return out;
}

IdxArray read_idx(const std::string& path) {
  IdxInput in(path, "IDX file");
  IdxArray out;
  out.dims = in.header().dims;
  out.data = in.decode(static_cast<uint64_t>(out.dims[0]));
  return out;
}

Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes, int64_t limit) {
  if (num_classes < 1 || num_classes > 256)
    fail(labels_path, "num_classes", "expected 1..256 for unsigned-byte labels, found " +
                                         std::to_string(num_classes));
  if (limit < 0)
    fail(images_path, "limit", "expected >= 0 (0 = all images), found " + std::to_string(limit));
  IdxInput img(images_path, "images file");
  IdxInput lab(labels_path, "labels file");
  check_pair(img.header(), lab.header(), images_path, labels_path);
  const int64_t n = img.header().dims[0];
  Dataset ds;
  ds.count = limit > 0 ? std::min(n, limit) : n;
  ds.total = n;
  ds.rows = static_cast<int>(img.header().dims[1]);
  ds.cols = static_cast<int>(img.header().dims[2]);
  ds.num_classes = num_classes;
  ds.labels = lab.decode(static_cast<uint64_t>(ds.count));
  check_labels(ds.labels, num_classes, labels_path);
  ds.images = img.decode(static_cast<uint64_t>(ds.count));
  return ds;
}

TrainTest load_mnist_dir(const std::string& dir, int64_t limit_train, int64_t limit_test) {
  check_dir(dir);
  const std::string tr_img = pick(dir, "train-images-idx3-ubyte");
  const std::string tr_lab = pick(dir, "train-labels-idx1-ubyte");
  const std::string te_img = pick(dir, "t10k-images-idx3-ubyte");
  const std::string te_lab = pick(dir, "t10k-labels-idx1-ubyte");
  TrainTest tt;
  tt.train = load_idx_dataset(tr_img, tr_lab, 10, limit_train);
  tt.test = load_idx_dataset(te_img, te_lab, 10, limit_test);
  if (tt.train.rows != tt.test.rows || tt.train.cols != tt.test.cols)
    fail(te_img, "rows/cols", "expected " + std::to_string(tt.train.rows) + " x " +
                                  std::to_string(tt.train.cols) + " (as in " + one_line(tr_img) +
                                  "), found " + std::to_string(tt.test.rows) + " x " +
                                  std::to_string(tt.test.cols));
  return tt;
}

}  // namespace ember
