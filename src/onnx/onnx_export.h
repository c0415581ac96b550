// The fp32 ONNX exporter's pieces that the QDQ exporter (onnx_export_qdq.cpp) reuses: the graph
// writer (nodes and initializers with fresh names) and a hook through which an exporter changes
// what a Conv/Linear reads as its weight and bias and what readers of each tensor see.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ember/model.h"
#include "ember_onnx.pb.h"

namespace ember::onnx {

namespace pb = ember_onnx;

class Writer {
 public:
  explicit Writer(pb::GraphProto* g) : g_(g) {}

  std::string fresh(const std::string& base) { return base + "_" + std::to_string(next_++); }

  pb::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                      const std::string& name) {
    pb::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(fresh(name));
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  // A one-output node whose output gets a fresh name; returns it.
  std::string op(const std::string& op, std::vector<std::string> in, const std::string& name) {
    const std::string out = fresh(name + "_" + op);
    node(op, std::move(in), {out}, name);
    return out;
  }
  std::string raw(const std::string& name, int type, const std::vector<int64_t>& dims, std::string bytes) {
    pb::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::move(bytes));  // little-endian
    return name;
  }
  std::string floats(const std::string& name, std::vector<int64_t> dims, const float* v, size_t n) {
    pb::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(pb::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v), n * sizeof(float)));  // little-endian
    return name;
  }
  std::string scalar(float v) {
    auto it = scalars_.find(v);
    if (it != scalars_.end()) return it->second;
    return scalars_[v] = floats(fresh("const"), {}, &v, 1);
  }
  std::string ints(const std::string& base, const std::vector<int64_t>& v) {
    pb::TensorProto* t = g_->add_initializer();
    t->set_name(fresh(base));
    t->set_data_type(pb::TensorProto::INT64);
    t->add_dims(int64_t(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return t->name();
  }

 private:
  pb::GraphProto* g_;
  int next_ = 0;
  std::map<float, std::string> scalars_;
};

// How an exporter other than the fp32 one changes the graph (null: the fp32 export).
class ExportHook {
 public:
  virtual ~ExportHook() = default;
  // The value a Conv or Linear of parameter prefix `prefix` reads as its `what` ("weight",
  // "bias"; dims: as the fp32 initializer would have), or "" for the fp32 initializer.
  virtual std::string param(Writer& w, const std::string& prefix, const std::string& what,
                            const std::vector<int64_t>& dims) = 0;
  // A tensor was written under `name` ("input", or the output of the node of prefix `key`):
  // the name its readers read instead (or `name`).
  virtual std::string tensor(Writer& w, const std::string& key, const std::string& name) = 0;
  // Whether the Conv of this prefix reads the hook's weights (param) rather than fp32 ones.
  virtual bool keeps_weights(const std::string& prefix) const = 0;
  // For such a Conv: the prefix of the BatchNorm2d its weight and bias already carry (exported as
  // one Conv, the BatchNormalization left out), or "" (the BatchNorm2d stays a node).
  virtual std::string folded_bn(const std::string&) const { return ""; }
};

// The ModelProto bytes of a model with these weights (by parameter name), through `hook`.
std::string export_model_bytes(const Model& m, const std::map<std::string, const float*>& weights, ExportHook* hook,
                               const std::string& doc);

}  // namespace ember::onnx
