// The ONNX wire-format pre-scan (onnx_scan.h): a table of onnx.proto's message fields (libonnx-dev
// 1.12: which field holds which message, string or repeated number) and one recursive walk that
// counts against the limits as it goes, so a hostile file is refused after reading no more of it
// than the limit needs, and nothing is allocated.
#include "onnx/onnx_scan.h"

#include "ember/error.h"

namespace ember::onnx {

namespace {

// The messages of onnx.proto the scan descends into (TypeElem: TypeProto.Sequence and .Optional,
// whose field 1 is a TypeProto; TypeTensor: TypeProto.Tensor and .SparseTensor).
enum class M : uint8_t {
  Model, Graph, Node, Attr, Tensor, Sparse, ValueInfo, Type, TypeTensor, TypeElem, TypeMap, Shape, Dim,
  Training, Function, Entry, Opset, Annotation, Segment
};
// What a field holds: a scalar or unknown field (Other), a string or bytes, a message, or a
// repeated number that may be packed (varints of 8 or 4 bytes, fixed 4 or 8 bytes).
enum class F : uint8_t { Other, String, Msg, Ints8, Ints4, Fixed4, Fixed8 };
// Counted fields: a node, an initializer, a graph input/output/value_info, a node input/output.
enum class C : uint8_t { None, Node, Init, Value, Edge };
struct Field {
  F f = F::Other;
  M m = M::Model;
  C c = C::None;
};

constexpr Field S{F::String}, O{F::Other};
constexpr Field msg(M m, C c = C::None) { return {F::Msg, m, c}; }

Field model_field(uint32_t k) {
  switch (k) {
    case 2: case 3: case 4: case 6: return S;
    case 7: return msg(M::Graph);
    case 8: return msg(M::Opset);
    case 14: return msg(M::Entry);
    case 20: return msg(M::Training);
    case 25: return msg(M::Function);
    default: return O;
  }
}

Field graph_field(uint32_t k) {
  switch (k) {
    case 1: return msg(M::Node, C::Node);
    case 2: case 10: return S;
    case 5: return msg(M::Tensor, C::Init);
    case 15: return msg(M::Sparse, C::Init);
    case 11: case 12: case 13: return msg(M::ValueInfo, C::Value);
    case 14: return msg(M::Annotation);
    default: return O;
  }
}

Field node_field(uint32_t k) {
  switch (k) {
    case 1: case 2: return {F::String, M::Model, C::Edge};
    case 3: case 4: case 6: case 7: return S;
    case 5: return msg(M::Attr);
    default: return O;
  }
}

Field attr_field(uint32_t k) {
  switch (k) {
    case 1: case 4: case 9: case 13: case 21: return S;
    case 5: case 10: return msg(M::Tensor);
    case 6: case 11: return msg(M::Graph);
    case 7: return {F::Fixed4};
    case 8: return {F::Ints8};
    case 14: case 15: return msg(M::Type);
    case 22: case 23: return msg(M::Sparse);
    default: return O;
  }
}

Field tensor_field(uint32_t k) {
  switch (k) {
    case 1: case 7: case 11: return {F::Ints8};
    case 3: return msg(M::Segment);
    case 4: return {F::Fixed4};
    case 5: return {F::Ints4};
    case 6: case 8: case 9: case 12: return S;
    case 10: return {F::Fixed8};
    case 13: return msg(M::Entry);
    default: return O;
  }
}

Field function_field(uint32_t k) {
  switch (k) {
    case 1: case 4: case 5: case 6: case 8: case 10: return S;
    case 7: return msg(M::Node, C::Node);
    case 9: return msg(M::Opset);
    default: return O;
  }
}

Field field_of(M m, uint32_t k) {
  switch (m) {
    case M::Model: return model_field(k);
    case M::Graph: return graph_field(k);
    case M::Node: return node_field(k);
    case M::Attr: return attr_field(k);
    case M::Tensor: return tensor_field(k);
    case M::Function: return function_field(k);
    case M::Sparse: return k == 1 || k == 2 ? msg(M::Tensor) : k == 3 ? Field{F::Ints8} : O;
    case M::ValueInfo: return k == 2 ? msg(M::Type) : k == 1 || k == 3 ? S : O;
    case M::Type:
      return k == 1 || k == 8 ? msg(M::TypeTensor) : k == 4 || k == 9 ? msg(M::TypeElem) : k == 5 ? msg(M::TypeMap)
             : k == 6 ? S : O;
    case M::TypeTensor: return k == 2 ? msg(M::Shape) : O;
    case M::TypeElem: return k == 1 ? msg(M::Type) : O;
    case M::TypeMap: return k == 2 ? msg(M::Type) : O;
    case M::Shape: return k == 1 ? msg(M::Dim) : O;
    case M::Dim: return k == 2 || k == 3 ? S : O;
    case M::Training: return k == 1 || k == 2 ? msg(M::Graph) : k == 3 || k == 4 ? msg(M::Entry) : O;
    case M::Entry: return k == 1 || k == 2 ? S : O;
    case M::Opset: return k == 1 ? S : O;
    case M::Annotation: return k == 1 ? S : k == 2 ? msg(M::Entry) : O;
    case M::Segment: return O;
  }
  return O;
}

constexpr uint64_t kMessageBytes = 192, kStringBytes = 48, kNumberBytes = 16;

class Scanner {
 public:
  Scanner(const uint8_t* base, size_t n, const std::string& file, const ScanLimits& l)
      : base_(base), file_(file), l_(l), parse_limit_(n + l.parse_extra) {}

  void message(const uint8_t* p, const uint8_t* end, M m, int depth) {
    if (depth > l_.depth) malformed("messages nested more than " + std::to_string(l_.depth) + " deep", p);
    cost(kMessageBytes);
    while (p < end) {
      const uint64_t tag = varint(p, end);
      const uint64_t k = tag >> 3;
      if (k == 0 || k > 536870911) malformed("field number " + std::to_string(k), p);
      field(p, end, field_of(m, uint32_t(k)), int(tag & 7), depth);
    }
  }

  ScanCounts counts;

 private:
  void field(const uint8_t*& p, const uint8_t* end, const Field f, int wire, int depth) {
    const bool number = f.f == F::Ints8 || f.f == F::Ints4 || f.f == F::Fixed4 || f.f == F::Fixed8;
    switch (wire) {
      case 0: varint(p, end); break;
      case 1: skip(p, end, 8); break;
      case 5: skip(p, end, 4); break;
      case 2: {
        const uint64_t len = varint(p, end);
        const uint8_t* q = p;
        skip(p, end, len);
        if (f.f == F::Msg) {
          count(f.c);
          message(q, p, f.m, depth + 1);
        } else if (number) {  // packed: fixed widths are reserved exactly, varints grow
          const uint64_t width = f.f == F::Fixed4 ? 4 : f.f == F::Fixed8 ? 8 : kNumberBytes;
          cost(width * packed_count(q, p, f.f));
        } else {
          count(f.c);
          cost(kStringBytes + len);
        }
        return;
      }
      default: malformed("wire type " + std::to_string(wire) + " (groups and unknown types are not in ONNX)", p);
    }
    if (number) cost(kNumberBytes);
  }

  static uint64_t packed_count(const uint8_t* p, const uint8_t* end, F f) {
    const uint64_t n = uint64_t(end - p);
    if (f == F::Fixed4) return n / 4;
    if (f == F::Fixed8) return n / 8;
    uint64_t ends = 0;  // a varint ends at each byte without the continuation bit
    for (; p < end; ++p) ends += (*p & 0x80) == 0;
    return ends;
  }

  void count(C c) {
    switch (c) {
      case C::Node: return over(++counts.nodes, l_.nodes, "nodes");
      case C::Init: return over(++counts.initializers, l_.initializers, "initializers");
      case C::Value: return over(++counts.values, l_.values, "graph inputs, outputs and value_info entries");
      case C::Edge: return over(++counts.node_edges, l_.node_edges, "node inputs and outputs");
      case C::None: return;
    }
  }

  void over(uint64_t n, uint64_t limit, const char* what) const {
    if (n > limit)
      throw Error(file_ + ": more than " + std::to_string(limit) + " " + what +
                  " (counted in all its graphs before parsing; the limit of ember's ONNX importer, docs/onnx.md)");
  }

  void cost(uint64_t bytes) {
    counts.parse_bytes += bytes;
    if (counts.parse_bytes > parse_limit_)
      throw Error(file_ + ": parsing it would take more than " + std::to_string(parse_limit_ >> 20) +
                  " MiB (its size plus " + std::to_string(l_.parse_extra >> 20) +
                  " MiB, the importer's limit): too many small messages, strings or numbers");
  }

  uint64_t varint(const uint8_t*& p, const uint8_t* end) const {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p >= end) malformed("a number runs past the end", p);
      const uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    malformed("a number longer than 10 bytes", p);
  }

  void skip(const uint8_t*& p, const uint8_t* end, uint64_t n) const {
    if (n > uint64_t(end - p)) malformed("a field runs past the end of its message", p);
    p += n;
  }

  [[noreturn]] void malformed(const std::string& why, const uint8_t* at) const {
    throw Error(file_ + ": not an ONNX model (the protobuf does not parse: " + why + ", at byte " +
                std::to_string(at - base_) + ")");
  }

  const uint8_t* base_;
  const std::string& file_;
  const ScanLimits& l_;
  const uint64_t parse_limit_;
};

}  // namespace

ScanCounts scan_onnx(const uint8_t* bytes, size_t n, const std::string& file, const ScanLimits& limits) {
  if (n > limits.file_bytes)
    throw Error(file + ": " + std::to_string(n) + " bytes is more than the " + std::to_string(limits.file_bytes) +
                "-byte limit of ember's ONNX importer");
  Scanner s(bytes, n, file, limits);
  s.message(bytes, bytes + n, M::Model, 0);
  return s.counts;
}

}  // namespace ember::onnx
