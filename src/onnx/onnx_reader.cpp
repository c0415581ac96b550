// The ONNX tensor and attribute readers (onnx_reader.h): every dim, data type and payload size is
// checked before values are copied, so a lying header cannot make ember allocate more than the
// file holds or read past it.
#include "onnx/onnx_reader.h"

#include <cstring>

#include "ember/error.h"
#include "kernels/half.h"

namespace ember::onnx {

namespace {

constexpr uint64_t kMaxElems = uint64_t(1) << 31;  // one tensor: at most 2^31 elements (8 GiB f32)


size_t elem_bytes(int type, const std::string& what) {
  switch (type) {
    case pb::TensorProto::FLOAT: case pb::TensorProto::INT32: return 4;
    case pb::TensorProto::DOUBLE: case pb::TensorProto::INT64: return 8;
    case pb::TensorProto::FLOAT16: return 2;
    case pb::TensorProto::INT8: case pb::TensorProto::UINT8: return 1;
    default: throw Error(what + ".data_type: " + std::to_string(type) + " is not supported (float, double, float16, int8, uint8, int32, int64)");
  }
}

}  // namespace

std::string shown(const std::string& s) { return nn::onnx_shown(s); }

Const read_tensor(const pb::TensorProto& t, const std::string& what) {
  if (t.data_location() == pb::TensorProto::EXTERNAL || t.external_data_size() > 0)
    throw Error(what + ": external data is not supported (save the model with its weights inside the file)");
  if (t.has_segment()) throw Error(what + ".segment: segmented tensors are not supported");
  const size_t esize = elem_bytes(t.data_type(), what);
  Const c;
  uint64_t n = 1;
  for (int k = 0; k < t.dims_size(); ++k) {
    const int64_t d = t.dims(k);
    if (d < 0 || uint64_t(d) > kMaxElems || (n *= uint64_t(d)) > kMaxElems)
      throw Error(what + ".dims[" + std::to_string(k) + "]: " + std::to_string(d) + " makes the tensor too large or negative");
    c.dims.push_back(d);
  }
  if (t.dims_size() > 8) throw Error(what + ".dims: rank " + std::to_string(t.dims_size()) + " is more than 8");
  const int type = t.data_type();
  c.is_int = type == pb::TensorProto::INT32 || type == pb::TensorProto::INT64 || type == pb::TensorProto::INT8 ||
             type == pb::TensorProto::UINT8;
  auto need = [&](uint64_t have, const char* field) {
    if (have != n) throw Error(what + "." + field + ": holds " + std::to_string(have) + " values, dims say " + std::to_string(n));
  };
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    need(raw.size() / esize, "raw_data");
    if (raw.size() % esize) throw Error(what + ".raw_data: " + std::to_string(raw.size()) + " bytes is not a whole number of values");
    c.f.resize(n);
    if (c.is_int) c.i.resize(n);
    const char* p = raw.data();
    for (uint64_t k = 0; k < n; ++k, p += esize) {
      if (type == pb::TensorProto::FLOAT) std::memcpy(&c.f[k], p, 4);
      else if (type == pb::TensorProto::DOUBLE) { double d; std::memcpy(&d, p, 8); c.f[k] = float(d); }
      else if (type == pb::TensorProto::FLOAT16) { uint16_t h; std::memcpy(&h, p, 2); c.f[k] = half_to_float(h); }
      else if (type == pb::TensorProto::INT32) { int32_t v; std::memcpy(&v, p, 4); c.i[k] = v, c.f[k] = float(v); }
      else if (type == pb::TensorProto::INT8) c.i[k] = int8_t(*p), c.f[k] = float(c.i[k]);
      else if (type == pb::TensorProto::UINT8) c.i[k] = uint8_t(*p), c.f[k] = float(c.i[k]);
      else { int64_t v; std::memcpy(&v, p, 8); c.i[k] = v, c.f[k] = float(v); }
    }
    return c;
  }
  switch (type) {
    case pb::TensorProto::FLOAT:
      need(uint64_t(t.float_data_size()), "float_data");
      c.f.assign(t.float_data().begin(), t.float_data().end());
      break;
    case pb::TensorProto::DOUBLE:
      need(uint64_t(t.double_data_size()), "double_data");
      for (double d : t.double_data()) c.f.push_back(float(d));
      break;
    case pb::TensorProto::FLOAT16:  // stored in int32_data, one half per value
      need(uint64_t(t.int32_data_size()), "int32_data");
      for (int32_t v : t.int32_data()) c.f.push_back(half_to_float(uint16_t(v)));
      break;
    case pb::TensorProto::INT32:
      need(uint64_t(t.int32_data_size()), "int32_data");
      for (int32_t v : t.int32_data()) c.i.push_back(v), c.f.push_back(float(v));
      break;
    case pb::TensorProto::INT8:
    case pb::TensorProto::UINT8: {  // one value per int32_data entry
      need(uint64_t(t.int32_data_size()), "int32_data");
      const int32_t lo = type == pb::TensorProto::INT8 ? -128 : 0, hi = type == pb::TensorProto::INT8 ? 127 : 255;
      for (int32_t v : t.int32_data()) {
        if (v < lo || v > hi)
          throw Error(what + ".int32_data: " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." +
                      std::to_string(hi) + " (" + (lo ? "int8" : "uint8") + ")");
        c.i.push_back(v), c.f.push_back(float(v));
      }
      break;
    }
    default:
      need(uint64_t(t.int64_data_size()), "int64_data");
      for (int64_t v : t.int64_data()) c.i.push_back(v), c.f.push_back(float(v));
  }
  return c;
}

namespace {

std::string node_str(const pb::GraphProto& g, int i) {
  return "node " + std::to_string(i) + " '" + shown(g.node(i).name()) + "' (" + shown(g.node(i).op_type()) + ")";
}
std::string op_str(const pb::GraphProto& g, int i) { return std::to_string(i) + " (" + shown(g.node(i).op_type()) + ")"; }

// Whether node `from` reads, through any chain of nodes, an output of node `to`.
bool depends_on(const pb::GraphProto& g, const std::map<std::string, int>& writer, int from, int to) {
  std::vector<bool> seen(size_t(g.node_size()), false);
  std::vector<int> stack{from};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    for (const std::string& in : g.node(k).input()) {
      auto it = writer.find(in);
      if (it == writer.end() || it->second < 0) continue;
      if (it->second == to) return true;
      if (!seen[size_t(it->second)]) seen[size_t(it->second)] = true, stack.push_back(it->second);
    }
  }
  return false;
}

// Node i's input `in`, written by node j >= i: a cycle, or a use before the definition.
[[noreturn]] void out_of_order(const pb::GraphProto& g, const std::map<std::string, int>& writer, int i, int j,
                               const std::string& in, const std::string& file) {
  const std::string w = file + ": " + node_str(g, i) + ": its input '" + shown(in) + "' ";
  if (j == i) throw Error(w + "is its own output: the graph has a cycle");
  if (depends_on(g, writer, j, i))
    throw Error(w + "comes from " + node_str(g, j) + ", which depends on this node's output: the graph has a cycle");
  throw Error(w + "is used before any node produces it (" + node_str(g, j) + " does, later; ONNX requires nodes in topological order)");
}

}  // namespace

void check_graph_names(const pb::GraphProto& g, const std::string& file) {
  std::map<std::string, int> writer;  // -1: an initializer, -2: a graph input, else the node
  for (const pb::TensorProto& t : g.initializer())
    if (!writer.emplace(t.name(), -1).second) throw Error(file + ": initializer '" + shown(t.name()) + "' appears twice");
  for (const pb::ValueInfoProto& in : g.input()) writer.emplace(in.name(), -2);  // IR < 4 lists initializers too
  for (int i = 0; i < g.node_size(); ++i)
    for (const std::string& o : g.node(i).output()) {
      if (o.empty()) continue;  // an optional output left out
      const auto [it, fresh] = writer.emplace(o, i);
      if (fresh) continue;
      const std::string t = file + ": tensor '" + shown(o) + "' is produced ";
      if (it->second == -1) throw Error(t + "by node " + op_str(g, i) + " and is an initializer");
      if (it->second == -2) throw Error(t + "by node " + op_str(g, i) + " and is a graph input");
      if (it->second == i) throw Error(t + "twice by node " + op_str(g, i));
      throw Error(t + "by nodes " + op_str(g, it->second) + " and " + op_str(g, i));
    }
  for (int i = 0; i < g.node_size(); ++i)
    for (const std::string& in : g.node(i).input()) {
      auto it = writer.find(in);
      if (!in.empty() && it != writer.end() && it->second >= i) out_of_order(g, writer, i, it->second, in, file);
    }
}

Attrs::Attrs(const pb::NodeProto& n, std::string where) : where_(std::move(where)) {
  for (const pb::AttributeProto& a : n.attribute()) {
    if (!a_.emplace(a.name(), &a).second) throw Error(where_ + ": attribute '" + shown(a.name()) + "' appears twice");
    if (a.has_ref_attr_name()) throw Error(where_ + ": attribute '" + shown(a.name()) + "' refers to a function attribute (not supported)");
  }
}

const pb::AttributeProto& Attrs::get(const std::string& name, pb::AttributeProto::AttributeType t) const {
  const pb::AttributeProto& a = *a_.at(name);
  if (a.type() != t && !(a.type() == pb::AttributeProto::UNDEFINED))
    throw Error(where_ + ": attribute '" + shown(name) + "' has type " + std::to_string(int(a.type())) + ", expected " +
                std::to_string(int(t)));
  return a;
}

int64_t Attrs::i(const std::string& name, int64_t def) const {
  return has(name) ? get(name, pb::AttributeProto::INT).i() : def;
}
float Attrs::f(const std::string& name, float def) const {
  return has(name) ? get(name, pb::AttributeProto::FLOAT).f() : def;
}
std::string Attrs::s(const std::string& name, const std::string& def) const {
  return has(name) ? get(name, pb::AttributeProto::STRING).s() : def;
}
std::vector<int64_t> Attrs::ints(const std::string& name, std::vector<int64_t> def) const {
  if (!has(name)) return def;
  const auto& a = get(name, pb::AttributeProto::INTS);
  return {a.ints().begin(), a.ints().end()};
}
const pb::TensorProto* Attrs::tensor(const std::string& name) const {
  return has(name) ? &get(name, pb::AttributeProto::TENSOR).t() : nullptr;
}
void Attrs::only(std::initializer_list<const char*> known) const {
  for (const auto& [name, a] : a_) {
    bool ok = false;
    for (const char* k : known) ok = ok || name == k;
    if (!ok) throw Error(where_ + ": attribute '" + shown(name) + "' is not supported");
  }
}

}  // namespace ember::onnx
