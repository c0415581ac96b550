// ConvNeXt ops above their scalar references (kernels/ref/ref_convnext.h): LayerNorm over rows,
// LayerNorm2d over channels, global average pooling, per-channel scale and zero padding. Split
// over the pool by rows or samples; parameter gradients are per-thread partials in `ws`, summed
// in thread order (the same bits for a given thread count). f64 runs on one thread.
#pragma once
#include "kernels/ref/ref_convnext.h"
#include "ops/ops.h"

namespace ember::ops {

// LayerNorm of R rows of D contiguous values: y, x [R, D]; gamma, beta [D] (may be null); mean,
// rstd [R] saved for backward. ws: layernorm_workspace(D, threads) elements.
size_t layernorm_workspace(int D, int threads);
template <class T>
void layernorm_fwd(const Exec& e, T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int R, int D, T eps);
// The same with y written in bf16 (yh [R, D], rounded to nearest even: a bf16 plan's LayerNorm
// that feeds a 1x1 convolution): each row normalised into rows (threads x D floats of scratch,
// in cache) and converted from there. The same fp32 values as layernorm_fwd before rounding.
void layernorm_fwd_bf16(const Exec& e, uint16_t* yh, float* mean, float* rstd, const float* x, const float* gamma,
                        const float* beta, int R, int D, float eps, float* rows);
// dx [R, D] (may be null); dgamma, dbeta [D] overwritten (may be null).
template <class T>
void layernorm_bwd(const Exec& e, T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean,
                   const T* rstd, const T* gamma, int R, int D, T* ws);

// LayerNorm2d: x, y [N, C, HW] normalised over C at each position; mean, rstd [N, HW].
// ws: layernorm_workspace(C, threads) elements.
template <class T>
void layernorm2d_fwd(const Exec& e, T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int N,
                     int C, int HW, T eps);
template <class T>
void layernorm2d_bwd(const Exec& e, T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean,
                     const T* rstd, const T* gamma, int N, int C, int HW, T* ws);

// y[N, C] = mean over HW of x[N, C, HW]; backward spreads dy / HW.
template <class T>
void global_avgpool_fwd(const Exec& e, T* y, const T* x, int N, int C, int HW);
template <class T>
void global_avgpool_bwd(const Exec& e, T* dx, const T* dy, int N, int C, int HW);

// y[N, C, HW] = x * s[C]; backward: dx (may be null), ds [C] overwritten. ws: threads * C.
// y[N, D] = x * scale[n] (drop path forward and backward; y may be x), split over samples.
template <class T>
void sample_scale(const Exec& e, T* y, const T* x, const T* scale, int N, size_t D);
template <class T>
void channel_scale_fwd(const Exec& e, T* y, const T* x, const T* s, int N, int C, int HW);
template <class T>
void channel_scale_bwd(const Exec& e, T* dx, T* ds, const T* dy, const T* x, const T* s, int N, int C, int HW,
                       T* ws);

// Zero padding [N, C, H, W] -> [N, C, H + top + bottom, W + left + right] and its crop.
template <class T>
void zero_pad_fwd(const Exec& e, T* y, const T* x, const ref::ZeroPad2d& s);
template <class T>
void zero_pad_bwd(const Exec& e, T* dx, const T* dy, const ref::ZeroPad2d& s);

}  // namespace ember::ops
