// The int8 lowering's state (int8plan::Impl): the compiler (int8_plan.cpp) that turns a quantized
// model into steps, run by Plan as the units of its lowered graph, and the parts that its QDQ export
// view and the quantized file's checks (int8_view.cpp) use.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/quant.h"
#include "kernels/int8_kernels.h"
#include "nn/graph.h"
#include "quant/int8_ops.h"
#include "quant/node_graph.h"
#include "quant/quant_math.h"

namespace ember {

namespace int8plan {
enum Form { kU8 = 0, kF32Nhwc = 1, kF32Nchw = 2 };  // flat tensors use kU8 and kF32Nchw
enum class Role { fallback, gemm, dw, relu8, pool8, flatten8, fused };

struct TensorInfo {
  QParams qp;
  int buf[3] = {-1, -1, -1};  // value per form (Impl::vals)
  int native = -1;            // the form its producer writes
  int C = 0, HW = 1;          // per-sample [C, H*W] (flat: HW 1)
  bool image = false;
  int hwc_from = -1;          // a flatten8 output: the image tensor whose NHWC order it keeps
};

struct Step {
  enum Kind { gemm, dw, relu8, pool8, fallback, convert } kind = fallback;
  int node = -1, op = -1;
  int tensor = -1, from = -1, to = -1;   // convert
  int in = -1, res = -1, out = -1;       // values (Impl::vals)
  std::vector<int> ins;                  // fallback: input values
  Int8Epilogue ep;
  std::string what;                      // for summary()
  // Its descriptor (the plan's UnitInfo): the model ops, algorithm, layout, weight format, post-ops
  // and scratch bytes.
  std::vector<std::string> ops, post_ops;
  std::string algorithm, layout, weight_format;
  size_t scratch = 0, packed_per_call = 0;  // an fp32 fallback's layer packs its weight per call
  double flops = 0;                      // per sample, the node's layer's (the fused ones' are not counted)
};
}  // namespace int8plan

namespace int8plan {
struct Impl {
  QuantizedWeights q;
  std::string where = "int8 plan";       // how its errors start (the file's name when the reader checks one)
  bool pack = true;                      // false: steps and checks only (no packed weights)
  bool file_checks = false;              // the quantized file's checks too (check_exact_u8_outputs)
  bool quantizing = false;               // `ember quantize` asks which ops are exact on u8: every max-pool
                                         // is, whatever pair calibration gave its output (it then gets its input's)
  quant::NodeGraph ng;
  int batch = 1, threads = 1;
  const Kernels* fk = nullptr;
  const Int8Kernels* k = nullptr;
  std::vector<Role> role;                // per node
  std::vector<int> final_of;             // per gemm/dw node: the tensor its fused step writes
  std::vector<int> res_of;               // per gemm/dw node: the residual tensor, or -1
  std::vector<int> bn_of;                // per gemm/dw node: the BatchNorm2d folded into it, or -1
  std::vector<TensorInfo> ts;
  struct Val {                           // a value of the lowered graph (its tensor id): a tensor in a form
    int tensor, form;
  };
  std::vector<Val> vals;                 // 0: the fp32 NCHW input
  std::vector<quant::GemmOp> gemms;
  std::vector<quant::DwOp> dws;
  std::vector<Step> steps;

  const nn::Graph& g() const { return ng.g; }
  std::string name(size_t t) const {
    return t == 0 ? "input" : g().nodes[size_t(g().tensors[t].producer)].param_prefix;
  }
};
}  // namespace int8plan

namespace int8plan {

inline bool exact_u8(Role r) { return r == Role::relu8 || r == Role::pool8 || r == Role::flatten8; }
[[noreturn]] inline void fail(const Impl& m, const quant::Problem& p) {
  throw Error(m.where + ": tensor '" + p.tensor + "': " + p.what);
}

// Roles, tensor forms and steps with their blocks (what compile places in the arena), every scale
// checked; with m.pack false, no weights are packed.
void build_steps(Impl& m);
// The int32 bias of node i's requantization in units of s_in s_w[k] (int8_plan.cpp); a, c: the
// affine of the BatchNorm2d it carries (with_bn false: the layer's own bias alone).
std::vector<int32_t> requant_bias(const Impl& m, int i, const QuantLayer& l, float s_in, std::vector<double>* a,
                                  std::vector<double>* c, bool with_bn = true);
// Layer l with the affine a folded in as the QDQ export writes it (int8_plan.cpp).
bool fold_affine(QuantLayer* l, const std::vector<double>& a, const std::vector<int32_t>& bias);
// The quantized file's check that each exact u8 op's own output pair is its input's (int8_view.cpp).
void check_exact_u8_outputs(const Impl& m);

}  // namespace int8plan
}  // namespace ember
