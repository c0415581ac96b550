// Dense targets for MSE and L1 (ember/train.h): an .npy array checked against the model's output
// and the data set's sample count, and each batch's rows copied into the plan by sample index.
#include <cmath>
#include <cstring>

#include "ember/error.h"
#include "ember/train.h"
#include "ember_support/files.h"

namespace ember {
namespace {

template <class T>
std::string dims_text(const std::vector<T>& v) {
  std::string t;
  for (T d : v) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "[" + t + "]";
}

// Whether shape is [count, *out], [count, size of out], or [count] for an output of one value.
bool fits(const std::vector<int64_t>& shape, const std::vector<int>& out, int64_t count, size_t per) {
  if (shape.empty() || shape[0] != count) return false;
  if (shape.size() == 1) return per == 1;
  if (shape.size() == 2 && uint64_t(shape[1]) == per) return true;
  if (shape.size() != out.size() + 1) return false;
  for (size_t i = 0; i < out.size(); ++i)
    if (shape[i + 1] != out[i]) return false;
  return true;
}

}  // namespace

Targets targets_of(NpyArray values, const std::vector<int>& output_dims, int64_t count, const std::string& name) {
  size_t per = 1;
  for (int d : output_dims) per *= size_t(d);
  std::vector<int64_t> want{count};
  want.insert(want.end(), output_dims.begin(), output_dims.end());
  if (!fits(values.shape, output_dims, count, per))
    throw Error(one_line(name) + ": shape: expected " + dims_text(want) + " (" + std::to_string(count) +
                " samples of the model's output" + (output_dims.size() > 1 ? ", or [" + std::to_string(count) + ", " + std::to_string(per) + "]" : "") +
                "), found " + dims_text(values.shape));
  for (size_t i = 0; i < values.size(); ++i)  // finite as float32 too: f32 plans read them so
    if (!std::isfinite(values.at(i)) || !std::isfinite(float(values.at(i))))
      throw Error(one_line(name) + ": value [" + std::to_string(i / per) + "][" + std::to_string(i % per) + "]: " +
                  std::to_string(values.at(i)) + "; targets must be finite (and within float32's range)");
  Targets t;
  t.values = std::move(values);
  t.count = count, t.per = per;
  return t;
}

void gather_targets(Plan& plan, const Targets& t, const int64_t* index, int n) {
  const size_t per = t.per;
  const bool dst64 = plan.dtype() == DType::f64;
  void* dst = plan.targets();
  for (int i = 0; i < n; ++i) {
    const size_t src = size_t(index[i]) * per, row = size_t(i) * per;
    if (!t.values.is_f64 && !dst64) {
      std::memcpy(static_cast<float*>(dst) + row, t.values.f32.data() + src, per * sizeof(float));
    } else if (t.values.is_f64 && dst64) {
      std::memcpy(static_cast<double*>(dst) + row, t.values.f64.data() + src, per * sizeof(double));
    } else {
      for (size_t k = 0; k < per; ++k) {
        if (dst64) static_cast<double*>(dst)[row + k] = double(t.values.f32[src + k]);
        else static_cast<float*>(dst)[row + k] = float(t.values.f64[src + k]);
      }
    }
  }
}

}  // namespace ember
