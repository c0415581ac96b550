// Constant folding for the importer: a node whose inputs are all constants is computed here when
// it is one of the shape-arithmetic ops exporters emit (torch.onnx writes F.pad's pads as
// ConstantOfShape -> Concat -> Reshape -> Slice -> Transpose -> Reshape -> Cast). Results are
// capped at kMaxFolded elements, so a lying shape cannot make the importer allocate much.
#include <algorithm>
#include <climits>
#include <cmath>

#include "ember/error.h"
#include "onnx/onnx_import_ops.h"

namespace ember::onnx {

namespace {

constexpr size_t kMaxFolded = size_t(1) << 22;  // elements of one folded value
constexpr size_t kMaxRank = 8;

void check_rank(size_t rank, const std::string& where) {
  if (rank > kMaxRank) throw Error(where + ": a folded constant of rank " + std::to_string(rank) + " (at most 8)");
}

size_t count_of(const std::vector<int64_t>& dims, const std::string& where) {
  size_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || uint64_t(d) > kMaxFolded || (n *= size_t(d)) > kMaxFolded)
      throw Error(where + ": a folded constant of shape with " + std::to_string(d) + " is too large");
  }
  return n;
}

// out[k] = in[src[k]] for both the float and the integer values.
Const pick(const Const& in, const std::vector<size_t>& src, std::vector<int64_t> dims) {
  Const o;
  o.dims = std::move(dims), o.is_int = in.is_int;
  o.f.reserve(src.size());
  for (size_t s : src) o.f.push_back(in.f[s]);
  if (in.is_int)
    for (size_t s : src) o.i.push_back(in.i[s]);
  return o;
}

std::vector<size_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<size_t> st(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) st[k - 1] = st[k] * size_t(dims[k]);
  return st;
}

// Visits every index of `dims` in row-major order.
template <class F>
void each_index(const std::vector<int64_t>& dims, F f) {
  std::vector<int64_t> idx(dims.size(), 0);
  const size_t n = count_of(dims, "fold");
  for (size_t k = 0; k < n; ++k) {
    f(idx);
    for (size_t a = dims.size(); a-- > 0;) {
      if (++idx[a] < dims[a]) break;
      idx[a] = 0;
    }
  }
}

int64_t norm_axis(int64_t a, size_t rank, const std::string& where) {
  if (a < -int64_t(rank) || a >= int64_t(rank)) throw Error(where + ": axis " + std::to_string(a) + " out of range");
  if (a < 0) a += int64_t(rank);
  if (a < 0 || a >= int64_t(rank)) throw Error(where + ": axis " + std::to_string(a) + " out of range");
  return a;
}

Const reshape(const Const& c, const std::vector<int64_t>& shape, const std::string& where) {
  check_rank(shape.size(), where);
  std::vector<int64_t> dims;
  int64_t known = 1, minus = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t d = shape[k] == 0 && k < c.dims.size() ? c.dims[k] : shape[k];
    if (d == -1) {
      if (minus >= 0) throw Error(where + ": two -1 dims");
      minus = int64_t(k);
    } else if (d < 0 || uint64_t(d) > kMaxFolded) {
      throw Error(where + ": dim " + std::to_string(d) + " is negative or too large");
    } else if ((known *= std::max<int64_t>(d, 1)) > int64_t(kMaxFolded)) {
      throw Error(where + ": the shape is too large");
    }
    dims.push_back(d);
  }
  if (minus >= 0) dims[size_t(minus)] = known ? int64_t(c.count()) / known : 0;
  if (count_of(dims, where) != c.count()) throw Error(where + ": the shape does not hold " + std::to_string(c.count()) + " values");
  Const o = c;
  o.dims = dims;
  return o;
}

Const slice(const Const& c, const std::vector<const Const*>& in, const std::string& where) {
  const size_t rank = c.dims.size();
  std::vector<int64_t> start(rank, 0), step(rank, 1), dims = c.dims;
  const size_t n = in[1]->i.size();
  if (in[2]->i.size() != n) throw Error(where + ": starts and ends differ in length");
  const bool has_axes = in.size() > 3 && in[3], has_steps = in.size() > 4 && in[4];
  if (n > rank || (has_axes && in[3]->i.size() != n) || (has_steps && in[4]->i.size() != n))
    throw Error(where + ": starts, ends, axes and steps must have one value per sliced axis");
  for (size_t k = 0; k < n; ++k) {
    const int64_t a = has_axes ? norm_axis(in[3]->i[k], rank, where) : int64_t(k), d = c.dims[size_t(a)];
    // A step longer than the axis takes at most one value: clamping it keeps the arithmetic small.
    const int64_t s = std::clamp<int64_t>(has_steps ? in[4]->i[k] : 1, -(d + 1), d + 1);
    if (s == 0) throw Error(where + ": step 0");
    if (d == 0) {  // nothing to take (and no valid clamp range for a negative step)
      dims[size_t(a)] = 0;
      continue;
    }
    auto adj = [&](int64_t v) { return v < 0 ? v + d : v; };
    int64_t b = adj(in[1]->i[k]), e = adj(in[2]->i[k]);
    if (s > 0) b = std::clamp<int64_t>(b, 0, d), e = std::clamp<int64_t>(e, 0, d);
    else b = std::clamp<int64_t>(b, 0, d - 1), e = std::clamp<int64_t>(e, -1, d - 1);
    start[size_t(a)] = b, step[size_t(a)] = s;
    dims[size_t(a)] = std::max<int64_t>(0, s > 0 ? (e - b + s - 1) / s : (b - e - s - 1) / -s);
  }
  const auto st = strides_of(c.dims);
  std::vector<size_t> src;
  each_index(dims, [&](const std::vector<int64_t>& idx) {
    size_t off = 0;
    for (size_t a = 0; a < rank; ++a) off += size_t(start[a] + idx[a] * step[a]) * st[a];
    src.push_back(off);
  });
  return pick(c, src, dims);
}

Const transpose_const(const Const& c, std::vector<int64_t> perm, const std::string& where) {
  const size_t rank = c.dims.size();
  if (perm.empty())
    for (size_t a = rank; a-- > 0;) perm.push_back(int64_t(a));
  if (perm.size() != rank) throw Error(where + ": perm has " + std::to_string(perm.size()) + " axes, the constant " + std::to_string(rank));
  std::vector<int64_t> sorted = perm, dims;
  std::sort(sorted.begin(), sorted.end());
  for (size_t a = 0; a < rank; ++a)
    if (sorted.size() != rank || sorted[a] != int64_t(a)) throw Error(where + ": perm is not a permutation");
  for (int64_t p : perm) dims.push_back(c.dims[size_t(p)]);
  const auto st = strides_of(c.dims);
  std::vector<size_t> src;
  each_index(dims, [&](const std::vector<int64_t>& idx) {
    size_t off = 0;
    for (size_t a = 0; a < rank; ++a) off += size_t(idx[a]) * st[size_t(perm[a])];
    src.push_back(off);
  });
  return pick(c, src, dims);
}

}  // namespace

bool Importer::fold(int i) {
  const pb::NodeProto& n = g_.node(i);
  static const char* const ops[] = {"ConstantOfShape", "Concat", "Reshape", "Slice", "Transpose", "Cast",
                                    "Unsqueeze", "Squeeze", "Identity", "Neg"};
  if (std::find_if(std::begin(ops), std::end(ops), [&](const char* o) { return n.op_type() == o; }) == std::end(ops))
    return false;
  std::vector<const Const*> in;
  for (int k = 0; k < n.input_size(); ++k) {
    if (n.input(k).empty()) { in.push_back(nullptr); continue; }
    const Val& v = val(i, k);
    if (!v.is_const) return false;
    in.push_back(&v.c);
  }
  if (in.empty() || !in[0]) return false;
  const std::string w = where(i);
  const Attrs a(n, w);
  const std::string& op = n.op_type();
  const Const& c = *in[0];
  Val out;
  out.is_const = true;
  if (op == "ConstantOfShape") {
    Const o;
    o.dims = c.i;
    check_rank(o.dims.size(), w);
    const size_t count = count_of(o.dims, w);
    Const v = a.tensor("value") ? read_tensor(*a.tensor("value"), w + ": value") : Const{{1}, {0.f}, {}, false};
    if (v.count() != 1) throw Error(w + ": value must hold one value");
    o.is_int = v.is_int;
    o.f.assign(count, v.f[0]);
    if (v.is_int) o.i.assign(count, v.i[0]);
    out.c = std::move(o);
  } else if (op == "Concat") {  // of 1-D (or scalar) constants
    a.only({"axis"});
    if (a.i("axis", 0) != 0 && a.i("axis", 0) != -1) throw Error(w + ": only axis 0 of 1-D constants is folded");
    Const o;
    o.is_int = true;
    size_t total = 0;
    for (const Const* p : in) total += p ? p->count() : 0;
    if (total > kMaxFolded) throw Error(w + ": a folded constant of " + std::to_string(total) + " elements is too large");
    for (const Const* p : in) {
      if (!p || p->dims.size() > 1) throw Error(w + ": only 1-D constants are folded");
      o.is_int = o.is_int && p->is_int;
      o.f.insert(o.f.end(), p->f.begin(), p->f.end());
      o.i.insert(o.i.end(), p->i.begin(), p->i.end());
    }
    if (!o.is_int) o.i.clear();
    o.dims = {int64_t(o.f.size())};
    count_of(o.dims, w);
    out.c = std::move(o);
  } else if (op == "Reshape") {
    if (in.size() < 2 || !in[1]) throw Error(w + ": no shape");
    out.c = reshape(c, in[1]->i, w);
  } else if (op == "Slice") {
    if (in.size() < 3 || !in[1] || !in[2]) throw Error(w + ": starts and ends are needed");
    out.c = slice(c, in, w);
  } else if (op == "Transpose") {
    out.c = transpose_const(c, a.ints("perm", {}), w);
  } else if (op == "Cast") {
    const int64_t to = a.i("to", 1);
    if (to != pb::TensorProto::FLOAT && to != pb::TensorProto::DOUBLE && to != pb::TensorProto::INT32 &&
        to != pb::TensorProto::INT64)
      throw Error(w + ": Cast to type " + std::to_string(to) + " is not folded (float, double, int32, int64)");
    out.c = c;
    out.c.is_int = to == pb::TensorProto::INT64 || to == pb::TensorProto::INT32;
    out.c.i.clear();
    if (out.c.is_int) {
      if (c.is_int) out.c.i = c.i;
      else
        for (float f : c.f) {
          if (!(std::fabs(f) < 9.2e18f)) throw Error(w + ": " + std::to_string(f) + " does not fit an integer");
          out.c.i.push_back(int64_t(f));
        }
    }
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = in.size() > 1 && in[1] ? in[1]->i : a.ints("axes", {});
    out.c = c;
    if (op == "Squeeze") {
      std::vector<int64_t> dims;
      for (size_t k = 0; k < c.dims.size(); ++k)
        if (!(c.dims[k] == 1 && (axes.empty() || std::count(axes.begin(), axes.end(), int64_t(k)) ||
                                 std::count(axes.begin(), axes.end(), int64_t(k) - int64_t(c.dims.size())))))
          dims.push_back(c.dims[k]);
      out.c.dims = dims;
    } else {
      const size_t rank = c.dims.size() + axes.size();
      check_rank(rank, w);
      for (int64_t& x : axes) x = norm_axis(x, rank, w);
      std::sort(axes.begin(), axes.end());
      if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) throw Error(w + ": repeated axes");
      for (int64_t x : axes) out.c.dims.insert(out.c.dims.begin() + x, 1);
    }
  } else if (op == "Identity") {
    out.c = c;
  } else {  // Neg
    out.c = c;
    for (float& f : out.c.f) f = -f;
    for (int64_t& x : out.c.i) {
      if (x == INT64_MIN) throw Error(w + ": the negation of " + std::to_string(x) + " overflows");
      x = -x;
    }
  }
  if ((folded_ += out.c.count()) > kMaxFoldedTotal)
    throw Error(w + ": the folded constants hold more than " + std::to_string(kMaxFoldedTotal) + " elements in all");
  out.weight_name = n.output(0);
  set(i, 0, std::move(out));
  return true;
}

}  // namespace ember::onnx
