// IDX (MNIST-format) reader: raw or gzip (detected by the 1f 8b signature), unsigned-byte data
// only. Every header field is checked against the file's (uncompressed) size before the payload
// is allocated, and a gzip stream must be complete and exact; any problem throws ember::Error
// with one line naming the path, the field, what was expected and what was found.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
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
constexpr unsigned kGzChunk = 1u << 30;              // gzread takes an unsigned count

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

// Facts about the file on disk, gathered with plain stdio before any decoding.
struct Probe {
  uint64_t size = 0;       // bytes on disk
  bool gzip = false;       // starts with 1f 8b
  uint32_t isize = 0;      // gzip trailer ISIZE (uncompressed size mod 2^32)
};

// Opens path for reading, or throws naming the path and strerror.
FilePtr open_file(const std::string& path) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, "file", std::string("cannot open for reading: ") + std::strerror(errno));
  FilePtr fp(f);
  struct stat st {};
  if (fstat(fileno(f), &st) != 0)
    fail(path, "file", std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    fail(path, "file", std::string("expected a regular file, found a directory: ") + std::strerror(EISDIR));
  return fp;
}

Probe probe_file(const std::string& path) {
  FilePtr f = open_file(path);
  Probe p;
  if (std::fseek(f.get(), 0, SEEK_END) != 0)
    fail(path, "file", std::string("cannot seek: ") + std::strerror(errno));
  long end = std::ftell(f.get());
  if (end < 0) fail(path, "file", std::string("cannot tell size: ") + std::strerror(errno));
  p.size = static_cast<uint64_t>(end);
  std::rewind(f.get());
  unsigned char sig[2] = {0, 0};
  size_t got = std::fread(sig, 1, 2, f.get());
  if (got < 2 && std::ferror(f.get()))
    fail(path, "file", std::string("cannot read: ") + std::strerror(errno));
  p.gzip = got == 2 && sig[0] == 0x1f && sig[1] == 0x8b;
  if (!p.gzip) return p;
  if (p.size < kGzipMinSize)
    fail(path, "size", "expected at least " + std::to_string(kGzipMinSize) +
                           " bytes for a gzip file (header + trailer), found " +
                           std::to_string(p.size) + " (truncated gzip)");
  unsigned char tail[4];
  if (std::fseek(f.get(), -4, SEEK_END) != 0 || std::fread(tail, 1, 4, f.get()) != 4)
    fail(path, "gzip ISIZE", std::string("cannot read the gzip trailer: ") + std::strerror(errno));
  p.isize = le32(tail);
  return p;
}

// A byte source: raw stdio or zlib's gz* reader. read_exact throws on any short read or error.
class Source {
 public:
  Source(const std::string& path, bool gzip) : path_(path), gzip_(gzip) {
    if (gzip_) {
      errno = 0;
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_)
        fail(path, "file", std::string("cannot open gzip for reading: ") +
                               (errno ? std::strerror(errno) : "out of memory"));
      gzbuffer(gz_, 1u << 17);
    } else {
      raw_ = open_file(path);
    }
  }
  ~Source() {
    if (gz_) gzclose(gz_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // Reads exactly n bytes into buf; `field` names what is being read for the error message.
  void read_exact(void* buf, uint64_t n, const std::string& field) {
    auto* out = static_cast<unsigned char*>(buf);
    uint64_t done = 0;
    while (done < n) {
      unsigned want = static_cast<unsigned>(std::min<uint64_t>(n - done, kGzChunk));
      uint64_t got = 0;
      if (gzip_) {
        int r = gzread(gz_, out + done, want);
        check_gz(field, r);
        got = static_cast<uint64_t>(r);
      } else {
        got = std::fread(out + done, 1, want, raw_.get());
        if (got < want && std::ferror(raw_.get()))
          fail(path_, field, std::string("read error: ") + std::strerror(errno));
      }
      done += got;
      if (got < want) {
        fail(path_, field, "expected " + std::to_string(n) + " bytes, found only " +
                               std::to_string(done) +
                               (gzip_ ? " (gzip stream ends early)" : " (file truncated)"));
      }
    }
  }

  // For gzip: the stream must end right after the payload (and its CRC/length must verify).
  void expect_end() {
    if (!gzip_) return;
    unsigned char extra;
    int r = gzread(gz_, &extra, 1);
    check_gz("gzip stream", r);
    if (r != 0)
      fail(path_, "gzip stream", "expected the uncompressed data to end after the payload, "
                                 "found trailing bytes");
  }

 private:
  // zlib reports truncation only through gzerror (Z_BUF_ERROR) after a short read; errors are
  // named "gzip stream" since zlib may be decoding ahead of the field that was asked for.
  void check_gz(const std::string& field, int r) {
    int err = Z_OK;
    std::string msg = gzerror(gz_, &err);
    if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
    if (msg.empty()) msg = err == Z_BUF_ERROR ? "unexpected end of file" : "error";
    if (err == Z_BUF_ERROR)
      fail(path_, "gzip stream", "expected complete gzip data (while reading " + field +
                                     "), found it truncated (zlib: " + msg + ")");
    if (r < 0 || (err != Z_OK && err != Z_STREAM_END))
      fail(path_, "gzip stream", "expected valid gzip data (while reading " + field +
                                     "), found corrupt data (zlib: " + msg + ")");
  }

  std::string path_;
  bool gzip_;
  FilePtr raw_;
  gzFile gz_ = nullptr;
};

}  // namespace

IdxArray read_idx(const std::string& path) {
  Probe probe = probe_file(path);
  Source src(path, probe.gzip);

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

  if (probe.gzip) {
    uint32_t want = static_cast<uint32_t>(total & 0xffffffffu);
    if (probe.isize != want)
      fail(path, "gzip ISIZE", "expected " + std::to_string(want) + " (" + std::to_string(header) +
                                   "-byte header + " + shape + " = " + std::to_string(product) +
                                   " bytes, mod 2^32), found " + std::to_string(probe.isize) +
                                   " (dims disagree with the data, or the gzip is truncated)");
  } else if (probe.size != total) {
    std::string which = probe.size < total
                            ? "truncated by " + std::to_string(total - probe.size) + " bytes"
                            : std::to_string(probe.size - total) + " trailing bytes";
    fail(path, "size", "expected " + std::to_string(total) + " bytes (" + std::to_string(header) +
                           "-byte header + dims " + shape + "), found " +
                           std::to_string(probe.size) + " (" + which + ")");
  }

  out.data.resize(product);
  src.read_exact(out.data.data(), product, "data");
  src.expect_end();
  return out;
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
