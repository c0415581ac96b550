// Benchmarks of the binarized layers behind `ember bench bitnet`: the exact loss deltas of one
// random 32x32 example (threads over channels, or over examples), the brute-force oracle on a
// small layer for contrast, and the bit-convolution kernel alone in bit-MACs per second.
#include <chrono>
#include <memory>

#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::string kernel_name(const std::string& isa) { return bit_kernels_for(resolve_isa(isa, "isa")).name; }

BenchRow bench_deltas(const BenchConfig& c) {
  LayerShape s;
  s.H = s.W = 32, s.B = c.input_bits, s.O = c.channels, s.S = c.segments, s.kind = c.kind;
  validate(s, "bench");
  if (c.threads < 1 || c.threads > 256) throw Error("threads: expected 1..256, found " + std::to_string(c.threads));
  const BitKernels& k = bit_kernels_for(resolve_isa(c.isa, "isa"));
  const Layer L = random_layer(s, 1);
  const int nimg = 4;
  std::vector<BitImage> imgs;
  for (int i = 0; i < nimg; ++i) imgs.push_back(random_image(s.H, s.W, s.B, 100 + i));
  ThreadPool pool(c.threads);
  BenchRow r;
  r.cfg = c;
  int64_t live = 0, seen = 0;
  if (!c.over_examples) {
    DeltaEngine eng(s, k);
    ExampleDeltas d;
    eng.compute(L, imgs[0], 0, &d, &pool);  // warm-up: sizes the output
    const auto t0 = Clock::now();
    int n = 0;
    while (n < 2 || seconds_since(t0) < c.min_seconds) {
      eng.compute(L, imgs[n % nimg], n % s.C, &d, &pool);
      live += int64_t(d.live.size()), ++seen, ++n;
    }
    r.examples = n;
    r.ms_per_example = seconds_since(t0) * 1e3 / n;
  } else {
    std::vector<std::unique_ptr<DeltaEngine>> engs;
    std::vector<ExampleDeltas> outs(c.threads);
    std::vector<int64_t> lives(c.threads, 0);
    for (int t = 0; t < c.threads; ++t) engs.push_back(std::make_unique<DeltaEngine>(s, k));
    int round = 0;
    auto run_round = [&] {
      pool.run([&](int tid) {
        const int e = round * c.threads + tid;
        engs[tid]->compute(L, imgs[e % nimg], e % s.C, &outs[tid], nullptr);
        lives[tid] += int64_t(outs[tid].live.size());
      });
      ++round;
    };
    run_round();  // warm-up
    std::fill(lives.begin(), lives.end(), 0);
    const auto t0 = Clock::now();
    const int r0 = round;
    while (round - r0 < 2 || seconds_since(t0) < c.min_seconds) run_round();
    r.examples = (round - r0) * c.threads;
    r.ms_per_example = seconds_since(t0) * 1e3 / r.examples;
    for (auto v : lives) live += v;
    seen = r.examples;
  }
  r.ns_per_weight = r.ms_per_example * 1e6 / double(s.conv_weights() + s.head_weights());
  r.live_channels = double(live) / double(seen) / s.O;
  return r;
}

double bench_oracle_ms(const LayerShape& s) {
  const Layer L = random_layer(s, 1);
  const BitImage img = random_image(s.H, s.W, s.B, 2);
  const auto t0 = Clock::now();
  int n = 0;
  while (n < 1 || seconds_since(t0) < 0.2) {
    const DenseDeltas d = oracle_deltas(L, img, n % s.C);
    ++n;
  }
  return seconds_since(t0) * 1e3 / n;
}

double bench_conv_bitmacs(int input_bits, int channels, const std::string& isa, double min_seconds) {
  LayerShape s;
  s.H = s.W = 32, s.B = input_bits, s.O = channels;
  validate(s, "bench");
  const BitKernels& k = bit_kernels_for(resolve_isa(isa, "isa"));
  const Layer L = random_layer(s, 3);
  const BitImage img = random_image(s.H, s.W, s.B, 4);
  // Patch rows [P, K] of random bits (the image's words repeated), weights [O, K] of the layer.
  std::vector<uint64_t> x(size_t(s.P()) * s.K());
  for (size_t i = 0; i < x.size(); ++i) x[i] = img.bits[i % img.bits.size()];
  std::vector<int32_t> out(size_t(s.O) * s.P());
  k.conv(out.data(), s.P(), x.data(), s.P(), L.conv_sign.data(), nullptr, s.O, s.K());
  const auto t0 = Clock::now();
  int n = 0;
  while (n < 2 || seconds_since(t0) < min_seconds) {
    k.conv(out.data(), s.P(), x.data(), s.P(), L.conv_sign.data(), nullptr, s.O, s.K());
    ++n;
  }
  return double(s.P()) * s.O * s.N() * n / seconds_since(t0);
}

}  // namespace ember::bitnet
