// safetensors weights: writer (atomic: temporary file in the same directory, fsync, rename,
// fsync of the directory) and a reader that checks every header field against the file and the
// plan before copying a byte. Tensors are F32, little-endian, in PyTorch's layouts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "ember/error.h"
#include "ember/io.h"
#include "ember/version.h"

namespace ember {

using json = nlohmann::json;

namespace {
std::string errno_str() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(path + ": write failed: " + errno_str());
    p += w;
    n -= size_t(w);
  }
}
}  // namespace

void save_weights(Plan& plan, const std::string& path) {
  if (plan.dtype() != DType::f32) throw Error(path + ": only f32 plans can be saved");
  json header;
  size_t offset = 0;
  for (const ParamInfo& p : plan.params()) {
    header[p.name] = {{"dtype", "F32"}, {"shape", p.shape}, {"data_offsets", {offset, offset + p.size * 4}}};
    offset += p.size * 4;
  }
  header["__metadata__"] = {{"format", "pt"}, {"ember_version", kVersion},
                            {"model", model_to_json(plan.model())}};
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint64_t(h.size()) >> (8 * i)) & 0xff;

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create temporary file " + tmp + ": " + errno_str());
  try {
    write_all(fd, len, 8, path);
    write_all(fd, h.data(), h.size(), path);
    write_all(fd, plan.param_data(), plan.param_count() * 4, path);
    if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + errno_str());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": close failed: " + errno_str());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = errno_str();
    ::unlink(tmp.c_str());
    throw Error(path + ": rename from " + tmp + " failed: " + e);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void load_weights(Plan& plan, const std::string& path) {
  if (plan.dtype() != DType::f32) throw Error(path + ": only f32 plans can load weights");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open weights: " + errno_str());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  auto read_at = [&](void* dst, size_t n, uint64_t off, const char* field) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, off_t(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw Error(path + ": " + field + ": read failed (" + (r == 0 ? "unexpected end of file" : errno_str()) + ")");
      p += r, n -= size_t(r), off += uint64_t(r);
    }
  };
  if (size < 8) throw Error(path + ": header length: file is " + std::to_string(size) + " bytes, expected at least 8");
  unsigned char len[8];
  read_at(len, 8, 0, "header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(len[i]) << (8 * i);
  if (hlen > size - 8 || hlen > (uint64_t(100) << 20))
    throw Error(path + ": header length: " + std::to_string(hlen) + " exceeds the file's " +
                std::to_string(size - 8) + " bytes after the length field (or 100 MiB)");
  std::string h(hlen, '\0');
  read_at(h.data(), hlen, 8, "header");
  json header;
  try {
    header = json::parse(h);
  } catch (const json::parse_error& e) {
    throw Error(path + ": header: invalid JSON: " + e.what());
  }
  if (!header.is_object()) throw Error(path + ": header: expected a JSON object");
  const uint64_t data_start = 8 + hlen, data_size = size - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  size_t tensors = 0;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") ++tensors;
  if (tensors != plan.params().size())
    throw Error(path + ": tensors: file has " + std::to_string(tensors) + ", model " +
                plan.model().name + " has " + std::to_string(plan.params().size()));
  float* dst = static_cast<float*>(plan.param_data());
  for (const ParamInfo& p : plan.params()) {
    const std::string f = path + ": " + p.name;
    if (!header.contains(p.name)) throw Error(f + ": missing from the file");
    const json& t = header[p.name];
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      throw Error(f + ": expected an object with dtype, shape and data_offsets");
    if (t["dtype"] != "F32") throw Error(f + ".dtype: expected \"F32\", found " + t["dtype"].dump());
    if (t["shape"] != json(p.shape))
      throw Error(f + ".shape: expected " + json(p.shape).dump() + ", found " + t["shape"].dump());
    const json& o = t["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw Error(f + ".data_offsets: expected [begin, end], found " + o.dump());
    const uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
    if (b > e || e > data_size || e - b != p.size * 4)
      throw Error(f + ".data_offsets: [" + std::to_string(b) + ", " + std::to_string(e) +
                  "] must span " + std::to_string(p.size * 4) + " bytes inside the " +
                  std::to_string(data_size) + " data bytes");
    ranges.push_back({b, e});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw Error(path + ": data_offsets: tensors overlap");
  for (const ParamInfo& p : plan.params()) {
    const uint64_t b = header[p.name]["data_offsets"][0].get<uint64_t>();
    read_at(dst + p.offset, p.size * 4, data_start + b, "tensor data");
  }
}

}  // namespace ember
