// The HTML run report: reads a run directory (metrics.jsonl, config.json, and the optional
// model.json, profile.json, profile.folded) through size-capped regular-file reads and bounded
// JSON parsing, checks every field it uses, and returns one page with inline CSS, inline SVG
// charts (thinned for long runs) and a tiny inline script; nothing is fetched from outside.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "ember/version.h"
#include "ember_support/files.h"
#include "ember_support/report.h"
#include "fs/json_read.h"
#include "util.h"

namespace ember::report {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using detail::grouped;
using detail::short_num;

std::string esc(std::string_view s) { return xml_escape(s); }

// Size caps of the inputs (checked before reading) and of what the page shows.
constexpr uint64_t kMetricsMaxBytes = uint64_t(64) << 20;  // metrics.jsonl
constexpr uint64_t kJsonMaxBytes = uint64_t(16) << 20;     // config.json, model.json, profile.json
constexpr uint64_t kFoldedMaxBytes = uint64_t(256) << 20;  // profile.folded
constexpr size_t kMaxEpochs = 100000;                      // lines of metrics.jsonl (= --epochs' cap)
constexpr size_t kChartEpochs = 1000;                      // epochs drawn: <= 2,000 points a chart
constexpr size_t kTableEdge = 50;                          // epoch table: the first and last rows

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(one_line("report: " + where + ": " + what));
}

std::string found(const json& v) { return json_brief(nlohmann::json(v)); }  // depth <= kJsonMaxDepth

// A whole input file: a regular file of at most max_bytes, or an error naming it.
std::string read_text(const fs::path& p, uint64_t max_bytes) { return read_input(p.string(), max_bytes, "report:"); }

// Parsed with ember::parse_json first (nesting bounded, duplicate keys refused, messages
// short), then again keeping the keys' order for the page: the text is known safe by then.
json parse_ordered(std::string_view text, const std::string& where) {
  ember::parse_json(text, "report: " + where);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(where, "invalid JSON: " + one_line(e.what()));
  }
}

// An optional file of the run: present (even as a broken symlink, which then fails to read).
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// A number field: missing or of another type is an error; null reads as NaN where allowed.
double number(const json& obj, const char* key, const std::string& where, bool allow_null) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(where, std::string("field '") + key + "': missing (expected a number)");
  if (it->is_null() && allow_null) return std::nan("");
  if (!it->is_number()) fail(where, std::string("field '") + key + "': expected a number, found " + found(*it));
  return it->get<double>();
}

std::string string_field(const json& obj, const char* key, const std::string& where, bool required) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) fail(where, std::string("field '") + key + "': missing (expected a string)");
    return {};
  }
  if (!it->is_string()) fail(where, std::string("field '") + key + "': expected a string, found " + found(*it));
  return it->get<std::string>();
}

// ---- The files --------------------------------------------------------------------------------

struct Epoch {
  double epoch, lr, train_loss, train_acc, test_loss, test_acc, seconds, samples_per_s;
};

// One line of metrics.jsonl, checked against the epochs before it.
Epoch read_epoch(std::string_view line, const std::string& where, const std::vector<Epoch>& out) {
  if (out.size() >= kMaxEpochs)
    fail(where, "more than " + grouped(double(kMaxEpochs)) + " epochs (the most ember trains and reports)");
  const json j = parse_ordered(line, where);
  if (!j.is_object()) fail(where, "expected a JSON object, found " + found(j));
  Epoch e;
  e.epoch = number(j, "epoch", where, false);
  if (e.epoch != std::floor(e.epoch) || e.epoch < 0)
    fail(where, "field 'epoch': expected a whole number >= 0, found " + found(j["epoch"]));
  if (!out.empty() && e.epoch <= out.back().epoch)
    fail(where, "field 'epoch': expected epochs in increasing order, found " + found(j["epoch"]) + " after " +
                    short_num(out.back().epoch));
  e.lr = number(j, "lr", where, true);
  e.train_loss = number(j, "train_loss", where, true);
  e.train_acc = number(j, "train_acc", where, true);
  e.test_loss = number(j, "test_loss", where, true);
  e.test_acc = number(j, "test_acc", where, true);
  e.seconds = number(j, "seconds", where, true);
  e.samples_per_s = number(j, "samples_per_s", where, true);
  for (auto [key, v] : {std::pair{"train_acc", e.train_acc}, std::pair{"test_acc", e.test_acc}})
    if (v < 0 || v > 1)
      fail(where, std::string("field '") + key + "': expected a fraction in [0, 1], found " + found(j[key]));
  return e;
}

std::vector<Epoch> read_metrics(const fs::path& p, const std::string& shown) {
  const std::string text = read_text(p, kMetricsMaxBytes);
  const std::string_view all(text);
  std::vector<Epoch> out;
  size_t line_no = 0, start = 0;
  while (start < all.size()) {
    size_t nl = all.find('\n', start);
    if (nl == std::string_view::npos) nl = all.size();
    const std::string_view line = all.substr(start, nl - start);
    start = nl + 1, ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    out.push_back(read_epoch(line, shown + " line " + std::to_string(line_no), out));
  }
  if (out.empty()) fail(shown, "no epochs (expected one JSON object per line)");
  return out;
}

json read_object(const fs::path& p, const std::string& shown) {
  json j = parse_ordered(read_text(p, kJsonMaxBytes), shown);
  if (!j.is_object()) fail(shown, "expected a JSON object, found " + found(j));
  return j;
}

// ---- HTML pieces ------------------------------------------------------------------------------

std::string inline_svg(std::string svg) {  // HTML puts <svg> in the SVG namespace by itself
  const std::string ns = " xmlns=\"http://www.w3.org/2000/svg\"";
  if (const size_t p = svg.find(ns); p != std::string::npos) svg.erase(p, ns.size());
  return svg;
}

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "—";
  if (v.is_object()) return json_text(v);
  if (v.is_array()) {
    std::string s;
    for (const json& e : v) s += (s.empty() ? "" : ", ") + (e.is_structured() ? json_text(e) : scalar_text(e));
    return "[" + s + "]";
  }
  if (v.is_number_float()) {  // 6 significant digits: 225.347, 0.0001, 1e-05
    char b[48];
    std::snprintf(b, sizeof b, "%.6g", v.get<double>());
    return b;
  }
  return json_text(v);
}

// Every key of a JSON object as table rows; nested objects become indented sub-rows.
void config_rows(const json& obj, int depth, std::string& out) {
  for (const auto& [key, v] : obj.items()) {
    const std::string pad = " style=\"padding-left:" + std::to_string(8 + 18 * depth) + "px\"";
    if (v.is_object() && depth < 8) {
      out += "<tr class=\"group\"><th colspan=\"2\"" + pad + ">" + esc(key) + "</th></tr>\n";
      config_rows(v, depth + 1, out);
    } else {
      out += "<tr><th" + pad + ">" + esc(key) + "</th><td>" + esc(scalar_text(v)) + "</td></tr>\n";
    }
  }
}

std::string shape_text(const json& v) {
  std::string s;
  for (const json& d : v) s += (s.empty() ? "" : "×") + scalar_text(d);
  return s.empty() ? "—" : s;
}

std::string note(const std::string& html) { return "<p class=\"note\">" + html + "</p>\n"; }

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "—";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double frac) { return std::isfinite(frac) ? fmt("%.2f", 100 * frac) + "%" : "—"; }

std::string model_section(const fs::path& p, const std::string& shown) {
  std::string s = "<section id=\"model\">\n<h2>Model</h2>\n";
  if (!present(p))
    return s + note("no model summary: <code>model.json</code> is missing (written by <code>ember train --out "
                    "DIR</code>)") + "</section>\n";
  const json m = read_object(p, shown);
  const std::string name = string_field(m, "name", shown, false);
  const auto layers = m.find("layers");
  if (layers == m.end()) fail(shown, "field 'layers': missing (expected an array)");
  if (!layers->is_array()) fail(shown, "field 'layers': expected an array, found " + found(*layers));
  double total = 0;
  std::vector<double> params;
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string where = shown + " layers[" + std::to_string(i) + "]";
    if (!l.is_object()) fail(where, "expected a JSON object, found " + found(l));
    string_field(l, "type", where, true);
    string_field(l, "description", where, false);
    if (l.contains("output_shape") && !l["output_shape"].is_array())
      fail(where, "field 'output_shape': expected an array, found " + found(l["output_shape"]));
    if (l.contains("index")) number(l, "index", where, false);
    params.push_back(l.contains("params") ? number(l, "params", where, false) : 0);
    total += params.back();
  }
  const double declared = m.contains("params") ? number(m, "params", shown, false) : total;
  s += "<p><b>" + esc(name.empty() ? "unnamed model" : name) + "</b>: " + grouped(declared) + " parameters";
  if (m.contains("input_shape")) {
    if (!m["input_shape"].is_array()) fail(shown, "field 'input_shape': expected an array, found " + found(m["input_shape"]));
    s += ", input " + esc(shape_text(m["input_shape"]));
  }
  s += ", " + std::to_string(layers->size()) + " layers.</p>\n";
  s += "<table class=\"data\">\n<thead><tr><th>#</th><th>type</th><th>description</th><th>output shape</th>"
       "<th class=\"num\">params</th><th class=\"num\">share</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    s += "<tr><td>" + (l.contains("index") ? short_num(l["index"].get<double>()) : std::to_string(i)) + "</td><td>" +
         esc(l["type"].get<std::string>()) + "</td><td>" +
         esc(l.contains("description") ? l["description"].get<std::string>() : "") + "</td><td>" +
         esc(l.contains("output_shape") ? shape_text(l["output_shape"]) : "—") + "</td><td class=\"num\">" +
         grouped(params[i]) + "</td><td class=\"num\">" + (total > 0 ? pct(params[i] / total) : "—") + "</td></tr>\n";
  }
  s += "</tbody>\n<tfoot><tr><th colspan=\"4\">total</th><td class=\"num\">" + grouped(total) +
       "</td><td></td></tr></tfoot>\n</table>\n";
  if (declared != total)
    s += note("model.json's <code>params</code> (" + grouped(declared) + ") differs from the layers' sum (" +
              grouped(total) + ").");
  return s + "</section>\n";
}

std::string epoch_row(const Epoch& e) {
  return "<tr><td>" + grouped(e.epoch) + "</td><td class=\"num\">" + fmt("%.4g", e.lr) + "</td><td class=\"num\">" +
         fmt("%.4f", e.train_loss) + "</td><td class=\"num\">" + pct(e.train_acc) + "</td><td class=\"num\">" +
         fmt("%.4f", e.test_loss) + "</td><td class=\"num\">" + pct(e.test_acc) + "</td><td class=\"num\">" +
         fmt("%.2f", e.seconds) + "</td><td class=\"num\">" +
         (std::isfinite(e.samples_per_s) ? grouped(std::round(e.samples_per_s)) : "—") + "</td></tr>\n";
}

// Every epoch, or for a long run the first and last kTableEdge with a row saying how many are hidden.
std::string epoch_table(const std::vector<Epoch>& ep) {
  const bool cut = ep.size() > 2 * kTableEdge;
  std::string s = "<table class=\"data\">\n<thead><tr><th>epoch</th><th class=\"num\">lr</th><th class=\"num\">train "
                  "loss</th><th class=\"num\">train acc</th><th class=\"num\">test loss</th><th class=\"num\">test acc</th>"
                  "<th class=\"num\">seconds</th><th class=\"num\">samples/s</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < ep.size(); ++i) {
    if (cut && i == kTableEdge) {
      s += "<tr class=\"hidden-rows\"><td colspan=\"8\">… " + grouped(double(ep.size() - 2 * kTableEdge)) +
           " epochs not shown …</td></tr>\n";
      i = ep.size() - kTableEdge;
    }
    s += epoch_row(ep[i]);
  }
  s += "</tbody>\n</table>\n";
  if (cut)
    s += note("The table shows the first and the last " + std::to_string(kTableEdge) + " of " +
              grouped(double(ep.size())) + " epochs; <code>metrics.jsonl</code> holds them all.");
  return s;
}

std::string training_section(const std::vector<Epoch>& ep) {
  const std::vector<size_t> drawn = thin_indices(ep.size(), kChartEpochs);
  std::vector<Point> tl, vl, ta, va, sps, lr;
  for (size_t i : drawn) {
    const Epoch& e = ep[i];
    tl.push_back({e.epoch, e.train_loss}), vl.push_back({e.epoch, e.test_loss});
    ta.push_back({e.epoch, 100 * e.train_acc}), va.push_back({e.epoch, 100 * e.test_acc});
    sps.push_back({e.epoch, e.samples_per_s}), lr.push_back({e.epoch, e.lr});
  }
  const bool thinned = drawn.size() < ep.size();
  const std::string of = thinned ? " (" + grouped(double(drawn.size())) + " of " + grouped(double(ep.size())) +
                                       " epochs, thinned)" : "";
  LineChartOptions o;
  o.x_integer = true, o.x_title = "epoch", o.width = 520, o.height = 300;
  std::string s = "<section id=\"training\">\n<h2>Training</h2>\n";
  if (thinned)
    s += note("The charts draw " + grouped(double(drawn.size())) + " evenly spaced epochs of " +
              grouped(double(ep.size())) + " (the first and the last included).");
  s += "<div class=\"charts\">\n";
  o.title = "Loss" + of, o.y_title = "cross-entropy loss";
  s += inline_svg(line_chart_svg({{"train", tl}, {"test", vl}}, o));
  o.title = "Accuracy" + of, o.y_title = "accuracy (%)";
  s += inline_svg(line_chart_svg({{"train", ta}, {"test", va}}, o));
  o.title = "Throughput" + of, o.y_title = "samples/s", o.y_include_zero = true;
  s += inline_svg(line_chart_svg({{"training samples/s", sps}}, o));
  o.title = "Learning rate" + of, o.y_title = "learning rate";
  s += inline_svg(line_chart_svg({{"lr", lr}}, o));
  return s + "</div>\n" + epoch_table(ep) + "</section>\n";
}

std::string summary_cards(const std::vector<Epoch>& ep) {
  const Epoch& last = ep.back();
  size_t best = 0;
  double secs = 0, sps = 0;
  int n_sps = 0;
  for (size_t i = 0; i < ep.size(); ++i) {
    if (std::isfinite(ep[i].test_acc) && (!std::isfinite(ep[best].test_acc) || ep[i].test_acc > ep[best].test_acc))
      best = i;
    if (std::isfinite(ep[i].seconds)) secs += ep[i].seconds;
    if (std::isfinite(ep[i].samples_per_s)) sps += ep[i].samples_per_s, ++n_sps;
  }
  auto card = [](const std::string& label, const std::string& value) {
    return "<div class=\"card\"><div class=\"label\">" + label + "</div><div class=\"value\">" + value + "</div></div>\n";
  };
  return "<div class=\"cards\">\n" + card("final test accuracy", pct(last.test_acc)) +
         card("best test accuracy", pct(ep[best].test_acc) + " <small>(epoch " + grouped(ep[best].epoch) + ")</small>") +
         card("final test loss", fmt("%.4f", last.test_loss)) + card("epochs", std::to_string(ep.size())) +
         card("training time", fmt("%.1f", secs) + " s") +
         card("mean samples/s", n_sps ? grouped(std::round(sps / n_sps)) : "—") + "</div>\n";
}

// Profile columns: the known ones in this order, then any others in first-seen order.
std::vector<std::string> profile_columns(const json& rows) {
  std::vector<std::string> cols = {"layer", "phase", "calls", "total_ms", "ms_per_step", "pct_step", "gflops", "pct_peak"};
  std::vector<std::string> seen;
  for (const json& r : rows)
    for (const auto& [k, v] : r.items())
      if (std::find(cols.begin(), cols.end(), k) == cols.end() && std::find(seen.begin(), seen.end(), k) == seen.end())
        seen.push_back(k);
  cols.insert(cols.end(), seen.begin(), seen.end());
  std::vector<std::string> used;
  for (const auto& c : cols)
    for (const json& r : rows)
      if (r.contains(c)) {
        used.push_back(c);
        break;
      }
  return used;
}

std::string cell(const std::string& key, const json& v) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (key == "bytes" || (key.size() > 6 && key.substr(key.size() - 6) == "_bytes")) return detail::human_bytes(d);
    return v.is_number_integer() ? grouped(d) : fmt("%.4g", d);
  }
  return esc(scalar_text(v));
}

// The profile's bars, one per row ("layer phase", total_ms), every row checked.
std::vector<Bar> profile_bars(const json& rows, const std::string& shown_pj) {
  std::vector<Bar> bars;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const std::string where = shown_pj + " rows[" + std::to_string(i) + "]";
    if (!r.is_object()) fail(where, "expected a JSON object, found " + found(r));
    const std::string layer = string_field(r, "layer", where, true), phase = string_field(r, "phase", where, true);
    const double ms = number(r, "total_ms", where, false);
    for (const auto& [k, v] : r.items())
      if (v.is_structured()) fail(where, "field '" + k + "': expected a number or a string, found " + found(v));
    bars.push_back({layer + " " + phase, ms, phase});
  }
  return bars;
}

// The profile's top-level scalars (and arrays of scalars, "busy_pct": [99.5, 19.3]) on one line.
std::string profile_facts(const json& p) {
  auto flat = [](const json& v) {
    if (v.is_object()) return false;
    if (v.is_array())
      for (const json& e : v)
        if (e.is_structured()) return false;
    return true;
  };
  std::string head;
  for (const auto& [k, v] : p.items())
    if (flat(v)) head += (head.empty() ? "" : " · ") + esc(k) + " <b>" + cell(k, v) + "</b>";
  return "<p class=\"facts\">" + head + "</p>\n";
}

std::string profile_table(const json& rows) {
  const std::vector<std::string> cols = profile_columns(rows);
  auto text_col = [](const std::string& c) { return c == "layer" || c == "phase"; };
  std::string s = "<table class=\"data\">\n<thead><tr>";
  for (const auto& c : cols) s += "<th" + std::string(text_col(c) ? "" : " class=\"num\"") + ">" + esc(c) + "</th>";
  s += "</tr></thead>\n<tbody>\n";
  for (const json& r : rows) {
    s += "<tr>";
    for (const auto& c : cols)
      s += std::string(text_col(c) ? "<td>" : "<td class=\"num\">") + (r.contains(c) ? cell(c, r[c]) : "") + "</td>";
    s += "</tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

std::string buffers_table(const json& b, const std::string& shown_pj) {
  if (!b.is_array()) fail(shown_pj, "field 'buffers': expected an array, found " + found(b));
  std::string s = "<h3>Buffers</h3>\n<table class=\"data\">\n<tbody>\n";
  for (size_t i = 0; i < b.size(); ++i) {
    const json& r = b[i];
    const std::string where = shown_pj + " buffers[" + std::to_string(i) + "]";
    if (!r.is_object()) fail(where, "expected a JSON object, found " + found(r));
    const std::string name = string_field(r, "name", where, true);
    s += "<tr><th>" + esc(name) + "</th><td class=\"num\">" + detail::human_bytes(number(r, "bytes", where, false)) +
         "</td></tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

std::string profile_part(const fs::path& pj, const std::string& shown_pj) {
  if (!present(pj))
    return note("no profile: run <code>ember train --out DIR --profile</code> to write <code>profile.json</code>.");
  const json p = read_object(pj, shown_pj);
  const auto rows = p.find("rows");
  if (rows == p.end()) fail(shown_pj, "field 'rows': missing (expected an array)");
  if (!rows->is_array()) fail(shown_pj, "field 'rows': expected an array, found " + found(*rows));
  const std::vector<Bar> bars = profile_bars(*rows, shown_pj);
  BarChartOptions bo;
  bo.title = "Time per layer and phase (total over the profiled steps)";
  bo.value_title = "total time (ms)", bo.unit = "ms", bo.width = 1100;
  std::string s = profile_facts(p) + inline_svg(bar_chart_svg(bars, bo)) + profile_table(*rows);
  if (const auto b = p.find("buffers"); b != p.end()) s += buffers_table(*b, shown_pj);
  return s;
}

std::string flame_part(const fs::path& pf, const std::string& shown_pf) {
  if (!present(pf))
    return note("no flame graph: <code>profile.folded</code> is missing (<code>ember train --out DIR --profile</code> "
                "writes ember's own spans; <code>scripts/flamegraph.sh</code> samples with perf).");
  const std::vector<FoldedStack> stacks = parse_folded(read_text(pf, kFoldedMaxBytes), "report: " + shown_pf);
  FlameGraphOptions fo;
  fo.title = "ember spans (profile.folded)", fo.unit = "µs", fo.width = 1100;
  return inline_svg(flame_graph_svg(stacks, fo));
}

std::string profile_section(const fs::path& dir, const std::string& shown_dir) {
  return "<section id=\"profile\">\n<h2>Where the time goes</h2>\n" +
         profile_part(dir / "profile.json", quote_path(shown_dir + "/profile.json")) + "<h3>Flame graph</h3>\n" +
         flame_part(dir / "profile.folded", quote_path(shown_dir + "/profile.folded")) + "</section>\n";
}

std::string file_date(const fs::path& p) {
  std::error_code ec;
  const auto t = fs::last_write_time(p, ec);
  if (ec) return {};
  const std::time_t tt = std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(t));
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M UTC", &tm);
  return b;
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#222;background:#f6f6f4;margin:0}
main{max-width:1160px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 2px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:16px;margin:20px 0 6px}.sub{color:#666;margin:0 0 12px}
section{background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:4px 16px 14px;margin:14px 0}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 10px;text-align:left;vertical-align:top}
table.data tbody tr:nth-child(odd){background:#f7f7f7}table.data thead th{border-bottom:2px solid #ccc}
table.data tfoot th,table.data tfoot td{border-top:2px solid #ccc}.num{text-align:right;font-variant-numeric:tabular-nums}
table.config th{font-weight:600;color:#444}table.config tr.group th{background:#f0f0f0}
.charts{display:flex;flex-wrap:wrap;gap:12px}svg.chart{max-width:100%;height:auto;border:1px solid #eee}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.card{background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:8px 14px;min-width:140px}
.card .label{color:#666;font-size:12px}.card .value{font-size:20px;font-weight:600}
.note{color:#8a5a00;background:#fff8e6;border-left:3px solid #e0a800;padding:6px 10px}.facts{color:#444}
code{background:#f0f0f0;padding:1px 4px;border-radius:3px}footer{color:#888;font-size:12px;margin-top:24px}
)";

// Counts the charts after load (body data-charts, data-charts-visible); any script error lands
// in data-script-error. The headless browser test reads these from the DOM.
constexpr const char* kScript = R"(
(function(){
  window.addEventListener('error', function(e){ document.body.setAttribute('data-script-error', String(e.message)); });
  function ready(){
    var charts = document.querySelectorAll('svg.chart'), visible = 0;
    for (var i = 0; i < charts.length; i++) { var r = charts[i].getBoundingClientRect(); if (r.width > 0 && r.height > 0) visible++; }
    document.body.dataset.charts = String(charts.length);
    document.body.dataset.chartsVisible = String(visible);
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', ready); else ready();
})();
)";

std::string trimmed(const std::string& run_dir) {
  std::string shown_dir = run_dir;
  while (shown_dir.size() > 1 && shown_dir.back() == '/') shown_dir.pop_back();
  return shown_dir;
}

}  // namespace

std::vector<size_t> thin_indices(size_t n, size_t max_count) {
  std::vector<size_t> out;
  if (n == 0 || max_count == 0) return out;
  if (n <= max_count) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const size_t m = std::max<size_t>(max_count, 2);  // rounding i*(n-1)/(m-1): increasing, ends kept
  for (size_t i = 0; i < m; ++i) out.push_back((i * (n - 1) + (m - 1) / 2) / (m - 1));
  return out;
}

void check_run_dir(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    fail(quote_path(trimmed(run_dir)), "not a directory (expected the directory of a training run)");
}

std::string render_report_html(const std::string& run_dir) {
  const fs::path dir(run_dir);
  const std::string shown_dir = trimmed(run_dir);
  check_run_dir(run_dir);
  const std::string shown_metrics = quote_path(shown_dir + "/metrics.jsonl");
  const std::string shown_config = quote_path(shown_dir + "/config.json");
  const json config = read_object(dir / "config.json", shown_config);
  const std::vector<Epoch> epochs = read_metrics(dir / "metrics.jsonl", shown_metrics);
  std::string model = string_field(config, "model", shown_config, false);
  std::string started = string_field(config, "started", shown_config, false);
  if (model.empty()) model = "model";
  std::string date = started.size() >= 10 ? started.substr(0, 10) : started;
  if (started.empty()) started = date = file_date(dir / "metrics.jsonl");
  const std::string title = "ember report: " + model + (date.empty() ? "" : ", " + date);

  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
                  esc(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  h += "<h1>" + esc(title) + "</h1>\n<p class=\"sub\">run <code>" + esc(shown_dir) + "</code>" +
       (started.empty() ? "" : ", started " + esc(started)) + "</p>\n";
  h += summary_cards(epochs);
  std::string rows;
  config_rows(config, 0, rows);
  h += "<section id=\"config\">\n<h2>Configuration and machine</h2>\n<table class=\"config\">\n<tbody>\n" + rows +
       "</tbody>\n</table>\n</section>\n";
  h += model_section(dir / "model.json", quote_path(shown_dir + "/model.json"));
  h += training_section(epochs);
  h += profile_section(dir, shown_dir);
  h += std::string("<footer>written by ember ") + kVersion + " (<code>ember report</code>) from " + esc(shown_dir) +
       "; self-contained: no network resources.</footer>\n</main>\n<script>" + kScript + "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace ember::report
