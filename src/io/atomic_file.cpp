// Atomic file replacement (temporary file in the same directory, write, fsync, close, rename,
// fsync of the directory) and the byte sources the readers use (pread on a regular file, or
// memory). Errors name the file and the step; a full disk says so.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ember/error.h"
#include "io/source.h"

namespace ember {

namespace {
std::string reason(int err) {
  if (err == ENOSPC) return "no space left on device (disk full)";
  if (err == EFBIG) return "file too large (disk quota or file size limit reached)";
  if (err == EDQUOT) return "disk quota exceeded";
  return std::strerror(err);
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp = dir_of(path) + "/." + base + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create the temporary file " + tmp + ": " + reason(errno));
  auto fail = [&](const std::string& step, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(path + ": " + step + " failed: " + reason(err) + "; " + path + " was left as it was");
  };
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
    throw Error(path + ": close failed: " + reason(err) + "; " + path + " was left as it was");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path + ": rename from " + tmp + " failed: " + reason(err));
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // makes the rename itself durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace io {

FileSource::FileSource(const std::string& path) {
  name_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(path + ": not a regular file");
  }
  size_ = uint64_t(st.st_size);
}

FileSource::~FileSource() { ::close(fd_); }

void FileSource::read(void* dst, size_t n, uint64_t off, const std::string& field) const {
  if (off > size_ || n > size_ - off)
    throw Error(name_ + ": " + field + ": bytes [" + std::to_string(off) + ", " +
                std::to_string(off + n) + ") lie beyond the file's " + std::to_string(size_));
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw Error(name_ + ": " + field + ": read failed (" +
                  (r == 0 ? std::string("unexpected end of file") : std::strerror(errno)) + ")");
    p += r, n -= size_t(r), off += uint64_t(r);
  }
}

MemorySource::MemorySource(const uint8_t* bytes, size_t n, const std::string& name)
    : bytes_(bytes), n_(n) {
  name_ = name;
}

void MemorySource::read(void* dst, size_t n, uint64_t off, const std::string& field) const {
  if (off > n_ || n > n_ - off)
    throw Error(name_ + ": " + field + ": bytes [" + std::to_string(off) + ", " +
                std::to_string(off + n) + ") lie beyond the data's " + std::to_string(n_));
  if (n) std::memcpy(dst, bytes_ + off, n);
}

}  // namespace io
}  // namespace ember
