// Every fast path against its scalar reference: the f32 ops (threaded, through each kernel table
// the CPU supports) versus the reference kernels in double, on awkward sizes (batch 1, fewer
// samples than threads, odd channels, groups, stride > kernel, padding >= kernel), and the
// owner-first work split the fused conv uses, and the pool's exactly-once parts.
#include "act_ref.h"
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gradcheck.h"
#include "ops/conv_desc.h"
#include "ops/conv_nhwc.h"
#include "ops/ops.h"

namespace ember::test {
namespace {


constexpr double kTol = 2e-5;

// Every path of ops::conv2d_plan, with its edges.
std::vector<ConvShape> conv_shapes() {
  return {
      conv(3, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1),   // mnist-cnn conv (direct stride-1 kernels)
      conv(2, 3, 9, 37, 7, 3, 3, 1, 1, 1, 1, 1),     // the same path: odd K, rows over two blocks
      conv(3, 2, 6, 11, 13, 3, 5, 1, 1, 1, 2, 1),    // the same path: a 3x5 kernel, padding 1 x 2
      conv(1, 3, 9, 7, 17, 3, 3, 2, 1, 1, 0, 1),     // batch 1, odd K
      conv(5, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 2),      // groups
      conv(2, 6, 5, 5, 6, 3, 3, 1, 1, 1, 1, 6),      // depthwise
      conv(3, 3, 9, 6, 12, 7, 7, 1, 1, 3, 3, 3),     // depthwise x4, 7x7 'same' (ConvNeXt's)
      conv(2, 4, 1, 1, 16, 7, 7, 1, 1, 3, 3, 4),     // the same at 1x1: one tap of 49 inside
      conv(3, 4, 4, 4, 16, 7, 7, 1, 1, 3, 3, 4),     // 4x4 planes, batch < 8: the direct loops
      conv(9, 4, 4, 4, 16, 7, 7, 1, 1, 3, 3, 4),     // 4x4 planes, batch 9: the dense per-group map (dw_dense)
      conv(2, 3, 2, 2, 6, 7, 7, 1, 1, 3, 3, 3),      // 2x2 planes, x2
      conv(8, 3, 2, 2, 6, 7, 7, 1, 1, 3, 3, 3),      // the same, batch 8 (dw_dense)
      conv(2, 3, 4, 4, 6, 3, 3, 1, 1, 0, 0, 3),      // 4x4 -> 2x2, no padding
      conv(2, 2, 3, 5, 4, 3, 3, 1, 1, 1, 1, 2),      // a 3x5 plane (15 pixels)
      conv(2, 2, 4, 5, 6, 3, 5, 1, 1, 0, 2, 2),      // depthwise x3, no vertical padding (direct loops)
      conv(2, 2, 8, 9, 4, 3, 5, 1, 1, 0, 2, 2),      // the same over 54 pixels (register blocks)
      conv(2, 3, 13, 11, 3, 3, 3, 1, 1, 1, 1, 3),    // depthwise x1, 13x11: partial 4x8 blocks
      conv(1, 2, 5, 6, 4, 3, 3, 1, 1, 3, 3, 2),      // depthwise, padding >= kernel (direct loops)
      conv(1, 5, 8, 9, 10, 7, 7, 1, 1, 3, 3, 5),     // depthwise x2, batch 1: groups split over the threads
      conv(2, 3, 6, 6, 6, 3, 3, 2, 2, 1, 1, 3),      // depthwise at stride 2 (im2col path)
      conv(4, 7, 5, 3, 33, 1, 1, 1, 1, 0, 0, 1),     // pointwise over 15 pixels: one GEMM over the batch
      conv(5, 9, 1, 1, 11, 1, 1, 1, 1, 0, 0, 1),     // pointwise at 1x1 (x used as [N, C])
      conv(3, 5, 2, 2, 7, 1, 1, 1, 1, 0, 0, 1),      // pointwise at 2x2
      conv(1, 37, 2, 2, 19, 1, 1, 1, 1, 0, 0, 1),    // pointwise over 4 pixels in all: rows of pixels
      conv(1, 9, 1, 3, 40, 1, 1, 1, 1, 0, 0, 1),     // the same over 3
      conv(2, 3, 1, 17, 5, 1, 1, 1, 1, 0, 0, 1),     // pointwise over 17 pixels: per sample
      conv(2, 2, 7, 7, 3, 2, 2, 3, 3, 0, 0, 1),      // stride > kernel
      conv(2, 1, 3, 3, 2, 2, 2, 1, 1, 2, 2, 1),      // padding >= kernel
      conv(3, 5, 8, 6, 7, 2, 2, 2, 2, 0, 0, 1),      // patchify 2x2/2 over 12 pixels: one GEMM over the batch
      conv(2, 3, 12, 20, 9, 4, 4, 4, 4, 0, 0, 1),    // patchify 4x4/4 over 15 pixels (a stem's shape)
      conv(2, 3, 10, 12, 5, 2, 2, 2, 2, 0, 0, 1),    // patchify 2x2/2 over 30 pixels: per sample
      conv(2, 2, 16, 36, 5, 4, 4, 4, 4, 0, 0, 1),    // patchify 4x4/4 over 36 pixels: per sample
      conv(2, 2, 9, 9, 4, 3, 3, 3, 3, 0, 0, 1),      // patchify 3x3/3: the general im2col
      conv(3, 4, 7, 9, 6, 2, 2, 2, 2, 0, 0, 1),      // 2x2/2 with a row and a column left over
      conv(3, 3, 7, 7, 5, 3, 3, 2, 2, 1, 1, 1),      // 3x3/2 padded over 16 pixels: batched, general
      conv(17, 512, 16, 16, 16, 4, 4, 4, 4, 0, 0, 1)};  // 4x4/4 over 16 pixels, two chunks of samples
}

// Runs a's forward and backward on s (ws sized for plan) and compares them with the double reference.
void check_conv(const ops::Exec& e, ops::ConvAlgo a, const ConvShape& s, size_t workspace) {
  const size_t nx = size_t(s.N) * s.C * s.H * s.W, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S,
               ny = size_t(s.N) * s.K * s.P * s.Q;
  auto xd = randn(nx, 1), wd = randn(nw, 2), bd = randn(s.K, 3), gd = randn(ny, 4);
  auto x = to_float(xd), w = to_float(wd), b = to_float(bd), g = to_float(gd);
  for (size_t i = 0; i < nx; ++i) xd[i] = x[i];  // the reference sees the same rounded inputs
  for (size_t i = 0; i < nw; ++i) wd[i] = w[i];
  for (int i = 0; i < s.K; ++i) bd[i] = b[i];
  for (size_t i = 0; i < ny; ++i) gd[i] = g[i];
  std::vector<float> ws(workspace), y(ny), dx(nx, NAN), dw(nw, NAN), db(s.K, NAN);
  std::vector<double> yr(ny), dxr(nx), dwr(nw), dbr(s.K);
  ops::conv2d_fwd<float>(e, a, y.data(), x.data(), w.data(), b.data(), s, ws.data());
  ops::conv2d_bwd<float>(e, a, dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), s, ws.data());
  ref::conv2d_fwd<double>(yr.data(), xd.data(), wd.data(), bd.data(), s);
  ref::conv2d_bwd_data<double>(dxr.data(), gd.data(), wd.data(), s);
  ref::conv2d_bwd_filter<double>(dwr.data(), dbr.data(), gd.data(), xd.data(), s);
  const double red = std::sqrt(double(s.N) * s.P * s.Q);
  EXPECT_LT(max_rel_diff(y, yr), kTol * 10);
  EXPECT_LT(max_rel_diff(dx, dxr), kTol * 10);
  EXPECT_LT(max_rel_diff(dw, dwr), kTol * red);
  EXPECT_LT(max_rel_diff(db, dbr), kTol * red);
}

std::string conv_trace(Isa isa, int threads, const ConvShape& s) {
  return std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " N" + std::to_string(s.N) + " C" +
         std::to_string(s.C) + " K" + std::to_string(s.K) + " G" + std::to_string(s.groups);
}

TEST(FastVsRef, Conv2d) {
  for (Isa isa : isas())
    for (int threads : {1, 2, 3})
      for (const ConvShape& s : conv_shapes()) {
        SCOPED_TRACE(conv_trace(isa, threads, s));
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        const ops::ConvDesc cp = ops::conv2d_plan(s, threads);
        check_conv(e, cp.algo, s, cp.workspace);
      }
}

// A plan chooses a convolution's algorithm for its batch; its last, partial batch runs the same
// algorithm on fewer samples (dw_dense, chosen from 8 samples, at 1), in the workspace planned.
// The shapes cover every algorithm.
TEST(ConvPlan, EveryAlgorithmRunsBatchesSmallerThanItsPlan) {
  std::set<std::string> seen;
  for (Isa isa : isas())
    for (int threads : {1, 3})
      for (const ConvShape& planned : conv_shapes()) {
        const ops::ConvDesc cp = ops::conv2d_plan(planned, threads);
        seen.insert(ops::conv_algo_name(cp.algo));
        for (int n : {1, planned.N - 1}) {
          if (n < 1) continue;
          ConvShape s = planned;
          s.N = n;
          SCOPED_TRACE(conv_trace(isa, threads, s) + " of a plan for " + std::to_string(planned.N) + ": " +
                       ops::conv_algo_name(cp.algo));
          ThreadPool pool(threads);
          check_conv(ops::Exec{kernels_for(isa), pool}, cp.algo, s, cp.workspace);
        }
      }
  EXPECT_EQ(seen, (std::set<std::string>{"im2col-gemm", "batched-1x1", "batched-im2col", "direct-s1",
                                         "depthwise-dense", "depthwise"}));
}
// An inference plan's descriptor (pack on) reads the weight packed once by conv2d_pack: for every
// shape, both layouts, every kernel set and 1 or 2 threads, the forward from the packed weight
// agrees with the double reference (kTol, relative) and, where the packed kernels give the
// per-call GEMM's bits (more rows than gemm_stream_rows), equals the unpacked forward exactly.
// Every GEMM algorithm of a packing table has a packed format.
TEST(ConvDesc, PackedWeightsGiveTheUnpackedForward) {
  std::set<std::string> packed_seen;
  for (Isa isa : isas())
    for (int threads : {1, 2})
      for (const ConvShape& s : conv_shapes())
        for (bool nhwc : {false, true}) {
          const Kernels& k = kernels_for(isa);
          const ops::ConvDesc d = ops::conv2d_desc(s, nhwc, threads, k, true);
          if (d.algo == ops::ConvAlgo::none) continue;
          SCOPED_TRACE(conv_trace(isa, threads, s) + (nhwc ? " nhwc " : " nchw ") + ops::conv_algo_name(d.algo));
          const bool gemm = d.algo == ops::ConvAlgo::nhwc_gemm || d.algo == ops::ConvAlgo::nhwc_im2col ||
                            d.algo == ops::ConvAlgo::nhwc_patchify || d.algo == ops::ConvAlgo::batched_im2col;
          // (an nchw weight of at most gemm_stream_rows rows is op(A) the GEMM reads in place: not packed)
          if (gemm && k.gemm_packs && (nhwc || s.K / s.groups > k.gemm_stream_rows)) EXPECT_GT(d.packed_elems, 0u);
          if (!d.packed_elems) continue;
          packed_seen.insert(ops::weight_format_name(d.weight_format));
          const size_t nx = size_t(s.N) * s.C * s.H * s.W, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S,
                       ny = size_t(s.N) * s.K * s.P * s.Q;
          auto xd = randn(nx, 1), wd = randn(nw, 2), bd = randn(s.K, 3);
          auto x = to_float(xd), w = to_float(wd), b = to_float(bd);
          for (size_t i = 0; i < nx; ++i) xd[i] = x[i];
          for (size_t i = 0; i < nw; ++i) wd[i] = w[i];
          for (int i = 0; i < s.K; ++i) bd[i] = b[i];
          std::vector<float> ws(d.workspace + 1), wp_store(d.packed_elems + 16), y(ny, NAN), y0(ny, NAN);
          float* wp = wp_store.data() + (16 - reinterpret_cast<uintptr_t>(wp_store.data()) / 4 % 16) % 16;
          ThreadPool pool(threads);
          const ops::Exec e{k, pool};
          ops::conv2d_pack(k, d, wp, w.data(), b.data(), s, ws.data());
          std::vector<double> yr(ny), xr(nx);
          if (nhwc) {
            ops::conv2d_nhwc_fwd<float>(e, d.algo, y.data(), x.data(), w.data(), b.data(), s, ws.data(), wp);
            ops::conv2d_nhwc_fwd<float>(e, d.algo, y0.data(), x.data(), w.data(), b.data(), s, ws.data(), nullptr);
            ops::conv2d_nhwc_fwd<double>(e, d.algo, yr.data(), xd.data(), wd.data(), bd.data(), s, nullptr, nullptr);
          } else {
            ops::conv2d_fwd<float>(e, d.algo, y.data(), x.data(), w.data(), b.data(), s, ws.data(), nullptr, nullptr, wp);
            ops::conv2d_fwd<float>(e, d.algo, y0.data(), x.data(), w.data(), b.data(), s, ws.data());
            ref::conv2d_fwd<double>(yr.data(), xd.data(), wd.data(), bd.data(), s);
          }
          EXPECT_LT(max_rel_diff(y, yr), kTol * 10);
          const int rows = nhwc ? s.N * s.P * s.Q : s.K / s.groups;
          if (rows > k.gemm_stream_rows && d.algo != ops::ConvAlgo::dw_dense && d.algo != ops::ConvAlgo::nhwc_dw_dense &&
              d.algo != ops::ConvAlgo::batched_pointwise)
            EXPECT_EQ(std::memcmp(y.data(), y0.data(), ny * sizeof(float)), 0);
        }
  EXPECT_TRUE(packed_seen.count("gemm-b-panels")) << "no shape packs op(B)";
  EXPECT_TRUE(packed_seen.count("gemm-a-panels")) << "no shape packs op(A)";
  EXPECT_TRUE(packed_seen.count("dense-map")) << "no shape packs a dense map";
}

// A bf16 inference plan's descriptor (pack on, bf16) packs the weight once into the table's bf16
// panels (packer_a / packer_b): for every nchw shape (bf16 plans run nchw), every kernel set and 1
// or 2 threads, the forward from it agrees with the per-call bf16 forward (the same bf16
// products, summed in another order: fp32 rounding of the sums) and, for a 1x1 conv, reading the
// input's bf16 copy alone (x null, as after a fused norm) gives the bits of reading x.
TEST(ConvDesc, Bf16PackedWeightsGiveTheBf16Forward) {
  int packed = 0;
  for (Isa isa : isas())
    for (int threads : {1, 2})
      for (const ConvShape& s : conv_shapes()) {
        const Kernels& k = kernels_for(isa);
        const ops::ConvDesc d = ops::conv2d_desc(s, false, threads, k, true, true);
        SCOPED_TRACE(conv_trace(isa, threads, s) + " " + ops::conv_algo_name(d.algo));
        EXPECT_EQ(d.bf16_weights, d.bf16_products && d.packed_elems > 0);  // dw_dense packs its maps on every table
        if (!d.packed_elems) continue;
        ++packed;
        const size_t nx = size_t(s.N) * s.C * s.H * s.W, nw = size_t(s.K) * (s.C / s.groups) * s.R * s.S,
                     ny = size_t(s.N) * s.K * s.P * s.Q;
        auto x = to_float(randn(nx, 1)), w = to_float(randn(nw, 2)), b = to_float(randn(s.K, 3));
        std::vector<float> ws(d.workspace + 1), wp_store(d.packed_elems + 16), y(ny, NAN), y0(ny, NAN);
        float* wp = wp_store.data() + (16 - reinterpret_cast<uintptr_t>(wp_store.data()) / 4 % 16) % 16;
        ThreadPool pool(threads);
        const ops::Exec e{k, pool, nullptr, d.bf16_products};
        ops::conv2d_pack(k, d, wp, w.data(), b.data(), s, ws.data());
        ops::conv2d_fwd<float>(e, d.algo, y.data(), x.data(), w.data(), b.data(), s, ws.data(), nullptr, nullptr, wp);
        ops::conv2d_fwd<float>(e, d.algo, y0.data(), x.data(), w.data(), b.data(), s, ws.data());
        EXPECT_LT(max_rel_diff(y, y0), kTol * 10);
        if (d.reads_bf16_input) {
          std::vector<uint16_t> xh(nx);
          cvt_f32_bf16_ref(xh.data(), x.data(), nx);
          std::vector<float> yh(ny, NAN);
          ops::conv2d_fwd<float>(e, d.algo, yh.data(), nullptr, w.data(), b.data(), s, ws.data(), nullptr, xh.data(), wp);
          EXPECT_EQ(std::memcmp(yh.data(), y.data(), ny * sizeof(float)), 0) << "from the bf16 input copy";
        }
      }
  bool fast = false;
  for (Isa isa : isas()) fast |= kernels_for(isa).gemm_packs != 0;
  if (fast) EXPECT_GT(packed, 0) << "no shape packed";
}

TEST(FastVsRef, Linear) {
  const int sizes[][3] = {{64, 6272, 128}, {1, 7, 1}, {7, 33, 10}, {17, 1, 5}, {3, 100, 129}, {100, 784, 128},
                          {128, 50, 129}, {129, 20, 200}, {3100, 24, 40}};  // the last: bias by row chunks
  for (Isa isa : isas())
    for (int threads : {1, 2, 3})
      for (const auto& sz : sizes) {
        const int N = sz[0], C = sz[1], K = sz[2];
        SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " N" +
                     std::to_string(N) + " C" + std::to_string(C) + " K" + std::to_string(K));
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        auto x = to_float(randn(size_t(N) * C, 5)), w = to_float(randn(size_t(K) * C, 6)),
             b = to_float(randn(K, 7)), g = to_float(randn(size_t(N) * K, 8));
        std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end()),
            gd(g.begin(), g.end()), yr(size_t(N) * K), dxr(size_t(N) * C), dwr(size_t(K) * C), dbr(K);
        std::vector<float> y(size_t(N) * K, NAN), dx(size_t(N) * C, NAN), dw(size_t(K) * C, NAN), db(K, NAN);
        ops::linear_fwd<float>(e, y.data(), x.data(), w.data(), b.data(), N, C, K);
        // With scratch, a batch below K (<= 128) runs as y^T = w x^T: the same to rounding.
        std::vector<float> ws(std::max(ops::linear_fwd_workspace(N, K), ops::linear_fwd_split_workspace(N, C, K, threads)) + 1, NAN),
            yt(size_t(N) * K, NAN);
        ops::linear_fwd<float>(e, yt.data(), x.data(), w.data(), b.data(), N, C, K, ws.data());
        ops::linear_bwd<float>(e, dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, K);
        ref::linear_fwd<double>(yr.data(), xd.data(), wd.data(), bd.data(), N, C, K);
        ref::linear_bwd<double>(dxr.data(), dwr.data(), dbr.data(), gd.data(), xd.data(), wd.data(), N, C, K);
        EXPECT_LT(max_rel_diff(y, yr), kTol * std::sqrt(double(C)));
        EXPECT_LT(max_rel_diff(yt, yr), kTol * std::sqrt(double(C)));
        EXPECT_LT(max_rel_diff(dx, dxr), kTol * std::sqrt(double(K)));
        EXPECT_LT(max_rel_diff(dw, dwr), kTol * std::sqrt(double(N)));
        EXPECT_LT(max_rel_diff(db, dbr), kTol * std::sqrt(double(N)));
      }
}

// The sparse-input Linear (ops::linear_fwd_sp / linear_bwd_sp) against the dense reference in
// double: inputs whose share of zeros puts every chunk on the sparse path, some chunks on it (zero
// columns in some chunks only: mixed), or none; with the input gradient masked at zero inputs
// (after a ReLU) or needed everywhere; 1-3 threads; a batch below the compiled one. And the same
// bits on a second run (the chunk decisions and partial sums are fixed for a thread count).
TEST(FastVsRef, LinearSparseInput) {
  const int sizes[][3] = {{64, 6272, 128}, {9, 700, 40}, {64, 784, 128}, {5, 130, 129}};
  for (Isa isa : isas())
    for (int threads : {1, 2, 3})
      for (const auto& sz : sizes)
        for (const char* kind : {"sparse", "mixed", "dense"})
          for (bool masked : {true, false}) {
            const int N = sz[0], C = sz[1], K = sz[2], n = N > 5 ? N - 2 : N;
            if (isa == Isa::scalar && C > 1000) continue;  // the references alone: slow and covered below
            SCOPED_TRACE(std::string(isa_name(isa)) + " threads " + std::to_string(threads) + " N" +
                         std::to_string(N) + " C" + std::to_string(C) + " K" + std::to_string(K) + " " +
                         kind + (masked ? " masked" : ""));
            ThreadPool pool(threads);
            const ops::Exec e{kernels_for(isa), pool};
            const size_t bytes = ops::linear_sp_saved_bytes(N, C, K, threads);
            ASSERT_GT(bytes, 0u);
            auto x = to_float(randn(size_t(N) * C, 5)), w = to_float(randn(size_t(K) * C, 6)),
                 b = to_float(randn(K, 7)), g = to_float(randn(size_t(N) * K, 8));
            const ops::LinearSpLayout l = ops::linear_sp_layout(N, C, K, threads);
            std::mt19937 rng(9);
            for (int r = 0; r < N; ++r)
              for (int c = 0; c < C; ++c) {
                const int chunk = c / l.width;
                const double zeros = std::string(kind) == "sparse" ? 0.8
                                     : std::string(kind) == "mixed" ? (chunk % 2 ? 0.9 : 0.0) : 0.0;
                if (std::uniform_real_distribution<double>(0, 1)(rng) < zeros) x[size_t(r) * C + c] = 0.f;
              }
            std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end()),
                gd(g.begin(), g.end()), yr(size_t(n) * K), dxr(size_t(n) * C), dwr(size_t(K) * C), dbr(K);
            ref::linear_fwd<double>(yr.data(), xd.data(), wd.data(), bd.data(), n, C, K);
            ref::linear_bwd<double>(dxr.data(), dwr.data(), dbr.data(), gd.data(), xd.data(), wd.data(), n, C, K);
            std::vector<uint8_t> saved(bytes + 64);
            void* sv = saved.data() + (64 - reinterpret_cast<uintptr_t>(saved.data()) % 64) % 64;
            std::vector<float> ws(std::max(ops::linear_fwd_workspace(N, K), ops::linear_fwd_split_workspace(N, C, K, e.pool.size())) + 1);
            std::vector<float> y(size_t(n) * K, NAN), dx(size_t(n) * C, NAN), dw(size_t(K) * C, NAN), db(K, NAN);
            ops::linear_fwd_sp(e, y.data(), sv, x.data(), w.data(), b.data(), n, C, K, ws.data());
            ops::linear_bwd_sp(e, dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), sv, masked, n, C, K);
            for (size_t i = 0; i < dxr.size(); ++i)
              if (masked && x[i] == 0.f) {
                if (dx[i] == 0.f) dxr[i] = 0;  // the sparse input gradient skips it (may or may not run)
              }
            EXPECT_LT(max_rel_diff(y, yr), kTol * std::sqrt(double(C)));
            EXPECT_LT(max_rel_diff(dx, dxr), kTol * std::sqrt(double(K)));
            EXPECT_LT(max_rel_diff(dw, dwr), kTol * std::sqrt(double(N)));
            EXPECT_LT(max_rel_diff(db, dbr), kTol * std::sqrt(double(N)));
            if (!masked) {  // the input gradient is needed at zero inputs too
              for (size_t i = 0; i < dxr.size(); i += 97) ASSERT_NEAR(dx[i], dxr[i], 1e-3 * (1 + std::abs(dxr[i])));
            }
            const auto* flags = reinterpret_cast<const uint8_t*>(static_cast<std::byte*>(sv) + l.flags);
            int sparse = 0;
            for (int c = 0; c < l.chunks; ++c) sparse += flags[c] != 0;
            const bool fast = kernels_for(isa).linear_sp_max_density > 0;
            if (std::string(kind) == "dense") {
              EXPECT_EQ(sparse, 0);
            } else if (std::string(kind) == "sparse" && fast) {
              EXPECT_EQ(sparse, l.chunks);
            } else if (std::string(kind) == "mixed" && fast && l.chunks > 1) {
              EXPECT_EQ(sparse, l.chunks / 2);
            }
            EXPECT_EQ(flags[l.chunks] != 0, sparse > 0);
            std::vector<float> y2(y.size()), dw2(dw.size()), dx2(dx.size()), db2(db.size());
            ops::linear_fwd_sp(e, y2.data(), sv, x.data(), w.data(), b.data(), n, C, K, ws.data());
            ops::linear_bwd_sp(e, dx2.data(), dw2.data(), db2.data(), g.data(), x.data(), w.data(), sv, masked, n, C, K);
            EXPECT_EQ(y, y2);
            EXPECT_EQ(dw, dw2);
            EXPECT_EQ(dx, dx2);
          }
}

TEST(FastVsRef, PoolsAndActivations) {
  const ref::PoolShape shapes[] = {{5, 3, 28, 28, 14, 14, 2, 2, 2, 2, 0, 0},
                                   {1, 2, 7, 5, 4, 3, 3, 3, 2, 2, 1, 1},
                                   {3, 1, 5, 5, 2, 2, 2, 2, 3, 3, 0, 0}};
  for (Isa isa : isas())
    for (int threads : {1, 2, 3})
      for (const auto& s : shapes) {
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        const size_t nx = size_t(s.N) * s.C * s.H * s.W, ny = size_t(s.N) * s.C * s.P * s.Q;
        auto x = to_float(distinct(nx, 9)), g = to_float(randn(ny, 10));
        std::vector<float> y(ny), dx(nx, NAN), yr(ny), dxr(nx);
        std::vector<int32_t> arg(ny), argr(ny);
        ops::maxpool2d_fwd<float>(e, y.data(), arg.data(), x.data(), s);
        ops::maxpool2d_bwd<float>(e, dx.data(), g.data(), arg.data(), s);
        ref::maxpool2d_fwd<float>(yr.data(), argr.data(), x.data(), s);
        ref::maxpool2d_bwd<float>(dxr.data(), g.data(), argr.data(), s);
        EXPECT_EQ(y, yr);
        EXPECT_EQ(arg, argr);
        EXPECT_EQ(dx, dxr);
        ops::avgpool2d_fwd<float>(e, y.data(), x.data(), s);
        ops::avgpool2d_bwd<float>(e, dx.data(), g.data(), s);
        ref::avgpool2d_fwd<float>(yr.data(), x.data(), s);
        ref::avgpool2d_bwd<float>(dxr.data(), g.data(), s);
        EXPECT_EQ(y, yr);
        EXPECT_EQ(dx, dxr);
      }
  for (Isa isa : isas())
    for (int threads : {1, 2})
      for (size_t n : {size_t(1), size_t(17), size_t(40000)}) {
        ThreadPool pool(threads);
        const ops::Exec e{kernels_for(isa), pool};
        auto x = to_float(randn(n, 11)), g = to_float(randn(n, 12));
        std::vector<float> y(n), dx(n), yr(n), dxr(n);
        ops::act_fwd<float>(e, ops::Act::relu, y.data(), x.data(), n);
        ops::act_bwd<float>(e, ops::Act::relu, dx.data(), g.data(), y.data(), n);
        act_ref_fwd<float>(ActId::relu)(yr.data(), x.data(), n);
        act_ref_bwd<float>(ActId::relu)(dxr.data(), g.data(), yr.data(), n);
        EXPECT_EQ(y, yr);
        EXPECT_EQ(dx, dxr);
      }
}

// Threaded weight gradients are summed in a fixed order: repeated runs are bit-identical.
TEST(FastVsRef, ConvBackwardIsDeterministicForAThreadCount) {
  const ConvShape s = conv(7, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1);
  ThreadPool pool(2);
  const ops::Exec e{kernels_for(best_isa()), pool};
  auto x = to_float(randn(size_t(s.N) * 784, 13)), w = to_float(randn(32 * 25, 14)),
       g = to_float(randn(size_t(s.N) * 32 * 784, 15));
  const ops::ConvDesc cp = ops::conv2d_plan(s, 2);
  std::vector<float> ws(cp.workspace), dw1(800), db1(32), dw2(800), db2(32);
  ops::conv2d_bwd<float>(e, cp.algo, nullptr, dw1.data(), db1.data(), g.data(), x.data(), w.data(), s, ws.data());
  ops::conv2d_bwd<float>(e, cp.algo, nullptr, dw2.data(), db2.data(), g.data(), x.data(), w.data(), s, ws.data());
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
}

// OwnedRanges hands out every item exactly once, whatever the race: threads that take their own
// items, threads that arrive late and steal, more threads than items, one item, none.
TEST(OwnedRanges, EveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " n " + std::to_string(n));
      ThreadPool pool(threads);
      for (int rep = 0; rep < 20; ++rep) {
        OwnedRanges items(n, threads);
        std::vector<std::atomic<int>> taken(size_t(n) + 1);
        std::vector<int64_t> own(threads, 0);
        pool.run([&](int t) {
          if (t == 0 && rep % 2) std::this_thread::sleep_for(std::chrono::microseconds(200));  // late
          for (int64_t i; (i = items.next(t)) >= 0;) {
            ASSERT_LT(i, n);
            taken[size_t(i)].fetch_add(1);
            const Range r = split_range(n, t, threads);
            own[t] += i >= r.begin && i < r.end;
          }
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(taken[size_t(i)].load(), 1) << i;
        }
        if (rep % 2 == 0 && threads == 1) {
          EXPECT_EQ(own[0], n);
        }
      }
    }
}

// The pool runs every part of every region exactly once, whoever runs it: parts of uneven length
// (so a thread that finishes first takes the parts nobody has started), back-to-back regions
// (so a worker that wakes late must not touch the next region's job), 1 to 4 threads.
TEST(ThreadPool, EveryPartOnceWhoeverRunsIt) {
  for (int threads : {1, 2, 3, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> runs(size_t(threads) * 2000);
    for (int region = 0; region < 2000; ++region)
      pool.run([&](int part) {
        ASSERT_GE(part, 0);
        ASSERT_LT(part, threads);
        if ((region + part) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        runs[size_t(region) * threads + part].fetch_add(1);
      });
    for (size_t i = 0; i < runs.size(); ++i) {
      ASSERT_EQ(runs[i].load(), 1) << "region " << i / threads << " part " << i % threads;
    }
  }
}

}  // namespace
}  // namespace ember::test
