// The safetensors format: a header parser that checks every field against the file before
// anything is allocated or copied, the writer (atomic), and weights in PyTorch's names and
// layouts, loaded with conversion from F64, F16 and BF16.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "fs/json_read.h"
#include "ember/model.h"
#include "ember/version.h"
#include "ember_support/files.h"
#include "io/source.h"
#include "kernels/bf16.h"
#include "kernels/half.h"

namespace ember {

using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // 100 MiB, as the safetensors library
constexpr size_t kMaxRank = 16;

int dtype_size(const std::string& d) {
  static constexpr std::pair<const char*, int> kTypes[] = {
      {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
  for (const auto& [name, size] : kTypes)
    if (d == name) return size;
  return 0;
}

// Names go into one-line error messages: a name with a control character (a newline, say) is
// refused, and shown JSON-escaped.
// A name longer than kMaxName is refused too, so every message naming it stays short.
constexpr size_t kMaxName = 1024;
void check_name(const std::string& file, const char* what, const std::string& name) {
  if (name.size() > kMaxName)
    throw Error(file + ": " + what + " " + json_brief(json(name)) + ": " + std::to_string(name.size()) +
                " bytes, more than the " + std::to_string(kMaxName) + " a name may have");
  for (unsigned char ch : name)
    if (ch < 0x20 || ch == 0x7f)
      throw Error(file + ": " + what + " " + json_brief(json(name)) + ": contains a control character");
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {
// The header length from a file's first 8 bytes (n of them given), checked against its size.
uint64_t header_length(const uint8_t* bytes, size_t n, uint64_t file_size, const std::string& file) {
  if (file_size < 8 || n < 8)
    throw Error(file + ": header length: the file is " + std::to_string(file_size) +
                " bytes, a safetensors file has at least 8");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(bytes[i]) << (8 * i);
  if (hlen > file_size - 8 || hlen > kMaxHeader)  // e.g. '{"input"' of a JSON file read as a number
    throw Error(file + ": not a safetensors file (or one cut short): its first 8 bytes, read as the header " +
                "length, say " + std::to_string(hlen) + " bytes, which exceeds the " + std::to_string(file_size - 8) +
                " bytes after them (or 100 MiB)");
  return hlen;
}
}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n, uint64_t file_size,
                                           const std::string& file) {
  const uint64_t hlen = header_length(bytes, n, file_size, file);
  if (hlen > n - 8) throw Error(file + ": header: only " + std::to_string(n - 8) + " of its " + std::to_string(hlen) + " bytes given");
  const json header = parse_json(std::string_view(reinterpret_cast<const char*>(bytes) + 8, hlen), file + ": header");
  if (!header.is_object()) throw Error(file + ": header: expected a JSON object, found " + std::string(header.type_name()));
  SafetensorsHeader h;
  h.data_offset = 8 + hlen;
  const uint64_t data_size = file_size - h.data_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) throw Error(file + ": __metadata__: expected an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        check_name(file, "__metadata__ key", m.key());
        if (!m.value().is_string())
          throw Error(file + ": __metadata__." + m.key() + ": expected a string, found " + m.value().type_name());
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw Error(file + ": a tensor has an empty name");
    check_name(file, "tensor name", key);
    const std::string f = file + ": tensor '" + key + "'";
    if (!v.is_object() || v.size() != 3 || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw Error(f + ": expected an object with exactly dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = key;
    if (!v["dtype"].is_string() || dtype_size(v["dtype"].get<std::string>()) == 0)
      throw Error(f + ".dtype: expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E5M2 F8_E4M3, found " + json_brief(v["dtype"]));
    e.dtype = v["dtype"].get<std::string>();
    const json& shape = v["shape"];
    if (!shape.is_array() || shape.size() > kMaxRank)
      throw Error(f + ".shape: expected an array of at most " + std::to_string(kMaxRank) + " sizes");
    uint64_t count = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 53))
        throw Error(f + ".shape: expected sizes that are integers >= 0, found " + json_brief(shape));
      if (__builtin_mul_overflow(count, d.get<uint64_t>(), &count))
        throw Error(f + ".shape: " + json_brief(shape) + " has more elements than 2^64");
      e.shape.push_back(int64_t(d.get<uint64_t>()));
    }
    uint64_t bytes_needed;
    if (__builtin_mul_overflow(count, uint64_t(dtype_size(e.dtype)), &bytes_needed))
      throw Error(f + ".shape: " + json_brief(shape) + " needs more than 2^64 bytes");
    const json& o = v["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw Error(f + ".data_offsets: expected [begin, end], found " + json_brief(o));
    e.begin = o[0].get<uint64_t>();
    e.end = o[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      throw Error(f + ".data_offsets: [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] is not a range inside the " + std::to_string(data_size) + " data bytes");
    if (e.end - e.begin != bytes_needed)
      throw Error(f + ".data_offsets: [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] spans " + std::to_string(e.end - e.begin) + " bytes, shape " + json_brief(shape) +
                  " of " + e.dtype + " needs " + std::to_string(bytes_needed));
    h.tensors.push_back(std::move(e));
  }
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : h.tensors) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  const SafetensorsEntry* last = nullptr;  // the non-empty range that reaches furthest so far
  for (const SafetensorsEntry* e : sorted) {
    if (e->begin == e->end) continue;
    if (last && e->begin < last->end)
      throw Error(file + ": tensor '" + e->name + "'.data_offsets: overlaps tensor '" + last->name + "'");
    if (!last || e->end > last->end) last = e;
  }
  return h;
}

namespace io {

SafetensorsHeader read_safetensors_header(const ByteSource& src) {
  const uint64_t size = src.size();
  uint8_t len[8] = {};
  if (size >= 8) src.read(len, 8, 0, "header length");
  const uint64_t hlen = header_length(len, size >= 8 ? 8 : 0, size, src.name());  // before allocating
  std::vector<uint8_t> buf(8 + hlen);
  std::memcpy(buf.data(), len, 8);
  src.read(buf.data() + 8, hlen, 8, "header");
  return parse_safetensors_header(buf.data(), buf.size(), size, src.name());
}

void read_tensor_f32(const ByteSource& src, const SafetensorsHeader& h, const SafetensorsEntry& e,
                     float* dst, size_t count) {
  const uint64_t off = h.data_offset + e.begin;
  const std::string field = "tensor '" + e.name + "' data";
  if (e.dtype == "F32") {
    src.read(dst, count * 4, off, field);
    return;
  }
  const int size = dtype_size(e.dtype);
  std::vector<uint8_t> raw(count * size_t(size));
  src.read(raw.data(), raw.size(), off, field);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = raw.data() + i * size_t(size);
    if (e.dtype == "F64") {
      double d;
      std::memcpy(&d, p, 8);
      dst[i] = float(d);
    } else if (e.dtype == "I64") {
      int64_t v;
      std::memcpy(&v, p, 8);
      dst[i] = float(v);
    } else if (e.dtype == "BF16") {
      const uint32_t bits = uint32_t(p[0] | p[1] << 8) << 16;
      std::memcpy(dst + i, &bits, 4);
    } else {
      dst[i] = half_to_float(uint16_t(p[0] | p[1] << 8));
    }
  }
}

namespace {
// Every parameter of `model` is in `h` with its shape and a float dtype, and every other tensor's
// name starts with `ignored_prefix` (empty: none may); a quantized file (ember/quant.h) is refused
// as such. Reads the header only.
void check_params(const std::vector<ParamInfo>& params, const Model& m, const SafetensorsHeader& h,
                  const std::string& file, const std::string& ignored_prefix) {
  if (h.metadata.count("ember_quant"))  // its scales are no parameters of the model: say what it is
    throw Error(file + " is a quantized (int8) file (its metadata has ember_quant); training and fp32 plans need fp32 "
                "weights (the file `ember quantize` read)");
  const std::string model = m.source.empty() ? m.name : m.source;
  for (const SafetensorsEntry& e : h.tensors) {
    if (!ignored_prefix.empty() && e.name.rfind(ignored_prefix, 0) == 0) continue;
    bool known = false;
    for (const ParamInfo& p : params) known = known || p.name == e.name;
    if (!known) throw Error(file + ": tensor '" + e.name + "': model " + model + " has no such parameter");
  }
  for (const ParamInfo& p : params) {
    const SafetensorsEntry* e = h.find(p.name);
    const std::string f = file + ": tensor '" + p.name + "'";
    if (!e) throw Error(f + ": missing (model " + model + " needs it)");
    const bool count = param_is_count(p) && e->dtype == "I64";  // torchvision's num_batches_tracked
    if (e->dtype != "F32" && e->dtype != "F64" && e->dtype != "F16" && e->dtype != "BF16" && !count)
      throw Error(f + ".dtype: expected F32, F64, F16 or BF16" + (param_is_count(p) ? ", I64" : "") + ", found " + e->dtype);
    if (e->shape != std::vector<int64_t>(p.shape.begin(), p.shape.end()))
      throw Error(f + ".shape: expected " + json_text(json(p.shape)) + ", found " + json_text(json(e->shape)));
  }
}
}  // namespace

void load_params(Plan& plan, const ByteSource& src, const SafetensorsHeader& h,
                 const std::string& ignored_prefix) {
  if (plan.dtype() != DType::f32) throw Error(src.name() + ": only f32 plans load weights");
  check_params(plan.params(), plan.model(), h, src.name(), ignored_prefix);
  float* dst = static_cast<float*>(plan.param_data());
  for (const ParamInfo& p : plan.params()) {
    read_tensor_f32(src, h, *h.find(p.name), dst + p.offset, p.size);
    check_finite(dst + p.offset, p.size, src.name() + ": tensor '" + p.name + "'");
  }
}

void check_finite(const float* v, size_t n, const std::string& what) {
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) bad++, first = std::min(first, i);
  if (bad)
    throw Error(what + ": " + std::to_string(bad) + " of " + std::to_string(n) + " values are NaN or Inf (the first at index " +
                std::to_string(first) + ", " + std::to_string(v[first]) + "): refusing to use them");
}

std::string safetensors_header_bytes(const std::vector<TensorOut>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorOut& t : tensors) {
    const uint64_t bytes = t.count * (t.raw ? uint64_t(t.raw_size) : t.i64 ? 8 : t.bf16 ? 2 : 4);
    const char* dtype = t.raw ? t.raw_dtype : t.i64 ? "I64" : t.bf16 ? "BF16" : "F32";
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = metadata;
  std::string h = json_text(header);
  h.append((8 - h.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  return out + h;
}

void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header_bytes(tensors, metadata);
  std::vector<std::string_view> parts{header};
  std::vector<std::vector<uint16_t>> rounded;  // the BF16 tensors' bytes
  std::vector<std::vector<int64_t>> counts;    // the I64 tensors' values
  rounded.reserve(tensors.size());
  counts.reserve(tensors.size());
  for (const TensorOut& t : tensors) {
    if (t.raw) {
      parts.emplace_back(static_cast<const char*>(t.raw), t.count * size_t(t.raw_size));
      continue;
    }
    if (t.i64) {
      std::vector<int64_t>& c = counts.emplace_back(t.count);
      for (size_t i = 0; i < t.count; ++i) c[i] = std::llround(double(t.data[i]));
      parts.emplace_back(reinterpret_cast<const char*>(c.data()), t.count * 8);
      continue;
    }
    if (!t.bf16) {
      parts.emplace_back(reinterpret_cast<const char*>(t.data), t.count * 4);
      continue;
    }
    std::vector<uint16_t>& h = rounded.emplace_back(t.count);
    for (size_t i = 0; i < t.count; ++i) h[i] = f32_to_bf16(t.data[i]);  // little-endian host
    parts.emplace_back(reinterpret_cast<const char*>(h.data()), t.count * 2);
  }
  write_file_atomic(path, parts);
}

bool param_is_count(const ParamInfo& p) {
  static const std::string kName = "num_batches_tracked";
  return p.role == ParamRole::running_stat && p.shape.empty() && p.name.size() >= kName.size() &&
         p.name.compare(p.name.size() - kName.size(), kName.size(), kName) == 0;
}

std::vector<TensorOut> weight_tensors(Plan& plan) {
  if (plan.dtype() != DType::f32) throw Error("save: only f32 plans can be saved");
  const float* w = static_cast<const float*>(std::as_const(plan).param_data());
  std::vector<TensorOut> out;
  for (const ParamInfo& p : plan.params())
    out.push_back({p.name, std::vector<int64_t>(p.shape.begin(), p.shape.end()), w + p.offset, p.size, false, param_is_count(p)});
  return out;
}

std::map<std::string, std::string> weight_metadata(const Plan& plan) {
  return {{"format", "pt"}, {"ember_version", kVersion}, {"model", model_to_json(plan.model())}};
}

}  // namespace io

void save_weights(Plan& plan, const std::string& path, WeightDtype dtype) {
  std::vector<io::TensorOut> tensors = io::weight_tensors(plan);
  for (io::TensorOut& t : tensors) t.bf16 = dtype == WeightDtype::bf16;
  io::write_safetensors(path, tensors, io::weight_metadata(plan));
}

void load_weights(Plan& plan, const std::string& path) {
  const io::FileSource src(path);
  io::load_params(plan, src, io::read_safetensors_header(src), "optimizer.");
}

void check_weights_fit(const Model& model, const std::string& path) {
  const io::FileSource src(path);
  io::check_params(model_params(model), model, io::read_safetensors_header(src), path, "optimizer.");
}

std::map<std::string, std::string> read_weights_metadata(const std::string& path) {
  const io::FileSource src(path);
  return io::read_safetensors_header(src).metadata;
}

void load_weights_from_memory(Plan& plan, const uint8_t* bytes, size_t n, const std::string& name) {
  const io::MemorySource src(bytes, n, name);
  io::load_params(plan, src, io::read_safetensors_header(src), "optimizer.");
}

}  // namespace ember
