// QDQ ONNX for int8 models (docs/onnx.md, "QDQ"): export a QuantizedWeights as QuantizeLinear /
// DequantizeLinear pairs around an fp32 graph (ONNX Runtime fuses them into its int8 kernels),
// and import QDQ files and the integer ops (QLinearConv, QLinearMatMul, ConvInteger,
// MatMulInteger) back into a QuantizedWeights.
#pragma once
#include <cstdint>
#include <string>

#include "ember/onnx.h"
#include "ember/quant.h"

namespace ember {

// The ModelProto bytes of a quantized model: opset 17; the input and every tensor with an
// activation entry go through QuantizeLinear -> DequantizeLinear (uint8); each quantized Conv2d
// and Linear reads DequantizeLinear of its INT8 weight (per output channel, axis 0) and of its
// INT32 bias (scale in_scale * w_scale[k]); every other parameter fp32. The output stays float.
// Throws Error naming the layer or tensor when q is inconsistent. With a QdqExport
// (qdq_export_view: what `ember export` writes), each Conv2d in folded_bn is one Conv carrying its
// BatchNorm2d (its layer in q already folded), and that BatchNormalization is left out.
std::string onnx_export_quantized_bytes(const QuantizedWeights& q);
std::string onnx_export_quantized_bytes(const QdqExport& v);
// The same written atomically to `path`.
void export_onnx_quantized(const QuantizedWeights& q, const std::string& path);
void export_onnx_quantized(const QdqExport& v, const std::string& path);

// Reads a QDQ or integer-op ONNX file into a QuantizedWeights: Q -> DQ pairs on activations give
// the acts of the tensor's producer ("input" for the model's input), DequantizeLinear of INT8 or
// UINT8 initializers (per axis or per tensor; zero points must be 0) the layers' int8 weights,
// INT32 biases their biases; QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger map to the
// same. Bad scales, zero points or shapes: Error in one line naming the tensor.
QuantizedWeights import_onnx_quantized(const std::string& path);
QuantizedWeights import_onnx_quantized_from_memory(const uint8_t* bytes, size_t n, const std::string& name);
// Whether an ONNX file holds QuantizeLinear, DequantizeLinear or an integer op (parses it whole).
bool is_quantized_onnx(const std::string& path);

}  // namespace ember
