// CIFAR-10 and CIFAR-100 binary batches (the "binary version" of the data sets): fixed-size
// records of label byte(s) then a 32x32 RGB image stored planar (1024 R, 1024 G, 1024 B bytes).
// Files are opened with open_input (regular files only), their sizes (from fstat) checked to be
// whole records and at most what the real file holds (10,000 records; CIFAR-100's train.bin
// 50,000) before a byte is allocated, and only the records kept by a limit are read.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "data/alloc.h"
#include "ember/data.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace ember {
namespace {

constexpr int kSide = 32, kImage = 3 * kSide * kSide;
// Records in the real files: every CIFAR-10 batch and CIFAR-100's test.bin, and CIFAR-100's train.bin.
constexpr uint64_t kBatchRecords = 10000, kTrain100Records = 50000;

struct Layout {
  bool hundred;  // CIFAR-100: two label bytes (coarse, fine)
  std::vector<std::string> train, test;
  uint64_t train_max, test_max;  // records per file
};

bool present(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Layout layout(const std::string& dir) {
  if (is_cifar100_dir(dir))
    return {true, {dir + "/train.bin"}, {dir + "/test.bin"}, kTrain100Records, kBatchRecords};
  Layout l{false, {}, {dir + "/test_batch.bin"}, kBatchRecords, kBatchRecords};
  for (int i = 1; i <= 5; ++i) l.train.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  return l;
}

void read_at(int fd, uint8_t* dst, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, dst, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error(quote_path(path) + ": read failed: " + (r < 0 ? std::strerror(errno) : "file shrank while reading"));
    dst += r, n -= size_t(r), off += uint64_t(r);
  }
}

// Appends the n records at buf (record size checked by the caller) to d.
void append_records(Dataset& d, const uint8_t* buf, int64_t n, bool hundred, bool fine, const std::string& name) {
  const size_t rec = size_t(hundred ? 2 : 1) + kImage;
  const size_t base = size_t(d.count);
  named_alloc(quote_path(name), "the images of " + std::to_string(n) + " records", (base + size_t(n)) * kImage, [&] {
    d.images.resize((base + size_t(n)) * kImage);
    d.labels.resize(base + size_t(n));
  });
  const int label_byte = hundred && fine ? 1 : 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = buf + size_t(i) * rec;
    const int label = r[label_byte];
    if (label >= d.num_classes)
      throw Error(quote_path(name) + ": record " + std::to_string(i) + ": " +
                  (hundred ? (fine ? "fine label " : "coarse label ") : "label ") + std::to_string(label) +
                  " is not below " + std::to_string(d.num_classes));
    d.labels[base + size_t(i)] = uint8_t(label);
    std::memcpy(d.images.data() + (base + size_t(i)) * kImage, r + rec - kImage, kImage);
  }
  d.count += n;
}

void check_size(uint64_t size, bool hundred, uint64_t max_records, const std::string& name) {
  const size_t rec = size_t(hundred ? 2 : 1) + kImage;
  const std::string records = std::to_string(rec) + "-byte CIFAR" + (hundred ? "-100" : "-10") + " records";
  if (size == 0 || size % rec != 0)
    throw Error(quote_path(name) + ": size " + std::to_string(size) + " bytes is not a whole number of " + records);
  if (size / rec > max_records)
    throw Error(quote_path(name) + ": size " + std::to_string(size) + " bytes is more than " + std::to_string(max_records) +
                " " + records + " (" + std::to_string(max_records * rec) + " bytes), what such a file holds");
}

Dataset empty_set(bool hundred, bool fine) {
  Dataset d;
  d.rows = d.cols = kSide, d.channels = 3;
  d.num_classes = hundred ? (fine ? 100 : 20) : 10;
  return d;
}

// Appends the records of one file (at most `room` of them when room >= 0) to d.
void read_batch(Dataset& d, const std::string& path, bool hundred, bool fine, uint64_t max_records, int64_t room) {
  const size_t rec = size_t(hundred ? 2 : 1) + kImage;
  uint64_t size = 0;
  const int fd = open_input(path, "CIFAR file", &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  check_size(size, hundred, max_records, path);
  int64_t n = int64_t(size / rec);
  d.total += n;
  if (room >= 0) n = std::min(n, room);
  std::vector<uint8_t> buf;
  named_alloc(quote_path(path), "reading " + std::to_string(n) + " records", size_t(n) * rec, [&] { buf.resize(size_t(n) * rec); });
  read_at(fd, buf.data(), buf.size(), 0, path);
  append_records(d, buf.data(), n, hundred, fine, path);
}

// Class names: one per line (blank lines ignored), used only when there is one per class.
std::vector<std::string> names(const std::string& path, int classes) {
  if (!present(path)) return {};
  std::vector<std::string> out = read_lines(path, 1 << 20, "class names file");
  for (std::string& l : out) l = one_line(l);
  if (int(out.size()) != classes) return {};
  return out;
}

Dataset load_split(const std::vector<std::string>& files, bool hundred, bool fine, uint64_t max_records, int64_t limit,
                   const char* field) {
  if (limit < 0) throw Error(std::string(field) + ": expected >= 0 (0: all images), found " + std::to_string(limit));
  Dataset d = empty_set(hundred, fine);
  bool counted = true;  // every file's records in d.total (the files past the limit from their sizes)
  for (const std::string& f : files) {
    if (limit > 0 && d.count >= limit) {
      struct stat st;
      const uint64_t rec = uint64_t(hundred ? 2 : 1) + kImage;
      counted = counted && ::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_size) % rec == 0;
      if (counted) d.total += int64_t(uint64_t(st.st_size) / rec);
      continue;
    }
    if (!present(f)) throw Error(quote_path(f) + ": missing (a CIFAR" + (hundred ? "-100" : "-10") + " data set has it)");
    read_batch(d, f, hundred, fine, max_records, limit > 0 ? limit - d.count : -1);
  }
  if (!counted) d.total = 0;
  return d;
}

}  // namespace

Dataset parse_cifar(const uint8_t* data, size_t size, bool hundred, bool fine, const std::string& name) {
  check_size(size, hundred, hundred ? kTrain100Records : kBatchRecords, name);
  Dataset d = empty_set(hundred, fine);
  append_records(d, data, int64_t(size / (size_t(hundred ? 2 : 1) + kImage)), hundred, fine, name);
  return d;
}

bool is_cifar_dir(const std::string& dir) {
  return present(dir + "/data_batch_1.bin") || present(dir + "/test_batch.bin") || present(dir + "/train.bin");
}

bool is_cifar100_dir(const std::string& dir) { return present(dir + "/train.bin") || present(dir + "/test.bin"); }

TrainTest load_cifar_dir(const std::string& dir, bool fine, int64_t limit_train, int64_t limit_test) {
  const Layout l = layout(dir);
  TrainTest t{load_split(l.train, l.hundred, fine, l.train_max, limit_train, "limit_train"),
              load_split(l.test, l.hundred, fine, l.test_max, limit_test, "limit_test")};
  const std::string meta = l.hundred ? (fine ? "/fine_label_names.txt" : "/coarse_label_names.txt") : "/batches.meta.txt";
  t.train.class_names = t.test.class_names = names(dir + meta, t.train.num_classes);
  return t;
}

}  // namespace ember
