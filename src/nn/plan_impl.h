// The plan's private state (Plan::Impl), shared by plan.cpp (compiling a model: passes, buffer
// placement, binding) and plan_run.cpp (running it: forward, loss, backward, optimizer steps).
#pragma once
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/fp_mode.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "ember/plan.h"
#include "nn/graph.h"
#include "nn/layers.h"

namespace ember {

namespace plan_impl {
constexpr size_t kNone = SIZE_MAX;  // an arena offset that is not there
}  // namespace plan_impl


struct Plan::Impl {
  Model model;
  PlanOptions opt;
  const Kernels* k = nullptr;
  std::unique_ptr<ThreadPool> pool;
  // The floating-point mode (PlanOptions::denormals) on the calling thread for one public call
  // that computes; the pool's workers hold it already. Restores the caller's on return.
  FpModeScope fp_scope() const { return FpModeScope(opt.denormals == Denormals::flush); }
  Arena arena;
  size_t esz = 4;  // bytes per element
  nn::Graph g;                                   // nodes point into `model`
  std::vector<nn::Unit> us;                      // execution units, in order
  std::vector<size_t> act, grad;                 // per tensor, arena offsets (grad: plan_impl::kNone = none)
  std::vector<int> first_param;                  // per unit, index into params or -1
  std::vector<size_t> idx_off;                   // per unit, saved indices offset
  std::vector<size_t> saved_off;                 // per unit, its forward-to-backward state
  std::vector<bool> unused_at_zero;              // per tensor: its gradient is unused wherever it
                                                 // is 0 (and it has one reader)
  // Per unit and input: -1 writes the input's gradient directly (its first writer in backward
  // order), k >= 0 writes gradient scratch k, then adds it (a tensor read by several nodes).
  std::vector<std::vector<int>> dx_via;
  std::vector<size_t> dx_tmp;                    // gradient scratch offsets
  std::vector<ParamInfo> params;
  std::vector<LayerInfo> infos;
  std::vector<UnitInfo> units;
  std::vector<int> layer_unit;                   // per node, its unit
  // The background link (ops::Background) of a first conv unit and the Linear after its Flatten:
  // bg_unit[i] says whether unit i takes part (the conv and the Linear), both bound to `bg`.
  std::vector<bool> bg_unit;
  ops::Background bg{};
  // backward_step's overlap (Adam): the unit whose backward runs last takes, as side work, the
  // updates of every parameter of the later units, in chunks built once, in backward order.
  struct UpdateChunk {
    int param;
    size_t begin, end;
  };
  std::vector<UpdateChunk> side_chunks;
  int side_unit = -1;
  Profiler* prof = nullptr;
  // Plan::freeze: per unit, a Linear weight transposed to [in, out] (empty for other units).
  bool frozen = false;
  bool train_mode = true;                        // set from opt.training; Plan::set_train_mode
  std::vector<std::vector<float>> packed;
  size_t nparams = 0, param_off = 0, grad_off = 0, state_off[2] = {0, 0}, labels_off = 0, ws_off = 0;
  size_t targets_off = SIZE_MAX;                  // MSE, L1: [batch, output] of dtype (Plan::targets)
  size_t ws_elems = 0, flow_bytes = 0;           // shared scratch; the liveness-placed area
  int state_count = 0;
  int64_t step = 0;
  int64_t sample0 = 0;                           // Plan::set_sample_offset
  // bf16 plans: every parameter rounded to bf16 (the GEMMs read the weights' copies), rewritten by
  // each optimizer update in its own pass, and from the masters before a forward or backward after
  // anything else may have written them (init_params, the non-const param_data()).
  size_t wh_off = SIZE_MAX;
  bool wh_stale = true;
  uint64_t param_version = 0;                    // Bufs::param_version: moved with wh_stale
  // QAT (Model::qat): per parameter whether it is a fake-quantized weight; their copy (wq_off, the
  // parameters' offsets), made again before a pass when the step or the parameters moved.
  std::vector<bool> qat_weight;
  size_t wq_off = SIZE_MAX;
  int64_t wq_step = -1;
  uint64_t wq_version = ~uint64_t(0);
  bool count_flush = false;                      // Plan::set_flush_counting
  Plan::FlushCount flush;
  std::vector<double> in_scale, in_shift;        // per input channel: x = u8 * scale + shift

  template <class T> T* at(size_t off) const { return arena.at<T>(off); }
  ops::Exec exec(const ops::SideWork* side = nullptr) const {
    return {*k, *pool, side, opt.precision == Precision::bf16};
  }
  size_t out_tensor() const { return size_t(nn::output(g)); }
  size_t tensor_bytes(size_t t) const {
    return size_t(opt.batch) * g.tensors[t].dims.size() * (g.tensors[t].dtype == DType::u8 ? 1 : esz);
  }
  // An int8 plan: what its graph's nodes point into (the quantized model, packed int8 weights).
  std::shared_ptr<const void> lowered;
};

namespace plan_impl {
// An int8 plan's graph (src/quant/int8_plan.cpp lowers a quantized model to it): its int8 steps
// and fp32 nodes, the fp32 kernels they run with, what the nodes point into, and the fp32 values of
// the model's parameters (`params`, by name: the fp32 nodes' are copied into the plan's).
struct Lowered {
  nn::Graph g;
  const Kernels* k = nullptr;
  std::shared_ptr<const void> keep;
  const std::vector<float>* values = nullptr;
  const std::vector<ParamInfo>* params = nullptr;
};
// Compiles `model` (Plan's constructor), running `passes` on the graph after infer; with
// `lowered`, an inference plan of that graph instead of the model's (an int8 plan).
std::unique_ptr<Plan::Impl> compile(const Model& model, const PlanOptions& opt, const std::vector<nn::GraphPass>& passes,
                                    Lowered* lowered = nullptr);
// A plan compiled with graph passes (tests: a pass that inserts nodes changes no result).
Plan plan_with_passes(const Model& model, const PlanOptions& opt, const std::vector<nn::GraphPass>& passes);
// QAT: the fake-quantized weight copy from the masters (per output channel, ref_fake_quant.h),
// when the parameters were written (param_version) or, with `steps`, the optimizer stepped since
// it was made (plan_run.cpp). Backward passes steps false: backward_step counts its step before
// its updates, and the copy must still be made again after them.
void refresh_qat_weights(Plan::Impl& m, bool steps = true);

inline void check_thawed(const Plan::Impl& m, const char* what) {
  if (m.frozen)
    throw Error(std::string(what) + ": the plan is frozen for inference (Plan::freeze); thaw() it "
                "before changing its parameters");
}
}  // namespace plan_impl

}  // namespace ember
