// Hostile-path-safe file access (see ember_support/files.h): regular-file inputs opened without
// blocking and size-capped, output paths checked before any work, atomic replacement through a
// short temporary name, and the checkpoint directory's lock.
#include "ember_support/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ember/error.h"

namespace ember {

std::string one_line(const std::string& message) {
  std::string s;
  s.reserve(message.size());
  for (unsigned char c : message) {
    if (c == '\n') s += "\\n";
    else if (c == '\r') s += "\\r";
    else if (c == '\t') s += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    } else s += char(c);
  }
  return s;
}

std::string quote_path(const std::string& path) { return "'" + one_line(path) + "'"; }

std::string clip_text(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return one_line(text);
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return one_line(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

namespace {

std::string reason(int err) {
  if (err == ENOSPC) return "no space left on device (disk full)";
  if (err == EFBIG) return "file too large (disk quota or file size limit reached)";
  if (err == EDQUOT) return "disk quota exceeded";
  if (err == ELOOP) return "too many levels of symbolic links (a symlink loop)";
  return std::strerror(err);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symlink";
  return "not a regular file";
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

[[noreturn]] void refuse(const std::string& what, const std::string& path, const std::string& why) {
  throw Error(what + " " + quote_path(path) + ": " + why);
}

// The target of a symlink chain, absolute (realpath), or a refusal naming the problem.
std::string link_target(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) refuse(what, path, "is a symlink to nothing (dangling): refusing to write through it");
    refuse(what, path, reason(err));
  }
  if (!S_ISREG(st.st_mode))
    refuse(what, path, std::string("is a symlink to ") + kind_of(st.st_mode) +
                           ", not to a regular file: refusing to replace it");
  char* real = ::realpath(path.c_str(), nullptr);
  if (!real) refuse(what, path, "cannot resolve the symlink: " + reason(errno));
  std::string out(real);
  std::free(real);
  return out;
}

void check_dir_writable(const std::string& path, const std::string& what) {
  const std::string dir = dir_of(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    refuse(what, path, "its directory " + quote_path(dir) + " cannot be used: " + reason(errno));
  if (!S_ISDIR(st.st_mode)) refuse(what, path, "its parent " + quote_path(dir) + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    refuse(what, path, "its directory " + quote_path(dir) + " is not writable: " + reason(errno));
}

}  // namespace

int open_input(const std::string& path, const std::string& what, uint64_t* size) {
  if (path.empty()) throw Error(what + ": an empty path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) refuse(what, path, "cannot open: " + reason(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    refuse(what, path, "cannot stat: " + reason(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(what, path, std::string("expected a regular file, found ") + kind_of(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size) *size = uint64_t(st.st_size);
  return fd;
}

std::string read_input(const std::string& path, uint64_t max_bytes, const std::string& what) {
  uint64_t size = 0;
  const int fd = open_input(path, what, &size);
  if (size > max_bytes) {
    ::close(fd);
    refuse(what, path, "is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                           "-byte limit");
  }
  std::string text(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t r = ::read(fd, text.data() + done, size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      refuse(what, path, "read failed: " + reason(err));
    }
    if (r == 0) break;  // shrank while read: take what is there
    done += size_t(r);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

std::vector<std::string> read_lines(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const std::string text = read_input(path, max_bytes, what);
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t j = std::min(text.find('\n', i), text.size());
    std::string l = text.substr(i, j - i);
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.pop_back();
    if (!l.empty()) out.push_back(std::move(l));
    i = j + 1;
  }
  return out;
}

FileId file_id(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return {uint64_t(st.st_dev), uint64_t(st.st_ino)};
}

namespace {
std::string canonical_key(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : p.string();
}
}  // namespace

namespace {
FileId id_of(const struct stat& st) { return {uint64_t(st.st_dev), uint64_t(st.st_ino)}; }

// The id of the nearest existing directory above `path` (symlinks and `..` resolved), or {0, 0}.
FileId existing_parent(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path full = std::filesystem::weakly_canonical(path, ec);
  std::filesystem::path p = (ec ? std::filesystem::path(path) : full).parent_path();
  for (;;) {
    struct stat st;
    if (::stat(p.empty() ? "." : p.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? id_of(st) : FileId{};
    if (p.empty() || p == p.root_path()) return {};
    p = p.parent_path();
  }
}

// A walk of a data set folder for the outputs: per output, its own id (when it exists) and the
// id of its nearest existing directory; `hit` gets the tree's path each one meets.
struct TreeSearch {
  static constexpr size_t kMaxEntries = size_t(1) << 24;
  const NamedPath& tree;
  std::vector<FileId> own, above;
  std::vector<std::string> hit;
  std::vector<bool> hit_dir;
  std::set<std::pair<uint64_t, uint64_t>> seen;  // directories walked (a symlink loop is walked once)
  size_t entries = 0;

  // A file the output is beats a folder it lies in: the message names the file it would replace.
  void match(const std::string& p, FileId id, bool dir) {
    for (size_t k = 0; k < own.size(); ++k) {
      const bool is = own[k].ino && own[k] == id, in = dir && tree.keep_out && above[k].ino && above[k] == id;
      if ((is && (hit[k].empty() || hit_dir[k])) || (in && hit[k].empty())) hit[k] = p, hit_dir[k] = dir;
    }
  }
  void walk(const std::string& dir, const struct stat& st, int depth) {
    const std::pair<uint64_t, uint64_t> key{uint64_t(st.st_dev), uint64_t(st.st_ino)};
    if (!seen.insert(key).second) return;
    match(dir, id_of(st), true);
    DIR* d = depth < tree.tree ? ::opendir(dir.c_str()) : nullptr;
    if (!d) return;  // unreadable: the loader names it
    std::vector<std::string> subdirs;
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (++entries > kMaxEntries) {
        ::closedir(d);
        throw Error(tree.flag + " " + quote_path(tree.path) + ": more than " + std::to_string(kMaxEntries) +
                    " entries below it: too many to check the outputs against");
      }
      struct stat es;
      if (::fstatat(::dirfd(d), e->d_name, &es, 0) != 0) continue;  // a dangling link: nothing to overwrite
      if (S_ISDIR(es.st_mode)) subdirs.push_back(dir + "/" + n);
      else match(dir + "/" + n, id_of(es), false);
    }
    ::closedir(d);
    for (const std::string& sd : subdirs) {
      struct stat ss;
      if (::stat(sd.c_str(), &ss) == 0 && S_ISDIR(ss.st_mode)) walk(sd, ss, depth + 1);
    }
  }
};

void check_outside_tree(const std::vector<NamedPath>& outputs, const NamedPath& tree) {
  if (std::all_of(outputs.begin(), outputs.end(), [](const NamedPath& o) { return o.path.empty(); })) return;
  struct stat root;
  if (::stat(tree.path.c_str(), &root) != 0) return;  // the loader names a missing data set
  TreeSearch t{tree, {}, {}, {}, {}, {}, 0};
  for (const NamedPath& o : outputs) {
    t.own.push_back(o.path.empty() ? FileId{} : file_id(o.path));
    t.above.push_back(o.path.empty() ? FileId{} : existing_parent(o.path));
  }
  t.hit.assign(outputs.size(), std::string()), t.hit_dir.assign(outputs.size(), false);
  if (S_ISDIR(root.st_mode)) t.walk(tree.path, root, 0);
  else t.match(tree.path, id_of(root), false);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (t.hit[k].empty()) continue;
    const std::string head = outputs[k].flag + " " + quote_path(outputs[k].path) + ": ";
    const std::string data = " (" + tree.flag + " " + quote_path(tree.path) + ")";
    if (t.hit_dir[k])
      throw Error(head + "lies inside the data set folder " + quote_path(t.hit[k]) + data +
                  ": outputs are never written into a data set");
    throw Error(head + "is an input of this run, the data set's file " + quote_path(t.hit[k]) + data +
                " (the same file by name or through a link): refusing to overwrite it");
  }
}
}  // namespace

void check_distinct(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  auto same = [](const NamedPath& a, const NamedPath& b) {
    const FileId ia = file_id(a.path), ib = file_id(b.path);
    return (ia.ino != 0 && ia == ib) || canonical_key(a.path) == canonical_key(b.path);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && !(outputs[i].dir && outputs[j].dir) && same(outputs[i], outputs[j]))
        throw Error(outputs[i].flag + " " + quote_path(outputs[i].path) + ": is also the output of " + outputs[j].flag +
                    " " + quote_path(outputs[j].path) + ": one would overwrite the other");
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && in.tree == 0 && same(outputs[i], in))
        throw Error(outputs[i].flag + " " + quote_path(outputs[i].path) + ": is an input of this run (" + in.flag + " " +
                    quote_path(in.path) + "): refusing to overwrite it");
  }
  for (const NamedPath& in : inputs)
    if (in.tree > 0 && !in.path.empty()) check_outside_tree(outputs, in);
}

std::string check_output(const std::string& path, const std::string& what) {
  if (path.empty()) throw Error(what + ": an empty path");
  if (path.size() >= PATH_MAX) refuse(what, path, "the path is longer than " + std::to_string(PATH_MAX - 1) + " bytes");
  const std::string base = base_of(path);
  if (base.empty() || base == "." || base == "..") refuse(what, path, "names a directory, not a file");
  if (base.size() > NAME_MAX)
    refuse(what, path, "the file name is " + std::to_string(base.size()) + " bytes, more than the " +
                           std::to_string(NAME_MAX) + " a name may have");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) refuse(what, path, reason(err));
    check_dir_writable(path, what);
    return path;
  }
  if (S_ISLNK(st.st_mode)) {
    const std::string target = link_target(path, what);
    check_dir_writable(target, what);
    return target;
  }
  if (!S_ISREG(st.st_mode))
    refuse(what, path, std::string("is ") + kind_of(st.st_mode) + ", not a regular file: refusing to replace it");
  check_dir_writable(path, what);
  return path;
}

void write_file_atomic(const std::string& path_in, const std::vector<std::string_view>& parts) {
  const std::string path = check_output(path_in, "output");
  struct stat old;
  const bool existed = ::stat(path.c_str(), &old) == 0;
  std::string tmp = dir_of(path) + "/.ember-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw Error(quote_path(path) + ": cannot create a temporary file in its directory: " + reason(errno));
  auto fail = [&](const std::string& step, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(quote_path(path) + ": " + step + " failed: " + reason(err) + "; " + quote_path(path) + " was left as it was");
  };
  mode_t mode = 0644;
  if (existed) {
    mode = old.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(022);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd, mode) != 0) fail("chmod", errno);
  for (std::string_view part : parts) {
    const char* p = part.data();
    size_t n = part.size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("write", w < 0 ? errno : ENOSPC);
      p += w;
      n -= size_t(w);
    }
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(quote_path(path) + ": close failed: " + reason(err) + "; " + quote_path(path) + " was left as it was");
  }
  // The path may have changed since the check (another process): never rename over a non-file.
  struct stat now;
  if (::lstat(path.c_str(), &now) == 0 && !S_ISREG(now.st_mode)) {
    ::unlink(tmp.c_str());
    refuse("output", path, std::string("became ") + kind_of(now.st_mode) + " while it was written: left as it is");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(quote_path(path) + ": rename from " + quote_path(tmp) + " failed: " + reason(err));
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // makes the rename itself durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

DirLock::DirLock(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) refuse(what, dir, "cannot create the directory: " + ec.message());
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) refuse(what, dir, reason(errno));
  if (!S_ISDIR(st.st_mode)) refuse(what, dir, std::string("is ") + kind_of(st.st_mode) + ", not a directory");
  const std::string lock = dir + "/.ember.lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0) refuse(what, dir, "cannot open its lock file .ember.lock: " + reason(errno));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd_);
    fd_ = -1;
    refuse(what, dir, "its lock file .ember.lock is not a regular file of its own (a device, FIFO or hard link)");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string pid = n > 0 ? std::string(buf, size_t(n)) : std::string("unknown");
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (err == EWOULDBLOCK)
      refuse(what, dir, "in use by another ember run (process id " + one_line(pid) +
                            "); wait for it to end or use another directory");
    refuse(what, dir, "cannot lock: " + reason(err));
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, me.data(), me.size(), 0);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace ember
