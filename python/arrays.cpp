// numpy arrays for the Python module (arrays.h): the checks, naming the argument and the first bad
// element, and the copies into a plan's input; layer()'s fields (numpy scalars among them) as JSON.
#include "arrays.h"

#include <climits>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ember/ember.h"

namespace ember_py {
namespace {
// float32 input must be finite: NaN or Inf would pass through ReLU and pooling as 0 or a silent
// loss (the CLI's data are bytes, which cannot hold either). Names the first element, "x[7, 0, 3, 4]".
// Tested on the bits (exponent all ones), whatever the compiler assumes about floating point.
void check_finite(const Samples& s, const char* arg) {
  const float* v = static_cast<const float*>(s.buf.ptr);
  const auto bits = [&](size_t i) {
    uint32_t b;
    std::memcpy(&b, v + i, sizeof b);
    return b;
  };
  const size_t count = size_t(s.n) * s.per, block = 4096;
  size_t at = 0;
  for (; at < count; at += block) {  // a branch-free scan per block
    uint32_t any = 0;
    for (size_t i = at, end = std::min(count, at + block); i < end; ++i) any |= uint32_t((bits(i) & 0x7f800000u) == 0x7f800000u);
    if (any) break;
  }
  if (at >= count) return;
  while ((bits(at) & 0x7f800000u) != 0x7f800000u) ++at;
  const uint32_t bad = bits(at);
  std::string index;
  for (int d = s.buf.ndim - 1; d >= 0; --d) {
    const auto dim = size_t(s.buf.shape[size_t(d)]);
    index = std::to_string(at % dim) + (index.empty() ? "" : ", ") + index;
    at /= dim;
  }
  const char* what = (bad & 0x007fffffu) != 0 ? "nan" : (bad >> 31) != 0 ? "-inf" : "inf";
  throw py::value_error(std::string(arg) + "[" + index + "]: found " + what + "; float32 inputs must be finite numbers");
}

std::vector<int32_t> labels_of(const py::array& y, int64_t n, int classes) {
  if (y.ndim() != 1 || y.shape(0) != n) {  // "found 49", or "found a 2-dimensional array [50, 1]"
    std::string found;
    if (y.ndim() == 1) found = std::to_string(y.shape(0));
    else {
      found.append("a ").append(std::to_string(y.ndim())).append("-dimensional array [");
      for (py::ssize_t d = 0; d < y.ndim(); ++d) found.append(d ? ", " : "").append(std::to_string(y.shape(d)));
      found.append("]");
    }
    throw py::value_error("y: expected " + std::to_string(n) + (n == 1 ? " label" : " labels") +
                          " (one per sample of x), found " + found);
  }
  if (y.dtype().kind() != 'i' && y.dtype().kind() != 'u') throw py::value_error("y: expected integer labels");
  const py::array_t<int64_t, py::array::forcecast> v(y);  // labels are small: a copy is fine
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = v.at(i);
    if (l < 0 || l >= classes)
      throw py::value_error("y[" + std::to_string(i) + "]: label " + std::to_string(l) + " is outside [0, " +
                            std::to_string(classes) + ")");
    out[size_t(i)] = int32_t(l);
  }
  return out;
}

}  // namespace

Samples samples_of(const py::buffer& b, const ember::Model& m, const char* arg) {
  Samples s{b.request(), false, 0, 0};
  const auto& f = s.buf.format;
  s.u8 = f == py::format_descriptor<uint8_t>::format();
  if (!s.u8 && f != py::format_descriptor<float>::format())
    throw py::value_error(std::string(arg) + ": expected a uint8 or float32 array, found format '" + f + "'");
  const std::vector<py::ssize_t> want = {m.in_c, m.in_h, m.in_w};
  // [N, H, W] for one channel; [N, C, L] for a sequence (the model's input [C, 1, L]); [N, F] for a
  // vector input (the model's input [F, 1, 1]); [N] for one value (the model's input [1, 1, 1]).
  const bool grey3 = s.buf.ndim == 3 && m.in_c == 1, seq3 = s.buf.ndim == 3 && m.in_h == 1 && !grey3;
  const bool vec2 = s.buf.ndim == 2 && m.in_h == 1 && m.in_w == 1, one1 = s.buf.ndim == 1 && m.in_c * m.in_h * m.in_w == 1;
  if (s.buf.ndim != 4 && !grey3 && !seq3 && !vec2 && !one1)
    throw py::value_error(std::string(arg) + ": expected shape [N, C, H, W] (or [N, H, W] for one channel, [N, C, L] " +
                          "for an input [C, 1, L], [N, F] for a vector input), found " + std::to_string(s.buf.ndim) +
                          " dimensions");
  for (int d = 1; d < s.buf.ndim; ++d) {
    const py::ssize_t w = want[size_t(d - 1 + (grey3 || (seq3 && d == 2) ? 1 : 0))];
    if (s.buf.shape[size_t(d)] != w)
      throw py::value_error(std::string(arg) + ": dimension " + std::to_string(d) + " is " +
                            std::to_string(s.buf.shape[size_t(d)]) + ", the model's input is [" + std::to_string(m.in_c) +
                            ", " + std::to_string(m.in_h) + ", " + std::to_string(m.in_w) + "]");
  }
  py::ssize_t stride = s.buf.itemsize;  // C-contiguous: each stride the product of the later dims
  for (int d = s.buf.ndim - 1; d >= 0; --d) {
    if (s.buf.strides[size_t(d)] != stride)
      throw py::value_error(std::string(arg) + ": the array is not C-contiguous (use numpy.ascontiguousarray)");
    stride *= s.buf.shape[size_t(d)];
  }
  s.n = s.buf.shape[0];
  s.per = size_t(m.in_c) * m.in_h * m.in_w;
  if (s.n < 1) throw py::value_error(std::string(arg) + ": no samples");
  if (!s.u8) check_finite(s, arg);
  return s;
}

Truth truth_of(const py::array& y, int64_t n, const ember::Model& m) {
  Truth t;
  const char kind = y.dtype().kind();
  if (!ember::loss_takes_targets(m.loss) || kind != 'f') {  // numpy's floats, any width
    t.labels = labels_of(y, n, m.num_classes);
    return t;
  }
  std::vector<int> out;
  try {
    out = ember::model_output_dims(m);
  } catch (const ember::Error& e) {
    throw py::value_error(e.what());
  }
  size_t per = 1;
  std::string want = "[" + std::to_string(n);
  for (int v : out) per *= size_t(v), want += ", " + std::to_string(v);
  want += "]";
  size_t got = 1;
  for (py::ssize_t d = 1; d < y.ndim(); ++d) got *= size_t(y.shape(d));
  const bool same = y.ndim() >= 1 && y.shape(0) == n && got == per &&
                    (y.ndim() == py::ssize_t(out.size()) + 1 || y.ndim() == 2 || (y.ndim() == 1 && per == 1));
  if (!same) {
    std::string found = "[";
    for (py::ssize_t d = 0; d < y.ndim(); ++d) found += (d ? ", " : "") + std::to_string(y.shape(d));
    throw py::value_error("y: the loss " + std::string(ember::loss_kind_name(m.loss)) + " takes targets of the output's shape " +
                          want + ", found " + found + "]");
  }
  t.targets = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(y);
  t.per = per;
  const float* v = t.targets.data();
  for (size_t i = 0; i < size_t(n) * per; ++i)
    if (!std::isfinite(v[i])) throw py::value_error("y: target " + std::to_string(i) + " is " + std::to_string(v[i]) + "; targets must be finite");
  return t;
}

// Sample i of s as the model's input (u8: x / 255) into dst [C, H, W].
void copy_sample(const Samples& s, int64_t i, float* dst) {
  const size_t at = size_t(i) * s.per;
  if (s.u8) {
    const uint8_t* src = static_cast<const uint8_t*>(s.buf.ptr) + at;
    for (size_t d = 0; d < s.per; ++d) dst[d] = src[d] * (1.0f / 255.0f);
  } else {
    std::memcpy(dst, static_cast<const float*>(s.buf.ptr) + at, s.per * sizeof(float));
  }
}

// Copies samples index[0 .. n) into the plan's input and their labels.
void load_batch(ember::Plan& plan, const Samples& s, const Truth* truth, const int64_t* index, int n) {
  const int32_t* labels = truth ? truth->label_data() : nullptr;
  float* in = static_cast<float*>(plan.input());
  for (int i = 0; i < n; ++i) {
    copy_sample(s, index[i], in + size_t(i) * s.per);
    if (labels) plan.labels()[i] = labels[index[i]];
    if (truth && truth->per)
      std::memcpy(static_cast<float*>(plan.targets()) + size_t(i) * truth->per, truth->targets.data() + size_t(index[i]) * truth->per,
                  truth->per * sizeof(float));
  }
  if (labels && ember::loss_takes_targets(plan.model().loss)) plan.one_hot_targets(n);
}

void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

namespace {
// One field's value for json.dumps, checked (layer_json).
py::object json_value(py::handle v, const std::string& field, std::vector<HugeInt>* huge) {
  const py::module_ np = py::module_::import("numpy");
  if (py::isinstance<py::bool_>(v) || py::isinstance(v, np.attr("bool_"))) return py::bool_(PyObject_IsTrue(v.ptr()) == 1);
  if (py::isinstance<py::int_>(v) || py::isinstance(v, np.attr("integer"))) {
    const auto i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0) return py::int_(x);
    const long long bound = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    huge->push_back({field, std::to_string(bound), py::repr(i).cast<std::string>()});
    return py::int_(bound);
  }
  if (py::isinstance<py::float_>(v) || py::isinstance(v, np.attr("floating"))) {
    const double d = PyFloat_AsDouble(v.ptr());
    if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    if (!std::isfinite(d))
      throw py::value_error("layer(): " + field + ": expected a finite number, found " + (std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf"));
    return py::float_(d);
  }
  if (py::isinstance<py::str>(v) || v.is_none()) return py::reinterpret_borrow<py::object>(v);
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    py::list out;
    size_t i = 0;
    for (py::handle item : v) out.append(json_value(item, field + "[" + std::to_string(i++) + "]", huge));
    return out;
  }
  throw py::value_error("layer(): " + field + ": expected a number, a bool, a string or a list of them, found a " +
                        py::str(py::type::handle_of(v).attr("__name__")).cast<std::string>());
}
}  // namespace

std::string layer_json(const std::string& type, const py::kwargs& fields, std::vector<HugeInt>* huge) {
  py::dict d;
  d["type"] = type;
  for (auto item : fields) d[item.first] = json_value(item.second, "layer." + py::str(item.first).cast<std::string>(), huge);
  return py::module_::import("json").attr("dumps")(d, py::arg("allow_nan") = false).cast<std::string>();
}

}  // namespace ember_py
