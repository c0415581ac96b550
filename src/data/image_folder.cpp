// Image-folder data sets: torchvision's ImageFolder layout (train/<class>/..., test/ or val/) and
// TinyImageNet's (wnids.txt, val/val_annotations.txt), scanned in sorted order, decoded on a few
// threads (each image alone, so the result does not depend on their number), resized to one size
// and packed planar u8 [N, C, S, S]. Paths are hostile: symlinked folders below a class are not
// followed, nesting is capped, every file goes through read_input (regular files, size-capped).
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ember/data.h"
#include "ember/error.h"
#include "ember/files.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
constexpr int kMaxDepth = 8;                         // folder levels below a class folder
constexpr uint64_t kMaxFile = uint64_t{1} << 28;     // 256 MiB per image file

struct Item {
  std::string path;
  int label;
};

bool image_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

bool is_dir(const std::string& p) {  // follows a symlink (class folders may be links)
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Names in dir, sorted, hidden ones (a leading '.') left out.
std::vector<std::string> entries(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw Error("--data " + quote_path(dir) + ": " + ec.message());
  std::vector<std::string> out;
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error("--data " + quote_path(dir) + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.') out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The image files below dir (depth levels down already), in sorted path order.
void walk(const std::string& dir, int depth, int label, std::vector<Item>& out, int64_t& skipped) {
  if (depth > kMaxDepth)
    throw Error("--data " + quote_path(dir) + ": nested more than " + std::to_string(kMaxDepth) + " folders below its class");
  for (const std::string& name : entries(dir)) {
    const std::string p = dir + "/" + name;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) throw Error("--data " + quote_path(p) + ": " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) walk(p, depth + 1, label, out, skipped);
    else if (!S_ISLNK(st.st_mode) && !S_ISREG(st.st_mode)) ++skipped;  // a FIFO, socket or device
    else if (image_name(name) && !(S_ISLNK(st.st_mode) && is_dir(p))) out.push_back({p, label});
    else ++skipped;  // not an image name, or a symlinked folder (not followed)
  }
}

struct Split {
  std::vector<Item> items;
  int64_t skipped = 0;
};

Split scan_classes(const std::string& root, const std::vector<std::string>& classes, bool train) {
  Split s;
  std::map<std::string, int> index;
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = int(i);
  for (const std::string& name : entries(root)) {
    const std::string p = root + "/" + name;
    if (!is_dir(p)) {
      ++s.skipped;
      continue;
    }
    const auto it = index.find(name);
    if (it == index.end())
      throw Error("--data " + quote_path(p) + ": class '" + one_line(name) + "' is not among train's classes");
    const size_t before = s.items.size();
    walk(p, 0, it->second, s.items, s.skipped);
    if (train && s.items.size() == before) throw Error("--data " + quote_path(p) + ": no .png/.jpg/.jpeg images in this class folder");
  }
  return s;
}

std::vector<std::string> lines(const std::string& path) { return read_lines(path, uint64_t{1} << 26, "--data"); }

// TinyImageNet's validation set: val/images/<file>, labelled by val/val_annotations.txt.
Split tiny_val(const std::string& dir, const std::vector<std::string>& classes) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = int(i);
  const std::string ann = dir + "/val/val_annotations.txt";
  Split s;
  int n = 0;
  for (const std::string& l : lines(ann)) {
    ++n;
    const size_t t1 = l.find('\t'), t2 = t1 == std::string::npos ? t1 : l.find('\t', t1 + 1);
    const std::string file = l.substr(0, t1), wnid = t1 == std::string::npos ? "" : l.substr(t1 + 1, t2 - t1 - 1);
    const auto it = index.find(wnid);
    if (file.empty() || file.find('/') != std::string::npos || it == index.end())
      throw Error("--data " + quote_path(ann) + ": line " + std::to_string(n) + ": expected FILE<tab>WNID with a wnid of wnids.txt");
    s.items.push_back({dir + "/val/images/" + file, it->second});
  }
  std::sort(s.items.begin(), s.items.end(), [](const Item& a, const Item& b) { return a.path < b.path; });
  return s;
}

// Runs fn(i) for every item on `threads` threads; the first failing item (lowest index) is
// reported.
template <class Fn>
void for_each_item(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t bad_at = SIZE_MAX;
  std::string bad_msg;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < bad_at) bad_at = i, bad_msg = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (bad_at != SIZE_MAX) throw Error(bad_msg);
}

Image read_one(const std::string& path, const FolderOptions& o, bool header_only) {
  const std::string bytes = read_input(path, kMaxFile, "--data");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (header_only) return read_image_header(p, bytes.size(), path, o.max_pixels);
  Image im = decode_image(p, bytes.size(), path, o.max_pixels);
  if (o.image_size > 0 && (im.width != o.image_size || im.height != o.image_size)) {
    Image r{o.image_size, o.image_size, im.channels, std::vector<uint8_t>(size_t(im.channels) * o.image_size * o.image_size)};
    resize_image(r.pixels.data(), o.image_size, o.image_size, im.pixels.data(), im.channels, im.height, im.width, o.cubic);
    im = std::move(r);
  }
  return im;
}

// Every item decoded (and resized), or only its header read.
std::vector<Image> decode_all(const std::vector<Item>& items, const FolderOptions& o, bool header_only = false) {
  std::vector<Image> out(items.size());
  for_each_item(items.size(), o.threads, [&](size_t i) { out[i] = read_one(items[i].path, o, header_only); });
  return out;
}

// The size every image must have: --image-size, or the first one's.
void check_same_size(const Item& it, const Image& im, const Item& first, int rows, int cols) {
  if (im.width != cols || im.height != rows)
    throw Error("--data " + quote_path(it.path) + ": image is " + std::to_string(im.width) + "x" +
                std::to_string(im.height) + ", the first one " + quote_path(first.path) + " is " +
                std::to_string(cols) + "x" + std::to_string(rows) + " (pass --image-size to resize all)");
}

Dataset pack(const std::vector<Item>& items, std::vector<Image> ims, int channels, int classes) {
  Dataset d;
  d.count = int64_t(items.size());
  d.channels = channels, d.num_classes = classes;
  d.rows = ims.empty() ? 0 : ims[0].height, d.cols = ims.empty() ? 0 : ims[0].width;
  const size_t plane = size_t(d.rows) * d.cols, per = plane * channels;
  d.images.resize(per * items.size());
  d.labels.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Image& im = ims[i];
    check_same_size(items[i], im, items[0], d.rows, d.cols);
    for (int c = 0; c < channels; ++c)  // a grey image in a colour set: its plane three times
      std::memcpy(d.images.data() + per * i + plane * c, im.pixels.data() + plane * (im.channels == 1 ? 0 : c), plane);
    d.labels[i] = uint8_t(items[i].label);
    Image().pixels.swap(ims[i].pixels);  // free as we go
  }
  return d;
}

// A streamed split: every header read and checked now, the pixels decoded as the loader needs.
Dataset streamed(const std::vector<Item>& items, const std::vector<Image>& heads, const Item& first, int rows, int cols,
                 int channels, int classes, const FolderOptions& o) {
  auto files = std::make_shared<ImageFiles>();
  files->rows = rows, files->cols = cols, files->channels = channels;
  files->resize = o.image_size > 0, files->cubic = o.cubic, files->max_pixels = o.max_pixels;
  Dataset d;
  d.count = int64_t(items.size());
  d.channels = channels, d.num_classes = classes, d.rows = rows, d.cols = cols;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!files->resize) check_same_size(items[i], heads[i], first, rows, cols);
    files->paths.push_back(items[i].path);
    d.labels.push_back(uint8_t(items[i].label));
  }
  d.files = std::move(files);
  return d;
}

void keep_first(std::vector<Item>& v, int64_t limit) {
  if (limit < 0) throw Error("--limit: " + std::to_string(limit) + " is negative");
  if (limit > 0 && int64_t(v.size()) > limit) v.resize(size_t(limit));
}

}  // namespace

void ImageFiles::decode(int64_t i, uint8_t* dst) const {
  FolderOptions o;
  o.image_size = resize ? rows : 0, o.cubic = cubic, o.max_pixels = max_pixels;
  const Image im = read_one(paths[size_t(i)], o, false);
  if (im.width != cols || im.height != rows)
    throw Error("--data " + quote_path(paths[size_t(i)]) + ": image is now " + std::to_string(im.width) + "x" +
                std::to_string(im.height) + ", it was " + std::to_string(cols) + "x" + std::to_string(rows));
  const size_t plane = size_t(rows) * cols;
  for (int c = 0; c < channels; ++c) std::memcpy(dst + plane * c, im.pixels.data() + plane * (im.channels == 1 ? 0 : c), plane);
}

const uint8_t* Dataset::image(int64_t i, uint8_t* scratch) const {
  if (!files) return images.data() + size_t(i) * image_elems();
  files->decode(i, scratch);
  return scratch;
}

bool is_image_folder(const std::string& dir) {
  if (is_dir(dir + "/train") && ::access((dir + "/wnids.txt").c_str(), F_OK) == 0) return true;
  if (!is_dir(dir + "/train")) return false;
  for (const std::string& n : entries(dir + "/train"))
    if (is_dir(dir + "/train/" + n)) return true;
  return false;
}

TrainTest load_image_folder(const std::string& dir, const FolderOptions& o, FolderReport* report) {
  const std::string train_dir = dir + "/train";
  if (!is_dir(train_dir)) throw Error("--data " + quote_path(dir) + ": no train/ folder");
  const bool tiny = ::access((dir + "/wnids.txt").c_str(), F_OK) == 0;
  std::vector<std::string> classes;
  if (tiny) {
    classes = lines(dir + "/wnids.txt");
    std::sort(classes.begin(), classes.end());
    if (std::adjacent_find(classes.begin(), classes.end()) != classes.end())
      throw Error("--data " + quote_path(dir + "/wnids.txt") + ": a wnid is listed twice");
  } else {
    for (const std::string& n : entries(train_dir))
      if (is_dir(train_dir + "/" + n)) classes.push_back(n);
  }
  if (classes.empty()) throw Error("--data " + quote_path(train_dir) + ": no class folders");
  if (classes.size() > 256)
    throw Error("--data " + quote_path(train_dir) + ": " + std::to_string(classes.size()) + " classes (at most 256)");
  Split tr = scan_classes(train_dir, classes, true);
  Split te;
  if (tiny) {
    te = tiny_val(dir, classes);
    if (te.items.empty()) throw Error("--data " + quote_path(dir + "/val/val_annotations.txt") + ": no images listed");
  } else {
    const std::string test_dir = is_dir(dir + "/test") ? dir + "/test" : dir + "/val";
    if (!is_dir(test_dir)) throw Error("--data " + quote_path(dir) + ": no test/ or val/ folder");
    te = scan_classes(test_dir, classes, false);
    if (te.items.empty()) throw Error("--data " + quote_path(test_dir) + ": no .png/.jpg/.jpeg images");
  }
  keep_first(tr.items, o.limit_train);
  keep_first(te.items, o.limit_test);
  if (report) report->skipped_train = tr.skipped, report->skipped_test = te.skipped;
  // Stream when the decoded set (at most 3 channels) would not fit the cache.
  const Image first = read_one(tr.items[0].path, o, true);
  const int rows = o.image_size > 0 ? o.image_size : first.height, cols = o.image_size > 0 ? o.image_size : first.width;
  const uint64_t bytes = uint64_t(tr.items.size() + te.items.size()) * 3 * uint64_t(rows) * uint64_t(cols);
  if (bytes > o.cache_bytes) {
    const std::vector<Image> ha = decode_all(tr.items, o, true), hb = decode_all(te.items, o, true);
    int channels = 1;
    for (const auto* v : {&ha, &hb})
      for (const Image& im : *v) channels = std::max(channels, im.channels);
    TrainTest t{streamed(tr.items, ha, tr.items[0], rows, cols, channels, int(classes.size()), o),
                streamed(te.items, hb, tr.items[0], rows, cols, channels, int(classes.size()), o)};
    t.train.class_names = t.test.class_names = classes;
    if (report) report->streamed = true;
    return t;
  }
  std::vector<Image> a = decode_all(tr.items, o), b = decode_all(te.items, o);
  int channels = 1;
  for (const auto* v : {&a, &b})
    for (const Image& im : *v) channels = std::max(channels, im.channels);
  TrainTest t{pack(tr.items, std::move(a), channels, int(classes.size())),
              pack(te.items, std::move(b), channels, int(classes.size()))};
  if (t.test.rows != t.train.rows || t.test.cols != t.train.cols)
    throw Error("--data " + quote_path(te.items[0].path) + ": test images are " + std::to_string(t.test.cols) + "x" +
                std::to_string(t.test.rows) + ", train's " + std::to_string(t.train.cols) + "x" +
                std::to_string(t.train.rows) + " (pass --image-size to resize all)");
  t.train.class_names = t.test.class_names = classes;
  return t;
}

}  // namespace ember
