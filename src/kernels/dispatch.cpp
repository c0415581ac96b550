// The one kernel table: which sets this CPU runs (read from the one probe, cpu_probe.h) and the
// immutable per-ISA tables.
// Every other part of ember reaches fast code only through kernels_for(isa).
#include "kernels/kernels.h"

#include <cstdlib>

#include "kernels/act_vec.h"
#include "kernels/act_headers.inc"
#include "kernels/cpu_probe.h"
#include "kernels/dw_impl.h"
#include "kernels/kernel_entries.h"
#include "kernels/ref/ref_convnext.h"

#include "ember/error.h"
#include "kernels/ref/ref.h"

namespace ember {
namespace ref {
void im2col_f32(float* col, const float* x, int Cg, const ConvShape& s);
void col2im_f32(float* dx, const float* col, int Cg, const ConvShape& s);
void bias_rows_f32(float* y, const float* b, int rows, int cols);
void bias_channels_f32(float* y, const float* b, int N, int K, int PQ);
void conv_s1_fwd_f32(float* y, const float* xp, const float* w, const float* b, const ConvS1& d, const float* wpk);
void conv_s1_wgrad_f32(float* dw, float* db, const float* dy, const float* xp, const ConvS1& d);
void relu_maxpool2_f32(float* y, int32_t* code, const float* x, int K, int P, int Q);
void conv_pool_wgrad_f32(float* dw, float* db, const float* dy, const int8_t* code, const float* xp,
                         const ConvS1& d, float* ws);
void conv_s1_relu_pool_f32(float* y, int8_t* code, const float* xp, const float* w, const float* b,
                           const ConvS1& d, float* ws, const float* wpk);
size_t conv_relu_pool_pack_f32(float* dst, const float* w, const float* b, const ConvS1& d);
void relu_maxpool2_bwd_f32(float* dx, const float* dy, const int32_t* code, int K, int P, int Q);
void linear_t1_f32(float* y, const float* x, const float* wt, size_t ldw, const float* b, int C,
                   int K);
void linear_sp_fwd_f32(float* y, float* wt, const float* x, size_t ldx, const float* w, size_t ldw,
                       int N, int K, int c0, int c1);
void linear_sp_wgrad_f32(float* dw, size_t ldw, const float* dy, const float* x, size_t ldx, int N,
                         int K, int c0, int c1);
void linear_sp_dgrad_f32(float* dx, const float* dy, const float* x, size_t ldx, const float* wt,
                         int N, int K, int c0, int c1);
size_t count_nonzero_f32(const float* x, size_t ldx, int N, int c0, int c1);
size_t adam_f32(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a);
size_t adam_bf16_f32(float* w, float* m, float* v, const float* g, size_t n, const AdamArgs& a, uint16_t* wh);
size_t count_nonfinite_f32(const float* x, size_t n);
void transpose_f32(float* dst, size_t ldd, const float* src, size_t lds, int rows, int cols);
size_t count_subnormal_f32(const float* x, size_t n);
}  // namespace ref

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::amx: return "amx";
  }
  return "?";
}

bool parse_isa(std::string_view t, Isa* out) {
  if (t == "scalar") *out = Isa::scalar;
  else if (t == "avx2") *out = Isa::avx2;
  else if (t == "avx512") *out = Isa::avx512;
  else if (t == "amx") *out = Isa::amx;
  else return false;
  return true;
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return cpu_probe().avx2 && cpu_probe().fma;
    case Isa::avx512: {
      const CpuProbe& p = cpu_probe();
      return p.avx512f && p.avx512bw && p.avx512vl && p.avx512dq;
    }
    case Isa::amx: {
      const CpuProbe& p = cpu_probe();
      if (!isa_supported(Isa::avx512) || !p.avx512_bf16 || !p.amx_bf16 || !amx_usable(p)) return false;
      static const bool holds = amx_tiles_hold_state();  // checked once, the first time it is asked
      return holds;
    }
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::amx)) return Isa::amx;
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

Isa resolve_isa(std::string_view text, const std::string& what) {
  if (text.empty()) return best_isa();
  Isa isa;
  const std::string shown(text.substr(0, 60));
  if (!parse_isa(text, &isa)) throw Error(what + ": expected scalar, avx2, avx512 or amx, found '" + shown + "'");
  if (!isa_supported(isa))
    throw Error(what + ": this CPU does not support " + shown + " (best available: " + isa_name(best_isa()) + ")");
  return isa;
}

Isa resolve_isa_option(const std::string& option) {
  const char* env = std::getenv("EMBER_ISA");
  return option.empty() && env ? resolve_isa(env, "EMBER_ISA") : resolve_isa(option, "isa");
}

namespace {
Kernels scalar_table() {
  Kernels k{};
  k.isa = Isa::scalar;
  k.sgemm = sgemm_ref;
  k.pack_b = pack_b_ref;
  k.sgemm_packed_b = sgemm_packed_b_ref;
  k.pack_a = pack_a_ref;
  k.sgemm_packed_a = sgemm_packed_a_ref;
  k.gemm_nr = 1;
  k.gemm_mr = 1;
  k.gemm_stream_rows = 0;
  k.gemm_direct_a_cols = 0;
  k.gemm_packs = 0;
  k.im2col = ref::im2col_f32;
  k.col2im = ref::col2im_f32;
  k.bias_rows = ref::bias_rows_f32;
  k.bias_channels = ref::bias_channels_f32;
  k.conv_s1_fwd = ref::conv_s1_fwd_f32;
  k.conv_s1_fwd_pack = ref::conv_relu_pool_pack_f32;  // reads w as stored: nothing packed
  k.dw_fwd = dw_fwd_loops;
  k.dw_bwd = dw_bwd_loops;
  k.dw_fwd_bf16 = dw_fwd_loops<true>;
  k.dw_bwd_bf16 = dw_bwd_loops<true>;
  k.dw_nhwc_fwd = ref::dw_nhwc_fwd_f32;
  k.dw_nhwc_bwd = ref::dw_nhwc_bwd_f32;
#define EMBER_ACT(name)                                                        \
  k.act_fwd[int(ActId::name)] = act::fwd_ref<act::name, float>;                \
  k.act_bwd[int(ActId::name)] = act::bwd_ref<act::name, float>;
#include "kernels/act_list.inc"
#undef EMBER_ACT
  k.ln_fwd = ref::layernorm_fwd<float>;
  k.ln_bwd = ref::layernorm_bwd<float>;
  k.ln2d_fwd = ref::layernorm2d_fwd<float>;
  k.ln2d_bwd = ref::layernorm2d_bwd<float>;
  k.conv_s1_wgrad = ref::conv_s1_wgrad_f32;
  k.maxpool_fwd = ref::maxpool2d_fwd_f32;
  k.relu_maxpool2 = ref::relu_maxpool2_f32;
  k.conv_s1_relu_pool = ref::conv_s1_relu_pool_f32;
  k.conv_s1_relu_pool_pack = ref::conv_relu_pool_pack_f32;
  k.conv_s1_pool_wgrad = ref::conv_pool_wgrad_f32;
  k.conv_pool_background = ref::conv_pool_background;
  k.relu_maxpool2_bwd = ref::relu_maxpool2_bwd_f32;
  k.linear_t1 = ref::linear_t1_f32;
  k.linear_sp_fwd = ref::linear_sp_fwd_f32;
  k.linear_sp_wgrad = ref::linear_sp_wgrad_f32;
  k.linear_sp_dgrad = ref::linear_sp_dgrad_f32;
  k.count_nonzero = ref::count_nonzero_f32;
  k.linear_sp_max_density = 0.5f;  // the references: their density rule keeps the ops' sparse
                                   // path exercised by the scalar test runs
  k.channel_sum = ref::channel_sum_f32;
  k.channel_axpy = ref::channel_axpy_f32;
  k.channel_dot = ref::channel_dot_f32;
  k.adam = ref::adam_f32;
  k.adam_bf16 = ref::adam_bf16_f32;
  k.transpose = ref::transpose_f32;
  k.count_nonfinite = ref::count_nonfinite_f32;
  k.count_subnormal = ref::count_subnormal_f32;
  k.fma_loop = ref::fma_loop;
  set_bf16_entries(k, {sbgemm_ref, sgemm_bf16_ref, gemm_bf16_mixed_ref, cvt_f32_bf16_ref, cvt_bf16_f32_ref,
                    "scalar reference (fp32 sums of exact bf16 products)", 1});
  set_bf16_packed_entries(k, {pack_b_bf16_ref, gemm_bf16_packed_b_ref, pack_a_bf16_ref, gemm_bf16_packed_a_ref, 1, 1});
  return k;
}
// A fast table: the set's own table (its constructor sets every entry it has code for), with the
// scalar reference in exactly the entries the set's list in kernel_entries.h leaves to it.
#define EMBER_FROM_REFERENCE(name) \
  if (!k.name) k.name = ref.name;
Kernels with_references(Kernels k) {
  const Kernels ref = scalar_table();
  if (k.isa == Isa::avx2) {
    EMBER_AVX2_REFERENCE_ENTRIES(EMBER_FROM_REFERENCE)
  } else {
    EMBER_AVX512_REFERENCE_ENTRIES(EMBER_FROM_REFERENCE)
  }
  for (int a = 0; a < kActs; ++a) {  // an activation without a vector form: its formula
    if (!k.act_fwd[a]) k.act_fwd[a] = ref.act_fwd[a];
    if (!k.act_bwd[a]) k.act_bwd[a] = ref.act_bwd[a];
  }
  return k;
}
#undef EMBER_FROM_REFERENCE

// The AMX table: the avx512 one (references filled) with the bf16 matrix products on tiles.
Kernels amx_table() {
  Kernels k = with_references(fast_kernels_avx512());
  k.isa = Isa::amx;
  set_bf16_entries(k, {sbgemm_amx, sgemm_bf16_amx, gemm_bf16_mixed_amx, k.cvt_f32_bf16, k.cvt_bf16_f32,
                       "amx_bf16 (TDPBF16PS tiles: 16x16x32 bf16 products per instruction)", 16});
  set_bf16_packed_entries(k, {pack_b_bf16_amx, gemm_bf16_packed_b_amx, pack_a_bf16_amx, gemm_bf16_packed_a_amx, 32, 32});
  return k;
}
}  // namespace

const Kernels& kernels_for(Isa isa) {
  // Each table is built once, on first use, and immutable after. A fast table is only built
  // when asked for, so no code compiled for an ISA runs on a CPU without it.
  switch (isa) {
    case Isa::avx2: {
      static const Kernels t = with_references(fast_kernels_avx2());
      return t;
    }
    case Isa::avx512: {
      static const Kernels t = with_references(fast_kernels_avx512());
      return t;
    }
    case Isa::amx: {
      static const Kernels t = amx_table();
      return t;
    }
    default: {
      static const Kernels t = scalar_table();
      return t;
    }
  }
}

// The static_asserts count Kernels' members against EMBER_KERNEL_ENTRIES (kernel_entries.h): an
// entry added to the struct but not to the list fails the build (all are 8 bytes; isa, bf16_path,
// bf16_rate, linear_sp_max_density, the five gemm_ and two bf16_ ints take eight more slots with their padding).
#define EMBER_COUNT_ENTRY(name) +1
static_assert(0 EMBER_KERNEL_ENTRIES(EMBER_COUNT_ENTRY) == kKernelEntries);
static_assert(sizeof(Kernels) == (kKernelEntries + 2 * kActs + 8) * sizeof(void*), "a Kernels entry is missing from EMBER_KERNEL_ENTRIES");

const ActInfo& act_info(ActId a) {
  static const ActInfo infos[kActs] = {
#define EMBER_ACT(name)                                                                              \
  {#name, act::name::from_output, act::DeadAtZero<act::name>, act::HasVector<act::name>, act::fwd_ref<act::name, double>, \
   act::bwd_ref<act::name, double>},
#include "kernels/act_list.inc"
#undef EMBER_ACT
  };
  return infos[int(a)];
}

namespace {
// The entries that need AVX512_BF16 (set_bf16): they run on an avx512 table of such a CPU only.
bool is_avx512_bf16(const void* f) {
  const void* bf16[] = {reinterpret_cast<const void*>(sbgemm_avx512bf16), reinterpret_cast<const void*>(sgemm_bf16_avx512bf16),
                        reinterpret_cast<const void*>(gemm_bf16_mixed_avx512bf16), reinterpret_cast<const void*>(cvt_f32_bf16_avx512bf16),
                        reinterpret_cast<const void*>(gemv_bf16_avx512bf16), reinterpret_cast<const void*>(conv_relu_pool_avx512bf16),
                        reinterpret_cast<const void*>(conv_relu_pool_pack_avx512bf16),
                        reinterpret_cast<const void*>(dw_fwd_bf16_avx512bf16), reinterpret_cast<const void*>(dw_bwd_bf16_avx512bf16),
                        reinterpret_cast<const void*>(pack_b_bf16_avx512bf16), reinterpret_cast<const void*>(gemm_bf16_packed_b_avx512bf16),
                        reinterpret_cast<const void*>(pack_a_bf16_avx512bf16), reinterpret_cast<const void*>(gemm_bf16_packed_a_avx512bf16)};
  for (const void* b : bf16)
    if (f == b) return true;
  return false;
}
bool is_amx(const void* f) {
  return f == reinterpret_cast<const void*>(sbgemm_amx) || f == reinterpret_cast<const void*>(sgemm_bf16_amx) ||
         f == reinterpret_cast<const void*>(gemm_bf16_mixed_amx) || f == reinterpret_cast<const void*>(pack_b_bf16_amx) ||
         f == reinterpret_cast<const void*>(gemm_bf16_packed_b_amx) || f == reinterpret_cast<const void*>(pack_a_bf16_amx) ||
         f == reinterpret_cast<const void*>(gemm_bf16_packed_a_amx);
}
// avx512: the avx512 table's entry, which the amx table shares where it has no tile kernel.
const char* origin(Isa isa, const void* f, const void* ref, const void* avx512) {
  if (!isa_supported(isa)) return "?";
  if (!f) return "-";
  if (isa != Isa::scalar && f == ref) return "reference";
  if (isa == Isa::amx && f == avx512 && !is_avx512_bf16(f)) return "avx512";
  if (is_avx512_bf16(f)) return "avx512_bf16";
  if (is_amx(f)) return "amx_bf16";
  return isa_name(isa);
}
}  // namespace

void kernel_rows(KernelRow (&rows)[kKernelRows]) {
  const Isa sets[kKernelSets] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::amx};
  const Kernels* t[kKernelSets];
  for (int i = 0; i < kKernelSets; ++i) t[i] = isa_supported(sets[i]) ? &kernels_for(sets[i]) : nullptr;
  int n = 0;
#define EMBER_ROW(name)                                                                                      \
  rows[n].entry = #name;                                                                                     \
  for (int i = 0; i < kKernelSets; ++i)                                                                      \
    rows[n].by_set[i] = origin(sets[i], t[i] ? reinterpret_cast<const void*>(t[i]->name) : nullptr,          \
                               reinterpret_cast<const void*>(t[0]->name),                                    \
                               t[2] ? reinterpret_cast<const void*>(t[2]->name) : nullptr);                  \
  ++n;
  EMBER_KERNEL_ENTRIES(EMBER_ROW)
#undef EMBER_ROW
  // The activations: act_fwd.<name>, act_bwd.<name>.
#define EMBER_ACT_ROW(name, dir)                                                                    \
  rows[n].entry = "act_" #dir "." #name;                                                            \
  for (int i = 0; i < kKernelSets; ++i)                                                             \
    rows[n].by_set[i] = origin(sets[i], t[i] ? reinterpret_cast<const void*>(t[i]->act_##dir[int(ActId::name)]) : nullptr, \
                               reinterpret_cast<const void*>(t[0]->act_##dir[int(ActId::name)]),                    \
                               t[2] ? reinterpret_cast<const void*>(t[2]->act_##dir[int(ActId::name)]) : nullptr);  \
  ++n;
#define EMBER_ACT(name) EMBER_ACT_ROW(name, fwd) EMBER_ACT_ROW(name, bwd)
#include "kernels/act_list.inc"
#undef EMBER_ACT
#undef EMBER_ACT_ROW
}

}  // namespace ember
