// Conv2d on channel-last activations (issue 41): x [N, H, W, C], y [N, P, Q, K], the weights in
// PyTorch's layout w [K, C/G, R, S] as everywhere else. Four algorithms run channel-last, each with
// batch x pixels as one long GEMM dimension where oneDNN's blocked formats put it (grouped convs
// other than depthwise have none: they run nchw):
//   pointwise  1x1, stride 1, no padding, groups 1: one GEMM over the N*H*W rows (a Linear).
//   patchify   stride == kernel, no padding, groups 1 (ConvNeXt's 4x4/4 stem and 2x2/2
//              downsampling): space-to-depth into rows [N*P*Q, R*S*C], then one GEMM.
//   depthwise  groups == C, stride 1 (the 7x7s): per sample, transposed into the planes of the
//              NCHW depthwise kernels and back (in cache).
//   im2col     any other shape with groups 1 (ResNet's 3x3s, 7x7/2 stem, strided 1x1s): overlapping,
//              padded windows gathered into rows [N*P*Q, R*S*C] (each tap a run of C), one GEMM per
//              chunk of whole samples, backward's rows gradient gathered back per input pixel.
// T = double runs the scalar reference (direct loops in channel-last indexing, any shape).
#pragma once
#include <cstddef>

#include "ops/conv_desc.h"
#include "ops/ops.h"

namespace ember::ops {

// The algorithms are conv_desc.h's nhwc_* (conv2d_nhwc_algo chooses; none: the shape runs only
// nchw). Elements of float the calls of algorithm a need for up to s.N samples (T = double: none).
size_t conv2d_nhwc_workspace(ConvAlgo a, const ConvShape& s, int threads);
size_t conv2d_nhwc_workspace(const ConvShape& s, int threads);  // of conv2d_nhwc_algo(s)

// A plan's calls: the descriptor's algorithm a; wp (f32; or null): its packed weight (conv2d_pack).
template <class T>
void conv2d_nhwc_fwd(const Exec& e, ConvAlgo a, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws,
                     const float* wp);
// dx (skipped when null), dw, db (skipped when null): overwritten.
template <class T>
void conv2d_nhwc_bwd(const Exec& e, ConvAlgo a, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                     const ConvShape& s, T* ws);
// The same with conv2d_nhwc_algo(s) chosen per call and no packed weight (tests, benchmarks).
template <class T>
void conv2d_nhwc_fwd(const Exec& e, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws);
template <class T>
void conv2d_nhwc_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const ConvShape& s,
                     T* ws);

// The im2col algorithm (conv_nhwc_im2col.cpp): whole samples per chunk (the window rows of a chunk
// stay within a fixed budget, at least one sample), its workspace, and the calls.
int im2col_chunk_samples(const ConvShape& s);
size_t im2col_nhwc_workspace(const ConvShape& s);
void im2col_nhwc_fwd(const Exec& e, float* y, const float* x, const float* w, const float* b, const ConvShape& s,
                     float* ws, const float* wp = nullptr);
void im2col_nhwc_bwd(const Exec& e, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     const ConvShape& s, float* ws);
// wr[k, (r, s, c)] = w[k, c, r, s] (to rows), or w from wr: the GEMM's weight for window rows.
void conv_weight_to_rows(float* wr, const float* w, const ConvShape& s);
void conv_weight_from_rows(float* w, const float* wr, const ConvShape& s);

// The whole batch: [N, C, HW] -> [N, HW, C] (to_nhwc) or back, split over the pool by samples.
template <class T>
void reorder(const Exec& e, T* dst, const T* src, int N, int C, int HW, bool to_nhwc);

}  // namespace ember::ops
