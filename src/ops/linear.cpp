// Linear (fully connected) forward and backward: f32 through the threaded GEMM of the kernel
// table, f64 through the scalar reference. Weight layout is PyTorch's: w[K, C].
#include <algorithm>
#include <type_traits>

#include "ops/ops.h"
#include "ops/parallel_gemm.h"

namespace ember::ops {

size_t linear_fwd_workspace(int N, int K) { return N <= 128 && N < K ? size_t(N) * K : 0; }

namespace {
// Batches of at most this many rows run a bf16 plan's Linear as Kernels::gemv_bf16 (batch-1
// inference: the GEMM would pack all of w for one row).
constexpr int kGemvRows = kLinearGemvRows;
// A Linear over many rows (a channel-last 1x1 convolution: batch x pixels) runs its rows in chunks
// of this many, each GEMM followed by its bias while the chunk is in cache. The same bits as one
// GEMM (the chunks split only the rows; each output is still one sum in the kernel's order).
// A second pass over the output cost 10-36 % of the 1x1 forwards of convnext-seed.
constexpr int kBiasChunkRows = 512;
bool split_depth(int N, int C, int K, int threads) {
  return threads > 1 && C >= 2048 && C >= 8 * std::max(N, K) && C >= 64 * threads;
}
}  // namespace

size_t linear_fwd_split_workspace(int N, int C, int K, int threads) {
  return split_depth(N, C, K, threads) ? size_t(threads - 1) * N * K : 0;
}

size_t linear_fwd_workspace_upto(int batch, int C, int K, int threads) {
  size_t most = 0;  // a partial batch may take a path the full one does not (N < K; the split)
  for (int n = 1; n <= batch; ++n)
    most = std::max({most, linear_fwd_workspace(n, K), linear_fwd_split_workspace(n, C, K, threads)});
  return most;
}

namespace {
bool many_rows(int N, int K, int P) { return N >= 2 * kBiasChunkRows * P && N >= K; }
// The next chunk of `left` rows: kBiasChunkRows, or all of them when fewer than two chunks are left.
int64_t chunk_len(int64_t left) { return left < 2 * kBiasChunkRows ? left : kBiasChunkRows; }
// Rows [0, N) in chunks of kBiasChunkRows, threads taking 8-aligned row ranges: gemm(first row,
// rows) then epi(first row, rows) for each chunk, while it is in cache. The last chunk takes the
// tail: no chunk is short enough for the GEMM's small-M path.
template <class Gemm, class Epi>
void each_row_chunk(const Exec& e, int N, Gemm&& gemm, Epi&& epi) {
  e.pool.run([&](int t) {
    const Range r = split_range_aligned(N, t, e.pool.size(), 8);
    for (int64_t i = r.begin, m = 0; i < r.end; i += m) {
      m = chunk_len(r.end - i);
      gemm(i, int(m));
      epi(i, int(m));
    }
  });
}
// out = x w^T that way.
template <class Epi>
void chunked_rows(const Exec& e, float* out, const float* x, Bf16Operand w, int N, int C, int K, Epi&& epi) {
  each_row_chunk(e, N, [&](int64_t i, int m) { gemm_w(e, false, true, m, K, C, 1.f, {x + i * C}, C, w, C, 0.f, out + i * K, K); },
                 epi);
}
}  // namespace

// y[N,K] = x[N,C] w[K,C]^T + b[K]. Both operands have C contiguous, so the GEMM packs (transposes)
// one of them: with a batch smaller than K (and at most 128 rows, where the GEMM reads op(A) in
// place) it computes y^T = w x^T into ws and transposes that, packing x rather than the larger w
// (fc1 at batch 64, one thread: 567 -> 525 us warm, 660 -> 582 us cold). Not with threads: the
// split of w's rows then has every thread pack all of x (fc1 forward 0.35 -> 0.41 ms at 2).
namespace {
// db[K] = the column sums of dy[N, K], each in row order (bias_grad's bits): with many rows the
// columns split over the pool in 16-aligned ranges.
void bias_grad_parallel(const Exec& e, float* db, const float* dy, int N, int K) {
  if (e.pool.size() == 1 || size_t(N) * K < (size_t(1) << 16) || K < 32) return bias_grad(db, dy, N, K);
  e.pool.run([&](int t) {
    const Range r = split_range_aligned(K, t, e.pool.size(), 16);
    if (r.end <= r.begin) return;
    float* __restrict d = db + r.begin;
    const int m = int(r.end - r.begin);
    for (int k = 0; k < m; ++k) d[k] = 0;
    for (int n = 0; n < N; ++n) {
      const float* __restrict row = dy + size_t(n) * K + r.begin;
#pragma GCC ivdep
      for (int k = 0; k < m; ++k) d[k] += row[k];
    }
  });
}
}  // namespace

template <class T>
void linear_fwd(const Exec& e, T* y, const T* x, const T* w, const T* b, int N, int C, int K, T* ws,
                const uint16_t* wh) {
  if constexpr (std::is_same_v<T, double>) {
    ref::linear_fwd<T>(y, x, w, b, N, C, K);
  } else {
    const int P = e.pool.size();
    if (e.bf16 && wh && N <= kGemvRows && e.k.gemv_bf16) {  // a small batch: the weight copy in place
      e.pool.run([&](int t) {
        const Range r = split_range_aligned(K, t, P, 4);
        if (r.end > r.begin)
          e.k.gemv_bf16(y + r.begin, K, x, C, wh + size_t(r.begin) * C, C, N, C, int(r.end - r.begin));
      });
      if (b) e.k.bias_rows(y, b, N, K);
      return;
    }
    if (ws && split_depth(N, C, K, P)) {  // y = sum over threads of x[:, r] w[:, r]^T, in thread order
      e.pool.run([&](int t) {
        const Range r = split_range_aligned(C, t, P, 16);
        float* out = t == 0 ? y : ws + size_t(t - 1) * N * K;
        if (r.end <= r.begin) {
          std::fill(out, out + size_t(N) * K, 0.f);
          return;
        }
        gemm_w(e, false, true, N, K, int(r.end - r.begin), 1.f, {x + r.begin}, C,
               {w + r.begin, wh ? wh + r.begin : nullptr}, C, 0.f, out, K);
      });
      e.pool.run([&](int t) {  // rows split; each element adds the partials in thread order
        const Range r = split_range(N, t, P);
        for (int64_t n = r.begin; n < r.end; ++n)
          for (int q = 0; q < P - 1; ++q) {
            const float* part = ws + size_t(q) * N * K + size_t(n) * K;
            for (int k = 0; k < K; ++k) y[size_t(n) * K + k] += part[k];
          }
      });
      if (b) e.k.bias_rows(y, b, N, K);
      return;
    }
    if (ws && P == 1 && linear_fwd_workspace(N, K)) {
      parallel_gemm_w(e, false, true, K, N, C, 1.f, {w, wh}, C, {x}, C, 0.f, ws, N);  // ws[K, N] = y^T
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) y[size_t(n) * K + k] = ws[size_t(k) * N + n] + (b ? b[k] : 0.f);
      return;
    }
    if (b && many_rows(N, K, P)) {  // many rows: the bias while each chunk is in cache
      chunked_rows(e, y, x, {w, wh}, N, C, K, [&](int64_t i, int m) { e.k.bias_rows(y + i * K, b, m, K); });
      return;
    }
    parallel_gemm_w(e, false, true, N, K, C, 1.f, {x}, C, {w, wh}, C, 0.f, y, K);
    if (b) e.k.bias_rows(y, b, N, K);
  }
}

size_t linear_pack_elems(const Kernels& k, int C, int K, bool bf16) {
  return packer_b(k, bf16)(true, C, K, nullptr, C, nullptr);
}
void linear_pack(const Kernels& k, float* wp, const float* w, int C, int K, bool bf16) {
  packer_b(k, bf16)(true, C, K, w, C, wp);
}

void linear_fwd_packed(const Exec& e, float* y, Bf16Operand x, const float* wp, const float* b, int N, int C, int K,
                       const Act* act, float* z) {
  float* out = act && z ? z : y;
  auto epi = [&](int64_t i, int m) {
    if (b) e.k.bias_rows(out + i * K, b, m, K);
    if (act) act_fwd_span<float>(e, *act, y + i * K, out + i * K, size_t(m) * K);
  };
  const int P = e.pool.size(), nr = e.packed_nr();
  if (P > 1 && N < 8 * P && K >= 2 * nr * P) {  // few rows: the columns, at the panel width
    e.pool.run([&](int t) {
      const Range r = split_range_aligned(K, t, P, nr);
      if (r.end > r.begin) e.gemm_packed_b(false, N, int(r.end - r.begin), C, x, C, wp, K, int(r.begin), out + r.begin, K);
    });
    return epi(0, N);
  }
  each_row_chunk(e, N, [&](int64_t i, int m) { e.gemm_packed_b(false, m, K, C, operand_at(x, size_t(i) * C), C, wp, K, 0, out + i * K, K); },
                 epi);
}

size_t linear_weight_bytes_per_call(const Kernels& k, int N, int C, int K, int threads, bool bf16, bool bias) {
  const size_t once = size_t(K) * C * (bf16 ? 2 : 4);
  if (!k.gemm_packs) return 0;  // the reference GEMMs read their operands in place
  if (bf16 ? N <= kGemvRows && k.gemv_bf16 : N <= k.gemm_stream_rows) return 0;
  if (bias && many_rows(N, K, threads)) {  // chunked_rows: one GEMM per chunk of each thread's rows
    size_t gemms = 0;
    for (int t = 0; t < threads; ++t) {
      const Range r = split_range_aligned(N, t, threads, 8);
      for (int64_t i = r.begin; i < r.end; i += chunk_len(r.end - i)) ++gemms;
    }
    return gemms * once;
  }
  const bool one = threads == 1 || 2.0 * N * K * C < 2e5;
  return one || K >= N ? once : size_t(threads) * once;  // a row split: every thread packs all of w
}

bool linear_act_chunked(int N, int K, int threads) { return many_rows(N, K, threads) && K % 8 == 0; }

// Each chunk: its GEMM into z (or y), the bias, then the activation into y. A chunk starts at a
// multiple of 8 rows, so at a multiple of 8 elements: act_fwd's vector lanes and tail, the same bits.
void linear_act_fwd(const Exec& e, Act a, float* y, float* z, const float* x, const float* w, const float* b,
                    int N, int C, int K) {
  float* out = z ? z : y;
  chunked_rows(e, out, x, {w, nullptr}, N, C, K, [&](int64_t i, int m) {
    if (b) e.k.bias_rows(out + i * K, b, m, K);
    act_fwd_span<float>(e, a, y + i * K, out + i * K, size_t(m) * K);
  });
}

namespace {
// The weight gradient over many rows (a channel-last 1x1 conv: batch x pixels, 8k-33k rows) sums
// fixed chunks of rows, one GEMM each, then adds the partials in chunk order: the chunks depend on
// N alone, so the bits are the same for any thread count. Split over columns instead, every thread
// packs all of dy^T: 48-53 % of the peak at 2 threads on convnext-seed's 1x1s, 60-75 % chunked.
constexpr int kGradChunkRows = 4096;
constexpr int kGradMaxChunks = 8;
}  // namespace

int weight_grad_chunks(int N, int C, int K) {
  if (N < 2 * kGradChunkRows || N < 8 * std::max(C, K)) return 1;
  return std::min(kGradMaxChunks, N / kGradChunkRows);
}
size_t linear_bwd_workspace(int N, int C, int K) {
  const int n = weight_grad_chunks(N, C, K);
  return n > 1 ? size_t(n - 1) * K * C : 0;
}

namespace {
// dw[K,C] = sum over the chunks c of dy[rows c]^T x[rows c]; chunk 0 into dw, chunk c > 0 into
// ws + (c - 1) * K * C. Threads take whole chunks when there are at least as many chunks as
// threads, else each chunk's GEMM splits over the pool (the same bits: a column split).
void weight_grad_chunked(const Exec& e, float* dw, const float* dy, const float* x, int N, int C, int K, float* ws) {
  const int n = weight_grad_chunks(N, C, K), P = e.pool.size();
  const size_t kc = size_t(K) * C;
  auto chunk = [&](int c, bool parallel) {
    const Range r = split_range_aligned(N, c, n, 8);
    float* out = c == 0 ? dw : ws + size_t(c - 1) * kc;
    const int m = int(r.end - r.begin);
    if (parallel) parallel_sgemm(e, true, false, K, C, m, 1.f, dy + r.begin * K, K, x + r.begin * C, C, 0.f, out, C);
    else e.gemm()(true, false, K, C, m, 1.f, dy + r.begin * K, K, x + r.begin * C, C, 0.f, out, C);
  };
  if (n >= P) e.pool.run([&](int t) { for (int c = t; c < n; c += P) chunk(c, false); });
  else for (int c = 0; c < n; ++c) chunk(c, true);
  e.pool.run([&](int t) {  // each element adds its partials in chunk order
    const Range r = split_range_aligned(int64_t(kc), t, P, 16);
    for (int c = 1; c < n; ++c) {
      const float* __restrict part = ws + size_t(c - 1) * kc;
      float* __restrict d = dw;
#pragma GCC ivdep
      for (int64_t i = r.begin; i < r.end; ++i) d[i] += part[i];
    }
  });
}
}  // namespace

// dx[N,C] = dy[N,K] w[K,C]; dw[K,C] = dy^T x; db[K] = sum over N of dy. ws: linear_bwd_workspace
// elements, or null (then dw is one GEMM split over columns).
template <class T>
void linear_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int N,
                int C, int K, const uint16_t* wh, T* ws) {
  if constexpr (std::is_same_v<T, double>) {
    ref::linear_bwd<T>(dx, dw, db, dy, x, w, N, C, K);
  } else {
    if (ws && weight_grad_chunks(N, C, K) > 1) weight_grad_chunked(e, dw, dy, x, N, C, K, ws);
    else parallel_sgemm(e, true, false, K, C, N, 1.f, dy, K, x, C, 0.f, dw, C);
    if (dx) parallel_gemm_w(e, false, false, N, C, K, 1.f, {dy}, K, {w, wh}, C, 0.f, dx, C);
    if (db) bias_grad_parallel(e, db, dy, N, K);
  }
}

// One sample, y[K] = x[C] w^T + b, from the weight stored transposed, wt[C, K]: threads take
// 16-aligned column ranges; each output is one accumulation in a fixed order (bit-identical).
void linear_fwd_t1(const Exec& e, float* y, const float* x, const float* wt, const float* b, int C,
                   int K, float* ws) {
  const int T = e.pool.size();
  if (ws && C >= kLinearT1SplitRows) {
    const int C0 = (C / 2) & ~15;
    auto half = [&](int h) {
      const int c0 = h ? C0 : 0, n = h ? C - C0 : C0;
      e.k.linear_t1(ws + size_t(h) * size_t(K), x + c0, wt + size_t(c0) * size_t(K), size_t(K), nullptr, n, K);
    };
    if (T == 1) {
      half(0), half(1);
    } else {
      e.pool.run([&](int t) {
        if (t < 2) half(t);
      });
    }
    for (int k = 0; k < K; ++k) y[k] = (ws[k] + ws[K + k]) + (b ? b[k] : 0.f);
    return;
  }
  if (T == 1 || K < 32) {
    e.k.linear_t1(y, x, wt, size_t(K), b, C, K);
    return;
  }
  e.pool.run([&](int t) {
    const Range r = split_range_aligned(K, t, T, 16);
    if (r.end <= r.begin) return;
    e.k.linear_t1(y + r.begin, x, wt + r.begin, size_t(K), b ? b + r.begin : nullptr, C,
                  int(r.end - r.begin));
  });
}

template void linear_fwd<float>(const Exec&, float*, const float*, const float*, const float*, int, int, int, float*, const uint16_t*);
template void linear_fwd<double>(const Exec&, double*, const double*, const double*, const double*, int, int, int, double*, const uint16_t*);
template void linear_bwd<float>(const Exec&, float*, float*, float*, const float*, const float*, const float*, int, int, int, const uint16_t*, float*);
template void linear_bwd<double>(const Exec&, double*, double*, double*, const double*, const double*, const double*, int, int, int, const uint16_t*, double*);

}  // namespace ember::ops
