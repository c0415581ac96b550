// QDQ and integer-op ONNX graphs rewritten as the fp32 graphs they compute (onnx_qdq_graph.cpp):
// Q -> DQ pairs dropped, quantized initializers dequantized in place, QLinearConv / QLinearMatMul /
// ConvInteger / MatMulInteger as Conv / MatMul; what was quantized is returned beside it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ember/quant.h"
#include "onnx/onnx_reader.h"

namespace ember::onnx {

struct QdqInfo {
  // Per dequantized weight initializer (its name is kept, its data now fp32): the scale of each
  // index along `axis` of its ONNX dims (per tensor: axis -1, one scale).
  struct Weight {
    std::vector<float> scale;
    int axis = -1;
    std::vector<int64_t> dims;
  };
  // Per dequantized INT32 bias initializer: its integers and per-channel scales (one: broadcast).
  struct Bias {
    std::vector<int32_t> q;
    std::vector<float> scale;
  };
  std::map<std::string, Weight> weights;
  std::map<std::string, Bias> biases;
  std::map<std::string, QParams> acts;  // fp32 value name -> its u8 quantization
  bool quantized = false;               // the graph had any quantization op
};

// Whether the graph has QuantizeLinear, DequantizeLinear or an integer op.
bool has_quant_ops(const pb::GraphProto& g);
// Rewrites g in place as above; Error "FILE: ..." naming the node or tensor at fault.
QdqInfo dequantize_graph(pb::GraphProto& g, const std::string& file);

}  // namespace ember::onnx
