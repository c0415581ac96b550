// Sparse-input Linear (f32) over the pool: x's columns in fixed chunks, each run by the sparse
// kernels or the dense GEMM as its share of non-zero inputs decides, chunks taken owner-first so a
// thread keeps the same columns (of x, w, the transposed copy, dw, dx) from forward to backward.
// Shapes: x[N, C], w[K, C] (PyTorch's layout), y[N, K].
#include <algorithm>
#include <cstring>

#include "ops/ops.h"
#include "ops/parallel_gemm.h"

namespace ember::ops {

namespace {
// Below this many weights the dense GEMM is cheap whatever the input: no sparse path (fc2).
constexpr int64_t kMinWeights = 16384;
constexpr int kChunkCols = 512;  // columns per chunk at least (then 4 chunks per thread at most)
// A chunk's path: the dense GEMM; sparse without the transposed weight copy in `saved` (a frozen
// plan's forward reads its own copy; a backward after it takes the GEMM for dx); sparse with it.
enum : uint8_t { kDense = 0, kSparse = 1, kSparseDgrad = 2 };
size_t align64(size_t n) { return (n + 63) / 64 * 64; }
// run(c) for every chunk c < chunks, each once, owner-first over the pool.
template <class F>
void each_chunk(const Exec& e, int chunks, F&& run) {
  if (e.pool.size() == 1) {
    for (int c = 0; c < chunks; ++c) run(c);
    return;
  }
  OwnedRanges owned(chunks, e.pool.size());
  e.pool.run([&](int t) {
    for (int64_t c; (c = owned.next(t)) >= 0;) run(int(c));
  });
}
}  // namespace

LinearSpLayout linear_sp_layout(int N, int C, int K, int threads) {
  LinearSpLayout l;
  const int want = std::max(1, std::min((C + kChunkCols - 1) / kChunkCols, 4 * threads));
  l.width = (C + want - 1) / want;
  l.width = (l.width + 31) / 32 * 32;  // whole column blocks of the kernels
  l.chunks = (C + l.width - 1) / l.width;
  l.flags = 0;  // offsets do not depend on N: a smaller batch uses a prefix of parts
  l.wt = align64(size_t(l.chunks) + 1);
  l.parts = l.wt + align64(size_t(C) * K * sizeof(float));
  l.bytes = l.parts + align64(size_t(l.chunks - 1) * N * K * sizeof(float));
  return l;
}

size_t linear_sp_saved_bytes(int N, int C, int K, int threads) {
  if (int64_t(C) * K < kMinWeights || C < 64) return 0;
  return linear_sp_layout(N, C, K, threads).bytes;
}

// y = x w^T + b. flags[c]: chunk c's path; flags[chunks]: whether any chunk is sparse (else the
// dense path ran and the backward takes it too).
void linear_fwd_sp(const Exec& e, float* y, void* saved, const float* x, const float* w,
                   const float* b, int N, int C, int K, float* ws, const float* frozen_wt) {
  const int T = e.pool.size();
  const LinearSpLayout l = linear_sp_layout(N, C, K, T);
  std::byte* s = static_cast<std::byte*>(saved);
  float* wt = reinterpret_cast<float*>(s + l.wt);
  float* parts = reinterpret_cast<float*>(s + l.parts);
  uint8_t* flags = reinterpret_cast<uint8_t*>(s + l.flags);
  const float max_density = e.k.linear_sp_max_density;
  auto decide = [&](int c) {
    const int c0 = c * l.width, c1 = std::min(C, c0 + l.width);
    const double share = double(e.k.count_nonzero(x, size_t(C), N, c0, c1)) / (double(N) * (c1 - c0));
    flags[c] = share > max_density ? kDense : frozen_wt ? kSparse : kSparseDgrad;
  };
  if (T == 1) {
    for (int c = 0; c < l.chunks; ++c) decide(c);
  } else {
    e.pool.run([&](int t) {
      const Range r = split_range(l.chunks, t, T);
      for (int64_t c = r.begin; c < r.end; ++c) decide(int(c));
    });
  }
  bool any = false;
  for (int c = 0; c < l.chunks; ++c) any |= flags[c] != kDense;
  flags[l.chunks] = any;
  if (!any) {
    linear_fwd<float>(e, y, x, w, b, N, C, K, ws);
    return;
  }
  auto run = [&](int c) {
    const int c0 = c * l.width, c1 = std::min(C, c0 + l.width);
    float* part = c == 0 ? y : parts + size_t(c - 1) * N * K;
    if (flags[c] != kDense && frozen_wt)
      e.k.linear_sp_fwd(part, nullptr, x, size_t(C), frozen_wt + size_t(c0) * K, size_t(K), N, K, c0, c1);
    else if (flags[c] != kDense)
      e.k.linear_sp_fwd(part, wt + size_t(c0) * K, x, size_t(C), w, size_t(C), N, K, c0, c1);
    else
      e.gemm()(false, true, N, K, c1 - c0, 1.f, x + c0, C, w + c0, C, 0.f, part, K);
  };
  each_chunk(e, l.chunks, run);
  add_partials<float>(e, y, size_t(N) * K, parts, size_t(N) * K, l.chunks - 1);
  if (b) e.k.bias_rows(y, b, N, K);
}

void linear_bwd_sp(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x,
                   const float* w, const void* saved, bool dx_unused_at_zero, int N, int C, int K) {
  const int T = e.pool.size();
  const LinearSpLayout l = linear_sp_layout(N, C, K, T);
  const std::byte* s = static_cast<const std::byte*>(saved);
  const float* wt = reinterpret_cast<const float*>(s + l.wt);
  const uint8_t* flags = reinterpret_cast<const uint8_t*>(s + l.flags);
  if (!flags[l.chunks]) {
    linear_bwd<float>(e, dx, dw, db, dy, x, w, N, C, K);
    return;
  }
  auto run = [&](int c) {
    const int c0 = c * l.width, c1 = std::min(C, c0 + l.width), cw = c1 - c0;
    if (flags[c] != kDense) e.k.linear_sp_wgrad(dw, size_t(C), dy, x, size_t(C), N, K, c0, c1);
    else e.gemm()(true, false, K, cw, N, 1.f, dy, K, x + c0, C, 0.f, dw + c0, C);
    if (!dx) return;
    if (flags[c] == kSparseDgrad && dx_unused_at_zero)
      e.k.linear_sp_dgrad(dx, dy, x, size_t(C), wt + size_t(c0) * K, N, K, c0, c1);
    else
      e.gemm()(false, false, N, cw, K, 1.f, dy, K, w + c0, C, 0.f, dx + c0, C);
  };
  each_chunk(e, l.chunks, run);
  if (db) bias_grad(db, dy, N, K);
}

namespace {
bool any_value(const Background& bg) {
  for (int c = 0; c < bg.channels; ++c)
    if (bg.value[c] != 0) return true;
  return false;
}
}  // namespace

void linear_bg_fwd(const Exec& e, float* y, const Background& bg, const float* w, int N, int K) {
  if (!any_value(bg)) return;
  const int C = bg.channels, P2 = bg.positions, T = e.pool.size();
  const size_t ldw = size_t(C) * P2;
  e.pool.run([&](int t) {  // fold[k, p] = sum_c value[c] w[k, c*P2 + p], rows split
    const Range r = split_range(K, t, T);
    if (r.end > r.begin)
      e.k.channel_sum(bg.fold + r.begin * P2, w + r.begin * ldw, ldw, bg.value, C, P2, int(r.end - r.begin));
  });
  parallel_sgemm(e, false, true, N, K, P2, 1.f, bg.mask, P2, bg.fold, P2, 1.f, y, K);  // y += mask fold^T
}

void linear_bg_bwd(const Exec& e, float* dw, const Background& bg, const float* dy, const float* w,
                   int N, int K) {
  const int C = bg.channels, P2 = bg.positions, T = e.pool.size();
  if (!any_value(bg)) {
    std::memset(bg.bias_grad, 0, size_t(C) * sizeof(float));
    return;
  }
  const size_t ldw = size_t(C) * P2;
  parallel_sgemm(e, true, false, K, P2, N, 1.f, dy, K, bg.mask, P2, 0.f, bg.fold, P2);  // u = dy^T mask
  e.pool.run([&](int t) {
    const Range c = split_range(C, t, T);  // bias_grad before dw changes nothing it reads
    if (c.end > c.begin) e.k.channel_dot(bg.bias_grad, w, ldw, bg.fold, bg.value, P2, K, int(c.begin), int(c.end));
    const Range r = split_range(K, t, T);
    if (r.end > r.begin)
      e.k.channel_axpy(dw + r.begin * ldw, ldw, bg.fold + r.begin * P2, bg.value, C, P2, int(r.end - r.begin));
  });
}

}  // namespace ember::ops
