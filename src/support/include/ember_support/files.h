// ember_support/files.h (not installed; src/fs, in libember): hostile-path-safe access to every file
// ember reads or writes: inputs must be regular files (opened without blocking, size-capped before
// reading), outputs are checked before any work and replaced atomically, never a device node.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// A path for a one-line message: single-quoted, with control characters escaped (\n, \xNN).
std::string quote_path(const std::string& path);
// The message with every control character escaped, so it prints on one line.
std::string one_line(const std::string& message);
// User text quoted in a message: one_line, cut to about max_chars with "... (N bytes)" after it
// when longer, so a 2 MB argument does not become a 2 MB error.
std::string clip_text(const std::string& text, size_t max_chars = 60);

// Opens an input that must be a regular file (a symlink to one is followed): O_NONBLOCK while
// opening, so a FIFO is refused at once instead of waiting for a writer. Returns the fd
// (O_CLOEXEC) and its size; throws Error "WHAT 'path': ..." naming a directory, device, FIFO,
// socket, symlink loop or the errno.
int open_input(const std::string& path, const std::string& what, uint64_t* size);
// The whole content of a regular file of at most max_bytes (checked before allocating).
std::string read_input(const std::string& path, uint64_t max_bytes, const std::string& what);
// The lines of a text file of at most max_bytes (read_input), trailing spaces, tabs and CRs cut,
// empty lines left out.
std::vector<std::string> read_lines(const std::string& path, uint64_t max_bytes, const std::string& what);
// The (device, inode) of an existing file, or {0, 0}; used to refuse an output that is an input.
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId&) const = default;
};
FileId file_id(const std::string& path);

// Refuses two outputs that are the same file (by canonical path, or device and inode), and an
// output that is one of the inputs: "FLAG 'p' ...". Paths that do not exist yet compare by name.
// An input that is a `tree` (a data set folder) is walked `tree` levels deep (symlinks followed,
// each directory once, at most 2^24 entries): an output that is any file in it (by device and
// inode: its own name, a hard link or a symlink) is refused, and with `keep_out` so is an output,
// or a directory to be made, inside it (its nearest existing directory, `..` resolved, is one of
// the tree's). An output that is a `dir` (a run or checkpoint directory) may be another one too.
struct NamedPath {
  std::string flag, path;
  int tree = 0;          // > 0: a folder, walked this many levels deep
  bool keep_out = true;  // with tree: no output inside the folder either (image folders)
  bool dir = false;      // an output directory: files are written inside it
};
void check_distinct(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Checks an output path before any work is done, and says where a write will go:
// - absent: its directory must exist and be writable, and its name at most 255 bytes;
// - a regular file: replaced (same checks on the directory);
// - a symlink to a regular file: the target is replaced and the link stays (the target returned);
// - anything else (directory, device node such as /dev/null or /dev/full, FIFO, socket, a dangling
//   symlink or a loop): refused.
// Throws Error "WHAT 'path': ..." on refusal. Returns the path to write.
std::string check_output(const std::string& path, const std::string& what);

// Writes the concatenation of `parts` to `path` atomically: check_output, a short temporary
// file in the target's directory (".ember-XXXXXX"), written, fsynced, closed, renamed over the
// target, then the directory fsynced. The replaced file's mode is kept. On any failure the
// temporary file is removed, the target is untouched (its old content survives), and the Error
// names the path, the step that failed and the reason ("no space left on device", ...).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

// An exclusive lock on a directory (flock on DIR/.ember.lock, which holds the owner's pid),
// held until destroyed. A second holder is refused with one line naming the directory and the
// other process id. The directory is created when missing.
class DirLock {
 public:
  DirLock() = default;
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace ember
