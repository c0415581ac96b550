// The arena: one 64-byte-aligned block holding every buffer of a plan. Buffers are placed
// first (reserve returns an offset), the block is allocated once, then offsets become pointers.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace ember {

class Arena {
 public:
  static constexpr size_t kAlign = 64;
  // Places `bytes` bytes and returns their offset.
  size_t reserve(size_t bytes) {
    const size_t off = size_;
    size_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return off;
  }
  // Allocates the block (zero-filled). Call once, after every reserve.
  void allocate() {
    void* p = std::aligned_alloc(kAlign, size_ ? size_ : kAlign);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, size_ ? size_ : kAlign);
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
