// Pre-scan of an ONNX file's protobuf wire format before the full parse: walks every message a
// parse would build (the graph, subgraphs in attributes, functions, training graphs) without
// allocating, counts nodes, initializers, values and node inputs, estimates the memory a parse
// would take, and refuses a file over the importer's limits at once (docs/onnx.md, "Limits").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::onnx {

// The importer's limits (docs/onnx.md). Counts are over the whole file, every graph in it.
struct ScanLimits {
  uint64_t file_bytes = (uint64_t(1) << 31) - 1;  // protobuf's own limit (2 GiB - 1): 536M f32 weights
  uint64_t nodes = 65536;                        // NodeProto: 16 per layer of a 4096-layer model
  uint64_t initializers = 65536;                 // TensorProto / SparseTensorProto initializers
  uint64_t values = 262144;                      // graph inputs, outputs and value_info entries
  uint64_t node_edges = uint64_t(1) << 20;       // node inputs and outputs (names)
  uint64_t parse_extra = uint64_t(256) << 20;    // parse memory beyond the file's own size
  int depth = 100;                               // message nesting (protobuf's own default)
};

struct ScanCounts {
  uint64_t nodes = 0, initializers = 0, values = 0, node_edges = 0;
  uint64_t parse_bytes = 0;  // the estimate: each message 192 bytes, each string 48 + its length,
                             // each packed fixed-width number its own width (the parse reserves
                             // exactly), each varint or unpacked number 16 (8 bytes, doubled for
                             // the array's growth)
};

// Throws Error "FILE: ..." at the first count over its limit, naming the limit, or "FILE: not an
// ONNX model (the protobuf does not parse: ...)" for wire data protobuf would refuse.
ScanCounts scan_onnx(const uint8_t* bytes, size_t n, const std::string& file, const ScanLimits& limits = {});

}  // namespace ember::onnx
