// What a profiled run shows, for a training plan or an int8 inference plan alike: a per-unit,
// per-phase table (calls, ms, ms per step, % of the step, GFLOP/s and % of the FMA peak), the
// largest buffers, and the same spans as a Chrome trace (one track per thread, Perfetto /
// chrome://tracing) and as folded stacks (flame graphs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ember/plan.h"
#include "ember/profiler.h"

namespace ember {

struct ProfileRow {
  std::string layer;             // unit name, or what the phase does ("batch gather", "loss")
  std::string phase;             // data | forward | loss | backward | optimizer | other
  int64_t calls = 0;
  double total_ms = 0, ms_per_step = 0, pct_step = 0;
  double gflops = 0, pct_peak = 0;  // 0 where the phase does no counted FLOPs; bf16 rows against the bf16 peak
  std::string precision;         // a unit's matrix products: "fp32", "bf16" or "int8"; empty for other rows
};

struct ProfileSummary {
  std::string model, isa;
  int batch = 0, threads = 0;
  int64_t steps = 0, samples = 0;
  double step_ms = 0;            // mean wall time of a step
  double peak_gflops = 0;        // FMA peak of `threads` threads (0: not measured)
  std::string precision;         // the plan's: fp32 or bf16
  int bf16_rate = 1;             // bf16 products per fp32 FMA (2 with VDPBF16PS): the bf16 peak's factor
  // Whole steps; pct_peak against the peak of the step's mix: each unit's FLOPs at its own
  // precision's peak (a bf16 plan's depthwise convolutions still count against the fp32 one).
  double gflops = 0, pct_peak = 0;
  std::vector<ProfileRow> rows;  // in step order; an "other" row holds what no span covers
  std::vector<double> busy_pct;  // per thread: share of step time spent in units' work
  std::vector<BufferInfo> buffers;  // largest first
  int64_t comm_bytes = 0;        // data-parallel: bytes this rank sent in all-reduces
};

// What the reports read of a plan: its name, kernels, batch, threads, units (the profiler's unit
// indices) and buffers. Every Plan (fp32, bf16, int8) gives one; a unit
// whose dtype is "u8" is an int8 row (GOP/s, no peak: ember measures no int8 peak).
struct ProfiledPlan {
  std::string model, isa, precision;  // precision: "fp32", "bf16" or "int8"
  int batch = 0, threads = 0;
  std::vector<UnitInfo> units;
  std::vector<BufferInfo> buffers;    // largest first
};
ProfiledPlan profiled_plan(const Plan& plan);

ProfileSummary summarize_profile(const ProfiledPlan& plan, const Profiler& prof, double peak_gflops);
inline ProfileSummary summarize_profile(const Plan& plan, const Profiler& prof, double peak_gflops) {
  return summarize_profile(profiled_plan(plan), prof, peak_gflops);
}
// The table a person reads (and the largest `max_buffers` buffers).
std::string format_profile(const ProfileSummary& s, int max_buffers = 8);
// The summary as one JSON object (the `profile.json` of a run directory).
std::string profile_json(const ProfileSummary& s);
// Chrome trace-event JSON of the kept spans: "X" events in microseconds, one tid per thread.
std::string chrome_trace_json(const ProfiledPlan& plan, const Profiler& prof);
inline std::string chrome_trace_json(const Plan& plan, const Profiler& prof) { return chrome_trace_json(profiled_plan(plan), prof); }
// Folded stacks ("step;forward;linear (4) 1234", microseconds) of the main thread's spans.
std::string folded_stacks(const ProfiledPlan& plan, const Profiler& prof);
inline std::string folded_stacks(const Plan& plan, const Profiler& prof) { return folded_stacks(profiled_plan(plan), prof); }

}  // namespace ember
