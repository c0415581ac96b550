// Conv2d on channel-last activations (issue 41): x [N, H, W, C], y [N, P, Q, K], the weights in
// PyTorch's layout w [K, C/G, R, S] as everywhere else. Three shapes run channel-last, each with
// batch x pixels as one long GEMM dimension where oneDNN's blocked formats put it:
//   pointwise  1x1, stride 1, no padding, groups 1: one GEMM over the N*H*W rows (a Linear).
//   patchify   stride == kernel, no padding, groups 1 (ConvNeXt's 4x4/4 stem and 2x2/2
//              downsampling): space-to-depth into rows [N*P*Q, R*S*C], then one GEMM.
//   depthwise  groups == C, stride 1 (the 7x7s): per sample, transposed into the planes of the
//              NCHW depthwise kernels and back (in cache).
// T = double runs the scalar reference (direct loops in channel-last indexing, any shape).
#pragma once
#include <cstddef>

#include "ops/ops.h"

namespace ember::ops {

enum class NhwcAlgo : uint8_t { none, pointwise, patchify, depthwise };
const char* nhwc_algo_name(NhwcAlgo a);  // "nhwc-gemm", "nhwc-patchify", "nhwc-depthwise", "none"
// The algorithm for a shape, or none: the shape runs only in NCHW.
NhwcAlgo conv2d_nhwc_algo(const ConvShape& s);
// Elements of float the calls need for up to s.N samples (T = double needs none).
size_t conv2d_nhwc_workspace(const ConvShape& s, int threads);

template <class T>
void conv2d_nhwc_fwd(const Exec& e, T* y, const T* x, const T* w, const T* b, const ConvShape& s, T* ws);
// dx (skipped when null), dw, db (skipped when null): overwritten.
template <class T>
void conv2d_nhwc_bwd(const Exec& e, T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const ConvShape& s,
                     T* ws);

// The whole batch: [N, C, HW] -> [N, HW, C] (to_nhwc) or back, split over the pool by samples.
template <class T>
void reorder(const Exec& e, T* dst, const T* src, int N, int C, int HW, bool to_nhwc);

}  // namespace ember::ops
