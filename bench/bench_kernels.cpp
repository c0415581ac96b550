// Single-thread throughput of the table's non-GEMM kernels per ISA, on mnist-cnn's shapes:
// direct conv forward and weight gradient (GFLOP/s), fused ReLU + max-pool and its adjoint,
// ReLU, Adam, im2col (GB/s of bytes read + written), the FMA loop (the peak), the sparse-input
// Linear against the dense GEMM, the bitnet bit convolution (bit-MACs/s), and the int8 GEMM of each
// int8 set against the fp32 sgemm on the same shapes (GOP/s, u8 output).
#include <benchmark/benchmark.h>

#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/bit_kernels.h"
#include "kernels/int8_kernels.h"
#include "kernels/kernels.h"

namespace {

using ember::Isa;

// 64-byte aligned, as the plan's arena gives every buffer (glibc's malloc gives 16: a 64-byte
// vector load then spans two lines, which is not what a step sees).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned64&) const { return true; }
};
using Floats = std::vector<float, Aligned64<float>>;

Floats rnd(size_t n) {
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.f, 1.f);
  Floats v(n);
  for (auto& x : v) x = d(g);
  return v;
}
bool skip(benchmark::State& st, Isa isa) {
  if (ember::isa_supported(isa)) return false;
  st.SkipWithError("ISA not supported by this CPU");
  return true;
}
const ember::ConvS1 kConv{1, 32, 32, 32, 5, 5, 28, 28};  // mnist-cnn's conv on a padded sample

void conv_fwd(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto xp = rnd(32 * 32), w = rnd(32 * 25), b = rnd(32);
  std::vector<float> y(32 * 784);
  for (auto _ : st) {
    k.conv_s1_fwd(y.data(), xp.data(), w.data(), b.data(), kConv, nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * 32 * 25 * 784 * 1e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
// An MNIST-like padded 32 x 32 sample: a digit's strokes inside the centred 20 x 20 box (40 % of
// its pixels non-zero: 20 % of the 28 x 28 image), the rest and the padding zero.
void mnist_like(Floats& xp) {
  std::mt19937 g(7);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      if (y < 6 || y >= 26 || x < 6 || x >= 26 || std::uniform_real_distribution<double>(0, 1)(g) >= 0.4)
        xp[y * 32 + x] = 0.f;
}
// GFLOP/s of the conv part, counted dense. With `mnist`: on mnist_like's sample (AVX-512 then
// takes the sparse-input path).
void conv_relu_pool(benchmark::State& st, Isa isa, bool mnist) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto xp = rnd(32 * 32), w = rnd(32 * 25), b = rnd(32);
  if (mnist) mnist_like(xp);
  std::vector<float> y(32 * 196), ws(ember::conv_relu_pool_scratch(kConv));
  std::vector<int8_t> code(32 * 196);
  std::vector<float> wpk(k.conv_s1_relu_pool_pack(nullptr, w.data(), b.data(), kConv));  // packed once, as a plan's
  k.conv_s1_relu_pool_pack(wpk.data(), w.data(), b.data(), kConv);
  for (auto _ : st) {
    k.conv_s1_relu_pool(y.data(), code.data(), xp.data(), w.data(), b.data(), kConv, ws.data(), wpk.empty() ? nullptr : wpk.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * 32 * 25 * 784 * 1e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void conv_relu_pool_dense(benchmark::State& st, Isa isa) { conv_relu_pool(st, isa, false); }
void conv_relu_pool_mnist(benchmark::State& st, Isa isa) { conv_relu_pool(st, isa, true); }
void conv_wgrad(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto xp = rnd(32 * 32), dy = rnd(32 * 784);
  std::vector<float> dw(32 * 25), db(32);
  for (auto _ : st) {
    k.conv_s1_wgrad(dw.data(), db.data(), dy.data(), xp.data(), kConv);
    benchmark::DoNotOptimize(dw.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * 32 * 25 * 784 * 1e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
// GFLOP/s of the dense weight gradient; with `mnist` on mnist_like's sample (AVX-512 then skips
// the windows whose input patch is all zero).
void conv_pool_wgrad(benchmark::State& st, Isa isa, bool mnist) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto xp = rnd(32 * 32), dy = rnd(32 * 196);
  if (mnist) mnist_like(xp);
  std::vector<int8_t> code(32 * 196);
  for (size_t i = 0; i < code.size(); ++i) code[i] = int8_t(int(i * 7 % 5) - 1);
  std::vector<float> dw(32 * 25), db(32), ws(ember::conv_pool_wgrad_scratch(kConv) + 16);
  float* ws64 = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
  for (auto _ : st) {  // the scratch 64-byte aligned, as the plan's arena gives it
    k.conv_s1_pool_wgrad(dw.data(), db.data(), dy.data(), code.data(), xp.data(), kConv, ws64);
    benchmark::DoNotOptimize(dw.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * 32 * 25 * 784 * 1e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void conv_pool_wgrad_dense(benchmark::State& st, Isa isa) { conv_pool_wgrad(st, isa, false); }
void conv_pool_wgrad_mnist(benchmark::State& st, Isa isa) { conv_pool_wgrad(st, isa, true); }
void relu_pool(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto x = rnd(32 * 784);
  std::vector<float> y(32 * 196), dx(32 * 784);
  std::vector<int32_t> code(32 * 196);
  for (auto _ : st) {
    k.relu_maxpool2(y.data(), code.data(), x.data(), 32, 28, 28);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] = benchmark::Counter((32 * 784 + 2 * 32 * 196) * 4e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void relu_pool_bwd(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  auto x = rnd(32 * 784), dy = rnd(32 * 196);
  std::vector<float> y(32 * 196), dx(32 * 784);
  std::vector<int32_t> code(32 * 196);
  k.relu_maxpool2(y.data(), code.data(), x.data(), 32, 28, 28);
  for (auto _ : st) {
    k.relu_maxpool2_bwd(dx.data(), dy.data(), code.data(), 32, 28, 28);
    benchmark::DoNotOptimize(dx.data());
  }
  st.counters["GB/s"] = benchmark::Counter((32 * 784 + 2 * 32 * 196) * 4e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
// An activation (src/kernels/act/) over 64 x 128 elements, forward or backward (from x, or y).
void act(benchmark::State& st, Isa isa, int a, bool bwd) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  const size_t n = 64 * 128;
  auto x = rnd(n), g = rnd(n);
  std::vector<float> y(n);
  for (auto _ : st) {
    if (bwd) k.act_bwd[a](y.data(), g.data(), x.data(), n);
    else k.act_fwd[a](y.data(), x.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["Gelem/s"] = benchmark::Counter(n * 1e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void adam(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  const size_t n = 805066;  // mnist-cnn's parameters
  auto w = rnd(n), g = rnd(n), m = rnd(n), v = rnd(n);
  for (auto& x : v) x = x * x;
  const ember::AdamArgs a{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, 0.f, 0.1f, 0.001f};
  for (auto _ : st) {
    k.adam(w.data(), m.data(), v.data(), g.data(), n, a);
    benchmark::DoNotOptimize(w.data());
  }
  st.counters["GB/s"] = benchmark::Counter(n * 28e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
// mnist-cnn's fc1 at batch 1 from its transposed weight (3.2 MB, L3-resident between calls), with
// every input non-zero or with 77 % zero (a trained model's average after ReLU + pool on MNIST);
// counter: bytes of weight rows read per second.
void linear_t1(benchmark::State& st, Isa isa, double zeros) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  const int C = 6272, K = 128;
  auto x = rnd(C), wt = rnd(size_t(C) * K), b = rnd(K);
  std::mt19937 g(3);
  size_t live = 0;
  for (auto& v : x) {
    if (std::uniform_real_distribution<double>(0, 1)(g) < zeros) v = 0.f;
    live += v != 0.f;
  }
  std::vector<float> y(K);
  for (auto _ : st) {
    k.linear_t1(y.data(), x.data(), wt.data(), K, b.data(), C, K);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GB/s"] = benchmark::Counter(live * K * 4e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void linear_t1_dense(benchmark::State& st, Isa isa) { linear_t1(st, isa, 0.0); }
void linear_t1_sparse(benchmark::State& st, Isa isa) { linear_t1(st, isa, 0.77); }
// mnist-cnn's fc1 at batch 64 (x[64, 6272], w[128, 6272]) on one thread: the sparse-input kernels
// (forward with its transposed weight copy, weight gradient, input gradient) at a share of
// non-zero inputs, against the dense GEMM of the same product. Counters: GFLOP/s counted dense
// (2 N C K per call, the dense GEMM's work: comparable across rows) and of the useful work
// (2 K per non-zero input).
enum class SpOp { fwd, wgrad, dgrad };
void linear_sp(benchmark::State& st, Isa isa, SpOp op, double density) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  const int N = 64, C = 6272, K = 128;
  auto x = rnd(size_t(N) * C), w = rnd(size_t(K) * C), dy = rnd(size_t(N) * K);
  std::mt19937 g(5);
  size_t live = 0;
  for (auto& v : x) {
    if (std::uniform_real_distribution<double>(0, 1)(g) >= density) v = 0.f;
    live += v != 0.f;
  }
  Floats y(size_t(N) * K), wt(size_t(C) * K), dw(size_t(K) * C), dx(size_t(N) * C);
  const bool dense = density >= 1.0;
  k.linear_sp_fwd(y.data(), wt.data(), x.data(), C, w.data(), C, N, K, 0, C);
  for (auto _ : st) {
    if (op == SpOp::fwd) {
      if (dense) k.sgemm(false, true, N, K, C, 1.f, x.data(), C, w.data(), C, 0.f, y.data(), K);
      else k.linear_sp_fwd(y.data(), wt.data(), x.data(), C, w.data(), C, N, K, 0, C);
    } else if (op == SpOp::wgrad) {
      if (dense) k.sgemm(true, false, K, C, N, 1.f, dy.data(), K, x.data(), C, 0.f, dw.data(), C);
      else k.linear_sp_wgrad(dw.data(), C, dy.data(), x.data(), C, N, K, 0, C);
    } else {
      if (dense) k.sgemm(false, false, N, C, K, 1.f, dy.data(), K, w.data(), C, 0.f, dx.data(), C);
      else k.linear_sp_dgrad(dx.data(), dy.data(), x.data(), C, wt.data(), N, K, 0, C);
    }
    benchmark::ClobberMemory();
  }
  const double it = double(st.iterations());
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * C * K * 1e-9 * it, benchmark::Counter::kIsRate);
  st.counters["useful"] = benchmark::Counter(2.0 * live * K * 1e-9 * it, benchmark::Counter::kIsRate);
}

void im2col(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  const ember::ConvShape s{1, 1, 28, 28, 32, 5, 5, 28, 28, 1, 1, 2, 2, 1};
  auto x = rnd(784);
  std::vector<float> col(25 * 784);
  for (auto _ : st) {
    k.im2col(col.data(), x.data(), 1, s);
    benchmark::DoNotOptimize(col.data());
  }
  st.counters["GB/s"] = benchmark::Counter((784 + 25 * 784) * 4e-9 * st.iterations(), benchmark::Counter::kIsRate);
}
void fma_peak(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  float sink = 0;
  double flops = 0;
  for (auto _ : st) flops += k.fma_loop(1 << 16, &sink);
  benchmark::DoNotOptimize(sink);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
}

// The bit convolution of the bitnet benchmark: 900 patches of 9 x 1024 bits against 1024 channels
// (binary); counter: bit multiply-accumulates per second.
void bit_conv(benchmark::State& st, Isa isa) {
  if (skip(st, isa)) return;
  const auto& k = ember::bit_kernels_for(isa);
  const int P = 900, O = 1024, K = 144;
  std::mt19937_64 g(1);
  std::vector<uint64_t> x(size_t(P) * K), w(size_t(O) * K);
  for (auto& v : x) v = g();
  for (auto& v : w) v = g();
  std::vector<int32_t> out(size_t(O) * P);
  for (auto _ : st) {
    k.conv(out.data(), P, x.data(), P, w.data(), nullptr, O, K);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["bitMAC/s"] = benchmark::Counter(double(P) * O * K * 64 * st.iterations(), benchmark::Counter::kIsRate);
  st.SetLabel(k.name);
}

// The int8 GEMM shapes of issue 42: mnist's fc1, a 1x1 conv of 64 -> 256 and 256 -> 64 channels on
// 128 x 128 pixels, and a batch-1 fc1. GOP/s counts a multiply-add as 2.
struct GemmShape {
  const char* name;
  int M, N, K;
};
const GemmShape kGemmShapes[] = {{"fc1", 64, 128, 6272}, {"conv1x1_64_256", 16384, 256, 64},
                                 {"conv1x1_256_64", 16384, 64, 256}, {"fc1_batch1", 1, 128, 6272}};

void int8_gemm(benchmark::State& st, ember::Int8Isa isa, GemmShape s) {
  if (!ember::int8_isa_supported(isa)) return st.SkipWithError("int8 set not supported by this CPU");
  const auto& k = ember::int8_kernels(isa);
  std::mt19937 g(1);
  std::vector<uint8_t> A(size_t(s.M) * s.K), C(size_t(s.M) * s.N);
  std::vector<int8_t> w(size_t(s.N) * s.K);
  for (auto& a : A) a = uint8_t(g());
  for (auto& v : w) v = int8_t(g());
  std::vector<uint8_t, Aligned64<uint8_t>> packed(k.packed_b_bytes(s.N, s.K));
  k.pack_b(packed.data(), w.data(), s.N, s.K);
  std::vector<float> scale(size_t(s.N), 1e-3f);
  ember::Int8Epilogue ep;
  ep.scale = scale.data();
  for (auto _ : st) {
    k.gemm(s.M, 0, s.N, s.N, s.K, A.data(), s.K, packed.data(), ep, C.data(), s.N);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GOP/s"] = benchmark::Counter(2.0 * s.M * s.N * s.K * st.iterations(), benchmark::Counter::kIsRate);
}

// The fp32 baseline: C[M, N] = A[M, K] * W[N, K]^T with the table's sgemm.
void f32_gemm(benchmark::State& st, Isa isa, GemmShape s) {
  if (skip(st, isa)) return;
  const auto& k = ember::kernels_for(isa);
  Floats A = rnd(size_t(s.M) * s.K), W = rnd(size_t(s.N) * s.K), C(size_t(s.M) * s.N);
  for (auto _ : st) {
    k.sgemm(false, true, s.M, s.N, s.K, 1.f, A.data(), s.K, W.data(), s.K, 0.f, C.data(), s.N);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GOP/s"] = benchmark::Counter(2.0 * s.M * s.N * s.K * st.iterations(), benchmark::Counter::kIsRate);
}

void register_gemms() {
  using ember::Int8Isa;
  for (const GemmShape& s : kGemmShapes) {
    for (Isa isa : {Isa::avx2, Isa::avx512})
      benchmark::RegisterBenchmark((std::string("gemm_f32/") + ember::isa_name(isa) + "/" + s.name).c_str(), f32_gemm,
                                   isa, s)
          ->Unit(benchmark::kMicrosecond);
    for (Int8Isa isa : {Int8Isa::avx2, Int8Isa::avx_vnni, Int8Isa::avx512_vnni})
      benchmark::RegisterBenchmark((std::string("gemm_int8/") + ember::int8_isa_name(isa) + "/" + s.name).c_str(),
                                   int8_gemm, isa, s)
          ->Unit(benchmark::kMicrosecond);
  }
}

void register_all() {
  register_gemms();
  using Fn = void (*)(benchmark::State&, Isa);
  const std::pair<const char*, Fn> all[] = {{"conv_s1_fwd", conv_fwd}, {"conv_s1_relu_pool", conv_relu_pool_dense}, {"conv_s1_relu_pool_mnist", conv_relu_pool_mnist},     {"conv_s1_wgrad", conv_wgrad}, {"conv_s1_pool_wgrad", conv_pool_wgrad_dense}, {"conv_s1_pool_wgrad_mnist", conv_pool_wgrad_mnist},
                                            {"relu_maxpool2", relu_pool},  {"relu_maxpool2_bwd", relu_pool_bwd},
                                            {"adam", adam},
                                            {"im2col", im2col},            {"fma_loop", fma_peak},
                                            {"linear_t1_dense", linear_t1_dense}, {"linear_t1_sparse77", linear_t1_sparse}};
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    for (const auto& [name, fn] : all)
      benchmark::RegisterBenchmark((std::string(name) + "/" + ember::isa_name(isa)).c_str(), fn, isa)
          ->Unit(benchmark::kMicrosecond);
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    for (int a = 0; a < ember::kActs; ++a)
      for (bool bwd : {false, true})
        benchmark::RegisterBenchmark((std::string(bwd ? "act_bwd." : "act_fwd.") + ember::act_info(ember::ActId(a)).name +
                                      "/" + ember::isa_name(isa)).c_str(),
                                     act, isa, a, bwd)
            ->Unit(benchmark::kMicrosecond);
  const std::pair<const char*, SpOp> sp[] = {{"fwd", SpOp::fwd}, {"wgrad", SpOp::wgrad}, {"dgrad", SpOp::dgrad}};
  for (Isa isa : {Isa::avx2, Isa::avx512})
    for (const auto& [name, op] : sp)
      for (int pct : {0, 20, 30, 40, 50, 60, 70, 100})  // 0: the fixed costs; 100: the dense GEMM
        benchmark::RegisterBenchmark(("linear_sp_" + std::string(name) + "/" + ember::isa_name(isa) + "/d" +
                                      std::to_string(pct)).c_str(),
                                     linear_sp, isa, op, pct / 100.0)
            ->Unit(benchmark::kMicrosecond);
  for (Isa isa : {Isa::avx2, Isa::avx512})
    benchmark::RegisterBenchmark((std::string("bit_conv/") + ember::isa_name(isa)).c_str(), bit_conv, isa)
        ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
