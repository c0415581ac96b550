// ONNX interchange: export a model with its weights as an ONNX file (opset 17, dynamic batch) that
// ONNX Runtime and onnx.checker accept, and import ONNX graphs (from torch.onnx.export and other
// exporters) into an ember Model and its weights for the ops ember has. docs/onnx.md lists the
// op mapping both ways; an op or attribute ember lacks is refused naming the node and the op.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ember/model.h"
#include "ember/plan.h"

namespace ember {

constexpr int kOnnxOpset = 17;  // LayerNormalization is one op from 17 on

// The ONNX ModelProto bytes of an f32 plan's model and current weights: one input "input"
// [batch, C, H, W] and one output "output" [batch, classes] (the logits, before the loss).
std::string onnx_export_bytes(const Plan& plan);
// The same written atomically to `path` (never through a device, FIFO or symlink's target).
void export_onnx(const Plan& plan, const std::string& path);

// An imported ONNX model: the graph as an ember Model (its layers named after the ONNX weights'
// names where those are valid node names, so parameters keep PyTorch's state_dict names) and
// its weights by parameter name, in PyTorch layouts.
struct OnnxImport {
  Model model;
  std::map<std::string, std::vector<float>> weights;
  std::vector<std::string> notes;  // what was folded or read as a view ("Transpose /x: layout view")
  std::vector<int> output_dims;    // the graph output's dims after N ([C, L] of [N, C, L], none of [N])
  bool quantized = false;          // a QDQ or integer-op file, imported as the fp32 graph it computes
                                   // (import_onnx_quantized, onnx_quant.h, reads its int8 model)
};

// Reads and checks an ONNX file: every header and tensor field against the file's bytes before
// anything is allocated, then maps the graph. Throws Error naming the file and the node, op,
// attribute or tensor at fault.
OnnxImport import_onnx(const std::string& path);
OnnxImport import_onnx_from_memory(const uint8_t* bytes, size_t n, const std::string& name);
// Copies an import's weights into a plan built from its model (f32; names and sizes checked).
void load_onnx_weights(Plan& plan, const OnnxImport& m);

// True for a path ending in ".onnx" (the CLI's --model and the Python module use it).
bool is_onnx_path(const std::string& path);

}  // namespace ember
