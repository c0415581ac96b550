// numpy arrays for the Python module (ember_module.cpp): samples and targets read in place, checked
// with ValueErrors naming the argument, and copied into a plan's input; Ctrl-C between steps;
// layer()'s keyword fields (Python or numpy scalars) as checked JSON.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ember/plan.h"

namespace ember_py {
namespace py = pybind11;

// A batch of samples [N, C, H, W] (or [N, H, W] for one channel) of uint8 or float32, C-contiguous;
// and labels [N] of any integer type. Checked with ValueErrors naming the argument.
struct Samples {
  py::buffer_info buf;
  bool u8 = false;
  int64_t n = 0;
  size_t per = 0;  // elements per sample
};

// s from b: a uint8 or float32 array of the model's input shape (float32: finite), else ValueError
// naming `arg`.
Samples samples_of(const py::buffer& b, const ember::Model& m, const char* arg);

// What y holds: class labels [N] (integers), or for MSE and L1 dense targets of the output's
// shape [N, *output] (float; [N, F] for a flat output of F, [N] when F is 1).
struct Truth {
  std::vector<int32_t> labels;
  py::array_t<float, py::array::c_style | py::array::forcecast> targets;
  size_t per = 0;  // target elements per sample (0: labels)
  const int32_t* label_data() const { return per == 0 ? labels.data() : nullptr; }
};

// y checked against n samples and the model's loss (labels in [0, classes), or finite targets).
Truth truth_of(const py::array& y, int64_t n, const ember::Model& m);
// Sample i of s as the model's input (u8: x / 255) into dst [C, H, W].
void copy_sample(const Samples& s, int64_t i, float* dst);
// Copies samples index[0 .. n) into the plan's input and their labels (or targets).
void load_batch(ember::Plan& plan, const Samples& s, const Truth* truth, const int64_t* index, int n);
// With the GIL: Ctrl-C becomes KeyboardInterrupt here, between steps.
void check_signals();

// layer(type, **fields) as the JSON text of one layer: numpy integer, float and bool scalars taken
// as Python's (in lists too). A NaN or infinite float, or a value JSON cannot hold, is a ValueError
// naming the field ("layer(): layer.eps: ..."). An int beyond 64 bits is written as the int64 bound
// of its sign and listed in *huge with its exact digits, for the caller to name in the parser's error.
struct HugeInt {
  std::string field, bound, exact;  // "layer.kernel[1]", "9223372036854775807", its true digits
};
std::string layer_json(const std::string& type, const py::kwargs& fields, std::vector<HugeInt>* huge);

}  // namespace ember_py
