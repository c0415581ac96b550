// Byte sources for the readers: a regular file read with pread, or bytes in memory (fuzzing).
// Both check every range against their size and throw Error naming the file and the field.
#pragma once
#include <cstdint>
#include <string>

#include "ember/io.h"

namespace ember::io {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly n bytes at offset off; `field` names what is being read in errors.
  virtual void read(void* dst, size_t n, uint64_t off, const std::string& field) const = 0;
  const std::string& name() const { return name_; }

 protected:
  std::string name_;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path);  // opens it; a regular file only
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  uint64_t size() const override { return size_; }
  void read(void* dst, size_t n, uint64_t off, const std::string& field) const override;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const uint8_t* bytes, size_t n, const std::string& name);
  uint64_t size() const override { return n_; }
  void read(void* dst, size_t n, uint64_t off, const std::string& field) const override;

 private:
  const uint8_t* bytes_;
  size_t n_;
};

// Reads the length field and the header from `src` and parses it (parse_safetensors_header).
SafetensorsHeader read_safetensors_header(const ByteSource& src);

// Checks that every parameter of `plan` is in `h` with its shape and a float dtype, that every
// other tensor's name starts with `ignored_prefix` (empty: none may), then copies them into the
// plan's parameter block, converting to f32.
void load_params(Plan& plan, const ByteSource& src, const SafetensorsHeader& h,
                 const std::string& ignored_prefix);

// Throws Error "WHAT: K of N values are NaN or Inf (the first at index I)" when any is.
void check_finite(const float* v, size_t n, const std::string& what);

// Copies tensor `e` (F32, F64, F16, BF16 or I64) into dst as count f32 values.
void read_tensor_f32(const ByteSource& src, const SafetensorsHeader& h, const SafetensorsEntry& e,
                     float* dst, size_t count);

// The bytes of a safetensors file: the 8-byte length, the header JSON (padded with spaces to a
// multiple of 8) for `tensors` laid out back to back in order, and the metadata.
struct TensorOut {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
  size_t count;
  bool bf16 = false;  // written as BF16 (rounded to nearest even, kernels/bf16.h), else F32
  bool i64 = false;   // written as I64 (each value rounded to an integer): a count, whatever bf16 says
  // Raw little-endian elements of another dtype ("I8", "U8", "I32": quantized weights), written as
  // they are (count of raw_size bytes each) in place of data.
  const void* raw = nullptr;
  const char* raw_dtype = nullptr;
  int raw_size = 0;
};
// Whether a parameter is a count that safetensors holds as I64 (torchvision's dtype): BatchNorm's
// num_batches_tracked, a running statistic of shape [].
bool param_is_count(const ParamInfo& p);
std::string safetensors_header_bytes(const std::vector<TensorOut>& tensors,
                                     const std::map<std::string, std::string>& metadata);
// Writes header and tensor data with write_file_atomic.
void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

// The weights of `plan` as TensorOut entries, and save_weights' metadata.
std::vector<TensorOut> weight_tensors(Plan& plan);
std::map<std::string, std::string> weight_metadata(const Plan& plan);

}  // namespace ember::io
