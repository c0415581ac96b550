// ONNX import: maps an ONNX graph onto ember layers node by node. Each value is a constant or an
// ember tensor seen in a layout: NCHW ([N, C, H, W]), NHWC (a Transpose of an NCHW tensor: no
// copy, only a view, as torchvision's permutes around LayerNorm and Linear) or flat ([N, D]).
// Known multi-node patterns (GELU's erf form, x * sigmoid(x), MatMul + bias Add) become one layer.
#include <algorithm>
#include <cmath>
#include <set>

#include "ember/error.h"
#include "ember/onnx.h"
#include "ember_support/files.h"
#include "nn/layers.h"
#include "onnx/onnx_import_ops.h"
#include "onnx/onnx_qdq.h"
#include "onnx/onnx_scan.h"

namespace ember {

namespace onnx {

std::string Importer::where(int i) const {
  const pb::NodeProto& n = g_.node(i);
  return file_ + ": node " + std::to_string(i) + " '" + shown(n.name()) + "' (" + shown(n.op_type()) + ")";
}

const Val& Importer::val(int i, int k) const {
  const pb::NodeProto& n = g_.node(i);
  if (k >= n.input_size() || n.input(k).empty()) throw Error(where(i) + ": input " + std::to_string(k) + " is missing");
  auto it = vals_.find(n.input(k));
  if (it == vals_.end())
    throw Error(where(i) + ": input '" + shown(n.input(k)) + "' is not a graph input, a weight or an earlier node's output");
  return it->second;
}

const Const& Importer::constant(int i, int k) const {
  const Val& v = val(i, k);
  if (!v.is_const) throw Error(where(i) + ": input " + std::to_string(k) + " ('" + shown(g_.node(i).input(k)) + "') must be a constant");
  return v.c;
}

Val& Importer::set(int i, int k, Val v) {
  const pb::NodeProto& n = g_.node(i);
  if (k >= n.output_size() || n.output(k).empty()) throw Error(where(i) + ": output " + std::to_string(k) + " is missing");
  if (vals_.count(n.output(k))) throw Error(where(i) + ": output '" + n.output(k) + "' is already defined");
  return vals_[n.output(k)] = std::move(v);
}

// A layer name from a weight's name ("stem.0.weight" -> "stem.0") when it is a valid, unused
// node name; else "onnx_K".
std::string Importer::name_for(const std::string& weight) {
  std::string n = weight.substr(0, weight.rfind('.') == std::string::npos ? 0 : weight.rfind('.'));
  bool ok = !n.empty() && n.size() <= 100 && n != "input";
  for (char c : n) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  if (!ok || names_.count(n)) n = "onnx_" + std::to_string(names_.size());
  while (names_.count(n)) n += "_";
  names_.insert(n);
  return n;
}

Val Importer::emit(LayerSpec s, const std::vector<const Val*>& in, const std::string& weight_name, nn::Dims out,
                   Layout lay) {
  s.name = name_for(weight_name);
  for (const Val* v : in) s.inputs.push_back(v->ref);
  out_.model.layers.push_back(s);
  Val v;
  v.ref = s.name, v.lay = lay, v.d = out;
  return v;
}

void Importer::weight(const std::string& layer, const std::string& what, std::vector<float> data) {
  if ((weights_ += data.size()) > weight_budget_)
    throw Error(file_ + ": the weights' copies would hold more values than the file has bytes (a weight read by "
                "too many nodes?)");
  out_.weights[layer + "." + what] = std::move(data);
}

// The nodes that read each value; a pattern may fold a node only into its value's one reader.
void Importer::index_readers() {
  for (int i = 0; i < g_.node_size(); ++i) {
    for (const std::string& in : g_.node(i).input()) readers_[in].push_back(i);
    for (const std::string& out : g_.node(i).output()) producer_[out] = i;
  }
  for (const pb::ValueInfoProto& o : g_.output()) readers_[o.name()].push_back(-1);
}

int Importer::only_reader(const std::string& value) const {
  auto it = readers_.find(value);
  if (it == readers_.end() || it->second.size() != 1) return -1;
  return it->second[0];
}

// Nodes whose outputs reach the graph's output (others are ignored, not refused).
void Importer::mark_live() {
  std::map<std::string, int> producer;
  for (int i = 0; i < g_.node_size(); ++i)
    for (const std::string& o : g_.node(i).output()) producer[o] = i;
  live_.assign(size_t(g_.node_size()), false);
  std::vector<std::string> stack{g_.output(0).name()};
  std::set<std::string> seen;
  while (!stack.empty()) {
    std::string v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    auto it = producer.find(v);
    if (it == producer.end() || live_[size_t(it->second)]) continue;
    live_[size_t(it->second)] = true;
    for (const std::string& in : g_.node(it->second).input()) stack.push_back(in);
  }
}

void Importer::read_inputs() {
  for (const pb::TensorProto& t : g_.initializer()) {
    Val v;
    v.is_const = true;
    v.c = read_tensor(t, file_ + ": initializer '" + shown(t.name()) + "'");
    v.weight_name = t.name();
    if (!vals_.emplace(t.name(), std::move(v)).second) throw Error(file_ + ": initializer '" + shown(t.name()) + "' appears twice");
  }
  const pb::ValueInfoProto* input = nullptr;
  for (const pb::ValueInfoProto& in : g_.input()) {
    if (vals_.count(in.name())) continue;  // an initializer listed as an input too (IR < 4)
    if (input) throw Error(file_ + ": graph inputs '" + shown(input->name()) + "' and '" + shown(in.name()) + "': ember models take one input");
    input = &in;
  }
  if (!input) throw Error(file_ + ": the graph has no input");
  const std::string w = file_ + ": input '" + shown(input->name()) + "'";
  if (!input->type().has_tensor_type() || input->type().tensor_type().elem_type() != pb::TensorProto::FLOAT)
    throw Error(w + ": expected a float tensor");
  const auto& shape = input->type().tensor_type().shape();
  const int rank = shape.dim_size();
  if (rank < 1 || rank > 4)
    throw Error(w + ": expected [N, C, H, W], [N, C, L], [N, D] or [N], found rank " + std::to_string(rank));
  int d[4] = {1, 1, 1, 1};
  for (int k = 1; k < rank; ++k) {
    const auto& dim = shape.dim(k);
    if (!dim.has_dim_value() || dim.dim_value() < 1 || dim.dim_value() > 65536)
      throw Error(w + ": dim " + std::to_string(k) + " must be a number in 1..65536 (only the batch may be symbolic)");
    d[k] = int(dim.dim_value());
  }
  if (rank == 3) std::swap(d[2], d[3]);  // [N, C, L]: ember's [C, 1, L]
  Model& m = out_.model;
  m.in_c = d[1], m.in_h = d[2], m.in_w = d[3];
  static const Layout kByRank[5] = {Layout::Flat, Layout::Vec, Layout::Flat, Layout::NCL, Layout::NCHW};
  Val v;
  v.ref = "input", v.lay = kByRank[rank], v.d = {d[1], d[2], d[3]};
  vals_[input->name()] = v;
  names_.insert("input");
}

// Output y's dims after the batch in the graph's rank: [C], [C, L] ([N, C, L]), none ([N]), an
// image's [C, H, W], or [C, 1, 1] ([1, 1, C] channels-last) for [N, C] declared as rank 4.
std::vector<int64_t> Importer::graph_dims(const pb::ValueInfoProto& o, const Val& y) const {
  const bool rank4 = o.type().tensor_type().has_shape() && o.type().tensor_type().shape().dim_size() == 4;
  if (y.lay == Layout::NCL) return {y.d.c, y.d.w};
  if (y.lay == Layout::Vec) return {};
  if (!y.d.flat()) return {y.d.c, y.d.h, y.d.w};
  if (rank4 && y.lay != Layout::Flat) return y.lay == Layout::NCHW ? std::vector<int64_t>{y.d.c, 1, 1} : std::vector<int64_t>{1, 1, y.d.c};
  return {y.d.c};
}

// The graph's declared output is what the model computes: a float tensor [N, classes] (or
// [N, classes, 1, 1] for an image of 1x1); the batch dim may be anything, the others symbolic,
// unknown or equal; a shape left out is taken as right.
void Importer::check_output(const pb::ValueInfoProto& o, const Val& y) const {
  const std::string w = file_ + ": output '" + shown(o.name()) + "'";
  const std::string want = y.lay == Layout::Vec ? "[N]"
                           : y.lay == Layout::NCL ? "[N, " + std::to_string(y.d.c) + ", " + std::to_string(y.d.w) + "]"
                           : y.d.flat() ? "[N, " + std::to_string(y.d.c) + "]"
                                        : "[N, " + std::to_string(y.d.c) + ", " + std::to_string(y.d.h) + ", " + std::to_string(y.d.w) + "]";
  if (!o.has_type()) throw Error(w + ": has no type (expected a float tensor " + want + ")");
  if (!o.type().has_tensor_type() || o.type().tensor_type().elem_type() != pb::TensorProto::FLOAT)
    throw Error(w + ": expected a float tensor " + want + ", found " +
                (o.type().has_tensor_type() ? "elem_type " + std::to_string(o.type().tensor_type().elem_type()) : "no tensor_type"));
  if (!o.type().tensor_type().has_shape()) return;  // a shape left out: any
  const auto& shape = o.type().tensor_type().shape();
  const std::vector<int64_t> dims = graph_dims(o, y);
  bool ok = size_t(shape.dim_size()) == dims.size() + 1;
  for (int k = 1; ok && k < shape.dim_size(); ++k)
    ok = !shape.dim(k).has_dim_value() || shape.dim(k).dim_value() == dims[size_t(k - 1)];
  if (!ok) {
    std::string found = "[";
    for (int k = 0; k < shape.dim_size(); ++k)
      found += (k ? ", " : "") + (shape.dim(k).has_dim_value() ? std::to_string(shape.dim(k).dim_value())
                                  : shape.dim(k).has_dim_param() ? shown(shape.dim(k).dim_param()) : std::string("?"));
    throw Error(w + ": declared " + found + "], the model computes " + want);
  }
}

void Importer::run() {
  if (g_.output_size() == 0) throw Error(file_ + ": the graph has no output (ember models have one: [N, classes] scores)");
  if (g_.output_size() != 1) throw Error(file_ + ": the graph has " + std::to_string(g_.output_size()) + " outputs; ember models have one");
  read_inputs();
  index_readers();
  mark_live();
  done_.assign(size_t(g_.node_size()), false);
  for (int i = 0; i < g_.node_size(); ++i)  // live Constants first: patterns look ahead at their values
    if (live_[size_t(i)] && g_.node(i).op_type() == "Constant" && g_.node(i).input_size() == 0)
      done_[size_t(i)] = true, constant_node(i);
  for (int i = 0; i < g_.node_size(); ++i) {
    if (done_[size_t(i)] || !live_[size_t(i)]) continue;
    done_[size_t(i)] = true;
    map_node(i);
    if (out_.model.layers.size() > kMaxModelLayers)  // stop at the first layer over, not after mapping all
      throw Error(where(i) + ": the model would have more than " + std::to_string(kMaxModelLayers) + " layers (its limit)");
  }
  auto it = vals_.find(g_.output(0).name());
  if (it == vals_.end()) throw Error(file_ + ": output '" + shown(g_.output(0).name()) + "' is produced by no node");
  Model& m = out_.model;
  if (!it->second.is_const && it->second.ref == "input" && m.layers.empty()) {  // Identity or Dropout of the input
    LayerSpec s;
    s.kind = LayerKind::DropPath;  // p 0: a copy (exported as Identity)
    it->second = emit(s, {&it->second}, "", it->second.d, it->second.lay);
  }
  const Val& y = it->second;
  if (y.is_const || m.layers.empty() || y.ref != m.layers.back().name)
    throw Error(file_ + ": output '" + shown(g_.output(0).name()) + "' must be the last layer's output");
  // Any output: class scores [N, D] or a feature map [N, C, H, W] (num_classes then only names its
  // channels: Plan::has_class_scores is false for an image).
  if (!y.d.flat() && y.lay == Layout::NHWC)
    throw Error(file_ + ": output '" + shown(g_.output(0).name()) + "' is a channels-last image [N, H, W, C]; "
                "ember's image outputs are [N, C, H, W]");
  check_output(g_.output(0), y);
  for (int64_t d : graph_dims(g_.output(0), y)) out_.output_dims.push_back(int(d));
  const bool scores = y.d.flat() && y.d.c >= 2 && y.lay != Layout::NCL;  // else one value or a map: a regression
  if (scores) m.num_classes = y.d.c;
  // A graph that ends in Softmax outputs probabilities: ember's loss then takes their log only.
  // One value or a feature map trains as a regression (mse, on targets of its shape).
  if (m.layers.back().kind == LayerKind::Softmax) m.loss = LossKind::CrossEntropy;
  if (!scores) m.loss = LossKind::MSE;
}

}  // namespace onnx

namespace {
// IR 3 brought opset_import; IR 10 is the IR of opset 21, the newest opset the importer maps
// (libonnx-dev 1.12's onnx.proto knows IR 8; IR 9 to 11 added only types ember refuses). onnx
// 1.18 and later write IR 11 whatever the opset, so 11 and the next one are read too (the opset
// and every op are checked anyway); a file claiming more (999) is refused.
constexpr int64_t kMinIrVersion = 3, kMaxIrVersion = std::max<int64_t>(12, onnx::pb::IR_VERSION);

void check_ir_version(int64_t v, const std::string& name) {
  if (v < kMinIrVersion || v > kMaxIrVersion)
    throw Error(name + ": ir_version " + std::to_string(v) + ": ember reads IR versions " + std::to_string(kMinIrVersion) +
                " to " + std::to_string(kMaxIrVersion) + " (opsets 1 to 21)");
}
}  // namespace

namespace onnx {

void parse_model(const uint8_t* bytes, size_t n, const std::string& name, pb::ModelProto& model, int& opset_out) {
  scan_onnx(bytes, n, name);  // the counts, before the parse allocates for them
  if (n > size_t(INT32_MAX) || !model.ParseFromArray(bytes, int(n)))
    throw Error(name + ": not an ONNX model (the protobuf does not parse)");
  int64_t opset = 0;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset = op.version();
    else throw Error(name + ": opset_import: domain '" + one_line(shown(op.domain())) + "' is not supported");
  if (model.opset_import_size() == 0) throw Error(name + ": no opset_import (is this an ONNX model?)");
  check_ir_version(model.ir_version(), name);
  // Opsets 1 to 6 too: the ops' attributes are checked one by one (an attribute an old version
  // had and ember does not know, such as Add-1's broadcast, is refused by name).
  if (opset < 1 || opset > 21) throw Error(name + ": opset " + std::to_string(opset) + " is not supported (1..21)");
  if (!model.has_graph()) throw Error(name + ": no graph");
  try {  // before any pass reads a name: the QDQ pass too
    check_graph_names(model.graph(), name);
  } catch (const Error& e) {  // names from the file may hold newlines
    throw Error(one_line(e.what()));
  }
  opset_out = int(opset);
}

OnnxImport run_import(Importer& im, const std::string& name) {
  try {
    im.run();
  } catch (const Error& e) {  // names from the file may hold newlines or control bytes
    throw Error(one_line(e.what()));
  }
  OnnxImport out = im.take();
  std::string stem = name.substr(name.find_last_of('/') + 1);
  if (stem.ends_with(".onnx")) stem.resize(stem.size() - 5);
  out.model.name = stem.empty() ? "onnx" : stem;
  // Through the JSON reader: the same limits and checks as a hand-written model description.
  Model checked = parse_model_json(model_to_json(out.model), name);
  checked.source = name;
  out.model = std::move(checked);
  return out;
}

}  // namespace onnx

OnnxImport import_onnx_from_memory(const uint8_t* bytes, size_t n, const std::string& name) {
  onnx::pb::ModelProto model;
  int opset = 0;
  onnx::parse_model(bytes, n, name, model, opset);
  const bool quantized = onnx::has_quant_ops(model.graph());
  if (quantized) {  // QDQ: the fp32 graph it computes (docs/onnx.md, "QDQ")
    try {
      onnx::dequantize_graph(*model.mutable_graph(), name);
    } catch (const Error& e) {
      throw Error(one_line(e.what()));
    }
  }
  onnx::Importer im(model.graph(), name, opset, n);
  OnnxImport out = onnx::run_import(im, name);
  out.quantized = quantized;
  return out;
}

OnnxImport import_onnx(const std::string& path) {
  const std::string bytes = read_input(path, onnx::ScanLimits{}.file_bytes, "ONNX model");
  return import_onnx_from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

void load_onnx_weights(Plan& plan, const OnnxImport& m) {
  if (plan.dtype() != DType::f32) throw Error(m.model.source + ": only f32 plans load weights");
  float* dst = static_cast<float*>(plan.param_data());
  for (const ParamInfo& p : plan.params()) {
    auto it = m.weights.find(p.name);
    if (it == m.weights.end()) throw Error(m.model.source + ": no weights for parameter '" + p.name + "'");
    if (it->second.size() != p.size)
      throw Error(m.model.source + ": parameter '" + p.name + "' has " + std::to_string(it->second.size()) +
                  " values, the model needs " + std::to_string(p.size));
    std::copy(it->second.begin(), it->second.end(), dst + p.offset);
  }
}

}  // namespace ember
