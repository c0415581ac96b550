// NumPy .npy arrays of little-endian float32 or float64 (descr '<f4' or '<f8', C order, format
// versions 1.0, 2.0 and 3.0): the dense targets of the MSE and L1 losses (Targets in ember/train.h;
// `ember train --targets`). Hostile input is refused with one line naming the file and the field,
// never a crash or an allocation larger than the file's own data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

// An array as the file holds it: one of f32 and f64 holds the product of `shape` values, in order.
struct NpyArray {
  std::vector<int64_t> shape;  // 1 to 8 dims, each >= 1
  bool is_f64 = false;
  std::vector<float> f32;
  std::vector<double> f64;
  size_t size() const { return is_f64 ? f64.size() : f32.size(); }
  double at(size_t i) const { return is_f64 ? f64[i] : double(f32[i]); }
};

// The header is checked strictly: the magic "\x93NUMPY", version 1.0, 2.0 or 3.0, a header of at
// most 64 KiB that is a Python dict literal with exactly the keys 'descr' ('<f4' or '<f8'),
// 'fortran_order' (False) and 'shape' (a tuple of 1 to 8 integers >= 1, product at most 2^32
// elements and 4 GiB), and the file's size must be the header's plus the data's exactly.
// Only a regular file is read (opened without blocking: a FIFO, device or directory is refused
// at once).
// Throws Error "PATH: FIELD: what is wrong".
NpyArray read_npy(const std::string& path);
// The same from memory (size bytes at data); `name` stands for the path in messages.
NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& name);

}  // namespace ember
