// Flame graphs: parsing folded stacks (Brendan Gregg's "a;b;c COUNT" format), folding `perf
// script` output into them, and drawing the flame graph SVG (root at the bottom, widths
// proportional to the counts, tooltips, colours from a hash of each frame's name).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>

#include "ember/error.h"
#include "ember_support/report.h"
#include "util.h"

namespace ember::report {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Calls f(line_number, line) for each line (without its '\n' or '\r').
template <class F>
void for_each_line(std::string_view text, F&& f) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    f(++line_no, line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

std::string excerpt(std::string_view s) {
  s = trim(s);
  std::string out = "'";
  out += detail::utf8_prefix(s, 60);
  out += s.size() > 60 ? "...'" : "'";
  return out;
}

bool all_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

bool is_pid(std::string_view s) {  // "1234" or "1234/1235"
  const size_t slash = s.find('/');
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return slash == std::string_view::npos ? digits(s) : digits(s.substr(0, slash)) && digits(s.substr(slash + 1));
}

// Index of the '(' matching the ')' at s[close], or npos.
size_t matching_open(std::string_view s, size_t close) {
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (s[i] == ')') ++depth;
    else if (s[i] == '(' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// A `perf script` sample header: "comm pid[/tid] [cpu] time: [period] event: [ip sym (dso)]".
// perf pads the command name to 16 columns when it prints no call chains, so the line may be
// indented; it is a header when a pid follows the first token and two tokens end with ':' (the
// time and the event). Whatever follows the event is the sample's own frame (perf without -g).
struct PerfHeader {
  std::string comm;
  std::string_view inline_frame;
};

bool parse_perf_header(std::string_view line, PerfHeader& h) {
  size_t pos = 0, pid_at = std::string_view::npos;
  int colons = 0;
  for (int tok = 0; pos < line.size(); ++tok) {
    while (pos < line.size() && std::isspace(static_cast<unsigned char>(line[pos]))) ++pos;
    const size_t start = pos;
    while (pos < line.size() && !std::isspace(static_cast<unsigned char>(line[pos]))) ++pos;
    if (start == pos) break;
    const std::string_view t = line.substr(start, pos - start);
    if (pid_at == std::string_view::npos) {
      if (tok > 0 && is_pid(t)) pid_at = start;
      continue;
    }
    if (t.back() == ':' && ++colons == 2) {
      h.comm = std::string(trim(line.substr(0, pid_at)));
      std::replace(h.comm.begin(), h.comm.end(), ';', ':');
      h.inline_frame = line.substr(pos);
      return true;
    }
  }
  return false;
}

// FNV-1a: the colour of a frame depends only on its name.
uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

std::string frame_colour(std::string_view name) {
  if (name == "[unknown]") return "rgb(200,200,200)";
  const uint32_t h = fnv1a(name);
  const double v1 = (h & 0xff) / 255.0, v2 = ((h >> 8) & 0xff) / 255.0, v3 = ((h >> 16) & 0xff) / 255.0;
  const int r = 205 + int(50 * v3), g = 60 + int(170 * v1), b = int(55 * v2);  // the "hot" palette
  return "rgb(" + std::to_string(r) + "," + std::to_string(g) + "," + std::to_string(b) + ")";
}

}  // namespace

std::vector<FoldedStack> parse_folded(std::string_view text, const std::string& source) {
  std::vector<FoldedStack> out;
  for_each_line(text, [&](size_t n, std::string_view line) {
    line = trim(line);
    if (line.empty() || line.front() == '#') return;
    const std::string where = source + " line " + std::to_string(n) + ": ";
    const size_t sp = line.find_last_of(" \t");
    if (sp == std::string_view::npos)
      throw Error(where + "expected 'frame;frame;... COUNT', found no count in " + excerpt(line));
    const std::string count(line.substr(sp + 1));
    char* end = nullptr;
    const double v = std::strtod(count.c_str(), &end);
    if (end == count.c_str() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 1e15)
      throw Error(where + "count: expected a number in [0, 1e15], found '" + count + "'");
    const std::string_view stack = trim(line.substr(0, sp));
    if (stack.empty()) throw Error(where + "expected 'frame;frame;... COUNT', found no frames");
    FoldedStack fs;
    fs.value = v;
    size_t start = 0;
    while (true) {
      const size_t semi = stack.find(';', start);
      std::string_view f = trim(stack.substr(start, semi == std::string_view::npos ? semi : semi - start));
      fs.frames.emplace_back(f.empty() ? std::string_view("[unknown]") : f);
      if (semi == std::string_view::npos) break;
      start = semi + 1;
    }
    out.push_back(std::move(fs));
  });
  return out;
}

std::string format_folded(const std::vector<FoldedStack>& stacks) {
  std::string out;
  for (const FoldedStack& s : stacks) {
    for (size_t i = 0; i < s.frames.size(); ++i) {
      if (i) out += ';';
      out += s.frames[i];
    }
    out += ' ';
    out += detail::num_attr(s.value);
    out += '\n';
  }
  return out;
}

std::string tidy_symbol(std::string_view symbol) {
  std::string_view s = trim(symbol);
  if (s.empty() || s == "[unknown]") return "[unknown]";
  // "+0x1c" offset.
  if (const size_t plus = s.rfind("+0x"); plus != std::string_view::npos && plus > 0 && all_hex(s.substr(plus + 3)))
    s = trim(s.substr(0, plus));
  // " [clone .constprop.0]" suffixes (possibly several).
  while (ends_with(s, "]")) {
    const size_t c = s.rfind(" [clone ");
    if (c == std::string_view::npos) break;
    s = trim(s.substr(0, c));
  }
  // Qualifiers after the argument list, then the argument list itself.
  std::string_view body = s;
  for (bool again = true; again;) {
    again = false;
    for (std::string_view q : {" const", " volatile", " &&", " &", " noexcept"})
      if (ends_with(body, q)) body = trim(body.substr(0, body.size() - q.size())), again = true;
  }
  if (ends_with(body, ")")) {
    const size_t open = matching_open(body, body.size() - 1);
    if (open != std::string_view::npos && open > 0) {
      std::string_view head = trim(body.substr(0, open));
      if (!ends_with(head, "operator") && !ends_with(head, "(anonymous namespace")) s = head;
    }
  }
  // A leading return type ("void ns::f<int>"): keep what follows the last space outside <>
  // and (), unless the name is an operator ("operator new", "operator<<").
  if (s.find("operator") == std::string_view::npos) {
    int depth = 0;
    size_t last_space = std::string_view::npos;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
      else if ((c == '>' || c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      else if (c == ' ' && depth == 0) last_space = i;
    }
    if (last_space != std::string_view::npos && last_space + 1 < s.size()) s = s.substr(last_space + 1);
  }
  std::string out(s.empty() ? std::string_view("[unknown]") : s);
  std::replace(out.begin(), out.end(), ';', ':');  // ';' separates frames
  return out;
}

std::vector<FoldedStack> fold_perf_script(std::string_view text, const std::string& source,
                                          const PerfFoldOptions& options) {
  std::map<std::string, FoldedStack> merged;  // sorted by the joined stack
  bool in_sample = false;
  std::string comm;
  std::vector<std::string> frames;  // innermost first, as perf prints them
  auto flush = [&] {
    if (!in_sample) return;
    FoldedStack s;
    s.value = 1;
    if (options.include_comm) s.frames.push_back(comm);
    s.frames.insert(s.frames.end(), frames.rbegin(), frames.rend());
    if (s.frames.empty()) s.frames.push_back("[unknown]");
    std::string key;
    for (const auto& f : s.frames) key += f + ";";
    auto [it, fresh] = merged.try_emplace(key, std::move(s));
    if (!fresh) it->second.value += 1;
    in_sample = false;
    frames.clear();
  };
  auto add_frame = [&](std::string_view f) {  // "addr symbol+0xoff (dso)"; address and dso optional
    f = trim(f);
    const size_t sp = f.find_first_of(" \t");
    if (all_hex(f.substr(0, sp))) f = sp == std::string_view::npos ? std::string_view() : trim(f.substr(sp));
    if (ends_with(f, ")")) {
      const size_t dso = f.rfind(" (");
      if (dso != std::string_view::npos) f = trim(f.substr(0, dso));
      else if (f.front() == '(') f = {};  // only "(dso)"
    }
    std::string sym = tidy_symbol(f);
    // Broken frame-pointer chains give runs of unknown frames: one stands for the run.
    if (!(sym == "[unknown]" && !frames.empty() && frames.back() == sym)) frames.push_back(std::move(sym));
  };
  for_each_line(text, [&](size_t n, std::string_view line) {
    if (trim(line).empty()) return flush();
    if (line.front() == '#' && !in_sample) return;  // perf's header comments
    const bool indented = line.front() == ' ' || line.front() == '\t';
    PerfHeader h;
    if (parse_perf_header(line, h)) {  // a new sample (its own leaf frame without -g)
      flush();
      comm = std::move(h.comm);
      in_sample = true;
      if (!trim(h.inline_frame).empty()) add_frame(h.inline_frame);
      return;
    }
    if (!indented)
      throw Error(source + " line " + std::to_string(n) +
                  ": expected a perf script sample header 'comm pid ... event:', found " + excerpt(line));
    if (!in_sample)
      throw Error(source + " line " + std::to_string(n) + ": a stack frame before any sample header: " +
                  excerpt(line));
    add_frame(line);
  });
  flush();
  std::vector<FoldedStack> out;
  out.reserve(merged.size());
  for (auto& [key, s] : merged) out.push_back(std::move(s));
  return out;
}

std::string flame_graph_svg(const std::vector<FoldedStack>& stacks, const FlameGraphOptions& o) {
  struct Node {
    std::string name;
    double value = 0;
    std::map<std::string, size_t> children;  // sorted by name
  };
  std::vector<Node> nodes(1);
  nodes[0].name = "all";
  for (const FoldedStack& s : stacks) {
    if (!std::isfinite(s.value) || s.value <= 0) continue;
    size_t cur = 0;
    nodes[0].value += s.value;
    for (const std::string& f : s.frames) {
      auto it = nodes[cur].children.find(f);
      size_t next;
      if (it == nodes[cur].children.end()) {
        next = nodes.size();
        nodes[cur].children.emplace(f, next);
        nodes.push_back(Node{f, 0, {}});
      } else {
        next = it->second;
      }
      nodes[next].value += s.value;
      cur = next;
    }
  }
  const double total = nodes[0].value;
  const int w = std::max(o.width, 200), fh = std::max(o.frame_height, 8);
  const double pad = 10, usable = w - 2 * pad;

  // Visible frames (depth-first, parents before children): x offset in value units and depth.
  struct Placed {
    size_t node;
    double offset;
    int depth;
  };
  std::vector<Placed> placed, todo{{0, 0.0, 0}};
  int max_depth = 0;
  while (total > 0 && !todo.empty()) {
    const Placed p = todo.back();
    todo.pop_back();
    if (nodes[p.node].value / total * usable < o.min_frame_px) continue;
    placed.push_back(p);
    max_depth = std::max(max_depth, p.depth);
    double off = p.offset;
    std::vector<Placed> kids;
    for (const auto& [name, idx] : nodes[p.node].children) {
      kids.push_back({idx, off, p.depth + 1});
      off += nodes[idx].value;
    }
    todo.insert(todo.end(), kids.rbegin(), kids.rend());  // first child drawn first
  }

  const double top = 52;
  const int h = int(top + (max_depth + 1) * fh + 16);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart flame-graph\" width=\"" + std::to_string(w) +
                  "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
                  std::to_string(h) + "\" role=\"img\" aria-label=\"" + xml_escape(o.title) +
                  "\" font-family=\"sans-serif\" font-size=\"11\" data-total=\"" + detail::num_attr(total) +
                  "\" data-unit=\"" + xml_escape(o.unit) + "\">\n<title>" + xml_escape(o.title) + "</title>\n";
  s += "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + std::to_string(w) + "\" height=\"" + std::to_string(h) +
       "\" fill=\"#fdfaf3\"/>\n<text class=\"chart-title\" x=\"" + detail::px(w / 2.0) +
       "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" + xml_escape(o.title) + "</text>\n";
  s += "<text class=\"subtitle\" x=\"" + detail::px(w / 2.0) + "\" y=\"38\" text-anchor=\"middle\" fill=\"#555\">" +
       (total > 0 ? "total " + detail::grouped(total) + " " + xml_escape(o.unit) + " in " +
                        std::to_string(stacks.size()) + " stacks; hover a frame for its share"
                  : std::string("no samples")) +
       "</text>\n";
  const double char_w = 11 * 0.59;
  for (const Placed& p : placed) {
    const Node& nd = nodes[p.node];
    const double x = pad + p.offset / total * usable, fw = nd.value / total * usable;
    const double y = top + (max_depth - p.depth) * fh;
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.2f", 100.0 * nd.value / total);
    const std::string name = xml_escape(nd.name);
    s += "<g class=\"frame\" data-name=\"" + name + "\" data-depth=\"" + std::to_string(p.depth) +
         "\" data-value=\"" + detail::num_attr(nd.value) + "\"><title>" + name + " (" + detail::grouped(nd.value) +
         " " + xml_escape(o.unit) + ", " + pct + "%)</title><rect x=\"" + detail::px(x) + "\" y=\"" + detail::px(y) +
         "\" width=\"" + detail::px(fw) + "\" height=\"" + std::to_string(fh - 1) + "\" fill=\"" +
         frame_colour(nd.name) + "\" rx=\"2\" ry=\"2\"/>";
    const size_t fit = fw > 6 ? size_t((fw - 6) / char_w) : 0;
    if (fit >= 3) {
      const std::string label =
          nd.name.size() <= fit ? nd.name : detail::utf8_prefix(nd.name, fit - 2) + "..";
      s += "<text x=\"" + detail::px(x + 3) + "\" y=\"" + detail::px(y + fh - 4.5) + "\">" + xml_escape(label) +
           "</text>";
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

}  // namespace ember::report
