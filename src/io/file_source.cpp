// The byte sources the readers use: pread on a regular file (opened with open_input, so a FIFO
// or device is refused at once), or memory. Errors name the file and the field. (Atomic writes
// live in src/fs/files.cpp.)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ember/error.h"
#include "ember_support/files.h"
#include "io/source.h"

namespace ember {

namespace io {

FileSource::FileSource(const std::string& path) {
  name_ = path;
  fd_ = open_input(path, "file", &size_);
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
