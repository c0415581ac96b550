// A small XML reader for the report tests: parses the SVG the charts write into a tree of
// elements (name, attributes, text), failing on anything not well-formed, plus lookups by tag
// and class. Enough for our own output; not a general XML parser (no DTDs, CDATA or namespaces).
#pragma once
#include <cctype>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace svgdom {

struct Element {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<std::unique_ptr<Element>> children;
  std::string text;  // character data directly inside this element, entities decoded

  bool has(const std::string& key) const {
    for (const auto& [k, v] : attrs)
      if (k == key) return true;
    return false;
  }
  std::string attr(const std::string& key) const {
    for (const auto& [k, v] : attrs)
      if (k == key) return v;
    throw std::runtime_error("<" + name + "> has no attribute " + key);
  }
  double num(const std::string& key) const {
    const std::string v = attr(key);
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end) throw std::runtime_error("<" + name + " " + key + "=\"" + v + "\"> is not a number");
    return d;
  }
  bool has_class(const std::string& c) const {
    if (!has("class")) return false;
    const std::string all = " " + attr("class") + " ";
    return all.find(" " + c + " ") != std::string::npos;
  }
  // Every descendant (depth-first, document order) with this tag ("" for any) and class ("" for any).
  std::vector<const Element*> find_all(const std::string& tag, const std::string& cls = "") const {
    std::vector<const Element*> out;
    collect(tag, cls, out);
    return out;
  }
  const Element* child(const std::string& tag) const {
    for (const auto& c : children)
      if (c->name == tag) return c.get();
    return nullptr;
  }

 private:
  void collect(const std::string& tag, const std::string& cls, std::vector<const Element*>& out) const {
    for (const auto& c : children) {
      if ((tag.empty() || c->name == tag) && (cls.empty() || c->has_class(cls))) out.push_back(c.get());
      c->collect(tag, cls, out);
    }
  }
};

inline std::string decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) throw std::runtime_error("unterminated entity in: " + s);
    const std::string e = s.substr(i + 1, semi - i - 1);
    if (e == "amp") out += '&';
    else if (e == "lt") out += '<';
    else if (e == "gt") out += '>';
    else if (e == "quot") out += '"';
    else if (e == "apos" || e == "#39") out += '\'';
    else throw std::runtime_error("unknown entity &" + e + ";");
    i = semi;
  }
  return out;
}

// Parses one root element (leading whitespace allowed); throws std::runtime_error when the
// text is not well-formed: unclosed or mismatched tags, bad attributes, raw '<' or '&' misuse.
inline std::unique_ptr<Element> parse(const std::string& s) {
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("XML error at offset " + std::to_string(i) + ": " + why + " near '" + s.substr(i, 40) + "'");
  };
  auto skip_ws = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.'; };
  std::vector<Element*> stack;
  std::unique_ptr<Element> root;
  skip_ws();
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t lt = s.find('<', i);
      const std::string raw = s.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
      if (stack.empty()) {
        if (raw.find_first_not_of(" \t\r\n") != std::string::npos) fail("text outside the root element");
      } else {
        stack.back()->text += decode(raw);
      }
      i = lt == std::string::npos ? s.size() : lt;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i);
      if (end == std::string::npos) fail("unterminated comment");
      i = end + 3;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      i += 2;
      const size_t st = i;
      while (i < s.size() && name_char(s[i])) ++i;
      const std::string name = s.substr(st, i - st);
      skip_ws();
      if (i >= s.size() || s[i] != '>') fail("bad closing tag");
      ++i;
      if (stack.empty() || stack.back()->name != name)
        fail("closing </" + name + "> does not match <" + (stack.empty() ? std::string("none") : stack.back()->name) + ">");
      stack.pop_back();
      if (stack.empty()) {
        skip_ws();
        if (i != s.size()) fail("content after the root element");
      }
      continue;
    }
    ++i;
    const size_t st = i;
    while (i < s.size() && name_char(s[i])) ++i;
    auto el = std::make_unique<Element>();
    el->name = s.substr(st, i - st);
    if (el->name.empty()) fail("empty tag name");
    bool self_closing = false;
    while (true) {
      skip_ws();
      if (i >= s.size()) fail("unterminated tag");
      if (s[i] == '>') {
        ++i;
        break;
      }
      if (s.compare(i, 2, "/>") == 0) {
        i += 2, self_closing = true;
        break;
      }
      const size_t ks = i;
      while (i < s.size() && name_char(s[i])) ++i;
      const std::string key = s.substr(ks, i - ks);
      if (key.empty() || i >= s.size() || s[i] != '=') fail("bad attribute");
      ++i;
      if (i >= s.size() || s[i] != '"') fail("attribute value not in double quotes");
      const size_t vs = ++i;
      const size_t ve = s.find('"', vs);
      if (ve == std::string::npos) fail("unterminated attribute value");
      const std::string raw = s.substr(vs, ve - vs);
      if (raw.find('<') != std::string::npos) fail("'<' in an attribute value");
      for (const auto& [k, v] : el->attrs)
        if (k == key) fail("duplicate attribute " + key);
      el->attrs.emplace_back(key, decode(raw));
      i = ve + 1;
    }
    Element* raw_el = el.get();
    if (stack.empty()) {
      if (root) fail("second root element");
      root = std::move(el);
    } else {
      stack.back()->children.push_back(std::move(el));
    }
    if (!self_closing) stack.push_back(raw_el);
    else if (stack.empty()) {
      skip_ws();
      if (i != s.size()) fail("content after the root element");
    }
  }
  if (!stack.empty()) fail("unclosed <" + stack.back()->name + ">");
  if (!root) fail("no root element");
  return root;
}

}  // namespace svgdom
