// The op table assembled from the generated list of op files (op_list.inc), and what every op
// shares: reading a layer's JSON object through its descriptor (every key checked, unknown keys
// refused, errors naming the file and the JSON path) and writing it back, and the pieces of the
// op files' descriptors and ONNX mappings.
#include "nn/op_table.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "ember/error.h"
#include "fs/json_read.h"

namespace ember {

const char* param_role_name(ParamRole r) {
  switch (r) {
    case ParamRole::weight: return "weight";
    case ParamRole::bias: return "bias";
    case ParamRole::norm_scale: return "norm_scale";
    case ParamRole::norm_shift: return "norm_shift";
    case ParamRole::layer_scale: return "layer_scale";
    case ParamRole::running_stat: return "running_stat";
  }
  return "?";
}
bool param_decays(ParamRole r) {
  return r == ParamRole::weight || r == ParamRole::norm_scale || r == ParamRole::layer_scale;
}
bool param_trained(ParamRole r) { return r != ParamRole::running_stat; }

namespace nn {

#define EMBER_OP(stem) const OpDesc& op_desc_##stem();
#include "op_list.inc"
#undef EMBER_OP

const std::vector<const OpDesc*>& op_table() {
  static const std::vector<const OpDesc*> table = [] {
    std::vector<const OpDesc*> t = {
#define EMBER_OP(stem) &op_desc_##stem(),
#include "op_list.inc"
#undef EMBER_OP
    };
    std::sort(t.begin(), t.end(), [](const OpDesc* a, const OpDesc* b) { return int(a->kind) < int(b->kind); });
    return t;
  }();
  return table;
}

const OpDesc& op_desc(LayerKind kind) {
  for (const OpDesc* d : op_table())
    if (d->kind == kind) return *d;
  throw Error("internal: no op table entry for layer kind " + std::to_string(int(kind)));
}

const OpDesc* find_op(std::string_view name) {
  for (const OpDesc* d : op_table())
    if (name == d->name) return d;
  return nullptr;
}

// ---- JSON values ----

void JsonFields::fail(const std::string& path, const std::string& msg) const {
  throw Error(source + ": " + path + ": " + msg);
}

int JsonFields::integer(const json& j, const std::string& path, int lo, int hi) const {
  if (!j.is_number_integer()) fail(path, "expected an integer, found " + json_brief(j));
  // Unsigned values above INT64_MAX would wrap in get<long long>(); they are out of range anyway.
  const bool big = j.is_number_unsigned() && j.get<unsigned long long>() > (unsigned long long)hi;
  const long long v = big ? (long long)hi + 1 : j.get<long long>();
  if (v < lo || v > hi)
    fail(path, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                   (big ? json_text(j) : std::to_string(v)));
  return int(v);
}

void JsonFields::pair(const json& j, const std::string& path, int lo, int hi, int* h, int* w) const {
  if (j.is_array()) {
    if (j.size() != 2) fail(path, "expected an integer or [h, w], found " + json_brief(j));
    *h = integer(j[0], path + "[0]", lo, hi);
    *w = integer(j[1], path + "[1]", lo, hi);
  } else {
    *h = *w = integer(j, path, lo, hi);
  }
}

bool JsonFields::boolean(const json& j, const std::string& path) const {
  if (!j.is_boolean()) fail(path, "expected true or false, found " + json_brief(j));
  return j.get<bool>();
}

double JsonFields::number(const json& j, const std::string& path, double lo, double hi, bool open_lo, bool open_hi,
                          const std::string& expected) const {
  const double v = j.is_number() ? j.get<double>() : NAN;
  const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && (open_hi ? v < hi : v <= hi);
  if (!ok) fail(path, "expected " + expected + ", found " + json_brief(j));
  return v;
}

Init JsonFields::init(const json& j, const std::string& path) const {
  const std::string v = j.is_string() ? j.get<std::string>() : "";
  if (v == "kaiming" || v == "he") return Init::Kaiming;
  if (v == "xavier" || v == "glorot") return Init::Xavier;
  if (v == "torch") return Init::Torch;
  if (v == "trunc_normal") return Init::TruncNormal;
  fail(path, "expected \"kaiming\", \"xavier\", \"torch\" or \"trunc_normal\", found " + json_brief(j));
}

std::string json_key(const std::string& key) {
  constexpr size_t kShown = 60;  // characters of a key quoted in a message
  const bool plain = !key.empty() && key.size() <= kShown &&
                     std::all_of(key.begin(), key.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; });
  return plain ? key : json_brief(json(key));
}

namespace {

// "a, b or c" of the table's names.
std::string op_names() {
  std::string out;
  const auto& t = op_table();
  for (size_t i = 0; i < t.size(); ++i) out += (i == 0 ? "" : i + 1 == t.size() ? " or " : ", ") + std::string(t[i]->name);
  return out;
}

// "name" (a string) and "inputs" (a name or an array of 1 to 8 names), allowed on every layer.
void read_links(const JsonFields& r, const json& j, const std::string& path, LayerSpec& s) {
  auto name = [&](const json& v, const std::string& at) {
    if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 128)
      r.fail(at, "expected a layer name (a string of 1 to 128 characters), found " + json_brief(v));
    return v.get<std::string>();
  };
  if (j.contains("name")) s.name = name(j["name"], path + ".name");
  if (!j.contains("inputs")) return;
  const json& in = j["inputs"];
  if (in.is_string()) {
    s.inputs.push_back(name(in, path + ".inputs"));
    return;
  }
  if (!in.is_array() || in.empty() || in.size() > 8)
    r.fail(path + ".inputs", "expected a layer name or an array of 1 to 8 names, found " + json_brief(in));
  for (size_t i = 0; i < in.size(); ++i) s.inputs.push_back(name(in[i], path + ".inputs[" + std::to_string(i) + "]"));
}

// Every key of j is "type", "name", "inputs" or one of the op's fields.
void check_keys(const JsonFields& r, const json& j, const std::string& path, const OpDesc& d) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    bool ok = k == "type" || k == "name" || k == "inputs";
    for (const OpField& f : d.fields) ok = ok || k == f.key;
    if (ok) continue;
    std::string list = "type, name, inputs";
    for (const OpField& f : d.fields) list += ", " + std::string(f.key);
    r.fail(path + "." + json_key(k), "unknown key (expected one of " + list + ")");
  }
}

}  // namespace

LayerSpec read_layer(const JsonFields& r, const json& j, const std::string& path) {
  if (!j.is_object()) r.fail(path, "expected an object, found " + json_brief(j));
  if (!j.contains("type") || !j["type"].is_string()) r.fail(path + ".type", "missing layer type");
  const OpDesc* d = find_op(j["type"].get<std::string>());
  if (!d) r.fail(path + ".type", "unknown layer " + json_brief(j["type"]) + " (expected " + op_names() + ")");
  LayerSpec s;
  s.kind = d->kind;
  read_links(r, j, path, s);
  check_keys(r, j, path, *d);
  for (const OpField& f : d->fields) {
    if (j.contains(f.key)) f.read(r, j[f.key], path + "." + f.key, s);
    else if (!f.fallback) r.fail(path + "." + f.key, "missing");
  }
  return s;
}

json write_layer(const LayerSpec& s) {
  const OpDesc& d = op_desc(s.kind);
  json j{{"type", d.name}};
  if (!s.name.empty()) j["name"] = s.name;
  if (!s.inputs.empty()) j["inputs"] = s.inputs;
  for (const OpField& f : d.fields) f.write(s, j);
  return j;
}

// ---- building blocks of the op files ----

OpDesc make_op(LayerKind kind, const char* name, const char* summary) {
  OpDesc d;
  d.kind = kind, d.name = name, d.summary = summary;
  return d;
}

std::vector<const char*> all_dtypes() { return {"f32", "f64", "bf16"}; }
std::vector<const char*> fp_dtypes() { return {"f32", "f64"}; }

namespace {
bool lists(const std::vector<const char*>& v, std::string_view what) {
  return std::find_if(v.begin(), v.end(), [&](const char* s) { return what == s; }) != v.end();
}
}  // namespace
bool op_declares_layout(LayerKind kind, std::string_view what) { return lists(op_desc(kind).layouts, what); }
bool op_declares_dtype(LayerKind kind, std::string_view what) { return lists(op_desc(kind).dtypes, what); }

std::string example_model(const std::string& op, const std::string& layers_json) {
  return "{\"name\": \"example-" + op + "\", \"input\": [1, 28, 28], \"classes\": 10, \"layers\": [" + layers_json + "]}";
}

OpDesc activation_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx) {
  OpDesc d = make_op(kind, name, summary);
  d.activation = true;
  d.onnx = std::move(onnx);
  d.layouts = {"nchw", "flat", "nhwc"};  // elementwise: either image layout
  d.dtypes = fp_dtypes();
  d.example = example_model(name, R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": ")" +
                                      std::string(name) +
                                      R"("}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
  return d;
}

OpDesc activation_op(LayerKind kind, const char* name, const char* summary, std::vector<const char*> onnx,
                     decltype(OpDesc::make) make, decltype(OpDesc::onnx_export) onnx_export,
                     decltype(OpDesc::onnx_import) onnx_import) {
  OpDesc d = activation_op(kind, name, summary, std::move(onnx));
  d.make = make;
  d.onnx_export = onnx_export;
  d.onnx_import = onnx_import;
  return d;
}

OpDesc pool_op(LayerKind kind, const char* name, const char* summary, const char* onnx) {
  OpDesc o = make_op(kind, name, summary);
  o.onnx = {onnx};
  o.layouts = {"nchw"};
  o.dtypes = fp_dtypes();
  OpField kernel = kernel_field(true);  // also the stride, unless "stride" is given
  kernel.read = [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
    r.pair(v, p, 1, 4096, &s.kernel_h, &s.kernel_w);
    s.stride_h = s.kernel_h, s.stride_w = s.kernel_w;
  };
  OpField end = {"padding_end", "int or [h, w]", "the padding",  // ONNX's asymmetric pads, SAME_UPPER, ceil_mode
                 [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
                   r.pair(v, p, 0, 4096, &s.pad_h_end, &s.pad_w_end);
                 },
                 [](const LayerSpec& s, json& o) {
                   if (s.pad_h_end >= 0 && (s.pad_h_end != s.pad_h || s.pad_w_end != s.pad_w)) o["padding_end"] = s.pad_h_end == s.pad_w_end ? json(s.pad_h_end) : json::array({s.pad_h_end, s.pad_w_end});
                 }};
  o.fields = {kernel, stride_field("the kernel"), padding_field(false, false), end};
  o.example = example_model(name, R"({"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1}, {"type": "relu"}, {"type": ")" +
                                      std::string(name) + R"(", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
  return o;
}

OpDesc join_op(LayerKind kind, const char* name, const char* summary, const char* onnx) {
  OpDesc o = make_op(kind, name, summary);
  o.min_inputs = 2, o.max_inputs = 8;
  o.onnx = {onnx};
  o.layouts = {"nchw", "flat"};
  o.dtypes = fp_dtypes();
  o.example = example_model(name, R"({"type": "conv2d", "name": "a", "out_channels": 4, "kernel": 3, "padding": 1}, )"
                                  R"({"type": "relu", "name": "b"}, {"type": ")" + std::string(name) + R"(", "inputs": ["a", "b"]}, )"
                                  R"({"type": "maxpool2d", "kernel": 2}, {"type": "flatten"}, {"type": "linear", "out_features": 10})");
  return o;
}

namespace {
json hw(int h, int w) { return h == w ? json(h) : json::array({h, w}); }
}  // namespace

OpField kernel_field(bool required) {
  return {"kernel", "int or [h, w]", required ? nullptr : "1",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { r.pair(v, p, 1, 4096, &s.kernel_h, &s.kernel_w); },
          [](const LayerSpec& s, json& o) { o["kernel"] = hw(s.kernel_h, s.kernel_w); }};
}

OpField stride_field(const char* fallback) {
  return {"stride", "int or [h, w]", fallback,
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { r.pair(v, p, 1, 4096, &s.stride_h, &s.stride_w); },
          [](const LayerSpec& s, json& o) { o["stride"] = hw(s.stride_h, s.stride_w); }};
}

OpField padding_field(bool same, bool required) {
  if (same)
    return {"padding", "int, [h, w] or \"same\"", "0",
            [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) {
              if (v == "same") s.same = true;
              else r.pair(v, p, 0, 4096, &s.pad_h, &s.pad_w);
            },
            [](const LayerSpec& s, json& o) { o["padding"] = s.same ? json("same") : hw(s.pad_h, s.pad_w); }};
  return {"padding", "int or [h, w]", required ? nullptr : "0",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { r.pair(v, p, 0, 4096, &s.pad_h, &s.pad_w); },
          [](const LayerSpec& s, json& o) { o["padding"] = hw(s.pad_h, s.pad_w); }};
}

OpField bias_field() {
  return {"bias", "bool", "true",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.bias = r.boolean(v, p); },
          [](const LayerSpec& s, json& o) { o["bias"] = s.bias; }};
}

OpField init_field() {
  return {"init", "\"kaiming\", \"xavier\", \"torch\" or \"trunc_normal\"", "the model's init",
          [](const JsonFields& r, const json& v, const std::string& p, LayerSpec& s) { s.init = r.init(v, p); },
          [](const LayerSpec& s, json& o) {
            if (s.init) o["init"] = init_name(*s.init);
          }};
}

std::vector<OpParam> weight_and_bias(const LayerSpec& s) {
  if (!s.bias) return {{"weight", ParamRole::weight}};
  return {{"weight", ParamRole::weight}, {"bias", ParamRole::bias}};
}

// ---- ONNX ----

std::string OnnxOut::flat(const std::string& v) { return rank(v) == 2 ? v : op("Flatten", {v}, {}, 2); }
std::string OnnxOut::img(const std::string& v) { return rank(v) == 4 ? v : op("Unsqueeze", {v, ints({2, 3})}, {}, 4); }

int onnx_rank(OnnxLayout l) {
  switch (l) {
    case OnnxLayout::Flat: return 2;
    case OnnxLayout::NCL: return 3;
    case OnnxLayout::Vec: return 1;
    default: return 4;
  }
}

std::string onnx_ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

// A 1-D window's lifted 2-D form ([1, k], [0, b, 0, e], as window_ints makes it) shown as [k], [b, e].
std::string onnx_win_str(const std::vector<int64_t>& v, bool one_d) {
  if (one_d && v.size() == 2) return onnx_ints_str({v[1]});
  if (one_d && v.size() == 4) return onnx_ints_str({v[1], v[3]});
  return onnx_ints_str(v);
}

bool onnx_all_are(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == x; });
}

bool OnnxIn::scalar_near(const std::string& value, float c) const {
  return std::fabs(scalar(value) - c) <= 1e-6f * std::fabs(c);
}

std::vector<std::string> join_inputs(OnnxOut& g) {
  int rank = 4;
  for (int k = 0; k < g.input_count(); ++k) rank = std::min(rank, g.rank(g.input(k)));
  std::vector<std::string> in;
  for (int k = 0; k < g.input_count(); ++k) in.push_back(rank == 2 ? g.flat(g.input(k)) : g.input(k));
  return in;
}

std::vector<const char*> OpDesc::onnx_alone() const {
  std::vector<const char*> v;
  if (onnx_import && onnx.size() == 1) v.push_back(onnx[0]);
  if (onnx_import) v.insert(v.end(), onnx_from.begin(), onnx_from.end());
  return v;
}

std::string onnx_shown(const std::string& s) { return s.size() <= 120 ? s : s.substr(0, 120) + "..."; }

bool import_join(OnnxIn& g, int i, bool concat) {
  const int n = g.input_count(i);
  if (n == 1) {  // Sum or Concat of one tensor: the tensor itself
    g.attrs(i).only({concat ? "axis" : "consumed_inputs"});
    g.set(i, 0, g.tensor(i, 0));
    return true;
  }
  if (n < 2 || n > kMaxInputs) throw Error(g.where(i) + ": expected 2 to " + std::to_string(kMaxInputs) + " inputs");
  std::vector<const OnnxValue*> in;
  const OnnxValue& x0 = g.tensor(i, 0);
  Dims d = x0.d;
  int64_t c = 0;
  for (int k = 0; k < n; ++k) {
    if (concat && g.val(i, k).is_const)
      throw Error(g.where(i) + ": input " + std::to_string(k) + " is a constant; ember's concat joins tensors only");
    const OnnxValue& v = g.tensor(i, k);
    if (v.lay != x0.lay) throw Error(g.where(i) + ": inputs in different layouts");
    if (v.d.h != d.h || v.d.w != d.w || (!concat && v.d.c != d.c)) throw Error(g.where(i) + ": inputs of different shapes");
    c += v.d.c;
    in.push_back(&v);
  }
  LayerSpec s;
  s.kind = concat ? LayerKind::Concat : LayerKind::Add;
  const OnnxAttrs& a = g.attrs(i);
  if (!concat) a.only({"consumed_inputs"});  // Sum-1..6's hint; Add-1..6's broadcast is refused
  if (concat) {
    a.only({"axis"});
    const int64_t axis = a.i("axis", 1), lay_axis = x0.lay == OnnxLayout::NHWC ? 3 : 1;
    if (x0.lay == OnnxLayout::Vec || (axis != lay_axis && axis != lay_axis - onnx_rank(x0.lay)))
      throw Error(g.where(i) + ": only concatenation over channels is supported, found axis " + std::to_string(axis));
    if (c > 65536 * 64) throw Error(g.where(i) + ": " + std::to_string(c) + " channels in all is too many");
    d.c = int(c);
  }
  g.set(i, 0, g.emit_layer(s, in, "", d, x0.lay));
  return true;
}

bool onnx_import_node(OnnxIn& g, int node, LayerKind kind) {
  if (g.input_count(node) != 1) return false;
  LayerSpec s;
  s.kind = kind;
  g.emit({node}, g.input(node, 0), s);
  return true;
}

}  // namespace nn
}  // namespace ember
