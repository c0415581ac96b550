// Listing image folders: train/<class>/**, test/ or val/, or TinyImageNet's wnids.txt and
// val/val_annotations.txt, in sorted order. Paths are hostile: symlinked folders below a class are
// not followed, nesting is capped, a FIFO, socket or device named as an image is refused (never
// opened), and an annotation file that lists one image twice is refused.
#include "data/image_scan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "ember/data.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace ember::detail {
namespace {

namespace fs = std::filesystem;
constexpr int kMaxDepth = 8;  // folder levels below a class folder

bool image_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device node";
  return "not a regular file";
}

// Names in dir, sorted, hidden ones (a leading '.') left out.
std::vector<std::string> entries(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw Error(what + " " + quote_path(dir) + ": " + ec.message());
  std::vector<std::string> out;
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(what + " " + quote_path(dir) + ": " + ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.') out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The image files below dir (depth levels down already), in sorted path order.
void walk(const std::string& dir, int depth, int label, const std::string& what, Split& out) {
  if (depth > kMaxDepth)
    throw Error(what + " " + quote_path(dir) + ": nested more than " + std::to_string(kMaxDepth) + " folders below its class");
  for (const std::string& name : entries(dir, what)) {
    const std::string p = dir + "/" + name;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) throw Error(what + " " + quote_path(p) + ": " + std::strerror(errno));
    const bool link = S_ISLNK(st.st_mode);
    if (S_ISDIR(st.st_mode)) walk(p, depth + 1, label, what, out);
    else if (!image_name(name) || (link && is_dir(p))) ++out.skipped;  // not an image name, or a symlinked folder
    else if (!link && !S_ISREG(st.st_mode))
      throw Error(what + " " + quote_path(p) + ": " + kind_of(st.st_mode) + " named as an image (only regular files are read)");
    else out.items.push_back({p, label});
  }
}

Split scan_classes(const std::string& root, const std::vector<std::string>& classes, bool train, const std::string& what) {
  Split s;
  std::map<std::string, int> index;
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = int(i);
  for (const std::string& name : entries(root, what)) {
    const std::string p = root + "/" + name;
    if (!is_dir(p)) {
      ++s.skipped;
      continue;
    }
    const auto it = index.find(name);
    if (it == index.end())
      throw Error(what + " " + quote_path(p) + ": class '" + one_line(name) + "' is not among train's classes");
    const size_t before = s.items.size();
    walk(p, 0, it->second, what, s);
    if (train && s.items.size() == before) throw Error(what + " " + quote_path(p) + ": no .png/.jpg/.jpeg images in this class folder");
  }
  return s;
}

std::vector<std::string> lines(const std::string& path, const std::string& what) { return read_lines(path, uint64_t{1} << 26, what); }

// TinyImageNet's validation set: val/images/<file>, labelled by val/val_annotations.txt. An image
// listed twice would be tested twice: refused, naming both lines.
Split tiny_val(const std::string& dir, const std::vector<std::string>& classes, const std::string& what) {
  std::map<std::string, int> index, seen;
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = int(i);
  const std::string ann = dir + "/val/val_annotations.txt";
  Split s;
  int n = 0;
  for (const std::string& l : lines(ann, what)) {
    ++n;
    const size_t t1 = l.find('\t'), t2 = t1 == std::string::npos ? t1 : l.find('\t', t1 + 1);
    const std::string file = l.substr(0, t1), wnid = t1 == std::string::npos ? "" : l.substr(t1 + 1, t2 - t1 - 1);
    const auto it = index.find(wnid);
    const std::string where = what + " " + quote_path(ann) + ": line " + std::to_string(n) + ": ";
    if (file.empty() || file.find('/') != std::string::npos || it == index.end())
      throw Error(where + "expected FILE<tab>WNID with a wnid of wnids.txt");
    if (const auto [at, fresh] = seen.emplace(file, n); !fresh)
      throw Error(where + "image '" + one_line(file) + "' is listed again (first on line " + std::to_string(at->second) + ")");
    s.items.push_back({dir + "/val/images/" + file, it->second});
  }
  std::sort(s.items.begin(), s.items.end(), [](const Item& a, const Item& b) { return a.path < b.path; });
  return s;
}

void keep_first(std::vector<Item>& v, int64_t limit, const char* field) {
  if (limit < 0) throw Error(std::string(field) + ": expected >= 0 (0: all images), found " + std::to_string(limit));
  if (limit > 0 && int64_t(v.size()) > limit) v.resize(size_t(limit));
}

std::vector<std::string> class_names(const std::string& dir, bool tiny, const std::string& what) {
  const std::string train_dir = dir + "/train";
  std::vector<std::string> classes;
  if (tiny) {
    classes = lines(dir + "/wnids.txt", what);
    std::sort(classes.begin(), classes.end());
    if (std::adjacent_find(classes.begin(), classes.end()) != classes.end())
      throw Error(what + " " + quote_path(dir + "/wnids.txt") + ": a wnid is listed twice");
  } else {
    for (const std::string& n : entries(train_dir, what))
      if (is_dir(train_dir + "/" + n)) classes.push_back(n);
  }
  if (classes.empty()) throw Error(what + " " + quote_path(train_dir) + ": no class folders");
  if (classes.size() > 256)
    throw Error(what + " " + quote_path(train_dir) + ": " + std::to_string(classes.size()) + " classes (at most 256)");
  return classes;
}

}  // namespace

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Listing list_image_folder(const std::string& dir, const FolderOptions& o) {
  const std::string& what = o.what;
  if (!is_dir(dir + "/train")) throw Error(what + " " + quote_path(dir) + ": no train/ folder");
  const bool tiny = ::access((dir + "/wnids.txt").c_str(), F_OK) == 0;
  Listing l;
  l.classes = class_names(dir, tiny, what);
  l.train = scan_classes(dir + "/train", l.classes, true, what);
  if (tiny) {
    l.test = tiny_val(dir, l.classes, what);
    if (l.test.items.empty()) throw Error(what + " " + quote_path(dir + "/val/val_annotations.txt") + ": no images listed");
  } else {
    const std::string test_dir = is_dir(dir + "/test") ? dir + "/test" : dir + "/val";
    if (!is_dir(test_dir)) throw Error(what + " " + quote_path(dir) + ": no test/ or val/ folder");
    l.test = scan_classes(test_dir, l.classes, false, what);
    if (l.test.items.empty()) throw Error(what + " " + quote_path(test_dir) + ": no .png/.jpg/.jpeg images");
  }
  l.train.total = int64_t(l.train.items.size()), l.test.total = int64_t(l.test.items.size());
  keep_first(l.train.items, o.limit_train, "limit_train");
  keep_first(l.test.items, o.limit_test, "limit_test");
  return l;
}

}  // namespace ember::detail

namespace ember {

bool is_image_folder(const std::string& dir, const std::string& what) {
  using detail::is_dir;
  if (is_dir(dir + "/train") && ::access((dir + "/wnids.txt").c_str(), F_OK) == 0) return true;
  if (!is_dir(dir + "/train")) return false;
  for (const std::string& n : detail::entries(dir + "/train", what))
    if (is_dir(dir + "/train/" + n)) return true;
  return false;
}

}  // namespace ember
