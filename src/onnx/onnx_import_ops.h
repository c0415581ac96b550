// The ONNX importer's state and its per-op mappers (onnx_import.cpp walks the graph;
// onnx_import_ops.cpp maps each op). A value is a constant or an ember tensor in a layout.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ember/onnx.h"
#include "nn/layers.h"
#include "onnx/onnx_reader.h"

namespace ember::onnx {

using Layout = nn::OnnxLayout;  // how a value lies (nn/op_onnx.h)
using Val = nn::OnnxValue;      // a constant or an ember tensor in a layout
inline int rank_of(Layout l) { return nn::onnx_rank(l); }

class Importer {
 public:
  // bytes: the file's size; the weights copied out of it may hold at most that many floats
  // (weights used by two nodes are copied twice), the folded constants kMaxFoldedTotal elements.
  Importer(const pb::GraphProto& g, std::string file, int opset, size_t bytes)
      : g_(g), file_(std::move(file)), opset_(opset), weight_budget_(bytes + (size_t(1) << 20)) {}
  static constexpr size_t kMaxFoldedTotal = size_t(1) << 24;
  void run();
  OnnxImport take() { return std::move(out_); }
  // After run(): each ONNX value as mapped ("ref": the layer that makes it, or "input"), and the
  // ONNX name each Conv/Gemm/MatMul parameter came from ("conv1.weight" -> the initializer).
  const std::map<std::string, Val>& values() const { return vals_; }
  const std::map<std::string, std::string>& sources() const { return sources_; }

 private:
  // onnx_import.cpp: the walk.
  std::string where(int i) const;
  const Val& val(int i, int k) const;
  const Const& constant(int i, int k) const;
  Val& set(int i, int k, Val v);
  std::string name_for(const std::string& weight);
  Val emit(LayerSpec s, const std::vector<const Val*>& in, const std::string& weight_name, nn::Dims out, Layout lay);
  void weight(const std::string& layer, const std::string& what, std::vector<float> data);
  void index_readers();
  int only_reader(const std::string& value) const;
  void mark_live();
  void read_inputs();
  std::vector<int64_t> graph_dims(const pb::ValueInfoProto& o, const Val& y) const;
  void check_output(const pb::ValueInfoProto& o, const Val& y) const;

  // onnx_import_ops.cpp: the node's mapping (the op files' imports, through TableIn), the
  // graph-level ones (constants, pass-throughs, layout views) and the window rules they share.
  void map_node(int i);
  bool fold(int i);                         // onnx_fold.cpp: all inputs constant: compute it
  const Val& tensor(int i, int k) const;    // a non-constant input
  void check_strides(int i, const std::vector<int64_t>& st, bool one_d = false) const;
  std::vector<int64_t> window_pads(int i, const nn::OnnxAttrs& a, const nn::Dims& x, const std::vector<int64_t>& k,
                                   const std::vector<int64_t>& st, bool one_d = false, bool* overhang = nullptr) const;
  std::vector<int64_t> window_ints(const nn::OnnxAttrs& a, const char* name, std::vector<int64_t> def, bool one_d) const;
  void transpose(int i);
  void constant_node(int i);

  friend class TableIn;  // the op table's own imports (onnx_import_ops.cpp) read the graph through it

  const pb::GraphProto& g_;
  std::string file_;
  int opset_;
  OnnxImport out_;
  std::map<std::string, Val> vals_;
  std::map<std::string, std::vector<int>> readers_;
  std::map<std::string, int> producer_;  // value -> the node that outputs it
  std::vector<bool> done_, live_;
  std::set<std::string> names_;
  std::map<std::string, std::string> sources_;  // parameter name -> the ONNX initializer's
  size_t folded_ = 0, weights_ = 0, weight_budget_;
};

// onnx_import.cpp: the parse and header checks (opset_out: the default domain's opset), and the
// walk with its one-line errors and the model's name and JSON check.
void parse_model(const uint8_t* bytes, size_t n, const std::string& name, pb::ModelProto& model, int& opset_out);
OnnxImport run_import(Importer& im, const std::string& name);

}  // namespace ember::onnx
