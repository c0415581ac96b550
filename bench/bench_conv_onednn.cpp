// Every convolution shape of the built-in models (mnist-cnn, convnext-seed, convnext-fashion,
// convnext-atto) at a training batch, ember's ops against oneDNN's (libdnnl, the library PyTorch
// calls for CPU convolutions): forward, backward-data and backward-weights, each side in its own
// layouts (oneDNN picks its blocked formats, `format_tag::any`, and its reorders are not timed),
// the same threads, alternating, best of rounds. Built only when oneDNN is found; ember itself
// never links it. Usage: bench_conv_onednn [--threads T] [--batch N] [--models a,b] [--seconds S]
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "ember/ember.h"
#include "kernels/kernels.h"
#include "ops/conv_nhwc.h"
#include "ops/ops.h"

namespace {

using ember::ConvShape;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::string model, node;
  ConvShape s;
};

// The Conv2d nodes (and Linear over channels: 1x1 convs) of a model, from its plan's shapes.
std::vector<Shape> conv_shapes(const std::string& name, int batch) {
  const ember::Model m = ember::builtin_model(name);
  ember::PlanOptions o;
  o.batch = 1, o.training = false;
  const ember::Plan plan(m, o);
  std::vector<Shape> out;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const ember::LayerSpec& l = m.layers[i];
    const bool chan = l.kind == ember::LayerKind::Linear && l.over_channels;
    if (l.kind != ember::LayerKind::Conv2d && !chan) continue;
    auto chw = [](std::vector<int> d) {  // a 1x1 image is shown flat, [C]
      d.resize(3, 1);
      return d;
    };
    const auto in = chw(plan.layers()[i].in_shape), o2 = chw(plan.layers()[i].out_shape);
    ConvShape s{batch, in[0], in[1], in[2], o2[0], chan ? 1 : l.kernel_h, chan ? 1 : l.kernel_w, o2[1], o2[2],
                chan ? 1 : l.stride_h, chan ? 1 : l.stride_w, 0, 0, chan ? 1 : l.groups};
    if (l.same) s.pad_h = (l.kernel_h - 1) / 2, s.pad_w = (l.kernel_w - 1) / 2;
    else if (!chan) s.pad_h = l.pad_h, s.pad_w = l.pad_w;
    out.push_back({name, l.name.empty() ? std::to_string(i) : l.name, s});
  }
  return out;
}

// Seconds per call of f: best of `rounds` rounds of at least `min_s` seconds each.
double time_best(const std::function<void()>& f, double min_s, int rounds = 3) {
  f();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    int n = 0;
    const auto t0 = Clock::now();
    double el = 0;
    do {
      f();
      ++n;
      el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < min_s);
    best = std::min(best, el / n);
  }
  return best;
}

// oneDNN's three passes for one shape, in the formats it chooses.
struct Dnnl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream st{eng};
  std::function<void()> fwd, bwd_data, bwd_weights;
  std::vector<dnnl::memory> keep;

  explicit Dnnl(const ConvShape& s) {
    using dnnl::memory;
    using tag = memory::format_tag;
    const memory::data_type f32 = memory::data_type::f32;
    const int G = s.groups;
    memory::dims src{s.N, s.C, s.H, s.W}, dst{s.N, s.K, s.P, s.Q}, bias{s.K};
    memory::dims wei = G == 1 ? memory::dims{s.K, s.C, s.R, s.S} : memory::dims{G, s.K / G, s.C / G, s.R, s.S};
    memory::dims strides{s.stride_h, s.stride_w}, pl{s.pad_h, s.pad_w};
    memory::dims pr{(s.P - 1) * s.stride_h + s.R - s.H - s.pad_h, (s.Q - 1) * s.stride_w + s.S - s.W - s.pad_w};
    auto any = [&](const memory::dims& d) { return memory::desc(d, f32, tag::any); };
    const memory::desc bias_md(bias, f32, tag::x);
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       any(src), any(wei), bias_md, any(dst), strides, pl, pr);
    dnnl::convolution_forward::primitive_desc fpd(fd, eng);
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, any(src), any(wei), any(dst),
                                             strides, pl, pr);
    dnnl::convolution_backward_data::primitive_desc bdp(bd, eng, fpd);
    dnnl::convolution_backward_weights::desc bw(dnnl::algorithm::convolution_direct, any(src), any(wei), bias_md,
                                                any(dst), strides, pl, pr);
    dnnl::convolution_backward_weights::primitive_desc bwp(bw, eng, fpd);
    auto mem = [&](const memory::desc& d) {
      memory m(d, eng);
      std::memset(m.get_data_handle(), 0, d.get_size());
      float* p = static_cast<float*>(m.get_data_handle());
      for (size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
      keep.push_back(m);
      return m;
    };
    memory x = mem(fpd.src_desc()), w = mem(fpd.weights_desc()), b = mem(fpd.bias_desc()), y = mem(fpd.dst_desc());
    memory dy = mem(bdp.diff_dst_desc()), dx = mem(bdp.diff_src_desc()), w2 = mem(bdp.weights_desc());
    memory x2 = mem(bwp.src_desc()), dy2 = mem(bwp.diff_dst_desc()), dw = mem(bwp.diff_weights_desc()),
           db = mem(bwp.diff_bias_desc());
    auto f = dnnl::convolution_forward(fpd);
    auto d = dnnl::convolution_backward_data(bdp);
    auto g = dnnl::convolution_backward_weights(bwp);
    fwd = [=, this] {
      f.execute(st, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
      st.wait();
    };
    bwd_data = [=, this] {
      d.execute(st, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_DIFF_SRC, dx}});
      st.wait();
    };
    bwd_weights = [=, this] {
      g.execute(st,
                {{DNNL_ARG_SRC, x2}, {DNNL_ARG_DIFF_DST, dy2}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}});
      st.wait();
    };
  }
};

// One shape's tensors for ember's side, filled with a fixed pattern.
struct Buffers {
  std::vector<float> x, w, b, y, dy, dx, dw, db, ws;
  explicit Buffers(const ConvShape& s) {
    auto fill = [](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (size_t i = 0; i < n; ++i) v[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
    };
    fill(x, size_t(s.N) * s.C * s.H * s.W);
    fill(w, size_t(s.K) * (s.C / s.groups) * s.R * s.S);
    fill(b, size_t(s.K));
    fill(y, size_t(s.N) * s.K * s.P * s.Q);
    fill(dy, y.size());
    fill(dx, x.size());
    fill(dw, w.size());
    fill(db, b.size());
  }
};

// ember's ops for one shape: forward; backward with the weight gradient only (the first layer's
// case) and with both gradients (every other layer's), which ember computes in one pass.
struct Ember : Buffers {
  std::function<void()> fwd, bwd_weights, bwd_both;
  Ember(const ConvShape& s, const ember::ops::Exec& e) : Buffers(s) {
    const ember::ops::ConvDesc cp = ember::ops::conv2d_plan(s, e.pool.size());
    ws.resize(cp.workspace);
    fwd = [&, s, e, cp] { ember::ops::conv2d_fwd<float>(e, cp.algo, y.data(), x.data(), w.data(), b.data(), s, ws.data()); };
    bwd_weights = [&, s, e, cp] {
      ember::ops::conv2d_bwd<float>(e, cp.algo, nullptr, dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
    };
    bwd_both = [&, s, e, cp] {
      ember::ops::conv2d_bwd<float>(e, cp.algo, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
    };
  }
};

// The same shape channel-last (ops/conv_nhwc.h), where it runs so: null functions otherwise.
struct EmberNhwc : Buffers {
  std::function<void()> fwd, bwd_weights, bwd_both;
  EmberNhwc(const ConvShape& s, const ember::ops::Exec& e) : Buffers(s) {
    if (ember::ops::conv2d_nhwc_algo(s) == ember::ops::ConvAlgo::none) return;
    ws.resize(ember::ops::conv2d_nhwc_workspace(s, e.pool.size()) + 1);
    fwd = [&, s, e] { ember::ops::conv2d_nhwc_fwd<float>(e, y.data(), x.data(), w.data(), b.data(), s, ws.data()); };
    bwd_weights = [&, s, e] {
      ember::ops::conv2d_nhwc_bwd<float>(e, nullptr, dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
    };
    bwd_both = [&, s, e] {
      ember::ops::conv2d_nhwc_bwd<float>(e, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
    };
  }
};

std::string shape_text(const ConvShape& s) {
  char t[160];
  std::snprintf(t, sizeof t, "N%d C%d K%d %dx%d k%dx%d/%d p%d g%d", s.N, s.C, s.K, s.H, s.W, s.R, s.S, s.stride_h,
                s.pad_h, s.groups);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, batch = 64;
  double seconds = 0.1;
  std::string models = "mnist-cnn,convnext-seed,convnext-fashion,convnext-atto";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--models") models = argv[i + 1];
    else return std::fprintf(stderr, "bench_conv_onednn: unknown flag %s\n", a.c_str()), 2;
  }
  if (threads < 1 || threads > 256 || batch < 1 || batch > 4096 || !(seconds > 0))
    return std::fprintf(stderr, "bench_conv_onednn: --threads 1..256, --batch 1..4096, --seconds > 0\n"), 2;
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);  // oneDNN's OpenMP, before its first use
  ember::ThreadPool pool(threads);
  const ember::ops::Exec e{ember::kernels_for(ember::best_isa()), pool};
  std::vector<Shape> shapes;
  std::set<std::tuple<int, int, int, int, int, int, int, int, int>> seen;
  for (size_t p = 0; p <= models.size();) {
    const size_t q = std::min(models.find(',', p), models.size());
    for (const Shape& sh : conv_shapes(models.substr(p, q - p), batch)) {
      const ConvShape& s = sh.s;
      if (seen.insert({s.C, s.K, s.H, s.W, s.R, s.stride_h, s.pad_h, s.groups, s.N}).second) shapes.push_back(sh);
    }
    p = q + 1;
  }
  std::printf("ember vs oneDNN %s, fp32, %d threads, batch %d, kernels %s; GFLOP/s (a multiply-add is 2)\n",
              std::to_string(dnnl_version()->major).append(".").append(std::to_string(dnnl_version()->minor)).c_str(),
              threads, batch, ember::isa_name(e.k.isa));
  std::printf("%-17s %-16s %-34s | %7s %7s %5s | %7s %7s %5s | %7s %7s %7s %5s\n", "model", "node", "shape", "fwd e",
              "fwd d", "e/d", "wgr e", "wgr d", "e/d", "bwd e", "bdat d", "bwd d", "e/d");
  std::printf("%-70s | %7s %5s | %7s %5s | %7s %5s\n", "  the same channel-last (ember nhwc), where it runs so:", "fwd n",
              "n/d", "wgr n", "n/d", "bwd n", "n/d");
  for (const Shape& sh : shapes) {
    const ConvShape& s = sh.s;
    const double flop = 2.0 * s.N * s.K * s.P * s.Q * (s.C / s.groups) * s.R * s.S;
    Ember em(s, e);
    std::unique_ptr<Dnnl> dn;
    try {
      dn = std::make_unique<Dnnl>(s);
    } catch (const dnnl::error& err) {  // a shape oneDNN has no primitive for
      std::printf("%-17s %-16s %-34s | oneDNN: %s\n", sh.model.c_str(), sh.node.substr(0, 16).c_str(),
                  shape_text(s).c_str(), err.what());
      continue;
    }
    EmberNhwc nh(s, e);
    double t[9] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep < 2; ++rep) {  // alternating: a slow moment of the host hits both sides
      if (nh.fwd) {
        t[6] = std::min(t[6], time_best(nh.fwd, seconds));
        t[7] = std::min(t[7], time_best(nh.bwd_weights, seconds));
        t[8] = std::min(t[8], time_best(nh.bwd_both, seconds));
      }
      t[0] = std::min(t[0], time_best(em.fwd, seconds));
      t[1] = std::min(t[1], time_best(dn->fwd, seconds));
      t[2] = std::min(t[2], time_best(em.bwd_weights, seconds));
      t[3] = std::min(t[3], time_best(dn->bwd_weights, seconds));
      t[4] = std::min(t[4], time_best(em.bwd_both, seconds));
      t[5] = std::min(t[5], time_best(dn->bwd_data, seconds));
    }
    const double g = flop / 1e9;
    std::printf("%-17s %-16s %-34s | %7.1f %7.1f %5.2f | %7.1f %7.1f %5.2f | %7.1f %7.1f %7.1f %5.2f\n",
                sh.model.c_str(), sh.node.substr(0, 16).c_str(), shape_text(s).c_str(), g / t[0], g / t[1], t[1] / t[0],
                g / t[2], g / t[3], t[3] / t[2], 2 * g / t[4], g / t[5], 2 * g / (t[3] + t[5]), (t[3] + t[5]) / t[4]);
    if (nh.fwd)
      std::printf("%-70s | %7.1f %5.2f | %7.1f %5.2f | %7.1f %5.2f\n", "  nhwc", g / t[6], t[1] / t[6], g / t[7],
                  t[3] / t[7], 2 * g / t[8], (t[3] + t[5]) / t[8]);
    std::fflush(stdout);
  }
  std::printf("e/d: oneDNN's time over ember's (above 1: ember faster). bwd e: ember's input and weight\n"
              "gradients in its one pass; bwd d: oneDNN's backward-data plus backward-weights.\n");
  return 0;
}
