// SVG line and horizontal bar charts for the run report: pure functions from data to one <svg>
// string, with "nice" axis ticks, axis and chart titles and a legend; plus the shared formatting
// helpers (util.h) and XML escaping.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ember_support/report.h"
#include "util.h"

namespace ember::report {

namespace detail {

std::string px(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.2f", std::abs(v) < 0.005 ? 0.0 : v);
  std::string s = b;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

int decimals_for_step(double step) {
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) return 0;
  for (int d = 0; d < 12; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::abs(scaled - std::round(scaled)) <= 1e-6 * scaled) return d;
  }
  return 12;
}

std::string fixed(double v, int decimals) {
  char b[64];
  if (std::abs(v) >= 1e15) std::snprintf(b, sizeof b, "%g", v);
  else std::snprintf(b, sizeof b, "%.*f", decimals, v);
  std::string s = b;
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // "-0.00"
  return s;
}

std::string grouped(double v) {
  if (!std::isfinite(v)) return "—";
  if (std::abs(v) >= 1e15) return short_num(v);
  const bool integral = v == std::round(v);
  char b[64];
  if (integral) std::snprintf(b, sizeof b, "%.0f", std::abs(v));
  else std::snprintf(b, sizeof b, "%.3f", std::abs(v));
  std::string s = b;
  const size_t dot = s.find('.');
  std::string head = s.substr(0, dot), tail = dot == std::string::npos ? "" : s.substr(dot);
  while (tail.size() > 2 && tail.back() == '0') tail.pop_back();
  std::string out;
  for (size_t i = 0; i < head.size(); ++i) {
    if (i > 0 && (head.size() - i) % 3 == 0) out += ',';
    out += head[i];
  }
  return (v < 0 ? "-" : "") + out + tail;
}

std::string short_num(double v) {
  if (!std::isfinite(v)) return "—";
  char b[48];
  if (v == std::round(v) && std::abs(v) < 1e9) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string num_attr(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string utf8_prefix(std::string_view s, size_t bytes) {
  if (s.size() <= bytes) return std::string(s);
  size_t n = bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

const char* series_colour(size_t i) {
  static constexpr std::array<const char*, 8> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                          "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return kPalette[i % kPalette.size()];
}

std::string human_bytes(double bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (!std::isfinite(bytes) || bytes < 1024) return grouped(bytes) + " B";
  size_t u = 0;
  bytes /= 1024;
  while (bytes >= 1024 && u + 1 < kUnits.size()) bytes /= 1024, ++u;
  char b[48];
  std::snprintf(b, sizeof b, "%.1f %s", bytes, kUnits[u]);
  return b;
}

}  // namespace detail

using detail::decimals_for_step;
using detail::px;

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') out += '?';
        else out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target, bool integer_step) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  lo = std::max(lo, -1e300), hi = std::min(hi, 1e300);  // keep hi - lo finite
  if (lo == hi) {  // a range around the value
    double d = std::abs(lo) * 0.1;
    if (d == 0) d = 1;
    if (integer_step) d = std::max(d, 1.0);
    lo -= d, hi += d;
  }
  target = std::max(target, 1);
  const double rough = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(rough)));
  const double norm = rough / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer_step) step = std::max(1.0, std::round(step));
  const double k0 = std::floor(lo / step + 1e-9), k1 = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = k0; k <= k1 + 0.5 && ticks.size() < 1000; k += 1) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  // A range too narrow for its magnitude (1e15 +- 1e-3) cannot be split in doubles: its ends.
  for (size_t i = 1; i < ticks.size(); ++i)
    if (!(ticks[i] > ticks[i - 1])) return {lo, hi};
  return ticks;
}

namespace {

// Width of text at font-size 12 sans-serif, estimated (the charts cannot measure text).
double text_width(std::string_view s, double font_px = 12) {
  return double(s.size()) * font_px * 0.58;
}

std::string open_svg(const char* cls, int w, int h, const std::string& title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart " + std::string(cls) + "\" width=\"" +
         std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
         std::to_string(h) + "\" role=\"img\" aria-label=\"" + xml_escape(title) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n<title>" + xml_escape(title) +
         "</title>\n<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + std::to_string(w) + "\" height=\"" +
         std::to_string(h) + "\" fill=\"#ffffff\"/>\n<text class=\"chart-title\" x=\"" + px(w / 2.0) +
         "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
}

// One legend row of coloured swatches and names starting at (x, y).
std::string legend(const std::vector<std::pair<std::string, std::string>>& items, double x, double y) {
  std::string s = "<g class=\"legend\">\n";
  for (const auto& [name, colour] : items) {
    s += "<g class=\"legend-item\" data-series=\"" + xml_escape(name) + "\"><rect x=\"" + px(x) + "\" y=\"" +
         px(y - 9) + "\" width=\"12\" height=\"10\" fill=\"" + colour + "\"/><text x=\"" + px(x + 16) + "\" y=\"" +
         px(y) + "\">" + xml_escape(name) + "</text></g>\n";
    x += 16 + text_width(name) + 18;
  }
  return s + "</g>\n";
}

}  // namespace

std::string line_chart_svg(const std::vector<Series>& series, const LineChartOptions& o) {
  const int w = std::max(o.width, 200), h = std::max(o.height, 150);
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  size_t n_points = 0;
  for (const Series& s : series)
    for (const Point& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
      ++n_points;
    }
  if (n_points == 0) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (o.y_include_zero) ymin = std::min(ymin, 0.0), ymax = std::max(ymax, 0.0);

  const double left = 74, right = 20, top = 50, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  const std::vector<double> xt = nice_ticks(xmin, xmax, std::max(2, int(pw / 90)), o.x_integer);
  const std::vector<double> yt = nice_ticks(ymin, ymax, std::max(2, int(ph / 50)));
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto X = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };
  const int xd = decimals_for_step(xt[1] - xt[0]), yd = decimals_for_step(yt[1] - yt[0]);

  std::string s = open_svg("line-chart", w, h, o.title);
  s += "<g class=\"plot-area\" data-left=\"" + px(left) + "\" data-top=\"" + px(top) + "\" data-width=\"" + px(pw) +
       "\" data-height=\"" + px(ph) + "\"/>\n";
  // y axis: grid lines, ticks, labels, title (rotated).
  s += "<g class=\"axis y-axis\" data-min=\"" + detail::fixed(y0, yd) + "\" data-max=\"" + detail::fixed(y1, yd) +
       "\">\n";
  for (double t : yt) {
    const std::string y = px(Y(t));
    s += "<g class=\"tick\" data-value=\"" + detail::fixed(t, yd) + "\"><line class=\"grid\" x1=\"" + px(left) +
         "\" y1=\"" + y + "\" x2=\"" + px(left + pw) + "\" y2=\"" + y + "\" stroke=\"#e5e5e5\"/><line x1=\"" +
         px(left - 5) + "\" y1=\"" + y + "\" x2=\"" + px(left) + "\" y2=\"" + y + "\" stroke=\"#333\"/><text x=\"" +
         px(left - 8) + "\" y=\"" + px(Y(t) + 4) + "\" text-anchor=\"end\">" + detail::fixed(t, yd) + "</text></g>\n";
  }
  s += "<line class=\"axis-line\" x1=\"" + px(left) + "\" y1=\"" + px(top) + "\" x2=\"" + px(left) + "\" y2=\"" +
       px(top + ph) + "\" stroke=\"#333\"/>\n";
  s += "<text class=\"axis-title\" x=\"" + px(16) + "\" y=\"" + px(top + ph / 2) + "\" text-anchor=\"middle\" " +
       "transform=\"rotate(-90 16 " + px(top + ph / 2) + ")\">" + xml_escape(o.y_title) + "</text>\n</g>\n";
  // x axis.
  s += "<g class=\"axis x-axis\" data-min=\"" + detail::fixed(x0, xd) + "\" data-max=\"" + detail::fixed(x1, xd) +
       "\">\n";
  for (double t : xt) {
    const std::string x = px(X(t));
    s += "<g class=\"tick\" data-value=\"" + detail::fixed(t, xd) + "\"><line x1=\"" + x + "\" y1=\"" +
         px(top + ph) + "\" x2=\"" + x + "\" y2=\"" + px(top + ph + 5) + "\" stroke=\"#333\"/><text x=\"" + x +
         "\" y=\"" + px(top + ph + 19) + "\" text-anchor=\"middle\">" + detail::fixed(t, xd) + "</text></g>\n";
  }
  s += "<line class=\"axis-line\" x1=\"" + px(left) + "\" y1=\"" + px(top + ph) + "\" x2=\"" + px(left + pw) +
       "\" y2=\"" + px(top + ph) + "\" stroke=\"#333\"/>\n";
  s += "<text class=\"axis-title\" x=\"" + px(left + pw / 2) + "\" y=\"" + px(h - 10.0) +
       "\" text-anchor=\"middle\">" + xml_escape(o.x_title) + "</text>\n</g>\n";
  if (n_points == 0)
    s += "<text class=\"no-data\" x=\"" + px(left + pw / 2) + "\" y=\"" + px(top + ph / 2) +
         "\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n";
  // Series: one polyline and a marker per finite point.
  std::vector<std::pair<std::string, std::string>> items;
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& se = series[i];
    const std::string colour = detail::series_colour(i), name = xml_escape(se.name);
    items.emplace_back(se.name, colour);
    std::string pts, marks;
    for (const Point& p : se.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      const std::string cx = px(X(p.x)), cy = px(Y(p.y));
      pts += (pts.empty() ? "" : " ") + cx + "," + cy;
      marks += "<circle class=\"point\" data-series=\"" + name + "\" cx=\"" + cx + "\" cy=\"" + cy +
               "\" r=\"3\" fill=\"" + colour + "\"><title>" + name + " at " + xml_escape(o.x_title) + " " +
               detail::short_num(p.x) + ": " + detail::short_num(p.y) + "</title></circle>\n";
    }
    s += "<g class=\"series\" data-series=\"" + name + "\">\n<polyline data-series=\"" + name +
         "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n" + marks + "</g>\n";
  }
  s += legend(items, left, 38);
  return s + "</svg>\n";
}

std::string bar_chart_svg(const std::vector<Bar>& bars, const BarChartOptions& o) {
  const int w = std::max(o.width, 240);
  const double bh = std::max(o.bar_height, 6), gap = 6;
  std::vector<std::string> groups;
  double vmax = 0, label_w = 0, value_w = 0;
  auto value_text = [&](double v) {
    return (std::isfinite(v) ? detail::short_num(v) : std::string("—")) + (o.unit.empty() ? "" : " " + o.unit);
  };
  for (const Bar& b : bars) {
    if (std::isfinite(b.value)) vmax = std::max(vmax, b.value);
    label_w = std::max(label_w, text_width(b.label));
    value_w = std::max(value_w, text_width(value_text(b.value)));
    if (!b.group.empty() && std::find(groups.begin(), groups.end(), b.group) == groups.end())
      groups.push_back(b.group);
  }
  const double left = std::min(label_w + 16, w * 0.4), right = value_w + 14;
  const double top = groups.size() >= 2 ? 52 : 34;
  const double pw = std::max(40.0, w - left - right);
  const double body = bars.empty() ? 30 : bars.size() * (bh + gap);
  const int h = int(std::ceil(top + body + 48));
  const std::vector<double> ticks = nice_ticks(0, vmax > 0 ? vmax : 1, std::max(2, int(pw / 90)));
  const double axis_max = ticks.back();
  const int td = decimals_for_step(ticks[1] - ticks[0]);
  auto X = [&](double v) { return left + v / axis_max * pw; };
  const size_t max_chars = size_t(std::max(3.0, (left - 16) / (12 * 0.58)));

  std::string s = open_svg("bar-chart", w, h, o.title);
  s += "<g class=\"axis x-axis\" data-min=\"0\" data-max=\"" + detail::fixed(axis_max, td) + "\">\n";
  const double axis_y = top + body;
  for (double t : ticks) {
    const std::string x = px(X(t));
    s += "<g class=\"tick\" data-value=\"" + detail::fixed(t, td) + "\"><line class=\"grid\" x1=\"" + x +
         "\" y1=\"" + px(top - 4) + "\" x2=\"" + x + "\" y2=\"" + px(axis_y) + "\" stroke=\"#eeeeee\"/><line x1=\"" +
         x + "\" y1=\"" + px(axis_y) + "\" x2=\"" + x + "\" y2=\"" + px(axis_y + 5) +
         "\" stroke=\"#333\"/><text x=\"" + x + "\" y=\"" + px(axis_y + 18) + "\" text-anchor=\"middle\">" +
         detail::fixed(t, td) + "</text></g>\n";
  }
  s += "<line class=\"axis-line\" x1=\"" + px(left) + "\" y1=\"" + px(axis_y) + "\" x2=\"" + px(left + pw) +
       "\" y2=\"" + px(axis_y) + "\" stroke=\"#333\"/>\n<text class=\"axis-title\" x=\"" + px(left + pw / 2) +
       "\" y=\"" + px(h - 8.0) + "\" text-anchor=\"middle\">" + xml_escape(o.value_title) + "</text>\n</g>\n";
  if (bars.empty())
    s += "<text class=\"no-data\" x=\"" + px(left + pw / 2) + "\" y=\"" + px(top + 18) +
         "\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = top + i * (bh + gap);
    const double bw = std::isfinite(b.value) && b.value > 0 ? b.value / axis_max * pw : 0;
    const size_t gi = b.group.empty() ? 0 : size_t(std::find(groups.begin(), groups.end(), b.group) - groups.begin());
    std::string label = b.label;
    if (label.size() > max_chars) label = detail::utf8_prefix(label, max_chars - 1) + "…";
    s += "<g class=\"bar\" data-label=\"" + xml_escape(b.label) + "\" data-value=\"" + detail::num_attr(b.value) +
         "\"><title>" + xml_escape(b.label) + ": " + xml_escape(value_text(b.value)) + "</title><rect x=\"" +
         px(left) + "\" y=\"" + px(y) + "\" width=\"" + px(bw) + "\" height=\"" + px(bh) + "\" fill=\"" +
         detail::series_colour(gi) + "\"/><text class=\"bar-label\" x=\"" + px(left - 6) + "\" y=\"" +
         px(y + bh / 2 + 4) + "\" text-anchor=\"end\">" + xml_escape(label) + "</text><text class=\"bar-value\" x=\"" +
         px(left + bw + 4) + "\" y=\"" + px(y + bh / 2 + 4) + "\">" + xml_escape(value_text(b.value)) +
         "</text></g>\n";
  }
  if (groups.size() >= 2) {
    std::vector<std::pair<std::string, std::string>> items;
    for (size_t i = 0; i < groups.size(); ++i) items.emplace_back(groups[i], detail::series_colour(i));
    s += legend(items, left, 38);
  }
  return s + "</svg>\n";
}

}  // namespace ember::report
