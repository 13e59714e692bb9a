#pragma once
// A strict reader of Prometheus' text exposition format (version 0.0.4), for the tests of
// /metrics: every line a HELP, a TYPE or a sample of a declared family; names, label syntax and
// values as the format defines them; no sample twice; histograms with cumulative buckets whose
// +Inf bucket is their _count. Throws std::runtime_error naming the line otherwise.

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
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
      std::smatch m;
      static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*))");
      static const std::regex type(
          R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
      if (line[0] == '#') {
        if (std::regex_match(line, m, help)) {
          families_[m[1]].help = m[2];
        } else if (std::regex_match(line, m, type)) {
          PromFamily& f = families_[m[1]];
          if (!f.type.empty()) fail("a second TYPE");
          if (!f.samples.empty()) fail("TYPE after the family's samples");
          f.type = m[2];
        } else if (line.rfind("# HELP", 0) == 0 || line.rfind("# TYPE", 0) == 0) {
          fail("a malformed HELP or TYPE");
        }
        continue;
      }
      static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?[0-9]+)?)");
      if (!std::regex_match(line, m, sample)) fail("not a sample");
      PromSample s;
      s.name = m[1];
      s.value = parse_value(m[4], fail);
      if (m[2].matched) s.labels = parse_labels(m[3], fail);
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
      static const std::regex name_re(R"([a-zA-Z_][a-zA-Z0-9_]*)");
      const size_t eq = text.find('=', i);
      if (eq == std::string::npos) fail("a label without '='");
      const std::string name = text.substr(i, eq - i);
      if (!std::regex_match(name, name_re)) fail("a bad label name '" + name + "'");
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
