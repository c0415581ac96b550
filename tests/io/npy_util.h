// Shared by the .npy tests: writes .npy files as NumPy does (a dict header padded with spaces to
// a multiple of 64 bytes, ending in '\n'), and hand-made variants of them for hostile cases.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

// The prefix of format `major`.0, the header text as given (not padded), then the payload.
[[maybe_unused]] std::string npy_raw(const std::string& dict, const std::string& payload, int major = 1) {
  std::string b("\x93NUMPY", 6);
  b += char(major), b += char(0);
  const size_t n = dict.size();
  b += char(n & 0xff), b += char((n >> 8) & 0xff);
  if (major != 1) b += char((n >> 16) & 0xff), b += char((n >> 24) & 0xff);
  return b + dict + payload;
}

// As numpy.save writes it: {'descr': ..., 'fortran_order': False, 'shape': SHAPE, } padded.
[[maybe_unused]] std::string npy_file(const std::string& descr, const std::string& shape, const std::string& payload,
                                      int major = 1, const std::string& fortran = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  return npy_raw(dict + "\n", payload, major);
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// A float32 array [rows, cols] of one value per row given by f(row, col).
template <class F>
std::string npy_f32(int64_t rows, int cols, F f) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) v.push_back(float(f(r, c)));
  return npy_file("<f4", "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")", bytes_of(v));
}

[[maybe_unused]] void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace
