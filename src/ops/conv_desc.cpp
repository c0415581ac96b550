// The convolution descriptor (conv_desc.h): the one choice of algorithm for both layouts, its
// workspace, the packed weight format and its packing, and what a call packs when the weight is
// not packed (the `weight_bytes_packed_per_call` of `ember info --json`).
#include "ops/conv_desc.h"

#include <algorithm>

#include "ops/conv_nhwc.h"

namespace ember::ops {

namespace {

size_t up16(size_t n) { return (n + 15) / 16 * 16; }
size_t crs(const ConvShape& s) { return size_t(s.C / s.groups) * s.R * s.S; }
ConvS1 s1_geometry(const ConvShape& s) { return {s.C, s.K, s.H + 2 * s.pad_h, s.W + 2 * s.pad_w, s.R, s.S, s.P, s.Q}; }

// The nchw algorithm: the first that fits the shape, in this order.
ConvAlgo nchw_algo(const ConvShape& s) {
  if (conv_pointwise(s) && s.groups == 1 && conv_few_pixels(s)) return ConvAlgo::batched_pointwise;
  if (s.groups == 1 && !conv_pointwise(s) && conv_few_pixels(s)) return ConvAlgo::batched_im2col;
  if (conv_direct_s1(s)) return ConvAlgo::direct_s1;
  if (conv_dw_dense(s)) return ConvAlgo::dw_dense;
  if (conv_depthwise(s)) return ConvAlgo::depthwise;
  return ConvAlgo::gemm;
}

// The packed format and size for an algorithm (packing on: an fp32 inference plan). The GEMM
// panels only where the table's GEMM packs at all (not the scalar reference, which reads its
// operands in place); dw_dense's maps on every table (building them is the cost either way).
void choose_format(ConvDesc& d, const ConvShape& s, const Kernels& k, bool bf16) {
  const size_t rows_k = size_t(s.R) * s.S * s.C;
  if (!k.gemm_packs && d.algo != ConvAlgo::dw_dense && d.algo != ConvAlgo::nhwc_dw_dense) return;
  const PackBFn pack_b = packer_b(k, bf16);
  switch (d.algo) {
    case ConvAlgo::gemm:
    case ConvAlgo::batched_im2col:
      if (size_t blk = conv2d_gemm_a_block(k, s, bf16)) d.weight_format = WeightFormat::gemm_a, d.packed_elems = blk * s.groups;
      break;
    case ConvAlgo::batched_pointwise:  // a batch of single pixels reads op(B) = w^T; more, op(A) = w
      if (s.P * s.Q == 1) d.weight_format = WeightFormat::gemm_b, d.packed_elems = pack_b(true, s.C, s.K, nullptr, s.C, nullptr);
      else if (size_t blk = conv2d_gemm_a_block(k, s, bf16)) d.weight_format = WeightFormat::gemm_a, d.packed_elems = blk;
      break;
    case ConvAlgo::dw_dense:
    case ConvAlgo::nhwc_dw_dense:
      d.weight_format = WeightFormat::dense_map, d.packed_elems = size_t(s.C) * dw_dense_packed_group(k, s, bf16);
      break;
    case ConvAlgo::nhwc_gemm:
    case ConvAlgo::nhwc_patchify:
    case ConvAlgo::nhwc_im2col:
      d.weight_format = WeightFormat::gemm_b;
      d.packed_elems = pack_b(true, int(rows_k), s.K, nullptr, int(rows_k), nullptr);
      break;
    case ConvAlgo::direct_s1:  // the table's tile, where its kernel tiles the shape
      if (size_t n = k.conv_s1_fwd_pack(nullptr, nullptr, nullptr, s1_geometry(s)))
        d.weight_format = WeightFormat::kernel_tiles, d.packed_elems = n;
      break;
    default: break;  // the depthwise kernels read the weight as stored
  }
}

}  // namespace

size_t conv2d_gemm_a_block(const Kernels& k, const ConvShape& s, bool bf16) {
  const int Kg = s.K / s.groups;
  if (bf16) return up16(k.pack_a_bf16(false, Kg, int(crs(s)), nullptr, int(crs(s)), nullptr));  // the bf16 GEMMs always pack
  return Kg > k.gemm_stream_rows ? up16(k.pack_a(false, Kg, int(crs(s)), nullptr, int(crs(s)), nullptr)) : 0;
}

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::gemm: return "im2col-gemm";
    case ConvAlgo::batched_pointwise: return "batched-1x1";
    case ConvAlgo::batched_im2col: return "batched-im2col";
    case ConvAlgo::direct_s1: return "direct-s1";
    case ConvAlgo::dw_dense: return "depthwise-dense";
    case ConvAlgo::depthwise: return "depthwise";
    case ConvAlgo::nhwc_gemm: return "nhwc-gemm";
    case ConvAlgo::nhwc_patchify: return "nhwc-patchify";
    case ConvAlgo::nhwc_depthwise: return "nhwc-depthwise";
    case ConvAlgo::nhwc_dw_dense: return "nhwc-depthwise-dense";
    case ConvAlgo::nhwc_im2col: return "nhwc-im2col";
    case ConvAlgo::none: break;
  }
  return "none";
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::gemm_a: return "gemm-a-panels";
    case WeightFormat::gemm_b: return "gemm-b-panels";
    case WeightFormat::dense_map: return "dense-map";
    case WeightFormat::kernel_tiles: return "kernel-tiles";
    case WeightFormat::as_stored: break;
  }
  return "kcrs";
}

ConvAlgo conv2d_nhwc_algo(const ConvShape& s) {
  if (conv_pointwise(s) && s.groups == 1) return ConvAlgo::nhwc_gemm;
  if (conv_patchify(s)) return ConvAlgo::nhwc_patchify;
  if (conv_dw_dense(s)) return ConvAlgo::nhwc_dw_dense;
  if (conv_depthwise(s)) return ConvAlgo::nhwc_depthwise;
  if (s.groups == 1) return ConvAlgo::nhwc_im2col;
  return ConvAlgo::none;
}

ConvDesc conv2d_desc(const ConvShape& s, bool nhwc, int threads, const Kernels& k, bool pack, bool bf16) {
  ConvDesc d;
  d.algo = nhwc ? conv2d_nhwc_algo(s) : nchw_algo(s);
  d.workspace = nhwc ? conv2d_nhwc_workspace(d.algo, s, threads) : conv2d_nchw_workspace(d.algo, s, threads);
  d.bf16_products = d.algo != ConvAlgo::direct_s1;  // the short-reduction direct kernels are fp32
  d.reads_bf16_input = !nhwc && conv_pointwise(s) && s.groups == 1;
  if (pack) choose_format(d, s, k, bf16 && d.bf16_products);
  d.bf16_weights = bf16 && d.bf16_products && d.packed_elems > 0;
  // Packing a weight's rows (nhwc) goes through the workspace: room for them.
  if (d.weight_format == WeightFormat::gemm_b && nhwc) d.workspace = std::max(d.workspace, size_t(s.K) * s.R * s.S * s.C);
  return d;
}

ConvDesc conv2d_plan(const ConvShape& s, int threads) { return conv2d_desc(s, false, threads, kernels_for(Isa::scalar), false); }

void conv2d_pack(const Kernels& k, const ConvDesc& d, float* wp, const float* w, const float* b, const ConvShape& s,
                 float* ws) {
  const int C = int(crs(s)), Kg = s.K / s.groups;
  const size_t rows_k = size_t(s.R) * s.S * s.C;
  const PackBFn pack_b = packer_b(k, d.bf16_weights);
  switch (d.weight_format) {
    case WeightFormat::gemm_a: {
      const size_t blk = d.packed_elems / s.groups;
      for (int g = 0; g < s.groups; ++g) packer_a(k, d.bf16_weights)(false, Kg, C, w + size_t(g) * Kg * C, C, wp + g * blk);
      break;
    }
    case WeightFormat::gemm_b:
      if (d.algo == ConvAlgo::batched_pointwise || d.algo == ConvAlgo::nhwc_gemm) {
        pack_b(true, s.C, s.K, w, s.C, wp);
      } else {  // window rows wr[K, (r, s, c)], then their panels
        conv_weight_to_rows(ws, w, s);
        pack_b(true, int(rows_k), s.K, ws, int(rows_k), wp);
      }
      break;
    case WeightFormat::dense_map: {  // each group's map T_g [M*PQ, HW], then its op(B) = T_g^T panels
      const int MPQ = s.K / s.C * s.P * s.Q, HW = s.H * s.W;
      for (int g = 0; g < s.C; ++g) {
        dw_dense_matrix(ws, w, g, s);
        pack_b(true, HW, MPQ, ws, HW, wp + size_t(g) * dw_dense_packed_group(k, s, d.bf16_weights));
      }
      break;
    }
    case WeightFormat::kernel_tiles: k.conv_s1_fwd_pack(wp, w, b, s1_geometry(s)); break;
    case WeightFormat::as_stored: break;
  }
}

size_t conv2d_weight_bytes_per_call(const ConvDesc& d, const ConvShape& s, const Kernels& k, bool bf16, int threads,
                                    bool bias) {
  if (d.packed_elems) return 0;
  const size_t esz = bf16 ? 2 : 4;  // a bf16 plan's GEMMs pack bf16 pairs
  const size_t wbytes = size_t(s.K) * crs(s) * esz, PQ = size_t(s.P) * s.Q, NP = size_t(s.N) * PQ;
  if (!k.gemm_packs) return 0;  // the reference GEMMs read their operands in place
  // What the table's GEMM packs of a weight that is op(A) with n columns, once per call of it.
  const auto packs_a = [&](size_t n) { return bf16 || (s.K / s.groups > k.gemm_stream_rows && n > size_t(k.gemm_direct_a_cols)); };
  const auto packs_b = [&](size_t rows) { return bf16 || rows > size_t(k.gemm_stream_rows); };
  switch (d.algo) {
    case ConvAlgo::gemm: return packs_a(PQ) ? size_t(s.N) * wbytes : 0;  // per sample
    case ConvAlgo::batched_im2col: return packs_a(NP) ? wbytes : 0;
    case ConvAlgo::batched_pointwise:
      if (PQ == 1) return packs_b(size_t(s.N)) ? wbytes : 0;
      return NP <= 4 ? 0 : packs_a(NP) ? wbytes : 0;
    case ConvAlgo::dw_dense:
    case ConvAlgo::nhwc_dw_dense: return size_t(s.K) * PQ * s.H * s.W * 4;  // fp32 maps
    case ConvAlgo::direct_s1: {  // the fast tables' short-reduction kernel transposes its weight per sample
      const ConvS1 g{s.C, s.K, s.H + 2 * s.pad_h, s.W + 2 * s.pad_w, s.R, s.S, s.P, s.Q};
      return k.gemm_packs && conv_s1_cl_fits(g) ? size_t(s.N) * wbytes : 0;
    }
    case ConvAlgo::nhwc_gemm: return linear_weight_bytes_per_call(k, int(NP), s.C, s.K, threads, bf16, bias);
    case ConvAlgo::nhwc_patchify:  // the rows, then the GEMM's panels
      return wbytes + linear_weight_bytes_per_call(k, int(NP), int(crs(s)), s.K, threads, bf16, bias);
    case ConvAlgo::nhwc_im2col: {  // the rows once, the GEMM's panels per chunk of samples
      size_t bytes = wbytes;
      for (int n0 = 0, cs = im2col_chunk_samples(s); n0 < s.N; n0 += cs)
        bytes += linear_weight_bytes_per_call(k, int(std::min(cs, s.N - n0) * PQ), int(crs(s)), s.K, threads, bf16, bias);
      return bytes;
    }
    default: return 0;  // depthwise: the direct kernels read the weight as stored
  }
}

}  // namespace ember::ops
