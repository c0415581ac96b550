// The op table's public face (ember/ops.h): its descriptors as plain data, as JSON for
// `ember info --ops --json`, as text, and the activations' names for --act and Python's act().
#include <cstdio>

#include "ember/ops.h"
#include "fs/json_read.h"
#include "nn/graph.h"
#include "nn/op_table.h"

namespace ember {

namespace {
std::vector<std::string> strings(const std::vector<const char*>& v) { return {v.begin(), v.end()}; }

OpInfo info_of(const nn::OpDesc& d) {
  OpInfo o;
  o.name = d.name, o.summary = d.summary, o.activation = d.activation;
  o.min_inputs = d.min_inputs, o.max_inputs = d.max_inputs;
  o.onnx = strings(d.onnx), o.onnx_import = strings(d.onnx_alone()), o.layouts = strings(d.layouts), o.dtypes = strings(d.dtypes);
  for (const nn::OpField& f : d.fields) o.fields.push_back({f.key, f.type, f.fallback ? f.fallback : "", !f.fallback});
  const Model example = parse_model_json(d.example, std::string("op table: ") + d.name + " example");
  for (const LayerSpec& s : example.layers) {
    if (s.kind != d.kind || !d.params) continue;
    for (const nn::OpParam& p : d.params(s)) o.params.push_back({p.name, param_role_name(p.role)});
    break;
  }
  o.example = d.example;
  return o;
}
}  // namespace

std::vector<OpInfo> op_infos() {
  std::vector<OpInfo> out;
  for (const nn::OpDesc* d : nn::op_table()) out.push_back(info_of(*d));
  return out;
}

std::string ops_json(int indent) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpInfo& o : op_infos()) {
    nlohmann::json fields = nlohmann::json::array(), params = nlohmann::json::array();
    for (const OpFieldInfo& f : o.fields)
      fields.push_back({{"key", f.key}, {"type", f.type}, {"default", f.required ? nlohmann::json() : nlohmann::json(f.fallback)}});
    for (const OpParamInfo& p : o.params) params.push_back({{"name", p.name}, {"role", p.role}});
    ops.push_back({{"name", o.name}, {"summary", o.summary}, {"activation", o.activation},
                   {"inputs", {o.min_inputs, o.max_inputs}}, {"onnx", o.onnx}, {"onnx_import", o.onnx_import}, {"layouts", o.layouts},
                   {"dtypes", o.dtypes}, {"fields", fields}, {"params", params},
                   {"example", nlohmann::json::parse(o.example)}});
  }
  nlohmann::json fusions = nlohmann::json::array();
  for (const nn::FusionInfo& f : nn::fusion_infos())
    fusions.push_back({{"name", f.name}, {"plans", f.plans}, {"layout", f.layout}});
  return json_text(nlohmann::json{{"ops", ops}, {"fusions", fusions}}, indent);
}

std::string ops_text() {
  std::string out;
  for (const OpInfo& o : op_infos()) {
    std::string fields, params, onnx, runs;
    for (const std::string& d : o.dtypes) runs += (runs.empty() ? "" : ",") + d;
    runs += " ";
    for (const std::string& l : o.layouts) runs += (runs.back() == ' ' ? "" : ",") + l;
    for (const OpFieldInfo& f : o.fields) fields += (fields.empty() ? "" : " ") + f.key + (f.required ? "" : "=" + f.fallback);
    for (const OpParamInfo& p : o.params) params += (params.empty() ? "" : " ") + p.name + ":" + p.role;
    for (const std::string& t : o.onnx) onnx += (onnx.empty() ? "" : ",") + t;
    const std::string inputs = o.min_inputs == o.max_inputs ? std::to_string(o.min_inputs)
                                                            : std::to_string(o.min_inputs) + "-" + std::to_string(o.max_inputs);
    out += o.name + std::string(o.name.size() < 14 ? 14 - o.name.size() : 1, ' ') + "in " + inputs +
           "  fields: " + (fields.empty() ? "-" : fields) + "  params: " + (params.empty() ? "-" : params) +
           "  onnx: " + (onnx.empty() ? "-" : onnx) + "  runs: " + runs + "\n" + std::string(14, ' ') + o.summary + "\n";
  }
  out += "fusions (one unit each, in this order):\n";
  for (const nn::FusionInfo& f : nn::fusion_infos()) {
    std::string plans;
    for (const std::string& p : f.plans) plans += (plans.empty() ? "" : ", ") + p;
    out += "  " + f.name + "  plans: " + plans + "  layout: " + f.layout + "\n";
  }
  return out;
}

std::vector<std::string> activation_names() {
  std::vector<std::string> out;
  for (const nn::OpDesc* d : nn::op_table())
    if (d->activation) out.push_back(d->name);
  return out;
}

std::string activation_list() {
  const std::vector<std::string> n = activation_names();
  std::string out;
  for (size_t i = 0; i < n.size(); ++i) out += (i == 0 ? "" : i + 1 == n.size() ? " or " : ", ") + n[i];
  return out;
}

bool find_activation(std::string_view name, LayerKind* kind) {
  const nn::OpDesc* d = nn::find_op(name);
  if (!d || !d->activation) return false;
  *kind = d->kind;
  return true;
}

LayerSpec parse_layer_json(const std::string& text, const std::string& source) {
  const nn::JsonFields r{source};
  return nn::read_layer(r, parse_json(text, source, 8), "layer");
}

}  // namespace ember
