// The denormal mode (PlanOptions::denormals, core/fp_mode.h): flush-to-zero and denormals-are-zero
// in every part of a pool run and for the length of every plan call, the caller's MXCSR given back
// unchanged, and products that go denormal computed the same on every kernel set and thread
// count: zero when flushed, the exact IEEE value when kept.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/fp_mode.h"
#include "core/thread_pool.h"
#include "ember/ember.h"
#include "kernels/kernels.h"

namespace ember::test {
namespace {

#if defined(__x86_64__) || defined(__i386__)

// The control bits of MXCSR (rounding, masks, FTZ, DAZ): bits 0-5 are sticky exception flags,
// which any arithmetic may raise.
uint32_t control() { return fp_control() & ~0x3Fu; }
// The caller's control word with the mode opposite to `flush`, so a scope that forgot to set or
// restore it shows.
uint32_t opposite(bool flush) { return fp_control_for(fp_control(), !flush); }

// Restores this thread's control word when a test ends (a failed check must not leak FTZ), and
// in between gives it back for the checks: with DAZ on, comparing a denormal result to 0 (or
// printing it) reads it as 0, so values are checked in IEEE mode.
struct KeepCsr {
  uint32_t saved = fp_control_for(fp_control(), false);
  void ieee() const { set_fp_control(saved); }
  ~KeepCsr() { set_fp_control(saved); }
};

TEST(Denormals, ScopeSetsTheModeAndRestoresTheCallers) {
  KeepCsr keep;
  for (bool flush : {true, false}) {
    const uint32_t before = opposite(flush);
    set_fp_control(before);
    {
      const FpModeScope s(flush);
      EXPECT_EQ(fp_flushes(), flush);
      {
        const FpModeScope inner(flush);  // nested: no change
        EXPECT_EQ(fp_flushes(), flush);
      }
      EXPECT_EQ(fp_flushes(), flush);
      volatile float tiny = 1e-30f, scale = 1e-10f;
      const float p = tiny * scale;  // 1e-40: a denormal result
      EXPECT_EQ(p == 0.f, flush);
    }
    EXPECT_EQ(control(), before & ~0x3Fu) << "flush " << flush;
  }
}

// Every part of every run sees the pool's mode, whichever thread runs it (the caller included),
// and the caller has its own control word back after each run.
TEST(Denormals, PoolPartsRunInThePoolsModeOnEveryThread) {
  KeepCsr keep;
  for (bool flush : {true, false}) {
    ThreadPool pool(3, flush);
    const uint32_t before = opposite(flush);
    set_fp_control(before);
    std::atomic<int> wrong{0}, parts{0};
    std::mutex mu;
    std::set<std::thread::id> seen;
    for (int rep = 0; rep < 50; ++rep) {
      pool.run([&](int) {
        if (fp_flushes() != flush) ++wrong;
        ++parts;
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(std::this_thread::get_id());
      });
      if (rep % 10 == 0)  // a slow part: the other threads claim theirs
        pool.run([&](int) {
          if (fp_flushes() != flush) ++wrong;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          std::lock_guard<std::mutex> lock(mu);
          seen.insert(std::this_thread::get_id());
        });
      ASSERT_EQ(control(), before & ~0x3Fu) << "flush " << flush << " run " << rep;
    }
    EXPECT_EQ(wrong.load(), 0) << "flush " << flush;
    EXPECT_EQ(parts.load(), 150);
    EXPECT_GE(seen.size(), 2u) << "no worker ran a part: the test saw only the caller";
  }
}

// Linear(1 -> 4), bias 0: every output is one product w_k * x, exact on every kernel set in any
// order, so the sets and thread counts must agree bit for bit. x and w are chosen so that some
// products are denormal (FTZ: 0 when flushed), some read a denormal input (DAZ: 0 when flushed)
// and some stay normal (the same in both modes).
struct Case {
  std::vector<float> out, grad;
};

Model one_input_linear() {
  Model m;
  m.in_c = 1, m.in_h = 1, m.in_w = 1, m.num_classes = 4;
  m.flatten().linear(4);
  m.loss = LossKind::MSE;
  return m;
}

const float kX[4] = {1e-30f, 1e-40f /* denormal input */, 1.f, -3e-20f};
const float kW[4] = {1e-10f, 0x1p100f, 1e-39f /* denormal weight */, 2.f};

// Runs the plan with the caller in the opposite mode (its own must not leak in, nor change),
// then returns to IEEE mode for the caller's checks.
Case run_linear(const KeepCsr& csr, const std::string& isa, int threads, Denormals dn, int batch) {
  PlanOptions o;
  o.batch = batch, o.threads = threads, o.isa = isa, o.denormals = dn;
  o.optimizer.kind = OptimizerKind::SGD;
  Plan plan(one_input_linear(), o);
  plan.init_params(1);
  float* w = static_cast<float*>(plan.param_data());
  for (const ParamInfo& p : plan.params())
    for (size_t i = 0; i < p.size; ++i) w[p.offset + i] = p.role == ParamRole::weight ? kW[i % 4] : 0.f;
  float* x = static_cast<float*>(plan.input());
  float* t = static_cast<float*>(plan.targets());
  for (int n = 0; n < batch; ++n) {
    x[n] = kX[n % 4];
    for (int k = 0; k < 4; ++k) t[n * 4 + k] = 0x1p-32f;  // dy = 2 (y - t) / (N D): normal
  }
  set_fp_control(opposite(dn == Denormals::flush));
  const uint32_t before = control();
  plan.forward(batch);
  plan.loss(batch, true);
  plan.backward(batch);
  EXPECT_EQ(control(), before) << "a plan call changed the caller's MXCSR (" << isa << ")";
  csr.ieee();
  Case c;
  const float* y = static_cast<const float*>(plan.output());
  c.out.assign(y, y + size_t(batch) * 4);
  const float* g = static_cast<const float*>(plan.grad_data());
  c.grad.assign(g, g + plan.param_count());
  return c;
}

std::vector<std::string> kernel_sets() {
  std::vector<std::string> sets{"scalar"};
  if (isa_supported(Isa::avx2)) sets.push_back("avx2");
  if (isa_supported(Isa::avx512)) sets.push_back("avx512");
  return sets;
}

// The same values, checked in IEEE mode (a denormal is not 0). The sign of a zero may differ: a
// product that underflows past the denormals is -0 or +0 depending on whether the kernel adds
// the zero bias in its FMA or after (-0 + 0 = +0), the one difference the sets may show.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

TEST(Denormals, DenormalProductsAgreeOnEveryKernelSetInBothModes) {
  KeepCsr keep;
  for (Denormals dn : {Denormals::flush, Denormals::keep}) {
    const bool flush = dn == Denormals::flush;
    const Case ref = run_linear(keep, "scalar", 1, dn, 4);
    // Output [n, k] = kX[n] * kW[k]: x 1e-30 times w 1e-10 is 1e-40 (denormal result); x 1e-40
    // is a denormal input; w 1e-39 a denormal weight; 1 * 2 stays normal.
    const float y00 = ref.out[0 * 4 + 0], y11 = ref.out[1 * 4 + 1], y22 = ref.out[2 * 4 + 2], y23 = ref.out[2 * 4 + 3];
    EXPECT_EQ(y23, 2.f);
    if (flush) {
      EXPECT_EQ(y00, 0.f) << "FTZ: a denormal product must be flushed";
      EXPECT_EQ(y11, 0.f) << "DAZ: a denormal input must read as zero";
      EXPECT_EQ(y22, 0.f) << "DAZ: a denormal weight must read as zero";
    } else {
      EXPECT_EQ(y00, 1e-30f * 1e-10f) << "keep: the exact denormal product";
      EXPECT_NE(y00, 0.f);
      EXPECT_EQ(y11, 1e-40f * 0x1p100f);
      EXPECT_EQ(y22, 1e-39f);
    }
    // Batch 1, x = 1e-30: each weight gradient is one product dy_k * x with dy_k ~ -1.2e-10
    // (the MSE's 2 (y - t) / D, t = 2^-32): denormal, so 0 when flushed.
    const Case one = run_linear(keep, "scalar", 1, dn, 1);
    size_t denormal_grads = 0;
    for (float g : one.grad) denormal_grads += std::fpclassify(g) == FP_SUBNORMAL;
    EXPECT_EQ(denormal_grads > 0, !flush) << "weight gradients below 2^-126: " << denormal_grads;
    for (const std::string& isa : kernel_sets())
      for (int threads : {1, 2}) {
        const Case c = run_linear(keep, isa, threads, dn, 4);
        EXPECT_TRUE(same_values(c.out, ref.out)) << isa << " threads " << threads << " " << denormals_name(dn);
        const Case g = run_linear(keep, isa, threads, dn, 1);
        EXPECT_TRUE(same_values(g.grad, one.grad)) << isa << " threads " << threads << " " << denormals_name(dn);
      }
  }
}

// A 1x1 convolution of one input channel (one product per output, exact): the conv kernels too
// flush in one mode and keep in the other, alike on every set; a batch of 64 runs them threaded.
TEST(Denormals, ConvolutionOutputsAgreeOnEveryKernelSet) {
  KeepCsr keep;
  Model m;
  m.in_c = 1, m.in_h = 6, m.in_w = 6, m.num_classes = 10;
  m.conv2d(8, 1, 1, 0);
  for (Denormals dn : {Denormals::flush, Denormals::keep}) {
    std::vector<float> ref;
    for (const std::string& isa : kernel_sets())
      for (int threads : {1, 2}) {
        PlanOptions o;
        o.batch = 64, o.threads = threads, o.isa = isa, o.denormals = dn, o.training = false;
        Plan plan(m, o);
        plan.init_params(1);
        float* w = static_cast<float*>(plan.param_data());
        for (const ParamInfo& p : plan.params())
          for (size_t i = 0; i < p.size; ++i) w[p.offset + i] = p.role == ParamRole::weight ? kW[i % 4] * 0.5f : 0.f;
        float* x = static_cast<float*>(plan.input());
        for (int i = 0; i < 64 * 36; ++i) x[i] = kX[i % 4] * float(1 + i % 7);
        set_fp_control(opposite(dn == Denormals::flush));
        const uint32_t before = control();
        plan.forward(64);
        EXPECT_EQ(control(), before);
        keep.ieee();
        const float* y = static_cast<const float*>(plan.output());
        std::vector<float> out(y, y + size_t(64) * 8 * 36);
        size_t denormal = 0;
        for (float v : out) denormal += std::fpclassify(v) == FP_SUBNORMAL;
        EXPECT_EQ(denormal > 0, dn == Denormals::keep) << isa << ": " << denormal << " denormal outputs";
        if (ref.empty()) ref = out;
        else EXPECT_TRUE(same_values(out, ref)) << isa << " threads " << threads << " " << denormals_name(dn);
      }
  }
}

TEST(Denormals, ParseAndName) {
  EXPECT_EQ(parse_denormals("flush", "x"), Denormals::flush);
  EXPECT_EQ(parse_denormals("keep", "x"), Denormals::keep);
  EXPECT_STREQ(denormals_name(Denormals::keep), "keep");
  try {
    parse_denormals("ftz", "--denormals");
    FAIL() << "accepted 'ftz'";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--denormals: expected flush or keep, found 'ftz'");
  }
}

#else
TEST(Denormals, NotX86) { GTEST_SKIP() << "the denormal mode is x86's MXCSR; this CPU runs IEEE arithmetic"; }
#endif

}  // namespace
}  // namespace ember::test
