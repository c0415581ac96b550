// `ember info`: the CPU features of the one probe, the kernel sets, and with --model a model's
// layers and each plan's units as their descriptors chose them at plan build (algorithm, layout,
// element type, weight format, post-ops, scratch, weight bytes packed per call), as text or with
// --json one document {"plans": [...]} (issue 56).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "ember/cpu.h"
#include "ember/error.h"
#include "ember/model.h"
#include "ember/ops.h"
#include "ember/plan.h"
#include "ember/quant.h"
#include "ember/train.h"
#include "ember/version.h"
#include "ember_support/json.h"

namespace ember::cli {

namespace {
using nlohmann::json;

// One plan's description: what `--json` prints of it, and what the text form shows.
struct PlanDesc {
  std::string kind, precision, layout;
  int batch = 0;
  std::vector<UnitInfo> units;
  std::string summary;  // the model's layers (fp32 training plans)
  std::vector<BufferInfo> buffers;
  size_t arena = 0;
};

std::string unit_layout(const UnitInfo& u) {
  return u.layout_in == u.layout_out ? u.layout_in : u.layout_in + "->" + u.layout_out;
}

// The int8 plan of the model's initial weights once quantized (initial_quantized): its steps are the units.
PlanDesc int8_plan(const Model& model, int batch) {
  const Plan plan(initial_quantized(model), int8_plan_options(batch, default_threads()));
  return {"inference", "int8", "nhwc", batch, plan.units(), {}, plan.buffers(), plan.arena_bytes()};
}

std::vector<PlanDesc> describe_plans(const Model& model, const InfoArgs& a, int batch) {
  const std::string prec = a.precision.empty() ? "fp32" : a.precision;
  if (prec == "int8") return {int8_plan(model, batch)};
  std::vector<PlanDesc> out;
  for (bool training : {true, false}) {
    PlanOptions o;
    o.batch = batch;
    o.training = training;
    o.layout = a.layout;
    o.precision = parse_precision(prec, "--precision");
    const Plan plan(model, o);
    out.push_back({training ? "training" : "inference", prec, a.layout, batch, plan.units(),
                   training ? plan.summary() : "", plan.buffers(), plan.arena_bytes()});
  }
  return out;
}

json unit_json(const UnitInfo& u) {
  return {{"name", u.name}, {"ops", u.ops}, {"algorithm", u.algorithm}, {"layout", unit_layout(u)},
          {"dtype", u.dtype}, {"weight_format", u.weight_format}, {"post_ops", u.post_ops},
          {"workspace_bytes", u.workspace_bytes}, {"weight_bytes_packed_per_call", u.weight_bytes_packed_per_call}};
}

void print_json(const Model& model, const std::vector<PlanDesc>& plans) {
  json doc = {{"model", model.name}, {"plans", json::array()}};
  for (const PlanDesc& p : plans) {
    json units = json::array();
    for (const UnitInfo& u : p.units) units.push_back(unit_json(u));
    doc["plans"].push_back({{"kind", p.kind}, {"precision", p.precision}, {"layout", p.layout}, {"batch", p.batch},
                            {"units", units}});
  }
  std::printf("%s\n", json_text(doc, 2).c_str());
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s.empty() ? "-" : s;
}

// The text form: the layers, then per plan its arena, largest buffers and every unit's descriptor.
void print_text(const std::vector<PlanDesc>& plans) {
  for (const PlanDesc& p : plans) {
    if (!p.summary.empty()) std::printf("\n%s", p.summary.c_str());
    std::printf("%s plan, batch %d", p.kind == "training" ? "training (Adam)" : p.kind.c_str(), p.batch);
    if (p.arena) std::printf(": arena %.2f MiB", double(p.arena) / (1 << 20));
    std::printf(" (%s, --layout %s)\n", p.precision.c_str(), p.layout.c_str());
    for (size_t i = 0; i < p.buffers.size() && i < 6; ++i)
      std::printf("  %10.3f MiB  %s\n", double(p.buffers[i].bytes) / (1 << 20), p.buffers[i].name.c_str());
    for (const BufferInfo& b : p.buffers)
      if (b.name.rfind("(the activations", 0) == 0) std::printf("  %s\n", b.name.c_str());
    std::printf("  units (chosen at plan build): name | algorithm | layout | dtype | weight format | post-ops | "
                "scratch MiB | weight bytes packed per call\n");
    for (const UnitInfo& u : p.units)
      std::printf("  unit  %-34s %-22s %-12s %-5s %-14s %-28s %8.3f %zu\n", u.name.c_str(),
                  u.algorithm.empty() ? "-" : u.algorithm.c_str(), unit_layout(u).c_str(), u.dtype.c_str(),
                  u.weight_format.empty() ? "-" : u.weight_format.c_str(), joined(u.post_ops, ",").c_str(),
                  double(u.workspace_bytes) / (1 << 20), u.weight_bytes_packed_per_call);
    if (p.kind != "training") continue;
    // Each unit's input and output layouts (the layout pass: docs/design.md), reorders marked.
    std::printf("  layouts (--layout %s): unit, input -> output\n", p.layout.c_str());
    for (const UnitInfo& u : p.units)
      std::printf("  layout     %-34s %s -> %s%s\n", u.name.c_str(), u.layout_in.c_str(), u.layout_out.c_str(),
                  u.name.rfind("reorder", 0) == 0 ? "  (reorder)" : "");
  }
}

// ember info --kernels: one line per kernel-table entry, what it runs on each set (kernels.h).
void print_kernel_rows(const std::vector<KernelSet>& sets) {
  std::printf("\nkernel table (entry: scalar avx2 avx512 amx; reference: the scalar reference; -: none, the op takes another path; ?: not on this CPU)\n");
  for (const KernelTableRow& r : kernel_table())
    std::printf("  %-24s %-10s %-10s %-12s %s\n", r.entry, r.by_set[0], r.by_set[1], r.by_set[2], r.by_set[3]);
  std::printf("bit kernels (binarized nets):");
  for (const KernelSet& k : sets)
    if (k.supported) std::printf(" %s: %s", k.name, k.bit_kernels);
  std::printf("\n");
}

// ember info: "amx: none (the CPU has no AMX tiles)", or the AMX sets the CPU has and whether Linux
// lets this process use the tiles ("OS permission: granted" or "refused", with why when the OS lacks them).
void print_amx() {
  const AmxSupport amx = amx_support();
  if (!amx.tile) {
    std::printf("amx: none (the CPU has no AMX tiles)\n");
    return;
  }
  std::printf("amx: tile%s%s (OS permission: %s)\n", amx.bf16 ? " bf16" : "", amx.int8 ? " int8" : "",
              amx.permission ? "granted" : amx.os_state ? "refused" : "refused, the OS has not enabled the tile state");
}

// ember info: the features the one CPU probe reads (ember/cpu.h), then the AMX line.
void print_cpu_features() {
  std::printf("cpu features:");
  for (const CpuFeature& f : cpu_features())
    if (f.present) std::printf(" %s", f.name);
  std::printf("\n");
  print_amx();
}

void print_machine(const InfoArgs& a) {
  std::printf("ember %s (%s build, %s)\n", kVersion, kBuildType, kCompiler);
  print_cpu_features();
  std::printf("kernel sets:");
  const std::vector<KernelSet> sets = kernel_sets();
  for (const KernelSet& k : sets) std::printf(" %s (%s)", k.name, k.supported ? "available" : "not on this CPU");
  const char* env = std::getenv("EMBER_ISA");
  const KernelSet best = best_kernel_set();
  std::printf("\nchosen kernel set: %s%s%s (override with --isa or EMBER_ISA)\n", env && *env ? env : best.name,
              env && *env ? ", from EMBER_ISA; best: " : "", env && *env ? best.name : "");
  KernelSet chosen = best;  // a bad EMBER_ISA is named by the commands that use it, not here
  for (const KernelSet& k : sets)
    if (env && k.supported && std::string_view(env) == k.name) chosen = k;
  std::printf("bf16 matrix products: %s\n", chosen.bf16_path);
  std::printf("threads: %d hardware threads (default --threads %d)\n",
              int(std::thread::hardware_concurrency()), default_threads());
  if (a.kernels) print_kernel_rows(sets);
  std::printf("denormals: flush (flush-to-zero and denormals-are-zero while ember's kernels run, the caller's mode "
              "restored; --denormals keep: exact IEEE)\n");
  std::printf("int8 path: %s (--precision int8 and quantized weights; EMBER_ISA=avx2 takes the avx2 path)\n",
              int8_path_name(env && *env ? env : ""));
}
}  // namespace

int run_info(const InfoArgs& a) {
  if (a.json && a.model.empty()) throw Error("--json: needs --ops or --model");
  if (!a.precision.empty() && a.precision != "fp32" && a.precision != "bf16" && a.precision != "int8")
    throw Error("--precision: expected fp32, bf16 or int8, found '" + a.precision.substr(0, 60) + "'");
  if (a.model.empty() && !a.precision.empty()) throw Error("--precision: needs --model");
  if (!a.json) print_machine(a);
  if (!a.model.empty()) {
    const Model model = model_flag(a.model);
    const int batch = a.batch_size > 0 ? a.batch_size : model.recipe.batch_size;
    check_integer("--batch-size", batch, 1, 65536);
    const std::vector<PlanDesc> plans = describe_plans(model, a, batch);
    if (a.json) return print_json(model, plans), 0;
    print_text(plans);
    if (a.weights.empty() && a.precision.empty()) print_int8_plan_of(model);
  }
  if (!a.weights.empty()) print_quantized(a.weights);
  return 0;
}

int run_info_ops(const InfoArgs& a) {
  std::fputs(a.json ? (ops_json(2) + "\n").c_str() : ops_text().c_str(), stdout);
  return 0;
}

}  // namespace ember::cli
