// Turns a profiler's spans into the profile table, profile.json, a Chrome trace and folded stacks.
// Rows follow a step's order: data, forward units, loss, backward units (last first), optimizer
// (an inference plan's steps have data and forward rows alone).
#include "ember/profile.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "fs/json_read.h"

namespace ember {

namespace {
double ms(int64_t ns) { return double(ns) / 1e6; }

std::string span_name(const ProfiledPlan& plan, const Span& s) {
  if (s.unit >= 0) return plan.units[size_t(s.unit)].name;
  switch (s.phase) {
    case Phase::step: return "step " + std::to_string(s.step);
    case Phase::data: return "batch gather";
    case Phase::loss: return "loss";
    case Phase::eval: return "test-set evaluation";
    case Phase::optimizer: return "NaN/Inf check";
    default: return phase_name(s.phase);
  }
}
}  // namespace

ProfiledPlan profiled_plan(const Plan& plan) {
  return {plan.model().name, plan.isa_name(), precision_name(plan.precision()), plan.batch(), plan.threads(), plan.units(),
          plan.buffers()};
}

ProfileSummary summarize_profile(const ProfiledPlan& plan, const Profiler& prof, double peak_gflops) {
  ProfileSummary s;
  s.model = plan.model;
  s.isa = plan.isa;
  s.batch = plan.batch;
  s.threads = plan.threads;
  s.steps = prof.steps();
  s.samples = prof.samples();
  s.peak_gflops = peak_gflops;
  s.precision = plan.precision;
  s.bf16_rate = kernels_for(resolve_isa(plan.isa, "isa")).bf16_rate;
  const int64_t step_ns = prof.total(0, Phase::step, -1).ns;
  s.step_ms = s.steps ? ms(step_ns) / double(s.steps) : 0;
  const auto& units = plan.units;
  int64_t covered = 0;
  double flops = 0, at_peak_ns = 0;  // the step's FLOPs, and their time at each one's peak
  auto add = [&](Phase ph, int unit, std::string layer, double flops_per_sample) {
    const Profiler::Total& t = prof.total(0, ph, unit);
    if (t.calls == 0) return;
    ProfileRow r;
    r.layer = std::move(layer);
    r.phase = phase_name(ph);
    r.calls = t.calls;
    r.total_ms = ms(t.ns);
    r.ms_per_step = s.steps ? r.total_ms / double(s.steps) : 0;
    r.pct_step = step_ns ? 100.0 * double(t.ns) / double(step_ns) : 0;
    const Precision prec = unit < 0 ? Precision::fp32
                           : ph == Phase::backward ? units[size_t(unit)].precision_bwd : units[size_t(unit)].precision;
    const bool bf16 = prec == Precision::bf16, int8 = unit >= 0 && units[size_t(unit)].dtype == "u8";
    if (unit >= 0 && ph != Phase::optimizer) r.precision = int8 ? "int8" : bf16 ? "bf16" : "fp32";
    const double peak = int8 ? 0 : peak_gflops * (bf16 ? s.bf16_rate : 1);
    if (flops_per_sample > 0 && t.ns > 0) {
      r.gflops = flops_per_sample * double(s.samples) / double(t.ns);
      r.pct_peak = peak > 0 ? 100 * r.gflops / peak : 0;
      flops += flops_per_sample * double(s.samples);
      if (peak > 0) at_peak_ns += flops_per_sample * double(s.samples) / peak;
    }
    covered += t.ns;
    s.rows.push_back(std::move(r));
  };
  add(Phase::data, -1, "batch gather", 0);
  for (size_t i = 0; i < units.size(); ++i) add(Phase::forward, int(i), units[i].name, units[i].flops_fwd);
  add(Phase::loss, -1, "loss", 0);
  for (size_t i = units.size(); i-- > 0;) add(Phase::backward, int(i), units[i].name, units[i].flops_bwd);
  add(Phase::optimizer, -1, "NaN/Inf check", 0);  // of every gradient, before the update
  for (size_t i = 0; i < units.size(); ++i) add(Phase::optimizer, int(i), units[i].name, 0);
  // Data-parallel training: the communication track (the last, past the pool's threads) holds
  // the all-reduce work and the waits, both on the main thread between the spans above.
  if (prof.threads() > plan.threads) {
    const int tc = prof.threads() - 1;
    for (Phase ph : {Phase::comm, Phase::comm_wait}) {
      const Profiler::Total& t = prof.total(tc, ph, -1);
      if (t.calls == 0) continue;
      ProfileRow r;
      char name[96];
      std::snprintf(name, sizeof name, ph == Phase::comm ? "gradient all-reduce (%.2f MB sent/step)" : "waiting for other ranks",
                    s.steps ? double(prof.comm_bytes()) / 1e6 / double(s.steps) : 0.0);
      r.layer = name;
      r.phase = phase_name(ph);
      r.calls = t.calls;
      r.total_ms = ms(t.ns);
      r.ms_per_step = s.steps ? r.total_ms / double(s.steps) : 0;
      r.pct_step = step_ns ? 100.0 * double(t.ns) / double(step_ns) : 0;
      covered += t.ns;
      s.rows.push_back(std::move(r));
    }
    s.comm_bytes = prof.comm_bytes();
  }
  if (step_ns > 0) {
    ProfileRow r;
    r.layer = "(between spans)";
    r.phase = "other";
    r.calls = s.steps;
    r.total_ms = ms(std::max<int64_t>(step_ns - covered, 0));
    r.ms_per_step = s.steps ? r.total_ms / double(s.steps) : 0;
    r.pct_step = 100.0 * r.total_ms / ms(step_ns);
    s.rows.push_back(r);
    s.gflops = flops / double(step_ns);
    s.pct_peak = 100 * at_peak_ns / double(step_ns);
  }
  for (int t = 0; t < plan.threads; ++t) {
    int64_t busy = 0;
    for (Phase ph : {Phase::forward, Phase::backward, Phase::optimizer})
      for (int u = -1; u < int(units.size()); ++u) busy += prof.total(t, ph, u).ns;
    s.busy_pct.push_back(step_ns ? 100.0 * double(busy) / double(step_ns) : 0);
  }
  s.buffers = plan.buffers;
  return s;
}

std::string format_profile(const ProfileSummary& s, int max_buffers) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "profile of %s: %" PRId64 " steps of batch %d (%" PRId64 " samples), %d threads, kernels %s, precision %s\n"
                "step: %.3f ms mean, %.1f GFLOP/s, %.1f%% of the %.0f GFLOP/s FMA peak%s\n\n",
                s.model.c_str(), s.steps, s.batch, s.samples, s.threads, s.isa.c_str(), s.precision.c_str(),
                s.step_ms, s.gflops, s.pct_peak, s.peak_gflops,
                s.precision == "bf16"   ? (s.bf16_rate == 2 ? " (bf16 rows: of twice it, VDPBF16PS)" : " (bf16 rows: emulated, of it)")
                : s.precision == "int8" ? " (the fp32 rows' share; int8 rows: GOP/s, no int8 peak is measured)"
                                        : "");
  out += line;
  size_t w = 5;
  for (const auto& r : s.rows) w = std::max(w, r.layer.size());
  std::snprintf(line, sizeof line, "%-*s  %-9s %-4s %7s %10s %9s %7s %9s %7s\n", int(w), "layer", "phase", "prec",
                "calls", "total ms", "ms/step", "% step", "GFLOP/s", "% peak");
  out += line;
  for (const auto& r : s.rows) {
    char gf[32] = "-", pk[32] = "-";
    if (r.gflops > 0) std::snprintf(gf, sizeof gf, "%.1f", r.gflops);
    if (r.pct_peak > 0) std::snprintf(pk, sizeof pk, "%.1f", r.pct_peak);
    std::snprintf(line, sizeof line, "%-*s  %-9s %-4s %7" PRId64 " %10.2f %9.4f %7.1f %9s %7s\n", int(w),
                  r.layer.c_str(), r.phase.c_str(), r.precision.empty() ? "-" : r.precision.c_str(), r.calls, r.total_ms, r.ms_per_step, r.pct_step, gf, pk);
    out += line;
  }
  out += "\nthreads busy in layer work (% of step time):";
  for (size_t t = 0; t < s.busy_pct.size(); ++t) {
    std::snprintf(line, sizeof line, " %zu: %.1f%%", t, s.busy_pct[t]);
    out += line;
  }
  out += "\n\nlargest buffers:\n";
  for (int i = 0; i < max_buffers && i < int(s.buffers.size()); ++i) {
    std::snprintf(line, sizeof line, "  %10.1f KiB  %s\n", double(s.buffers[size_t(i)].bytes) / 1024,
                  s.buffers[size_t(i)].name.c_str());
    out += line;
  }
  return out;
}

std::string profile_json(const ProfileSummary& s) {
  using nlohmann::json;
  json j = {{"model", s.model},   {"batch", s.batch},     {"threads", s.threads},
            {"isa", s.isa},       {"steps", s.steps},     {"samples", s.samples},
            {"step_ms", s.step_ms}, {"peak_gflops", s.peak_gflops}, {"gflops", s.gflops},
            {"pct_peak", s.pct_peak}, {"busy_pct", s.busy_pct}, {"precision", s.precision},
            {"bf16_rate", s.bf16_rate}, {"comm_bytes", s.comm_bytes}};
  json rows = json::array();
  for (const auto& r : s.rows)
    rows.push_back({{"layer", r.layer}, {"phase", r.phase}, {"calls", r.calls}, {"total_ms", r.total_ms},
                    {"ms_per_step", r.ms_per_step}, {"pct_step", r.pct_step}, {"gflops", r.gflops},
                    {"pct_peak", r.pct_peak}, {"precision", r.precision}});
  j["rows"] = rows;
  json bufs = json::array();
  for (const auto& b : s.buffers) bufs.push_back({{"name", b.name}, {"bytes", b.bytes}});
  j["buffers"] = bufs;
  return json_text(j, 1) + "\n";
}

std::string chrome_trace_json(const ProfiledPlan& plan, const Profiler& prof) {
  using nlohmann::json;
  json ev = json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0},
                {"args", {{"name", "ember " + plan.model}}}});
  for (int t = 0; t < prof.threads(); ++t)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t},
                  {"args", {{"name", t == 0 ? std::string("main (pool thread 0)")
                                     : t >= plan.threads ? std::string("communication (MPI, on the main thread)")
                                                           : "pool thread " + std::to_string(t)}}}});
  for (int t = 0; t < prof.threads(); ++t)
    for (const Span& s : prof.spans(t))
      ev.push_back({{"name", span_name(plan, s)}, {"cat", phase_name(s.phase)}, {"ph", "X"},
                    {"pid", 1}, {"tid", t}, {"ts", double(s.t0_ns) / 1e3},
                    {"dur", double(s.t1_ns - s.t0_ns) / 1e3}, {"args", {{"step", s.step}}}});
  json j = {{"traceEvents", ev}, {"displayTimeUnit", "ms"},
            {"otherData", {{"model", plan.model}, {"batch", plan.batch},
                           {"threads", plan.threads}, {"dropped_spans", prof.dropped()}}}};
  return json_text(j) + "\n";
}

std::string folded_stacks(const ProfiledPlan& plan, const Profiler& prof) {
  std::map<std::string, double> us;  // stack -> microseconds
  int64_t step_ns = 0, inside_ns = 0;
  for (const Span& s : prof.spans(0)) {
    const double d = double(s.t1_ns - s.t0_ns) / 1e3;
    if (s.phase == Phase::step) {
      step_ns += s.t1_ns - s.t0_ns;
      continue;
    }
    if (s.phase == Phase::eval) {
      us["evaluation"] += d;
      continue;
    }
    inside_ns += s.t1_ns - s.t0_ns;
    std::string stack = std::string("step;") + phase_name(s.phase);
    if (s.unit >= 0) stack += ";" + span_name(plan, s);
    us[stack] += d;
  }
  if (step_ns > inside_ns) us["step"] += double(step_ns - inside_ns) / 1e3;
  std::string out;
  for (const auto& [stack, v] : us) {
    const long long n = (long long)(v + 0.5);
    if (n > 0) out += stack + " " + std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace ember
