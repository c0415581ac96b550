// Plan-level tests: whole-model gradient check of mnist-cnn through an f64 plan, f32 vs f64
// agreement, zero heap allocations in training steps, bit-identical training for a seed and
// thread count, partial last batches, optimizer formulas, schedules and model descriptions.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "alloc_hook.h"
#include "ember/ember.h"
#include "gradcheck.h"
#include "plan_util.h"

// Counts every heap allocation in this test binary (all threads).
static std::atomic<long> g_allocs{0};
#if EMBER_TEST_CAN_HOOK_NEW
static void count_alloc(size_t) { g_allocs.fetch_add(1, std::memory_order_relaxed); }
EMBER_REPLACE_GLOBAL_NEW(count_alloc)
#endif

namespace ember::test {
namespace {

Model small_cnn() {
  Model m;
  m.name = "small-cnn";
  m.conv2d(4, 3, 1, 1).relu().maxpool2d(2).flatten().linear(16).tanh().linear(10);
  return m;
}

// One training pass of the first n images of d (gather, forward, loss, backward).
void run_pass(Plan& p, const Dataset& d, int n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) idx[size_t(i)] = i;
  p.gather_u8(d.images.data(), d.labels.data(), idx.data(), n);
  p.forward(n);
  p.loss(n, true);
  p.backward(n);
}
// Per parameter tensor of p32: |got - want| < 1e-4 times the largest |g64| of that tensor (g64:
// the f64 plan's gradients, the scale), and, with require_nonzero, that scale > 0.
template <class W>
void expect_grads_close(const Plan& p32, const float* got, const W* want, const double* g64,
                        const std::string& what, bool require_nonzero = false) {
  for (const ParamInfo& pi : p32.params()) {
    double gmax = 0, diff = 0;
    for (size_t i = pi.offset; i < pi.offset + pi.size; ++i) {
      gmax = std::max(gmax, std::abs(g64[i]));
      diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    }
    if (require_nonzero) {
      EXPECT_GT(gmax, 0) << pi.name << " " << what;
    }
    EXPECT_LT(diff, 1e-4 * gmax) << pi.name << " " << what;
  }
}

TEST(Plan, WholeModelGradcheckMnistCnn) {
  PlanOptions o;
  o.batch = 3;
  o.dtype = DType::f64;
  Plan plan(builtin_model("mnist-cnn"), o);
  plan.init_params(7);
  const int n = 2;  // a partial batch
  double* x = static_cast<double*>(plan.input());
  auto xin = randn(size_t(n) * 784, 3);
  for (size_t i = 0; i < xin.size(); ++i) x[i] = xin[i];
  plan.labels()[0] = 3, plan.labels()[1] = 8;
  plan.forward(n);
  plan.loss(n, true);
  plan.backward(n);
  double* w = static_cast<double*>(plan.param_data());
  const double* g = static_cast<const double*>(plan.grad_data());
  for (const ParamInfo& p : plan.params()) {
    std::vector<double> vals(w + p.offset, w + p.offset + p.size);
    std::vector<double> grads(g + p.offset, g + p.offset + p.size);
    const size_t stride = std::max<size_t>(1, p.size / 40);
    expect_gradient(p.name, vals, grads, [&] {
      std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
      plan.forward(n);
      return plan.loss(n, false);
    }, 1e-6, 1e-5, stride);
    std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
  }
}

// Two fused Conv -> ReLU -> MaxPool units (the second needs its input gradient: it is not first,
// and has padding, 3 input channels' worth of groups), checked against finite differences.
Model two_block_cnn() {
  Model m;
  m.name = "two-block-cnn";
  m.conv2d(3, 3, 1, 1).relu().maxpool2d(2).conv2d(6, 3, 1, 1, 3).relu().maxpool2d(2).flatten().linear(10);
  return m;
}

TEST(Plan, FusedConvReluPoolGradcheckWithInputGradient) {
  PlanOptions o;
  o.batch = 2;
  o.dtype = DType::f64;
  Plan plan(two_block_cnn(), o);
  plan.init_params(5);
  double* x = static_cast<double*>(plan.input());
  auto xin = randn(size_t(2) * 784, 4);
  for (size_t i = 0; i < xin.size(); ++i) x[i] = xin[i];
  plan.labels()[0] = 1, plan.labels()[1] = 6;
  plan.forward(2);
  plan.loss(2, true);
  plan.backward(2);
  double* w = static_cast<double*>(plan.param_data());
  const double* g = static_cast<const double*>(plan.grad_data());
  for (const ParamInfo& p : plan.params()) {
    std::vector<double> vals(w + p.offset, w + p.offset + p.size);
    std::vector<double> grads(g + p.offset, g + p.offset + p.size);
    expect_gradient(p.name, vals, grads, [&] {
      std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
      plan.forward(2);
      return plan.loss(2, false);
    }, 1e-6, 1e-5, std::max<size_t>(1, p.size / 60));
    std::memcpy(w + p.offset, vals.data(), p.size * sizeof(double));
  }
}

// The fused unit computes what the three separate layers compute, f32 and f64, 1 and 2 threads.
TEST(Plan, FusedMatchesUnfused) {
  for (const Model& model : {builtin_model("mnist-cnn"), two_block_cnn()})
    for (DType dt : {DType::f32, DType::f64})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(model.name + (dt == DType::f32 ? " f32" : " f64") + " threads " + std::to_string(threads));
        PlanOptions of, ou;
        of.batch = ou.batch = 6;
        of.dtype = ou.dtype = dt;
        of.threads = ou.threads = threads;
        ou.fuse = false;
        Plan pf(model, of), pu(model, ou);
        ASSERT_EQ(pf.param_count(), pu.param_count());
        pf.init_params(3);
        pu.init_params(3);
        const Dataset d = synthetic(6, 11);
        std::vector<int64_t> idx{0, 1, 2, 3, 4, 5};
        double loss[2];
        int i = 0;
        for (Plan* p : {&pf, &pu}) {
          p->gather_u8(d.images.data(), d.labels.data(), idx.data(), 5);  // a partial batch
          p->forward(5);
          loss[i++] = p->loss(5, true);
          p->backward(5);
        }
        EXPECT_NEAR(loss[0], loss[1], dt == DType::f32 ? 1e-5 : 1e-12);
        auto grads = [&](Plan& p, size_t i) {
          return dt == DType::f32 ? double(static_cast<const float*>(p.grad_data())[i])
                                  : static_cast<const double*>(p.grad_data())[i];
        };
        double gmax = 0, diff = 0;
        for (size_t j = 0; j < pf.param_count(); ++j) {
          gmax = std::max(gmax, std::abs(grads(pu, j)));
          diff = std::max(diff, std::abs(grads(pf, j) - grads(pu, j)));
        }
        EXPECT_LT(diff, (dt == DType::f32 ? 1e-5 : 1e-12) * gmax);
      }
}

TEST(Plan, F32AgreesWithF64) {
  for (const char* name : {"mnist-cnn", "mxnet-mlp"}) {
    PlanOptions o32, o64;
    o32.batch = o64.batch = 5;
    o32.threads = 2;
    o64.dtype = DType::f64;
    Plan p32(builtin_model(name), o32), p64(builtin_model(name), o64);
    p32.init_params(1);
    p64.init_params(1);
    const Dataset d = synthetic(5, 9);
    std::vector<int64_t> idx{0, 1, 2, 3, 4};
    for (Plan* p : {&p32, &p64}) {
      p->gather_u8(d.images.data(), d.labels.data(), idx.data(), 5);
      p->forward(5);
      p->loss(5, true);
      p->backward(5);
    }
    EXPECT_NEAR(p32.loss(5, false), p64.loss(5, false), 1e-5) << name;
    const float* g32 = static_cast<const float*>(p32.grad_data());
    const double* g64 = static_cast<const double*>(p64.grad_data());
    double gmax = 0, diff = 0;
    for (size_t i = 0; i < p32.param_count(); ++i) {
      gmax = std::max(gmax, std::abs(g64[i]));
      diff = std::max(diff, std::abs(g32[i] - g64[i]));
    }
    EXPECT_LT(diff, 1e-4 * gmax) << name;
  }
}

// Linear layers on mostly zero inputs run the sparse-input path (ops::linear_fwd_sp): its
// gradients agree with the f64 plan's (dense references) for a first layer on sparse pixels and
// for a layer after a ReLU (the input gradient may skip zero inputs), after a Flatten of a ReLU
// (the property passes through), and after a Tanh (it may not: tanh's output is 0 on the all-zero
// images, whose pre-activation is the zero bias, and the gradient there reaches the first bias
// because 3.bias keeps the later ReLU open),
// on every kernel set, 1 and 2 threads. The plan names the state it keeps; a frozen plan's
// forward (the transposed copy) gives the same bits.
TEST(Plan, SparseInputLinearAgreesWithF64) {
  const char* hidden[] = {"relu", "tanh"};
  for (const char* act : hidden)
    for (bool pool : {false, true})
      for (Isa isa : isas())
        for (int threads : {1, 2}) {
          SCOPED_TRACE(std::string(act) + (pool ? " pool " : " ") + isa_name(isa) + " threads " + std::to_string(threads));
          const std::string json = std::string(R"({"input": [1, 28, 28], "classes": 10, "init": "kaiming", "layers": [
              {"type": "flatten"}, {"type": "linear", "out_features": 96}, {"type": ")") + act + R"("},)" +
              (pool ? R"({"type": "flatten"},)" : "") + R"(
              {"type": "linear", "out_features": 200}, {"type": "relu"},
              {"type": "linear", "out_features": 10}]})";
          const Model model = parse_model_json(json, "sparse.json");
          PlanOptions o32, o64;
          o32.batch = o64.batch = 8;
          o32.threads = threads;
          o32.isa = isa_name(isa);
          o64.dtype = DType::f64;
          Plan p32(model, o32), p64(model, o64);
          p32.init_params(3);
          p64.init_params(3);
          for (const ParamInfo& pi : p32.params())  // the blank images reach the loss through 3.bias
            if (pi.name == "3.bias")
              for (size_t i = pi.offset; i < pi.offset + pi.size; ++i) {
                static_cast<float*>(p32.param_data())[i] = 0.5f;
                static_cast<double*>(p64.param_data())[i] = 0.5;
              }
          Dataset d = synthetic(8, 13);
          std::mt19937 g(14);
          for (size_t i = 0; i < d.images.size(); ++i)
            if (i < 5 * 784 || g() % 10 < 8) d.images[i] = 0;  // 5 blank images, then 80 % zeros
          for (Plan* p : {&p32, &p64}) run_pass(*p, d, 7);
          EXPECT_NEAR(p32.loss(7, false), p64.loss(7, false), 1e-5);
          const double* g64 = static_cast<const double*>(p64.grad_data());
          expect_grads_close(p32, static_cast<const float*>(p32.grad_data()), g64, g64, "");
          bool named = false;
          for (const BufferInfo& b : p32.buffers()) named |= b.name == "sparse-input state of linear (1)";
          EXPECT_TRUE(named);
          // Frozen, the sparse chunks read the transposed copy: the same bits.
          const float* out = static_cast<const float*>(p32.output());
          const std::vector<float> before(out, out + 7 * 10);
          p32.freeze();
          p32.forward(7);
          EXPECT_EQ(std::vector<float>(out, out + 7 * 10), before);
        }
}

// The background link (ops::Background): a first conv unit hands the windows whose input patch
// is all zero to the sparse Linear after its Flatten, which adds their share back. With conv
// biases > 0 (a background that is not 0), blank images and blank borders, on every kernel set,
// 1 and 2 threads and a partial batch (and with every conv bias <= 0, when the link has nothing
// to split): loss and every gradient agree with the f64 plan and with
// the f32 plan without the link; the plan names the link only when it has one; a frozen plan
// (no link, the true activations) gives the same outputs.
TEST(Plan, BackgroundLinkAgreesWithF64) {
  const Model model = parse_model_json(R"({"input": [1, 28, 28], "classes": 10, "init": "kaiming", "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 5, "padding": 2}, {"type": "relu"},
      {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
      {"type": "linear", "out_features": 40}, {"type": "relu"}, {"type": "linear", "out_features": 10}]})",
                                       "background.json");
  Dataset d = synthetic(8, 21);
  for (int i = 0; i < 8; ++i)  // image 0 blank; the others keep a 9 x 9 centre (noise + blocks)
    for (int r = 0; r < 28; ++r)
      for (int q = 0; q < 28; ++q)
        if (i == 0 || r < 10 || r > 18 || q < 9 || q > 17) d.images[size_t(i) * 784 + r * 28 + q] = 0;
  const double biases[2][8] = {{0.3, -0.2, 0.0, 0.05, 0.5, -0.4, 0.1, 0.0},  // split
                               {-0.3, -0.2, 0.0, -0.05, -0.5, -0.4, -0.1, 0.0}};  // nothing to split
  for (const double* conv_bias : biases)
  for (Isa isa : isas())
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " biases " +
                   (conv_bias == biases[0] ? "mixed" : "<= 0"));
      PlanOptions o32, o64, off;
      o32.batch = o64.batch = off.batch = 8;
      o32.threads = off.threads = threads;
      o32.isa = off.isa = isa_name(isa);
      o64.dtype = DType::f64;
      off.split_background = false;
      Plan p32(model, o32), p64(model, o64), poff(model, off);
      for (Plan* p : {&p32, &p64, &poff}) p->init_params(5);
      for (const ParamInfo& pi : p32.params())
        if (pi.name == "0.bias")
          for (size_t i = 0; i < pi.size; ++i) {
            static_cast<float*>(p32.param_data())[pi.offset + i] = float(conv_bias[i]);
            static_cast<float*>(poff.param_data())[pi.offset + i] = float(conv_bias[i]);
            static_cast<double*>(p64.param_data())[pi.offset + i] = conv_bias[i];
          }
      for (Plan* p : {&p32, &p64, &poff}) run_pass(*p, d, 7);
      EXPECT_NEAR(p32.loss(7, false), p64.loss(7, false), 1e-5);
      const float* g32 = static_cast<const float*>(p32.grad_data());
      const float* goff = static_cast<const float*>(poff.grad_data());
      const double* g64 = static_cast<const double*>(p64.grad_data());
      auto expect_grads = [&](const std::string& what) {  // against f64, and against the unlinked plan
        expect_grads_close(p32, g32, g64, g64, what, true);
        expect_grads_close(p32, g32, goff, g64, what + " (against the unlinked plan)");
      };
      expect_grads("");
      auto has_link = [](const Plan& p) {
        for (const BufferInfo& b : p.buffers())
          if (b.name.rfind("background link of ", 0) == 0) return true;
        return false;
      };
      EXPECT_EQ(has_link(p32), kernels_for(isa).linear_sp_max_density > 0);  // not AVX2: never sparse
      EXPECT_FALSE(has_link(poff));
      EXPECT_FALSE(has_link(p64));
      const float* out = static_cast<const float*>(p32.output());
      const std::vector<float> before(out, out + 7 * 10);
      p32.freeze();
      p32.forward(7);
      for (int i = 0; i < 70; ++i) EXPECT_NEAR(out[i], before[size_t(i)], 1e-5 * (1 + std::abs(before[size_t(i)])));
      // A backward after the frozen state changed follows what the forward did.
      p32.thaw();
      p32.forward(7);
      p32.loss(7, true);
      p32.freeze();
      p32.backward(7);
      expect_grads("(forward thawed, backward frozen)");
      p32.forward(7);
      p32.loss(7, true);
      p32.thaw();
      p32.backward(7);
      expect_grads("(forward frozen, backward thawed)");
    }
}

TEST(Plan, TrainingStepsAllocateNothing) {
  for (const char* name : {"mnist-cnn", "mxnet-mlp"}) {
    PlanOptions o;
    o.batch = 16;
    o.threads = 2;
    Plan plan(builtin_model(name), o);
    plan.init_params(1);
    const Dataset d = synthetic(40, 3);
    std::vector<int64_t> idx(40);
    for (int i = 0; i < 40; ++i) idx[i] = i;
    const long before = g_allocs.load();
    for (int start = 0; start < 40; start += 16) {  // the last batch is partial (8)
      const int n = std::min(16, 40 - start);
      plan.gather_u8(d.images.data(), d.labels.data(), idx.data() + start, n);
      plan.forward(n);
      plan.loss(n, true);
      plan.correct(n);
      if (start == 16) {
        plan.backward_step(n, 1e-3);
      } else {
        plan.backward(n);
        plan.optimizer_step(1e-3);
      }
    }
    // Under TSan the steps still run (two threads), but allocations cannot be counted.
    if (EMBER_TEST_CAN_HOOK_NEW) {
      EXPECT_EQ(g_allocs.load() - before, 0) << name << ": heap allocations during training steps";
    }
  }
}

// backward_step (the updates of later layers overlapped with the first layer's backward) gives
// the weights, optimizer state and NaN report of backward + optimizer_step, bit for bit: for a
// model whose first unit takes the side work (mnist-cnn's fused conv) and one where the plan
// drains it (mxnet-mlp), one and two threads, and with a NaN weight spoiling the gradients.
TEST(Plan, BackwardStepMatchesBackwardThenOptimizerStep) {
  const Dataset d = synthetic(48, 4);
  std::vector<int64_t> idx(48);
  for (int i = 0; i < 48; ++i) idx[i] = (i * 7) % 48;
  for (const char* name : {"mnist-cnn", "mxnet-mlp"})
    for (int threads : {1, 2})
      for (bool poison : {false, true}) {
        SCOPED_TRACE(std::string(name) + " " + std::to_string(threads) + " threads" + (poison ? " NaN" : ""));
        PlanOptions o;
        o.batch = 16;
        o.threads = threads;
        Plan a(builtin_model(name), o), b(builtin_model(name), o);
        a.init_params(3);
        b.init_params(3);
        if (poison) {  // a NaN in the last layer's weights: every gradient below it turns NaN
          const ParamInfo& last = a.params()[a.params().size() - 2];
          static_cast<float*>(a.param_data())[last.offset] = NAN;
          static_cast<float*>(b.param_data())[last.offset] = NAN;
        }
        for (int start = 0; start < 48; start += 16) {
          int ra = 0, rb = 0;
          for (Plan* p : {&a, &b}) {
            p->gather_u8(d.images.data(), d.labels.data(), idx.data() + start, 16);
            p->forward(16);
            p->loss(16, true);
          }
          a.backward(16);
          ra = a.optimizer_step(2e-3);
          rb = b.backward_step(16, 2e-3);
          EXPECT_EQ(ra, rb) << "first non-finite gradient";
          if (poison) {
            EXPECT_GE(ra, 0);
          }
        }
        ASSERT_EQ(a.param_count(), b.param_count());
        EXPECT_EQ(std::memcmp(a.param_data(), b.param_data(), a.param_count() * sizeof(float)), 0) << "weights";
        for (int s = 0; s < a.state_count(); ++s)
          EXPECT_EQ(std::memcmp(a.state_data(s), b.state_data(s), a.param_count() * sizeof(float)), 0) << "state " << s;
      }
}

std::vector<float> train_weights(int threads, uint64_t seed, const Dataset& tr, const Dataset& te) {
  PlanOptions o;
  o.batch = 16;
  o.threads = threads;
  Plan plan(small_cnn(), o);
  plan.init_params(seed);
  TrainConfig cfg;
  cfg.epochs = 2;
  cfg.seed = seed;
  train(plan, tr, te, cfg, nullptr);
  const float* w = static_cast<const float*>(plan.param_data());
  return {w, w + plan.param_count()};
}

// A frozen plan's batch-1 forward (Linear weights transposed, zero inputs skipped) agrees with
// the unfrozen plan within rounding, on every ISA with 1 and 2 threads, and batches of 4 are bit
// for bit the same. It reads the copies: a write through a pointer taken before freeze() changes
// batch 4 but not batch 1. Parameter writes throw until thaw(); a new freeze() follows new weights.
TEST(Plan, FrozenBatchOneMatchesUnfrozen) {
  const Dataset d = synthetic(4, 5);
  for (Isa isa : isas()) {
    std::vector<std::vector<float>> per_threads;  // frozen batch 1: the same bits for 1 and 2 threads
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads));
      PlanOptions o;
      o.batch = 4, o.threads = threads, o.isa = isa_name(isa);
      Plan plan(builtin_model("mnist-cnn"), o);
      plan.init_params(3);
      const int64_t idx[] = {0, 1, 2, 3};
      auto run = [&](int n) {
        plan.gather_u8(d.images.data(), d.labels.data(), idx, n);
        plan.forward(n);
        const float* y = static_cast<const float*>(plan.output());
        return std::vector<float>(y, y + n * 10);
      };
      auto expect_near = [](const std::vector<float>& got, const std::vector<float>& want) {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.f, std::abs(want[i]))) << i;
      };
      const auto dense1 = run(1), dense4 = run(4);
      float* w = static_cast<float*>(plan.param_data());
      plan.freeze();
      EXPECT_TRUE(plan.frozen());
      const auto frozen1 = run(1);
      expect_near(frozen1, dense1);
      per_threads.push_back(frozen1);
      EXPECT_EQ(run(4), dense4);
      EXPECT_THROW(plan.param_data(), Error);
      EXPECT_THROW(plan.init_params(1), Error);
      EXPECT_THROW(plan.optimizer_step(1e-3), Error);
      EXPECT_THROW(plan.backward_step(1, 1e-3), Error);
      EXPECT_EQ(std::as_const(plan).param_data(), w);
      const ParamInfo& fc1 = plan.params()[2];
      ASSERT_EQ(fc1.name, "4.weight");
      for (size_t i = 0; i < fc1.size; ++i) w[fc1.offset + i] *= 2;  // not seen by the copies
      EXPECT_EQ(run(1), frozen1);
      EXPECT_NE(run(4), dense4);
      plan.thaw();
      EXPECT_FALSE(plan.frozen());
      plan.init_params(4);
      const auto dense1b = run(1);
      plan.freeze();
      expect_near(run(1), dense1b);
    }
    EXPECT_EQ(per_threads[0], per_threads[1]) << isa_name(isa) << ": fc1's row halves are summed in one order";
  }
}

TEST(Plan, SameSeedAndThreadsGiveBitIdenticalWeights) {
  const Dataset tr = synthetic(100, 1), te = synthetic(20, 2);
  for (int threads : {1, 2}) {
    const auto a = train_weights(threads, 5, tr, te), b = train_weights(threads, 5, tr, te);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << threads << " threads";
    const auto c = train_weights(threads, 6, tr, te);
    EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0) << "seed must matter";
  }
}

TEST(Plan, PartialBatchMatchesFullBatchRows) {
  PlanOptions o;
  o.batch = 8;
  o.threads = 2;
  Plan big(builtin_model("mnist-cnn"), o);
  o.batch = 3;
  Plan small(builtin_model("mnist-cnn"), o);
  big.init_params(4);
  small.init_params(4);
  const Dataset d = synthetic(8, 5);
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  big.gather_u8(d.images.data(), d.labels.data(), idx.data(), 3);
  small.gather_u8(d.images.data(), d.labels.data(), idx.data(), 3);
  big.forward(3);
  small.forward(3);
  const float* a = static_cast<const float*>(big.output());
  const float* b = static_cast<const float*>(small.output());
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i])));
  EXPECT_NEAR(big.loss(3, false), small.loss(3, false), 1e-5);
}

TEST(Plan, TrainingLearnsSyntheticData) {
  const Dataset tr = synthetic(600, 11), te = synthetic(200, 12);
  PlanOptions o;
  o.batch = 32;
  o.threads = 2;
  Plan plan(small_cnn(), o);
  plan.init_params(1);
  TrainConfig cfg;
  cfg.epochs = 3;
  std::vector<EpochMetrics> seen;
  const TrainResult r = train(plan, tr, te, cfg, [&](const EpochMetrics& m) { seen.push_back(m); return true; });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_GT(r.last.test_acc, 0.9);
  EXPECT_LT(seen.back().train_loss, seen.front().train_loss);
  EXPECT_NEAR(seen[0].lr, 1e-3, 1e-12);
}

// One Linear layer (4 -> 3) so the update can be recomputed by hand in double.
void check_optimizer(OptimizerKind kind, double l2, double wd) {
  Model m;
  m.in_c = 1, m.in_h = 2, m.in_w = 2, m.num_classes = 3;
  m.flatten().linear(3);
  PlanOptions o;
  o.batch = 1;
  o.optimizer.kind = kind;
  o.optimizer.l2 = l2;
  o.optimizer.weight_decay = wd;
  Plan plan(m, o);
  plan.init_params(3);
  const size_t P = plan.param_count();  // 12 weights then 3 biases
  float* w = static_cast<float*>(plan.param_data());
  float* g = static_cast<float*>(plan.grad_data());
  std::vector<double> ww(w, w + P), m1(P, 0), v1(P, 0);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, mom = 0.9;
  for (int t = 1; t <= 3; ++t) {
    auto grad = randn(P, 100 + t);
    for (size_t i = 0; i < P; ++i) g[i] = float(grad[i]);
    plan.optimizer_step(lr);
    for (size_t i = 0; i < P; ++i) {
      const bool weight = i < 12;
      double gi = double(g[i]) + (weight ? l2 : 0) * ww[i];
      if (weight) ww[i] -= lr * wd * ww[i];
      if (kind == OptimizerKind::Adam || kind == OptimizerKind::AdamW) {
        m1[i] = b1 * m1[i] + (1 - b1) * gi;
        v1[i] = b2 * v1[i] + (1 - b2) * gi * gi;
        const double mh = m1[i] / (1 - std::pow(b1, t)), vh = v1[i] / (1 - std::pow(b2, t));
        ww[i] -= lr * mh / (std::sqrt(vh) + eps);
      } else if (kind == OptimizerKind::SGD) {
        ww[i] -= lr * gi;
      } else {
        m1[i] = mom * m1[i] + gi;
        ww[i] -= lr * (kind == OptimizerKind::Nesterov ? gi + mom * m1[i] : m1[i]);
      }
    }
    for (size_t i = 0; i < P; ++i) EXPECT_NEAR(w[i], ww[i], 2e-6) << "step " << t << " param " << i;
  }
}
TEST(Optimizer, MatchesPyTorchFormulas) {
  check_optimizer(OptimizerKind::SGD, 0, 0);
  check_optimizer(OptimizerKind::SGD, 1e-2, 0);
  check_optimizer(OptimizerKind::Momentum, 1e-3, 0);
  check_optimizer(OptimizerKind::Nesterov, 0, 0);
  check_optimizer(OptimizerKind::Adam, 0, 0);
  check_optimizer(OptimizerKind::Adam, 1e-1, 0);  // coupled L2, weights only
  check_optimizer(OptimizerKind::AdamW, 0, 1e-1); // decoupled, weights only
}

// decay_norms false (the ResNets' recipe): L2 and weight decay leave norm scales alone and still
// decay the conv weights; true (the default) decays both. Flatten -> layernorm(affine) -> linear.
TEST(Optimizer, DecayNormsChoosesWhetherNormScalesDecay) {
  Model m;
  m.in_c = 1, m.in_h = 2, m.in_w = 2, m.num_classes = 3;
  m.flatten();
  m.layers.push_back(LayerSpec{LayerKind::LayerNorm});
  m.linear(3);
  for (bool decay_norms : {true, false}) {
    PlanOptions o;
    o.batch = 1;
    o.optimizer.kind = OptimizerKind::SGD;
    o.optimizer.l2 = 0.5;
    o.optimizer.decay_norms = decay_norms;
    Plan plan(m, o);
    plan.init_params(3);
    float* w = static_cast<float*>(plan.param_data());
    std::vector<float> before(w, w + plan.param_count());
    std::memset(plan.grad_data(), 0, plan.param_count() * sizeof(float));
    plan.optimizer_step(0.1);
    for (const ParamInfo& p : plan.params()) {
      const bool moved = w[p.offset] != before[p.offset];
      const bool want = p.role == ParamRole::weight || (p.role == ParamRole::norm_scale && decay_norms);
      EXPECT_EQ(moved, want) << p.name << " decay_norms " << decay_norms;
    }
  }
}

TEST(Schedule, Values) {
  Schedule s;
  s.kind = ScheduleKind::Cosine, s.lr = 1e-3, s.lr_min = 1e-5, s.t_max = 20;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-3);
  EXPECT_NEAR(s.at(10), (1e-3 + 1e-5) / 2, 1e-15);
  EXPECT_NEAR(s.at(20), 1e-5, 1e-15);
  s.kind = ScheduleKind::Step, s.step_size = 3, s.gamma = 0.1;
  EXPECT_DOUBLE_EQ(s.at(2), 1e-3);
  EXPECT_NEAR(s.at(3), 1e-4, 1e-15);
  EXPECT_NEAR(s.at(7), 1e-5, 1e-15);
  s.kind = ScheduleKind::Exp, s.gamma = 0.5;
  EXPECT_NEAR(s.at(2), 2.5e-4, 1e-15);
  s.kind = ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
}

TEST(Model, JsonRoundTripOfBuiltins) {
  for (const auto& name : builtin_model_names()) {
    const Model a = builtin_model(name);
    const Model b = parse_model_json(model_to_json(a), "roundtrip.json");
    PlanOptions o;
    o.batch = 2;
    EXPECT_EQ(Plan(a, o).summary(), Plan(b, o).summary()) << name;
  }
}

TEST(Model, ShapeErrorsNameTheFileAndLayer) {
  const std::string bad = R"({"layers": [{"type": "conv2d", "out_channels": 4, "kernel": 3},
                                          {"type": "linear", "out_features": 10}]})";
  try {
    Plan p(parse_model_json(bad, "net.json"), PlanOptions{});
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("net.json: layers[1] (linear)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_model_json(R"({"layers": [{"type": "dense"}]})", "x.json"), Error);
  EXPECT_THROW(parse_model_json("{", "x.json"), Error);
}

TEST(Plan, ParameterNamesAndLayoutsFollowPyTorch) {
  Plan p(builtin_model("mnist-cnn"), PlanOptions{});
  const auto& ps = p.params();
  ASSERT_EQ(ps.size(), 6u);
  EXPECT_EQ(ps[0].name, "0.weight");
  EXPECT_EQ(ps[0].shape, (std::vector<int>{32, 1, 5, 5}));
  EXPECT_EQ(ps[2].name, "4.weight");
  EXPECT_EQ(ps[2].shape, (std::vector<int>{128, 6272}));
  EXPECT_EQ(ps[5].name, "6.bias");
  EXPECT_EQ(p.param_count(), 805066u);
}

}  // namespace
}  // namespace ember::test
