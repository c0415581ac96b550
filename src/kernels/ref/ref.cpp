// Float instantiations of the scalar reference kernels that back the scalar kernel table
// (and the fallbacks every other table uses where it has no fast version of its own).
#include "kernels/ref/ref.h"

#include "kernels/bf16.h"

#include <cmath>

namespace ember {

void sgemm_ref(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  ref::gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The scalar table's packed op(B) is op(B) itself, [K, N] row-major: the reference GEMM on it
// sums in the same order as on B (the same bits).
size_t pack_b_ref(bool tb, int K, int N, const float* B, int ldb, float* dst) {
  for (int k = 0; dst && k < K; ++k)
    for (int j = 0; j < N; ++j) dst[size_t(k) * N + j] = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
  return size_t(K) * N;
}
void sgemm_packed_b_ref(bool ta, int M, int n, int K, float alpha, const float* A, int lda, const float* Bp, int N,
                        int j0, float beta, float* C, int ldc) {
  ref::gemm<float>(ta, false, M, n, K, alpha, A, lda, Bp + j0, N, beta, C, ldc);
}
// ... and its packed op(A), op(A) itself [M, K] row-major.
size_t pack_a_ref(bool ta, int M, int K, const float* A, int lda, float* dst) {
  for (int i = 0; dst && i < M; ++i)
    for (int k = 0; k < K; ++k) dst[size_t(i) * K + k] = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
  return size_t(M) * K;
}
void sgemm_packed_a_ref(bool tb, int m, int N, int K, float alpha, const float* Ap, int M, int i0, const float* B,
                        int ldb, float beta, float* C, int ldc) {
  (void)M;
  ref::gemm<float>(false, tb, m, N, K, alpha, Ap + size_t(i0) * K, K, B, ldb, beta, C, ldc);
}

// Room for the reference (the rebuilt conv-output gradient) and for the AVX-512 kernel (the
// pooled gradient and the codes, transposed to [P/2 * Q/2, K rounded up to 16]).
size_t conv_pool_wgrad_scratch(const ConvS1& d) {
  const size_t dense = size_t(d.K) * d.P * d.Q;
  const size_t packed = 2 * size_t((d.K + 15) / 16 * 16) * (d.P / 2) * (d.Q / 2) +
                        size_t(d.Hp) * ((d.Wp + 14) / 16 * 16) * 16 +  // + the 2x2 windows of a channel
                        size_t(d.P / 2) * (d.Q / 2);                    // + the live windows' list
  return dense > packed ? dense : packed;
}

// Room for the AVX-512 fused forward: the weights as [C, R, S, K rounded up to 16], the bias,
// the pooled output channel-last [P/2 * Q/2, K rounded up to 16] before its transpose, and for its
// sparse-input path the weights with a zero border [C, R+2, S+2, Kp] and a 64-bit mask per input
// row [C, Hp] (two floats each); for the AVX512_BF16 kernel the input's column pairs [C, Hp, Wp].
size_t conv_relu_pool_scratch(const ConvS1& d) {
  const size_t Kp = size_t(d.K + 15) / 16 * 16;
  return Kp * (size_t(d.C) * d.R * d.S + 1 + size_t(d.P / 2) * (d.Q / 2) +
               size_t(d.C) * (d.R + 2) * (d.S + 2)) + 2 * size_t(d.C) * d.Hp + 16 +
         size_t(d.C) * d.Hp * d.Wp;  // the bf16 kernel's column pairs
}

namespace ref {
void im2col_f32(float* col, const float* x, int Cg, const ConvShape& s) { im2col<float>(col, x, Cg, s); }
void col2im_f32(float* dx, const float* col, int Cg, const ConvShape& s) { col2im<float>(dx, col, Cg, s); }
void bias_rows_f32(float* y, const float* b, int rows, int cols) { bias_rows<float>(y, b, rows, cols); }
void bias_channels_f32(float* y, const float* b, int N, int K, int PQ) {
  bias_channels<float>(y, b, N, K, PQ);
}
void conv_s1_fwd_f32(float* y, const float* xp, const float* w, const float* b, const ConvS1& d, const float*) {
  conv_s1_fwd<float>(y, xp, w, b, d);
}
void conv_s1_wgrad_f32(float* dw, float* db, const float* dy, const float* xp, const ConvS1& d) {
  conv_s1_wgrad<float>(dw, db, dy, xp, d);
}
void conv_s1_relu_pool_f32(float* y, int8_t* code, const float* xp, const float* w, const float* b,
                           const ConvS1& d, float*, const float*) {
  conv_s1_relu_pool<float>(y, code, xp, w, b, d);
}
size_t conv_relu_pool_pack_f32(float*, const float*, const float*, const ConvS1&) { return 0; }  // reads w as stored
void conv_pool_wgrad_f32(float* dw, float* db, const float* dy, const int8_t* code, const float* xp,
                         const ConvS1& d, float* ws) {
  conv_pool_wgrad<float>(dw, db, dy, code, xp, d, ws);
}
void maxpool2d_fwd_f32(float* y, int32_t* argmax, const float* x, const PoolShape& s) { maxpool2d_fwd<float>(y, argmax, x, s); }
void maxpool2d_window_f32(float* y, int32_t* argmax, const float* xp, const PoolShape& s, int p, int q) {
  maxpool2d_window<float>(y, argmax, xp, s, p, q);
}
void relu_maxpool2_f32(float* y, int32_t* code, const float* x, int K, int P, int Q) {
  relu_maxpool2<float>(y, code, x, K, P, Q);
}
void relu_maxpool2_bwd_f32(float* dx, const float* dy, const int32_t* code, int K, int P, int Q) {
  relu_maxpool2_bwd<float>(dx, dy, code, K, P, Q);
}
void linear_t1_f32(float* y, const float* x, const float* wt, size_t ldw, const float* b, int C,
                   int K) {
  linear_t1<float>(y, x, wt, ldw, b, C, K);
}
void linear_sp_fwd_f32(float* y, float* wt, const float* x, size_t ldx, const float* w, size_t ldw,
                       int N, int K, int c0, int c1) {
  linear_sp_fwd<float>(y, wt, x, ldx, w, ldw, N, K, c0, c1);
}
void linear_sp_wgrad_f32(float* dw, size_t ldw, const float* dy, const float* x, size_t ldx, int N,
                         int K, int c0, int c1) {
  linear_sp_wgrad<float>(dw, ldw, dy, x, ldx, N, K, c0, c1);
}
void linear_sp_dgrad_f32(float* dx, const float* dy, const float* x, size_t ldx, const float* wt,
                         int N, int K, int c0, int c1) {
  linear_sp_dgrad<float>(dx, dy, x, ldx, wt, N, K, c0, c1);
}
size_t count_nonzero_f32(const float* x, size_t ldx, int N, int c0, int c1) {
  return count_nonzero<float>(x, ldx, N, c0, c1);
}
void channel_sum_f32(float* out, const float* w, size_t ldw, const float* v, int C, int P, int K) {
  channel_sum<float>(out, w, ldw, v, C, P, K);
}
void channel_axpy_f32(float* dw, size_t ldw, const float* u, const float* v, int C, int P, int K) {
  channel_axpy<float>(dw, ldw, u, v, C, P, K);
}
void channel_dot_f32(float* out, const float* w, size_t ldw, const float* u, const float* v, int P,
                     int K, int c0, int c1) {
  channel_dot<float>(out, w, ldw, u, v, P, K, c0, c1);
}
size_t adam_f32(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a) {
  return adam<float>(w, m, v, g, n, a);
}
size_t adam_bf16_f32(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a, uint16_t* wh) {
  const size_t nonfinite = adam<float>(w, m, v, g, n, a);
  for (size_t i = 0; i < n; ++i) wh[i] = f32_to_bf16(w[i]);  // a reference: two passes
  return nonfinite;
}
void transpose_f32(float* dst, size_t ldd, const float* src, size_t lds, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[size_t(c) * ldd + r] = src[size_t(r) * lds + c];
}
size_t count_nonfinite_f32(const float* x, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += !std::isfinite(x[i]);
  return c;
}
size_t count_subnormal_f32(const float* x, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += std::fpclassify(x[i]) == FP_SUBNORMAL;
  return c;
}
}  // namespace ref

}  // namespace ember
