// The bf16 depthwise kernels (Kernels::dw_fwd_bf16 / dw_bwd_bf16: each table's rounding loops and
// the AVX512_BF16 kernels) against a plain double reference over the bf16-rounded x, w and dy, on
// ConvNeXt's shapes and awkward ones (odd rows, 8- and 16-lane column blocks, 3x3/5x5/7x7 and the
// shapes the fast kernel hands back: tiny planes, an even kernel, padding past the kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace ember {
namespace {

double rd(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct Ref {
  std::vector<double> y, dx, dw, ya, dxa, dwa;  // results, and the sums of |terms| (tolerances)
};
// y[k] = b[k] + sum w[k,r,s] x[k/M, p+r-ph, q+s-pw]; dx, dw the adjoints; all over rounded values.
Ref reference(const DwShape& d, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
              const std::vector<float>& dy) {
  const int K = d.G * d.M;
  Ref r;
  r.y.assign(size_t(K) * d.P * d.Q, 0), r.ya = r.y;
  r.dx.assign(size_t(d.G) * d.H * d.W, 0), r.dxa = r.dx;
  r.dw.assign(size_t(K) * d.R * d.S, 0), r.dwa = r.dw;
  for (int k = 0; k < K; ++k)
    for (int p = 0; p < d.P; ++p)
      for (int q = 0; q < d.Q; ++q) {
        const size_t yi = (size_t(k) * d.P + p) * d.Q + q;
        r.y[yi] = b[k];
        for (int i = 0; i < d.R; ++i)
          for (int j = 0; j < d.S; ++j) {
            const int h = p + i - d.pad_h, c = q + j - d.pad_w;
            if (h < 0 || h >= d.H || c < 0 || c >= d.W) continue;
            const size_t xi = (size_t(k / d.M) * d.H + h) * d.W + c, wi = (size_t(k) * d.R + i) * d.S + j;
            const double xv = rd(x[xi]), wv = rd(w[wi]), gv = rd(dy[yi]);
            r.y[yi] += wv * xv, r.ya[yi] += std::fabs(wv * xv);
            r.dx[xi] += wv * gv, r.dxa[xi] += std::fabs(wv * gv);
            r.dw[wi] += gv * xv, r.dwa[wi] += std::fabs(gv * xv);
          }
      }
  return r;
}

struct Impl {
  std::string name;
  DwFwdFn fwd;
  DwBwdFn bwd;
};
std::vector<Impl> impls() {
  std::vector<Impl> v;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx})
    if (isa_supported(isa)) v.push_back({isa_name(isa), kernels_for(isa).dw_fwd_bf16, kernels_for(isa).dw_bwd_bf16});
  if (isa_supported(Isa::avx512)) v.push_back({"avx512 loops", dw_fwd_bf16_avx512, dw_bwd_bf16_avx512});
  if (cpu_has_avx512_bf16()) v.push_back({"avx512bf16", dw_fwd_bf16_avx512bf16, dw_bwd_bf16_avx512bf16});
  return v;
}

// got within fp32 rounding of the sums (terms in any order) of want: a kernel multiplying unrounded
// operands misses by bf16's 2^-9 relative and fails.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
                  const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 4e-6 * mag[i] + 1e-30) << what << " at " << i;
}

DwShape same(int G, int M, int H, int W, int R, int S) {
  return {G, M, H, W, R, S, H, W, (R - 1) / 2, (S - 1) / 2};
}

TEST(DwBf16, EveryKernelMatchesTheRoundedDoubleReference) {
  const DwShape shapes[] = {
      same(3, 4, 16, 16, 7, 7),        // ConvNeXt stage 1: 16-lane blocks, 8-row blocks
      same(2, 4, 8, 8, 7, 7),          // stage 2: 8-lane blocks
      same(2, 1, 13, 11, 7, 7),        // odd rows (a half row pair), 16-column plane of 11
      same(2, 2, 19, 21, 7, 7),        // 24 columns: a 16-lane and an 8-lane block; 20 rows
      same(2, 3, 9, 20, 5, 5),         // 5x5
      same(3, 1, 6, 6, 3, 3),          // 3x3
      same(1, 2, 33, 7, 7, 5),         // 7x5: odd columns of taps, many row blocks
      {2, 2, 10, 10, 7, 7, 4, 4, 0, 0},  // no padding
      {2, 2, 9, 9, 7, 7, 5, 5, 1, 1},    // padding smaller than 'same'
      same(2, 4, 2, 3, 7, 7),          // a tiny plane: the loops
      {2, 2, 8, 8, 4, 4, 7, 7, 1, 2},    // an even kernel: the loops
      {1, 2, 5, 6, 3, 3, 9, 10, 3, 3}};  // padding >= kernel: the loops
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const DwShape& d : shapes) {
    const int K = d.G * d.M;
    std::vector<float> x(size_t(d.G) * d.H * d.W), w(size_t(K) * d.R * d.S), b(K), dy(size_t(K) * d.P * d.Q);
    for (auto* v : {&x, &w, &b, &dy})
      for (float& f : *v) f = nd(rng);
    const Ref r = reference(d, x, w, b, dy);
    for (const Impl& im : impls()) {
      SCOPED_TRACE(im.name + " G" + std::to_string(d.G) + " M" + std::to_string(d.M) + " " + std::to_string(d.H) +
                   "x" + std::to_string(d.W) + " k" + std::to_string(d.R) + "x" + std::to_string(d.S));
      std::vector<float> scratch(dw_scratch_elems(d), NAN), y(r.y.size(), NAN), dx(r.dx.size(), NAN);
      std::vector<float> dwv(r.dw.size(), 0.5f);  // the kernel adds to dw
      im.fwd(y.data(), x.data(), w.data(), b.data(), d, scratch.data());
      expect_close(y, r.y, r.ya, "y");
      im.bwd(dx.data(), dwv.data(), dy.data(), x.data(), w.data(), d, scratch.data());
      expect_close(dx, r.dx, r.dxa, "dx");
      std::vector<double> dw_want(r.dw);
      for (double& v : dw_want) v += 0.5;
      expect_close(dwv, dw_want, r.dwa, "dw");
      std::vector<float> dw2(r.dw.size(), 0.5f);  // without dx
      im.bwd(nullptr, dw2.data(), dy.data(), x.data(), w.data(), d, scratch.data());
      expect_close(dw2, dw_want, r.dwa, "dw without dx");
    }
  }
}

TEST(DwBf16, TheAvx512TableUsesVdpbf16psWhereTheCpuHasIt) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const Kernels& k = kernels_for(Isa::avx512);
  EXPECT_EQ(k.dw_fwd_bf16 == dw_fwd_bf16_avx512bf16, cpu_has_avx512_bf16());
  EXPECT_EQ(k.dw_bwd_bf16 == dw_bwd_bf16_avx512bf16, cpu_has_avx512_bf16());
}

}  // namespace
}  // namespace ember
