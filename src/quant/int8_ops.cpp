// The int8 plan's ops (int8_ops.h): im2col of u8 NHWC rows (padding at the zero point), the GEMM
// split over the pool by rows (or by 64 columns for a batch-1 Linear), depthwise split by output
// rows, and the fp32 <-> u8 conversions. Every split is fixed by (size, threads): any thread count
// gives the same bits (integer sums are exact; the epilogue is per element).
#include "quant/int8_ops.h"

#include <algorithm>
#include <cstring>

namespace ember::quant {

std::vector<int8_t> conv_rows_rsc(const std::vector<int8_t>& w, int K, int C, int R, int S) {
  std::vector<int8_t> out(w.size());
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r)
        for (int s = 0; s < S; ++s)
          out[((size_t(k) * R + r) * S + s) * C + c] = w[((size_t(k) * C + c) * R + r) * S + s];
  return out;
}

namespace {
// Per thread: the im2col chunk, then the padded rows (64-byte steps).
size_t thread_scratch(const GemmOp& op) { return (size_t(op.rows_per_chunk) * size_t(op.J) + op.pad_bytes + 63) / 64 * 64; }
}  // namespace

size_t GemmOp::scratch_bytes(int threads) const { return im2col ? size_t(threads) * thread_scratch(*this) + 64 : 0; }

void pack_gemm(const Int8Kernels& k, GemmOp& op, const std::vector<int8_t>& w_rows, const std::vector<int32_t>& bias,
               const std::vector<float>& scale) {
  const int J = op.R * op.S * op.C;
  op.J = op.im2col ? (J + 3) / 4 * 4 : J;
  std::vector<int8_t> padded(size_t(op.K) * size_t(op.J), 0);  // [K, op.J]: zeros past J
  for (int n = 0; n < op.K; ++n) std::copy_n(w_rows.begin() + ptrdiff_t(n) * J, J, padded.begin() + ptrdiff_t(n) * op.J);
  op.w7 = k.gemm_w7 && std::all_of(padded.begin(), padded.end(), [](int8_t v) { return v >= -64 && v <= 64; });
  op.packed.assign((op.w7 ? k.packed_b_bytes_w7 : k.packed_b_bytes)(op.K, op.J) + 64, 0);
  op.packed_at = size_t((64 - reinterpret_cast<uintptr_t>(op.packed.data()) % 64) % 64);
  (op.w7 ? k.pack_b_w7 : k.pack_b)(op.packed.data() + op.packed_at, padded.data(), op.K, op.J);
  op.scale = scale;
  op.bias.resize(size_t(op.K));
  for (int n = 0; n < op.K; ++n) {  // the input's zero point: sum_j (x - zp) w = sum_j x w - zp sum_j w
    int64_t sum = 0;
    for (int j = 0; j < J; ++j) sum += w_rows[size_t(n) * J + j];
    op.bias[size_t(n)] = int32_t(int64_t(bias[size_t(n)]) - int64_t(op.x_zp) * sum);
  }
  op.rows_per_chunk = std::clamp(k.chunk_bytes / std::max(op.J, 1), 8, 512);
  const size_t image = size_t(op.H + 2 * op.pad_h) * size_t(op.W + 2 * op.pad_w) * size_t(op.C);
  op.pad_bytes = op.im2col && op.C <= 4 && (op.pad_h > 0 || op.pad_w > 0) && image <= (size_t(1) << 20) ? image + 16 : 0;
}

namespace {
// n bytes from s to d, n small (a tap row of a few channels): two overlapping fixed-size moves
// where n >= 4, not a call.
inline void copy_small(uint8_t* d, const uint8_t* s, int n) {
  if (n >= 16) return void(std::memcpy(d, s, size_t(n)));
  const auto two = [&](auto word) {
    decltype(word) a, b;
    std::memcpy(&a, s, sizeof a), std::memcpy(&b, s + n - int(sizeof b), sizeof b);
    std::memcpy(d, &a, sizeof a), std::memcpy(d + n - int(sizeof b), &b, sizeof b);
  };
  if (n >= 8) return two(uint64_t{});
  if (n >= 4) return two(uint32_t{});
  for (int i = 0; i < n; ++i) d[i] = s[i];
}
}  // namespace

namespace {
// Padded rows [a, b) (padded coordinates: input row a - pad_h) of one image into pad, whose rows
// are (W + 2 pad_w) * C bytes: the zero point outside the image.
void pad_rows(const GemmOp& op, uint8_t* pad, const uint8_t* img, int a, int b) {
  const int C = op.C, pw = op.pad_w, row = (op.W + 2 * pw) * C;
  const uint8_t zp = uint8_t(op.x_zp);
  for (int hp = a; hp < b; ++hp) {
    uint8_t* d = pad + size_t(hp) * size_t(row);
    const int h = hp - op.pad_h;
    if (h < 0 || h >= op.H) {
      std::memset(d, zp, size_t(row));
      continue;
    }
    std::memset(d, zp, size_t(pw) * C);
    std::memcpy(d + size_t(pw) * C, img + size_t(h) * op.W * C, size_t(op.W) * C);
    std::memset(d + size_t(pw + op.W) * C, zp, size_t(pw) * C);
  }
}

// The padded path: per image the chunk touches, its rows the windows read are padded first; each
// window is then R runs of S*C bytes, the first R - 1 as 8-byte moves where S*C <= 8 and the move
// ends inside the row (the next run overwrites the excess; pad has 16 bytes of slack for the reads).
void im2col_rows_padded(const GemmOp& op, uint8_t* col, const uint8_t* x, int64_t m0, int rows, uint8_t* pad) {
  const int R = op.R, Q = op.Q, PQ = op.P * op.Q, sh = op.stride_h, sw = op.stride_w, C = op.C;
  const int SC = op.S * C, J = op.J, tail = J - R * SC;
  const size_t row = size_t(op.W + 2 * op.pad_w) * size_t(C), image_bytes = size_t(op.H) * op.W * C;
  int64_t n = m0 / PQ;
  int e = int(m0 % PQ);  // the pixel inside image n
  for (int i = 0; i < rows;) {
    const int count = std::min(rows - i, PQ - e);
    pad_rows(op, pad, x + size_t(n) * image_bytes, (e / Q) * sh, ((e + count - 1) / Q) * sh + R);
    int p = e / Q, q = e % Q;
    for (int k = 0; k < count; ++k) {
      uint8_t* dst = col + size_t(i + k) * size_t(J);
      const uint8_t* src = pad + size_t(p * sh) * row + size_t(q * sw) * C;
      for (int r = 0; r + 1 < R; ++r, dst += SC, src += row) {
        if (SC <= 8 && r * SC + 8 <= J) std::memcpy(dst, src, 8);
        else copy_small(dst, src, SC);
      }
      copy_small(dst, src, SC);
      for (int j = 0; j < tail; ++j) dst[SC + j] = 0;
      if (++q == Q) q = 0, ++p;
    }
    i += count, ++n, e = 0;
  }
}
}  // namespace

// Output pixel m = (n, p, q) walks on by one per row (no division per row); per tap row r, the
// S*C bytes are one run of the input row when the window is inside horizontally, else per tap.
// The op's fields are read into locals once: stores through col (bytes) could alias them.
void im2col_rows(const GemmOp& op, uint8_t* col, const uint8_t* x, int64_t m0, int rows, uint8_t* padded) {
  if (padded) return im2col_rows_padded(op, col, x, m0, rows, padded);
  const int R = op.R, S = op.S, H = op.H, W = op.W, P = op.P, Q = op.Q, C = op.C;
  const int sh = op.stride_h, sw = op.stride_w, ph = op.pad_h, pw = op.pad_w;
  const int SC = S * C, J = op.J, pad = J - R * SC;
  const size_t row_bytes = size_t(W) * C, image_bytes = size_t(H) * row_bytes;
  const uint8_t zp = uint8_t(op.x_zp);
  const int PQ = P * Q;
  int64_t n = m0 / PQ;
  int p = int(m0 % PQ) / Q, q = int(m0 % PQ) % Q;
  for (int i = 0; i < rows; ++i) {
    uint8_t* dst = col + size_t(i) * size_t(J);
    const uint8_t* img = x + size_t(n) * image_bytes;
    const int h0 = p * sh - ph, w0 = q * sw - pw;
    const bool w_inside = w0 >= 0 && w0 + S <= W;
    if (w_inside && h0 >= 0 && h0 + R <= H) {  // the window inside the image: R runs of S*C bytes
      const uint8_t* src = img + size_t(h0) * row_bytes + size_t(w0) * C;
      for (int r = 0; r < R; ++r, dst += SC, src += row_bytes) copy_small(dst, src, SC);
    } else {
      for (int r = 0; r < R; ++r, dst += SC) {
        const int h = h0 + r;
        if (h < 0 || h >= H) {
          std::memset(dst, zp, size_t(SC));
        } else if (w_inside) {
          copy_small(dst, img + size_t(h) * row_bytes + size_t(w0) * C, SC);
        } else {
          for (int s = 0; s < S; ++s) {
            const int w = w0 + s;
            if (w >= 0 && w < W) copy_small(dst + s * C, img + size_t(h) * row_bytes + size_t(w) * C, C);
            else std::memset(dst + s * C, zp, size_t(C));
          }
        }
      }
    }
    for (int j = 0; j < pad; ++j) dst[j] = 0;  // dst: past the R tap rows now
    if (++q == Q) {
      q = 0;
      if (++p == P) p = 0, ++n;
    }
  }
}

namespace {
// Rows [m0, m1) of the output: the kernel over all columns, A either x's rows or im2col chunks.
void gemm_rows(const Int8Kernels& k, const GemmOp& op, const Int8Epilogue& ep, const uint8_t* x, void* y,
               uint8_t* col, int64_t m0, int64_t m1) {
  const void* B = op.packed.data() + op.packed_at;
  const int J = op.J;
  const size_t esz = ep.f32_out ? 4 : 1;
  const int64_t step = op.im2col ? op.rows_per_chunk : m1 - m0;
  for (int64_t m = m0; m < m1; m += step) {
    const int rows = int(std::min(step, m1 - m));
    Int8Epilogue e = ep;
    if (e.res) e.res += size_t(m) * size_t(e.ldr);
    const uint8_t* A = x + size_t(m) * size_t(J);
    if (op.im2col) im2col_rows(op, col, x, m, rows, op.pad_bytes ? col + size_t(op.rows_per_chunk) * size_t(J) : nullptr), A = col;
    (op.w7 ? k.gemm_w7 : k.gemm)(rows, 0, op.K, op.K, J, A, J, B, e, static_cast<char*>(y) + size_t(m) * size_t(op.K) * esz, op.K);
  }
}
}  // namespace

void run_gemm(const Int8Kernels& k, ThreadPool& pool, const GemmOp& op, Int8Epilogue ep, const uint8_t* x, void* y,
              uint8_t* scratch, int n) {
  ep.bias = op.bias.data();
  ep.scale = op.scale.data();
  ep.ldr = op.K;
  const int64_t M = int64_t(n) * op.P * op.Q;
  const int T = pool.size();
  const int J = op.J;
  if (T == 1) return gemm_rows(k, op, ep, x, y, scratch, 0, M);
  if (M < 8 * T && !op.im2col) {  // few rows (a batch-1 Linear): split the columns in 64s
    const int blocks = (op.K + 63) / 64;
    pool.run([&](int t) {
      const Range r = split_range(blocks, t, T);
      if (r.end > r.begin)
        (op.w7 ? k.gemm_w7 : k.gemm)(int(M), int(r.begin) * 64, std::min(op.K, int(r.end) * 64), op.K, J, x, J,
               op.packed.data() + op.packed_at, ep, y, op.K);
    });
    return;
  }
  const size_t chunk = thread_scratch(op);
  pool.run([&](int t) {
    const Range r = split_range(M, t, T);
    if (r.end > r.begin) gemm_rows(k, op, ep, x, y, scratch + size_t(t) * chunk, r.begin, r.end);
  });
}

void run_dw(const Int8Kernels& k, ThreadPool& pool, const DwOp& op, Int8Epilogue ep, const uint8_t* x, void* y, int n) {
  ep.bias = op.bias.data();
  ep.scale = op.scale.data();
  ep.ldr = op.s.K;
  const Int8DwShape& s = op.s;
  const size_t in = size_t(s.H) * s.W * s.C, out = size_t(s.P) * s.Q * s.K, esz = ep.f32_out ? 4 : 1;
  const int64_t rows = int64_t(n) * s.P;
  pool.run([&](int t) {
    const Range r = split_range(rows, t, pool.size());
    for (int64_t i = r.begin; i < r.end;) {
      const int64_t smp = i / s.P;
      const int p0 = int(i % s.P), p1 = int(std::min<int64_t>(s.P, p0 + (r.end - i)));
      Int8Epilogue e = ep;
      if (e.res) e.res += size_t(smp) * out;
      k.dw(x + size_t(smp) * in, op.x_zp, op.w.data(), s, e, static_cast<char*>(y) + size_t(smp) * out * esz, p0, p1);
      i += p1 - p0;
    }
  });
}

namespace {
// [C, HW] -> [HW, C] (to_nhwc) or back, one sample, by the fp32 table's blocked transpose.
void transpose_one(TransposeFn tr, float* y, const float* x, int C, int HW, bool to_nhwc) {
  if (to_nhwc) tr(y, size_t(C), x, size_t(HW), C, HW);
  else tr(y, size_t(HW), x, size_t(C), HW, C);
}
}  // namespace

void quantize_rows(const Int8Kernels& k, TransposeFn tr, ThreadPool& pool, uint8_t* q, const float* x, int n, int C, int HW,
                   bool from_nchw, float scale, int32_t zp, float* scratch) {
  const size_t D = size_t(C) * HW;
  const float inv = 1.0f / scale;
  pool.run([&](int t) {
    const Range r = split_range(n, t, pool.size());
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float* src = x + size_t(i) * D;
      if (from_nchw && HW > 1 && C > 1) transpose_one(tr, scratch + size_t(t) * D, src, C, HW, true), src = scratch + size_t(t) * D;
      k.quantize(q + size_t(i) * D, src, D, inv, zp);
    }
  });
}

void dequantize_rows(const Int8Kernels& k, TransposeFn tr, ThreadPool& pool, float* x, const uint8_t* q, int n, int C, int HW,
                     bool to_nchw, float scale, int32_t zp, float* scratch) {
  const size_t D = size_t(C) * HW;
  pool.run([&](int t) {
    const Range r = split_range(n, t, pool.size());
    for (int64_t i = r.begin; i < r.end; ++i) {
      if (!(to_nchw && HW > 1 && C > 1)) {  // one channel (or one pixel): the two layouts are the same bytes
        k.dequantize(x + size_t(i) * D, q + size_t(i) * D, D, scale, zp);
        continue;
      }
      k.dequantize(scratch + size_t(t) * D, q + size_t(i) * D, D, scale, zp);
      transpose_one(tr, x + size_t(i) * D, scratch + size_t(t) * D, C, HW, false);
    }
  });
}

void transpose_rows(TransposeFn tr, ThreadPool& pool, float* y, const float* x, int n, int C, int HW, bool to_nhwc) {
  const size_t D = size_t(C) * HW;
  pool.run([&](int t) {
    const Range r = split_range(n, t, pool.size());
    for (int64_t i = r.begin; i < r.end; ++i) transpose_one(tr, y + size_t(i) * D, x + size_t(i) * D, C, HW, to_nhwc);
  });
}

}  // namespace ember::quant
