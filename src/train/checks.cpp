// The checks of a run's settings that every front end shares (the CLI's flags, Python's
// arguments, a resumed checkpoint's configuration): ranges, choices by name, and the errors that
// name the setting in the caller's spelling (a field name, "lr", unless the caller maps it).
#include <cmath>
#include <cstdio>

#include "ember/error.h"
#include "ember/train.h"
#include "ember_support/files.h"

namespace ember {

namespace {
[[noreturn]] void bad(const std::string& name, const std::string& expected, const std::string& found) {
  throw Error(name + ": expected " + expected + ", found " + found);
}
}  // namespace

void check_integer(const std::string& name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) bad(name, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", std::to_string(v));
}

void check_number(const std::string& name, double v, double lo, double hi, bool lo_open) {
  if (std::isfinite(v) && v >= lo && !(lo_open && v == lo) && v <= hi) return;
  char range[96], found[64];
  std::snprintf(range, sizeof range, "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
  std::snprintf(found, sizeof found, "%g", v);
  bad(name, std::string("a finite number in ") + range, found);
}

OptimizerKind parse_optimizer(const std::string& text, const std::string& name) {
  if (text == "sgd") return OptimizerKind::SGD;
  if (text == "momentum") return OptimizerKind::Momentum;
  if (text == "nesterov") return OptimizerKind::Nesterov;
  if (text == "adam") return OptimizerKind::Adam;
  if (text == "adamw") return OptimizerKind::AdamW;
  bad(name, "sgd, momentum, nesterov, adam or adamw", "'" + clip_text(text) + "'");
}

ScheduleKind parse_schedule(const std::string& text, const std::string& name) {
  if (text == "constant") return ScheduleKind::Constant;
  if (text == "step") return ScheduleKind::Step;
  if (text == "exp") return ScheduleKind::Exp;
  if (text == "cosine") return ScheduleKind::Cosine;
  bad(name, "constant, step, exp or cosine", "'" + clip_text(text) + "'");
}

void validate(const PlanOptions& p, const FieldName& name) {
  check_integer(name("batch_size"), p.batch, 1, 65536);
  check_integer(name("threads"), p.threads, 1, 256);
  check_number(name("l2"), p.optimizer.l2, 0, 1e3, false);
  check_number(name("weight_decay"), p.optimizer.weight_decay, 0, 1e3, false);
  check_number(name("momentum"), p.optimizer.momentum, 0, 1, false);
}

void validate(const TrainConfig& c, const FieldName& name) {
  check_integer(name("epochs"), c.epochs, 1, 100000);
  check_number(name("lr"), c.schedule.lr, 0, 1e3, true);
  check_number(name("lr_min"), c.schedule.lr_min, 0, 1e3, false);
  check_integer(name("t_max"), c.schedule.t_max, 1, 1000000);
  check_integer(name("step_size"), c.schedule.step_size, 1, 1000000);
  check_number(name("gamma"), c.schedule.gamma, 0, 1e3, true);
  check_number(name("early_stop_tol"), c.early_stop_tol, 0, 1e9, false);
}

}  // namespace ember
