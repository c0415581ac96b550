// The arena: one 64-byte-aligned block holding every buffer of a plan. Buffers are placed
// first (reserve returns an offset), the block is allocated once, then offsets become pointers.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ember {

class Arena {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kHuge = size_t(2) << 20;
  // Places `bytes` bytes and returns their offset.
  size_t reserve(size_t bytes) {
    const size_t off = size_;
    size_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return off;
  }
  // Allocates the block (zero-filled). Call once, after every reserve. A block of 2 MB or more
  // is placed on 2 MB boundaries and asked for transparent huge pages (Linux, where THP is
  // "madvise" or "always"): the sparse Linear reads 128 weight rows 25 KB apart per column block,
  // which on 4 KB pages is a TLB miss per row.
  void allocate() {
    const size_t want = size_ ? size_ : kAlign;
    const size_t align = want >= kHuge ? kHuge : kAlign;
    const size_t bytes = (want + align - 1) / align * align;
    void* p = std::aligned_alloc(align, bytes);
    if (!p) throw std::bad_alloc();
#if defined(__linux__)
    if (align == kHuge) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: its failure changes nothing
#endif
    std::memset(p, 0, bytes);
    data_.reset(static_cast<std::byte*>(p));
  }
  size_t size() const { return size_; }
  std::byte* base() const { return data_.get(); }
  template <class T>
  T* at(size_t offset) const { return reinterpret_cast<T*>(data_.get() + offset); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  size_t size_ = 0;
  std::unique_ptr<std::byte, Free> data_;
};

}  // namespace ember
