// Tests of the SVG line and bar charts (ember_support/report.h): the output is well-formed XML, axes carry
// nice ticks with numeric labels and titles, the legend names the series, and every drawn point
// or bar maps back to its data through the linear mapping read from the axis tick labels.
// Also thin_indices, which picks the epochs a long run's charts draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ember_support/report.h"
#include "report/svg_dom.h"

namespace {

using ember::report::Bar;
using ember::report::Point;
using ember::report::Series;
using svgdom::Element;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double parse_num(const std::string& s) {
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end) ADD_FAILURE() << "tick label '" << s << "' is not a number";
  return d;
}

// An axis as drawn: tick values (parsed from the label text) and their pixel positions, and the
// linear map value -> pixel fitted through the first and last tick.
struct Axis {
  std::vector<double> values, pos;
  double a = 0, b = 0;  // pixel = a + b * value
  std::string title;
  double to_px(double v) const { return a + b * v; }
  double to_value(double p) const { return (p - a) / b; }
};

Axis read_axis(const Element& svg, const std::string& cls, bool horizontal) {
  Axis ax;
  const auto axes = svg.find_all("g", cls);
  if (axes.size() != 1) {
    ADD_FAILURE() << "expected one <g class=\"" << cls << "\">, found " << axes.size();
    return ax;
  }
  for (const Element* t : axes[0]->find_all("g", "tick")) {
    const Element* label = t->child("text");
    const Element* mark = nullptr;
    for (const Element* l : t->find_all("line"))
      if (!l->has_class("grid")) mark = l;
    if (!label || !mark) {
      ADD_FAILURE() << cls << ": a tick without a tick mark or a label";
      continue;
    }
    ax.values.push_back(parse_num(label->text));
    ax.pos.push_back(horizontal ? mark->num("x1") : mark->num("y1"));
  }
  for (const Element* t : axes[0]->find_all("text", "axis-title")) ax.title = t->text;
  if (ax.values.size() < 2) {
    ADD_FAILURE() << cls << ": fewer than 2 ticks";
    return ax;
  }
  ax.b = (ax.pos.back() - ax.pos.front()) / (ax.values.back() - ax.values.front());
  ax.a = ax.pos.front() - ax.b * ax.values.front();
  return ax;
}

// Ticks are evenly spaced in value and in pixels, with a step of 1, 2 or 5 times a power of 10.
void expect_nice(const Axis& ax, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_GE(ax.values.size(), 2u);
  const double step = ax.values[1] - ax.values[0];
  ASSERT_GT(step, 0);
  for (size_t i = 1; i < ax.values.size(); ++i) {
    EXPECT_NEAR(ax.values[i] - ax.values[i - 1], step, 1e-9 * std::max(1.0, std::abs(step)));
    EXPECT_NEAR(ax.pos[i], ax.to_px(ax.values[i]), 0.5) << "tick " << ax.values[i] << " off the linear map";
  }
  const double mant = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::abs(mant - 1) < 1e-6 || std::abs(mant - 2) < 1e-6 || std::abs(mant - 5) < 1e-6)
      << "step " << step << " is not 1, 2 or 5 times a power of ten";
}

std::vector<std::pair<double, double>> polyline_points(const Element& pl) {
  std::vector<std::pair<double, double>> pts;
  std::istringstream in(pl.attr("points"));
  for (std::string xy; in >> xy;) {
    const size_t comma = xy.find(',');
    if (comma == std::string::npos) {
      ADD_FAILURE() << "bad point " << xy;
      continue;
    }
    pts.emplace_back(parse_num(xy.substr(0, comma)), parse_num(xy.substr(comma + 1)));
  }
  return pts;
}

std::vector<const Element*> with_attr(const std::vector<const Element*>& els, const std::string& key,
                                      const std::string& value) {
  std::vector<const Element*> out;
  for (const Element* e : els)
    if (e->has(key) && e->attr(key) == value) out.push_back(e);
  return out;
}

std::unique_ptr<Element> parse_svg(const std::string& svg) {
  try {
    auto root = svgdom::parse(svg);
    EXPECT_EQ(root->name, "svg");
    return root;
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << svg.substr(0, 2000);
    return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------

TEST(NiceTicks, CoverTheRangeWithRoundSteps) {
  const std::pair<double, double> ranges[] = {{0, 1},      {0.2134, 0.4123}, {87.12, 93.01}, {4800, 5042},
                                              {-3.5, 12},  {1e-5, 1e-3},     {1, 10},        {0.001, 0.0005},
                                              {-7, -6.99}, {123456, 987654}};
  for (auto [lo, hi] : ranges) {
    for (int target : {2, 5, 8}) {
      SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi) + " target " + std::to_string(target));
      const auto t = ember::report::nice_ticks(lo, hi, target);
      ASSERT_GE(t.size(), 2u);
      EXPECT_LE(t.front(), std::min(lo, hi) + 1e-12);
      EXPECT_GE(t.back(), std::max(lo, hi) - 1e-12);
      EXPECT_LE(t.size(), size_t(3 * target + 2));
      Axis ax;
      ax.values = t;
      ax.pos = t;
      ax.a = 0, ax.b = 1;
      expect_nice(ax, "nice_ticks");
      // Tight: dropping an end tick would no longer cover the range.
      EXPECT_GT(t[1], std::min(lo, hi));
      EXPECT_LT(t[t.size() - 2], std::max(lo, hi));
    }
  }
}

TEST(NiceTicks, DegenerateRanges) {
  for (double v : {0.0, 5.0, -0.97, 1e6}) {
    const auto t = ember::report::nice_ticks(v, v, 5);
    ASSERT_GE(t.size(), 2u) << v;
    EXPECT_LT(t.front(), v) << v;
    EXPECT_GT(t.back(), v) << v;
  }
  const auto i = ember::report::nice_ticks(3, 3, 5, /*integer_step=*/true);
  ASSERT_GE(i.size(), 2u);
  for (double v : i) EXPECT_EQ(v, std::round(v));
  const auto n = ember::report::nice_ticks(kNaN, 1, 5);
  ASSERT_GE(n.size(), 2u);
  for (double v : n) EXPECT_TRUE(std::isfinite(v));
}

TEST(NiceTicks, ExtremeRangesStayFinite) {
  const std::pair<double, double> ranges[] = {{-1e308, 1e308}, {1e15, 1e15 + 1e-3}, {-5e-320, 5e-320}};
  for (auto [lo, hi] : ranges) {
    const auto t = ember::report::nice_ticks(lo, hi, 5);
    ASSERT_GE(t.size(), 2u);
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_TRUE(std::isfinite(t[i])) << lo << ".." << hi;
      if (i) {
        EXPECT_GT(t[i], t[i - 1]) << lo << ".." << hi;
      }
    }
    ember::report::LineChartOptions o;
    const std::string svg = ember::report::line_chart_svg({{"s", {{0, lo}, {1, hi}}}}, o);
    EXPECT_EQ(svg.find("nan"), std::string::npos) << lo << ".." << hi;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << lo << ".." << hi;
    EXPECT_NO_THROW(svgdom::parse(svg));
  }
}

TEST(XmlEscape, EscapesMarkupAndControls) {
  EXPECT_EQ(ember::report::xml_escape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&#39;?");
  EXPECT_EQ(svgdom::decode(ember::report::xml_escape("x < y && \"z\"")), "x < y && \"z\"");
}

// A loss-like and an accuracy-like series over 12 epochs, one NaN in the second.
std::vector<Series> sample_series() {
  Series a{"train", {}}, b{"test", {}};
  for (int e = 1; e <= 12; ++e) {
    a.points.push_back({double(e), 0.05 + 0.9 * std::exp(-0.35 * e) + 0.01 * std::sin(e)});
    b.points.push_back({double(e), e == 7 ? kNaN : 0.12 + 0.7 * std::exp(-0.3 * e)});
  }
  return {a, b};
}

TEST(LineChart, PointsMapBackToTheData) {
  const auto series = sample_series();
  ember::report::LineChartOptions o;
  o.title = "Loss per epoch", o.x_title = "epoch", o.y_title = "cross-entropy loss", o.x_integer = true;
  const std::string svg = ember::report::line_chart_svg(series, o);
  auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  EXPECT_EQ(svg.find("nan"), std::string::npos);

  const Axis x = read_axis(*root, "x-axis", true), y = read_axis(*root, "y-axis", false);
  expect_nice(x, "x axis");
  expect_nice(y, "y axis");
  EXPECT_EQ(x.title, "epoch");
  EXPECT_EQ(y.title, "cross-entropy loss");
  EXPECT_GT(x.b, 0) << "x grows to the right";
  EXPECT_LT(y.b, 0) << "y grows upward";
  for (double v : x.values) EXPECT_EQ(v, std::round(v)) << "x_integer: whole-number ticks only";

  const auto titles = root->find_all("text", "chart-title");
  ASSERT_EQ(titles.size(), 1u);
  EXPECT_EQ(titles[0]->text, "Loss per epoch");

  std::vector<std::string> legend;
  for (const Element* it : root->find_all("g", "legend-item")) legend.push_back(it->child("text")->text);
  EXPECT_EQ(legend, (std::vector<std::string>{"train", "test"}));

  const auto polylines = root->find_all("polyline");
  const auto circles = root->find_all("circle");
  for (const Series& s : series) {
    SCOPED_TRACE(s.name);
    const auto pl = with_attr(polylines, "data-series", s.name);
    ASSERT_EQ(pl.size(), 1u);
    const auto pts = polyline_points(*pl[0]);
    std::vector<Point> finite;
    for (const Point& p : s.points)
      if (std::isfinite(p.y)) finite.push_back(p);
    ASSERT_EQ(pts.size(), finite.size());
    EXPECT_EQ(with_attr(circles, "data-series", s.name).size(), finite.size());
    for (size_t i = 0; i < pts.size(); ++i) {
      // Inverting the axes' mapping gives the data back to within a pixel.
      EXPECT_NEAR(x.to_value(pts[i].first), finite[i].x, 1.0 / std::abs(x.b));
      EXPECT_NEAR(y.to_value(pts[i].second), finite[i].y, 1.0 / std::abs(y.b));
      // And every point lies inside the axes.
      EXPECT_GE(pts[i].first, x.pos.front() - 0.01);
      EXPECT_LE(pts[i].first, x.pos.back() + 0.01);
      EXPECT_LE(pts[i].second, y.pos.front() + 0.01);
      EXPECT_GE(pts[i].second, y.pos.back() - 0.01);
    }
  }
}

TEST(LineChart, OnePointAndConstantSeries) {
  ember::report::LineChartOptions o;
  o.title = "one";
  o.x_integer = true;
  const std::string one = ember::report::line_chart_svg({{"only", {{1, 0.42}}}}, o);
  auto r1 = parse_svg(one);
  ASSERT_TRUE(r1);
  const Axis x1 = read_axis(*r1, "x-axis", true), y1 = read_axis(*r1, "y-axis", false);
  EXPECT_LT(x1.values.front(), 1);
  EXPECT_GT(x1.values.back(), 1);
  EXPECT_LT(y1.values.front(), 0.42);
  EXPECT_GT(y1.values.back(), 0.42);
  const auto pl = r1->find_all("polyline");
  ASSERT_EQ(pl.size(), 1u);
  const auto pts = polyline_points(*pl[0]);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(r1->find_all("circle").size(), 1u) << "a single point needs its marker to be seen";
  EXPECT_NEAR(x1.to_value(pts[0].first), 1, 1 / x1.b);
  EXPECT_NEAR(y1.to_value(pts[0].second), 0.42, 1 / std::abs(y1.b));

  const std::string flat = ember::report::line_chart_svg({{"flat", {{1, 5}, {2, 5}, {3, 5}}}}, o);
  auto r2 = parse_svg(flat);
  ASSERT_TRUE(r2);
  const Axis y2 = read_axis(*r2, "y-axis", false);
  EXPECT_LT(y2.values.front(), 5);
  EXPECT_GT(y2.values.back(), 5);
  const auto pts2 = polyline_points(*r2->find_all("polyline")[0]);
  ASSERT_EQ(pts2.size(), 3u);
  for (const auto& p : pts2) EXPECT_NEAR(y2.to_value(p.second), 5, 1 / std::abs(y2.b));
  for (const std::string& s : {one, flat}) {
    EXPECT_EQ(s.find("nan"), std::string::npos);
    EXPECT_EQ(s.find("inf"), std::string::npos);
  }
}

TEST(LineChart, NoDataStillDrawsAxes) {
  ember::report::LineChartOptions o;
  o.title = "empty";
  for (const auto& series : {std::vector<Series>{}, std::vector<Series>{{"missing", {{1, kNaN}, {kNaN, 2}}}}}) {
    const std::string svg = ember::report::line_chart_svg(series, o);
    auto root = parse_svg(svg);
    ASSERT_TRUE(root);
    EXPECT_EQ(root->find_all("text", "no-data").size(), 1u);
    expect_nice(read_axis(*root, "x-axis", true), "x");
    EXPECT_EQ(svg.find("nan"), std::string::npos);
  }
}

TEST(LineChart, NamesAreEscaped) {
  ember::report::LineChartOptions o;
  o.title = "A & B <chart>";
  o.y_title = "\"quoted\"";
  const std::string name = "loss <train> & 'val'";
  const std::string svg = ember::report::line_chart_svg({{name, {{0, 1}, {1, 2}}}}, o);
  EXPECT_EQ(svg.find("<train>"), std::string::npos);
  EXPECT_EQ(svg.find("<chart>"), std::string::npos);
  auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->find_all("g", "legend-item")[0]->child("text")->text, name);
  EXPECT_EQ(root->find_all("polyline")[0]->attr("data-series"), name);
  EXPECT_EQ(root->find_all("text", "chart-title")[0]->text, o.title);
}

TEST(BarChart, WidthsProportionalToValues) {
  const std::vector<Bar> bars = {{"conv1+relu+pool forward", 7.5, "forward"},
                                 {"conv2+relu+pool forward", 15, "forward"},
                                 {"fc1 forward", 3, "forward"},
                                 {"conv2+relu+pool backward", 22.5, "backward"},
                                 {"a rather long layer name that will not fit in the label column at all", 4.5, "optimizer"},
                                 {"negative", -2, "optimizer"},
                                 {"missing", kNaN, "optimizer"}};
  ember::report::BarChartOptions o;
  o.title = "Time per layer", o.value_title = "total time (ms)", o.unit = "ms";
  const std::string svg = ember::report::bar_chart_svg(bars, o);
  auto root = parse_svg(svg);
  ASSERT_TRUE(root);
  const Axis x = read_axis(*root, "x-axis", true);
  expect_nice(x, "value axis");
  EXPECT_EQ(x.values.front(), 0);
  EXPECT_GE(x.values.back(), 22.5);
  EXPECT_EQ(x.title, "total time (ms)");

  const auto gs = root->find_all("g", "bar");
  ASSERT_EQ(gs.size(), bars.size());
  std::map<std::string, std::string> group_colour;
  double prev_y = -1;
  for (size_t i = 0; i < bars.size(); ++i) {
    SCOPED_TRACE(bars[i].label);
    const Element* rect = gs[i]->child("rect");
    ASSERT_TRUE(rect);
    EXPECT_EQ(gs[i]->attr("data-label"), bars[i].label);
    EXPECT_NEAR(rect->num("x"), x.to_px(0), 0.01) << "bars start at the axis' 0";
    const double expect_w = std::isfinite(bars[i].value) && bars[i].value > 0 ? bars[i].value * x.b : 0;
    EXPECT_NEAR(rect->num("width"), expect_w, 0.02);
    EXPECT_GT(rect->num("y"), prev_y) << "one row per bar, top to bottom";
    prev_y = rect->num("y");
    const auto texts = gs[i]->find_all("text");
    ASSERT_EQ(texts.size(), 2u);
    const Element* value = gs[i]->find_all("text", "bar-value")[0];
    if (std::isfinite(bars[i].value)) {
      EXPECT_NEAR(parse_num(value->text.substr(0, value->text.find(' '))), bars[i].value, 1e-9);
      EXPECT_NE(value->text.find(" ms"), std::string::npos);
    }
    EXPECT_NEAR(value->num("x"), rect->num("x") + rect->num("width") + 4, 0.02) << "value at the bar's end";
    const std::string label = gs[i]->find_all("text", "bar-label")[0]->text;
    if (bars[i].label.size() > 40) {
      EXPECT_LT(label.size(), bars[i].label.size());
      EXPECT_EQ(bars[i].label.rfind(label.substr(0, label.size() - 3), 0), 0u) << label;  // prefix + "…"
      EXPECT_EQ(gs[i]->child("title")->text.rfind(bars[i].label, 0), 0u) << "the tooltip keeps the full name";
    } else {
      EXPECT_EQ(label, bars[i].label);
    }
    auto [it, fresh] = group_colour.emplace(bars[i].group, rect->attr("fill"));
    if (!fresh) {
      EXPECT_EQ(it->second, rect->attr("fill")) << "one colour per group";
    }
  }
  EXPECT_NE(group_colour["forward"], group_colour["backward"]);
  std::vector<std::string> legend;
  for (const Element* it : root->find_all("g", "legend-item")) legend.push_back(it->child("text")->text);
  EXPECT_EQ(legend, (std::vector<std::string>{"forward", "backward", "optimizer"}));
}

// thin_indices: at most max_count, increasing, first and last kept, gaps even (within 1).
TEST(ThinIndices, EvenlySpreadKeepingTheEnds) {
  using ember::report::thin_indices;
  EXPECT_TRUE(thin_indices(0, 10).empty());
  EXPECT_EQ(thin_indices(3, 10), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(thin_indices(5, 1), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(thin_indices(11, 3), (std::vector<size_t>{0, 5, 10}));
  for (auto [n, m] : {std::pair<size_t, size_t>{100000, 1000}, {1001, 1000}, {2000, 999}, {100001, 2}}) {
    SCOPED_TRACE(std::to_string(n) + " into " + std::to_string(m));
    const std::vector<size_t> idx = thin_indices(n, m);
    ASSERT_EQ(idx.size(), m);
    EXPECT_EQ(idx.front(), 0u);
    EXPECT_EQ(idx.back(), n - 1);
    size_t lo = n, hi = 0;
    for (size_t i = 1; i < idx.size(); ++i) {
      ASSERT_GT(idx[i], idx[i - 1]);
      lo = std::min(lo, idx[i] - idx[i - 1]), hi = std::max(hi, idx[i] - idx[i - 1]);
    }
    EXPECT_LE(hi - lo, 1u) << "uneven gaps";
  }
}

TEST(BarChart, EmptyIsWellFormed) {
  ember::report::BarChartOptions o;
  o.title = "nothing";
  auto root = parse_svg(ember::report::bar_chart_svg({}, o));
  ASSERT_TRUE(root);
  EXPECT_EQ(root->find_all("g", "bar").size(), 0u);
  EXPECT_EQ(root->find_all("text", "no-data").size(), 1u);
}

}  // namespace
