#pragma once
// A strict reader of Prometheus' text exposition format (version 0.0.4), for the tests of
// /metrics: every line a HELP, a TYPE or a sample of a declared family; names, label syntax and
// values as the format defines them; no sample twice; histograms with cumulative buckets whose
// +Inf bucket is their _count. Throws std::runtime_error naming the line otherwise.

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace hearth::test {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string type, help;
  std::vector<PromSample> samples;
};

class PromText {
 public:
  explicit PromText(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    std::set<std::string> seen;
    while (std::getline(in, line)) {
      ++number;
      const auto fail = [&](const std::string& why) {
        throw std::runtime_error("line " + std::to_string(number) + ": " + why + ": " + line);
      };
      if (line.empty()) continue;
      if (line[0] == '#') {
        const bool is_help = line.rfind("# HELP ", 0) == 0, is_type = line.rfind("# TYPE ", 0) == 0;
        if (!is_help && !is_type) {
          if (line.rfind("# HELP", 0) == 0 || line.rfind("# TYPE", 0) == 0)
            fail("a malformed HELP or TYPE");
          continue;  // a comment
        }
        const size_t space = line.find(' ', 7);
        const std::string name = line.substr(7, space == std::string::npos ? space : space - 7);
        if (space == std::string::npos || !metric_name(name)) fail("a malformed HELP or TYPE");
        const std::string rest = line.substr(space + 1);
        if (is_help) {
          families_[name].help = rest;
          continue;
        }
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.count(rest)) fail("a malformed HELP or TYPE");
        PromFamily& f = families_[name];
        if (!f.type.empty()) fail("a second TYPE");
        if (!f.samples.empty()) fail("TYPE after the family's samples");
        f.type = rest;
        continue;
      }
      // name, optional {labels}, one space, the value, optional timestamp
      size_t at = 0;
      while (at < line.size() && metric_char(line[at], at == 0)) ++at;
      const std::string sample_name = line.substr(0, at);
      std::string label_text;
      bool has_labels = false;
      if (at < line.size() && line[at] == '{') {
        const size_t close = line.rfind('}');
        if (close == std::string::npos || close < at) fail("not a sample");
        label_text = line.substr(at + 1, close - at - 1);
        has_labels = true;
        at = close + 1;
      }
      if (sample_name.empty() || at >= line.size() || line[at] != ' ') fail("not a sample");
      const size_t value_end = line.find(' ', at + 1);
      const std::string value_text = line.substr(
          at + 1, value_end == std::string::npos ? std::string::npos : value_end - at - 1);
      if (value_text.empty()) fail("not a sample");
      if (value_end != std::string::npos) {
        const std::string stamp = line.substr(value_end + 1);
        const size_t digits = stamp.rfind('-', 0) == 0 ? 1 : 0;
        if (stamp.size() == digits ||
            stamp.find_first_not_of("0123456789", digits) != std::string::npos)
          fail("not a sample");
      }
      PromSample s;
      s.name = sample_name;
      s.value = parse_value(value_text, fail);
      if (has_labels) s.labels = parse_labels(label_text, fail);
      std::string key = s.name + "{";
      for (const auto& [k, v] : s.labels) key += k + "=" + v + ",";
      if (!seen.insert(key).second) fail("the same sample twice");
      PromFamily* f = family_of(s.name, s.labels);
      if (!f) fail("a sample of no declared family");
      f->samples.push_back(std::move(s));
    }
    for (const auto& [name, f] : families_) {
      if (f.type.empty()) throw std::runtime_error(name + ": HELP without TYPE");
      if (f.type == "histogram") check_histogram(name, f);
    }
  }

  const std::map<std::string, PromFamily>& families() const { return families_; }
  std::string type(const std::string& family) const {
    auto it = families_.find(family);
    return it == families_.end() ? "" : it->second.type;
  }
  // The value of `sample` whose labels include `labels`; NaN if none.
  double value(const std::string& sample,
               const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& [name, f] : families_)
      for (const PromSample& s : f.samples) {
        if (s.name != sample) continue;
        bool all = true;
        for (const auto& [k, v] : labels) all &= s.labels.count(k) && s.labels.at(k) == v;
        if (all) return s.value;
      }
    return std::nan("");
  }

 private:
  // [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names have no ':'.
  static bool metric_char(char c, bool first) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    return alpha || (!first && c >= '0' && c <= '9');
  }
  static bool metric_name(const std::string& name) {
    if (name.empty()) return false;
    for (size_t i = 0; i < name.size(); ++i)
      if (!metric_char(name[i], i == 0)) return false;
    return true;
  }
  static bool label_name(const std::string& name) {
    return metric_name(name) && name.find(':') == std::string::npos;
  }

  template <typename Fail>
  static double parse_value(const std::string& v, const Fail& fail) {
    if (v == "+Inf") return INFINITY;
    if (v == "-Inf") return -INFINITY;
    if (v == "NaN") return NAN;
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail("a value that is not a number");
    return d;
  }

  template <typename Fail>
  static std::map<std::string, std::string> parse_labels(const std::string& text,
                                                         const Fail& fail) {
    std::map<std::string, std::string> labels;
    size_t i = 0;
    while (i < text.size()) {
      const size_t eq = text.find('=', i);
      if (eq == std::string::npos) fail("a label without '='");
      const std::string name = text.substr(i, eq - i);
      if (!label_name(name)) fail("a bad label name '" + name + "'");
      if (eq + 1 >= text.size() || text[eq + 1] != '"') fail("an unquoted label value");
      std::string value;
      size_t j = eq + 2;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] != '\\') {
          value += text[j];
          continue;
        }
        if (++j >= text.size()) fail("a label value ending in '\\'");
        if (text[j] == 'n')
          value += '\n';
        else if (text[j] == '\\' || text[j] == '"')
          value += text[j];
        else
          fail("a bad escape in a label value");
      }
      if (j >= text.size()) fail("an unterminated label value");
      if (!labels.emplace(name, value).second) fail("label '" + name + "' twice");
      i = j + 1;
      if (i < text.size()) {
        if (text[i] != ',') fail("labels not separated by ','");
        ++i;
      }
    }
    return labels;
  }

  PromFamily* family_of(const std::string& sample, const std::map<std::string, std::string>& l) {
    if (auto it = families_.find(sample); it != families_.end() && it->second.type != "histogram")
      return &it->second;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (sample.size() <= s.size() || sample.compare(sample.size() - s.size(), s.size(), s) != 0)
        continue;
      auto it = families_.find(sample.substr(0, sample.size() - s.size()));
      if (it == families_.end() || it->second.type != "histogram") continue;
      if (s == "_bucket" && !l.count("le")) return nullptr;
      return &it->second;
    }
    return nullptr;
  }

  static void check_histogram(const std::string& name, const PromFamily& f) {
    // Per label set (le aside): buckets in order, cumulative, +Inf last and equal to _count.
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
    std::map<std::map<std::string, std::string>, double> counts;
    for (const PromSample& s : f.samples) {
      auto labels = s.labels;
      if (s.name == name + "_bucket") {
        const std::string le = labels.at("le");
        labels.erase("le");
        buckets[labels].push_back({le == "+Inf" ? INFINITY : std::stod(le), s.value});
      } else if (s.name == name + "_count") {
        counts[labels] = s.value;
      }
    }
    for (const auto& [labels, b] : buckets) {
      for (size_t i = 1; i < b.size(); ++i)
        if (!(b[i].first > b[i - 1].first) || b[i].second < b[i - 1].second)
          throw std::runtime_error(name + ": buckets not increasing and cumulative");
      if (b.empty() || !std::isinf(b.back().first))
        throw std::runtime_error(name + ": no +Inf bucket");
      if (!counts.count(labels) || counts.at(labels) != b.back().second)
        throw std::runtime_error(name + ": the +Inf bucket is not the _count");
    }
  }

  std::map<std::string, PromFamily> families_;
};

}  // namespace hearth::test
