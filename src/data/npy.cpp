// The .npy reader (ember/npy.h): the fixed prefix (magic, version, header length), the header's
// Python dict literal parsed strictly by hand (never evaluated), the data's size checked against
// the file's before anything is allocated, then the little-endian floats copied out.
#include "ember/npy.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "ember/error.h"
#include "ember_support/files.h"

namespace ember {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader copies '<f4' and '<f8' as they are");

constexpr size_t kMaxHeader = size_t(64) << 10;      // the dict's bytes
constexpr uint64_t kMaxData = uint64_t(4) << 30;     // the array's bytes
constexpr size_t kMaxRank = 8;
constexpr size_t kMaxPrefix = 12;                    // magic 6, version 2, length 2 (v1) or 4

[[noreturn]] void fail(const std::string& name, const std::string& field, const std::string& what) {
  throw Error(one_line(name + ": " + field + ": " + what));  // a key or text from the file may hold any byte
}

struct Header {
  bool f64 = false;
  std::vector<int64_t> shape;
  uint64_t data_at = 0, data_bytes = 0;
};

// The prefix: where the dict starts (*at) and its length.
size_t dict_length(std::string_view b, const std::string& name, size_t* at) {
  if (b.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    fail(name, "magic", "expected a .npy file (starting \\x93NUMPY), found " + clip_text(std::string(b.substr(0, 6)), 24));
  if (b.size() < 10) fail(name, "version", "the file ends inside the prefix (" + std::to_string(b.size()) + " bytes)");
  const uint8_t major = uint8_t(b[6]), minor = uint8_t(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(name, "version", "expected 1.0, 2.0 or 3.0, found " + std::to_string(major) + "." + std::to_string(minor));
  *at = major == 1 ? 10 : 12;
  if (b.size() < *at) fail(name, "header length", "the file ends inside it (" + std::to_string(b.size()) + " bytes)");
  uint64_t len = 0;
  for (size_t i = *at; i-- > 8;) len = len << 8 | uint8_t(b[i]);
  if (len > kMaxHeader)
    fail(name, "header length", std::to_string(len) + " bytes is more than the " + std::to_string(kMaxHeader) + "-byte limit");
  return size_t(len);
}

// The header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (100, 3), }.
class DictParser {
 public:
  DictParser(std::string_view s, const std::string& name) : s_(s), name_(name) {}
  Header parse() {
    Header h;
    bool seen[3] = {false, false, false};
    expect('{', "header");
    while (skip_ws(), !eat('}')) {
      const std::string key = string("header key");
      const std::string shown = clip_text("'" + key + "'");
      expect(':', "header " + shown);
      const int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0) fail(name_, "header", "unexpected key " + shown + " (expected exactly 'descr', 'fortran_order' and 'shape')");
      if (seen[k]) fail(name_, "header", "key " + shown + " appears twice");
      seen[k] = true;
      if (k == 0) h.f64 = descr();
      else if (k == 1) fortran_order();
      else h.shape = shape();
      skip_ws();
      if (!eat(',') && (skip_ws(), peek() != '}')) fail(name_, "header", "expected ',' or '}' after " + shown + found());
    }
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) fail(name_, "header", std::string("missing key '") + (k == 0 ? "descr" : k == 1 ? "fortran_order" : "shape") + "'");
    skip_ws();
    if (i_ != s_.size()) fail(name_, "header", "unexpected text after the dict" + found());
    return h;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  std::string found() const {
    return i_ < s_.size() ? ", found " + clip_text(std::string(s_.substr(i_, 20)), 24) : ", found the end of the header";
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    if (peek() != c || i_ >= s_.size()) return false;
    ++i_;
    return true;
  }
  void expect(char c, const std::string& field) {
    skip_ws();
    if (!eat(c)) fail(name_, field, std::string("expected '") + c + "'" + found());
    skip_ws();
  }
  std::string string(const std::string& field) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(name_, field, "expected a quoted string" + found());
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail(name_, field, "the string never ends");
    std::string v(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return v;
  }
  bool descr() {
    const std::string d = string("descr");
    if (d == "<f4" || d == "<f8") return d == "<f8";
    fail(name_, "descr", clip_text("'" + d + "'") + " is not supported (expected '<f4' or '<f8': little-endian float32 or float64)");
  }
  void fortran_order() {
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return;
    }
    if (s_.substr(i_, 4) == "True") fail(name_, "fortran_order", "True is not supported (save a C-order array: np.ascontiguousarray)");
    fail(name_, "fortran_order", "expected False" + found());
  }
  std::vector<int64_t> shape() {
    std::vector<int64_t> dims;
    if (!eat('(')) fail(name_, "shape", "expected a tuple" + found());
    while (skip_ws(), !eat(')')) {
      if (dims.size() == kMaxRank) fail(name_, "shape", "expected at most " + std::to_string(kMaxRank) + " dims");
      dims.push_back(dim(dims.size()));
      skip_ws();
      if (!eat(',') && peek() != ')') fail(name_, "shape", "expected ',' or ')'" + found());
    }
    if (dims.empty()) fail(name_, "shape", "expected at least 1 dim, found () (a scalar)");
    return dims;
  }
  int64_t dim(size_t k) {
    const std::string field = "shape[" + std::to_string(k) + "]";
    int64_t v = 0;
    size_t digits = 0;
    for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_, ++digits) {
      if (digits == 18) fail(name_, field, "expected at most 18 digits");
      v = v * 10 + (s_[i_] - '0');
    }
    if (digits == 0) fail(name_, field, "expected an integer" + found());
    if (v < 1) fail(name_, field, "expected >= 1, found 0 (an empty array)");
    return v;
  }

  std::string_view s_;
  const std::string& name_;
  size_t i_ = 0;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (int64_t d : shape) t += std::to_string(d) + ", ";
  return t.substr(0, t.size() - 2) + ")";
}

// head: the file's first bytes (at least the prefix and the dict, when the file holds them).
Header parse_header(std::string_view head, uint64_t file_size, const std::string& name) {
  size_t at = 0;
  const size_t len = dict_length(head, name, &at);
  if (at + len > file_size)
    fail(name, "header length", std::to_string(len) + " bytes run past the end of the file (" + std::to_string(file_size) + " bytes)");
  Header h = DictParser(head.substr(at, len), name).parse();
  const uint64_t item = h.f64 ? 8 : 4;
  uint64_t bytes = item;
  for (int64_t d : h.shape)
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes) || bytes > kMaxData)
      fail(name, "shape", shape_text(h.shape) + " holds more than the " + std::to_string(kMaxData >> 30) + " GiB limit");
  h.data_at = at + len, h.data_bytes = bytes;
  if (file_size != h.data_at + bytes)
    fail(name, "shape", shape_text(h.shape) + " of " + (h.f64 ? "'<f8'" : "'<f4'") + " needs " + std::to_string(bytes) +
                            " bytes after the " + std::to_string(h.data_at) + "-byte header, the file has " +
                            std::to_string(file_size - h.data_at));
  return h;
}

NpyArray array_of(const Header& h) {
  NpyArray a;
  a.shape = h.shape, a.is_f64 = h.f64;
  if (h.f64) a.f64.resize(size_t(h.data_bytes / 8));
  else a.f32.resize(size_t(h.data_bytes / 4));
  return a;
}
void* data_of(NpyArray& a) { return a.is_f64 ? static_cast<void*>(a.f64.data()) : static_cast<void*>(a.f32.data()); }

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

// n bytes at offset `at` of the file into dst; a file that shrank while read is named.
void read_at(int fd, void* dst, size_t n, uint64_t at, const std::string& path) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, n - done, off_t(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path, "file", std::string("read error: ") + std::strerror(errno));
    if (r == 0) fail(path, "file", "ended after " + std::to_string(at + done) + " bytes while read (it shrank)");
    done += size_t(r);
  }
}

}  // namespace

NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& name) {
  const std::string_view all(reinterpret_cast<const char*>(data), data ? size : 0);
  const Header h = parse_header(all, all.size(), name);
  NpyArray a = array_of(h);
  if (h.data_bytes) std::memcpy(data_of(a), data + h.data_at, size_t(h.data_bytes));
  return a;
}

NpyArray read_npy(const std::string& path) {
  uint64_t size = 0;
  const Fd f{open_input(path, "npy file", &size)};
  std::string head(size_t(std::min<uint64_t>(size, kMaxPrefix + kMaxHeader)), '\0');
  read_at(f.fd, head.data(), head.size(), 0, path);
  const Header h = parse_header(head, size, path);
  NpyArray a = array_of(h);
  read_at(f.fd, data_of(a), size_t(h.data_bytes), h.data_at, path);
  return a;
}

}  // namespace ember
