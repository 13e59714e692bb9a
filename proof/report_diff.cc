#include "proof/report_diff.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "proof/report.h"
#include "base/read_file.h"

namespace hearth::proof {

using json = nlohmann::json;

namespace {

std::optional<Generation> generation_of(const json& run) {
  if (run.value("status", "") != "ok") return std::nullopt;
  Generation g;
  g.tokens = run.at("tokens").get<std::vector<int32_t>>();
  for (const json& lp : run.at("logprobs"))
    g.logprobs.push_back(lp.is_number() ? lp.get<double>() : std::nan(""));
  g.pieces = run.value("pieces", std::vector<std::string>(g.tokens.size()));
  g.pieces.resize(g.tokens.size());
  g.logprobs.resize(g.tokens.size(), std::nan(""));
  g.prompt_tokens = run.value("prompt_tokens", 0);
  g.stop = run.value("stop", "");
  return g;
}

// The first run (repeat 0) of each profile of a report prompt.
std::map<std::string, const json*> first_runs(const json& prompt) {
  std::map<std::string, const json*> runs;
  for (const json& run : prompt.at("runs"))
    if (run.at("repeat") == 0) runs[run.at("profile").get<std::string>()] = &run;
  return runs;
}

std::string show(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Settings and identities that differ between the two reports: often exactly what the diff is
// about (served vs single-process, 1 vs 8 workers), sometimes a sign of comparing the wrong pair.
json context_differences(const json& a, const json& b) {
  static const std::vector<json::json_pointer> keys = {
      json::json_pointer("/model/mode"),           json::json_pointer("/model/weights_digest"),
      json::json_pointer("/model/tokenizer/xxh3"), json::json_pointer("/model/backend"),
      json::json_pointer("/hearth/git_commit"),    json::json_pointer("/hearth/worker/xxh3"),
      json::json_pointer("/settings/budget"),      json::json_pointer("/settings/concurrency"),
      json::json_pointer("/settings/batched"),     json::json_pointer("/settings/contract"),
      json::json_pointer("/settings/repeat"),      json::json_pointer("/machine/hostname"),
      json::json_pointer("/machine/gpus")};
  json out = json::array();
  for (const auto& k : keys) {
    const json va = a.contains(k) ? a.at(k) : json(), vb = b.contains(k) ? b.at(k) : json();
    if (va != vb) out.push_back({{"key", k.to_string()}, {"a", va}, {"b", vb}});
  }
  return out;
}

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

DiffOutcome error_outcome(const std::string& why) {
  DiffOutcome d;
  d.exit_code = kExitError;
  d.json = {{"verdict", "error"}, {"error", why}};
  d.markdown = "# hearth-proof diff: ERROR\n\n" + why + "\n";
  d.verdict_line = "hearth-proof diff: ERROR: " + why;
  return d;
}

}  // namespace

json load_report(const std::filesystem::path& given) {
  const std::filesystem::path path =
      std::filesystem::is_directory(given) ? given / "report.json" : given;
  json r = json::parse(read_file(path), nullptr, false);
  if (r.is_discarded()) throw std::runtime_error(path.string() + ": not a JSON report");
  if (!r.is_object() || r.value("format", "") != kReportFormat)
    throw std::runtime_error(path.string() + ": not a hearth-proof report");
  if (r.value("version", 0) != kReportVersion)
    throw std::runtime_error(path.string() + ": report version " +
                             r.value("version", json()).dump() +
                             ", this hearth-proof reads version " + std::to_string(kReportVersion));
  for (const char* key : {"suite", "profiles", "prompts", "settings"})
    if (!r.contains(key))
      throw std::runtime_error(path.string() + ": report without \"" + key + "\"");
  return r;
}

DiffOutcome diff_reports(const json& a, const json& b, const Contract& contract,
                         const std::string& a_name, const std::string& b_name) {
  try {
    const std::string sa = a.at("suite").at("xxh3").get<std::string>(),
                      sb = b.at("suite").at("xxh3").get<std::string>();
    if (sa != sb)
      return error_outcome("the reports are of different suites (" +
                           show(a.at("suite").at("name")) + " " + sa + " vs " +
                           show(b.at("suite").at("name")) + " " + sb + ")");
    std::set<std::string> profiles_a, profiles_b;
    for (const json& p : a.at("profiles")) profiles_a.insert(p.at("label").get<std::string>());
    for (const json& p : b.at("profiles")) profiles_b.insert(p.at("label").get<std::string>());
    if (profiles_a != profiles_b) {
      std::string la, lb;
      for (const auto& s : profiles_a) la += (la.empty() ? "" : ", ") + s;
      for (const auto& s : profiles_b) lb += (lb.empty() ? "" : ", ") + s;
      return error_outcome("the reports ran different profiles (" + la + " vs " + lb + ")");
    }

    std::map<std::string, const json*> prompts_b;
    for (const json& p : b.at("prompts")) prompts_b[p.at("id").get<std::string>()] = &p;

    json prompts = json::array();
    size_t same = 0, changed = 0, errors = 0;
    std::string first_change, first_error;
    for (const json& pa : a.at("prompts")) {
      const std::string id = pa.at("id").get<std::string>();
      json entry{{"id", id}, {"profiles", json::array()}};
      bool any_error = false, any_change = false;
      auto it = prompts_b.find(id);
      if (it == prompts_b.end()) {
        entry["error"] = "missing from " + b_name;
        any_error = true;
      } else {
        const auto runs_a = first_runs(pa), runs_b = first_runs(*it->second);
        for (const std::string& label : profiles_a) {
          json item{{"profile", label}};
          const json* ra = runs_a.count(label) ? runs_a.at(label) : nullptr;
          const json* rb = runs_b.count(label) ? runs_b.at(label) : nullptr;
          const auto ga = ra ? generation_of(*ra) : std::nullopt,
                     gb = rb ? generation_of(*rb) : std::nullopt;
          if (!ga || !gb) {
            item["error"] = !ra   ? "no run of this profile in " + a_name
                            : !rb ? "no run of this profile in " + b_name
                            : !ga ? "the run failed in " + a_name
                                  : "the run failed in " + b_name;
            any_error = true;
            if (first_error.empty())
              first_error = "'" + id + "', " + label + ": " + item["error"].get<std::string>();
          } else {
            const Comparison c =
                compare(contract, *ga, *gb, ra->value("text", ""), rb->value("text", ""));
            item["comparison"] = to_json(c);
            if (!c.holds) {
              any_change = true;
              if (first_change.empty()) first_change = "'" + id + "', " + label + ": " + c.reason;
            }
          }
          entry["profiles"].push_back(item);
        }
        prompts_b.erase(it);
      }
      const char* verdict = any_error ? "error" : any_change ? "changed" : "same";
      entry["verdict"] = verdict;
      (any_error ? errors : any_change ? changed : same)++;
      prompts.push_back(entry);
    }
    for (const auto& [id, p] : prompts_b) {
      (void)p;
      prompts.push_back({{"id", id}, {"verdict", "error"}, {"error", "missing from " + a_name}});
      ++errors;
      if (first_error.empty()) first_error = "'" + id + "' missing from " + a_name;
    }

    DiffOutcome d;
    d.exit_code = errors ? kExitError : changed ? kExitViolated : kExitHolds;
    const char* verdict = errors ? "error" : changed ? "changed" : "same";
    d.json = {
        {"verdict", verdict},
        {"contract", contract.name()},
        {"a", a_name},
        {"b", b_name},
        {"suite", a.at("suite")},
        {"context_differences", context_differences(a, b)},
        {"summary",
         {{"prompts", prompts.size()}, {"same", same}, {"changed", changed}, {"error", errors}}},
        {"prompts", prompts}};

    const std::string counts =
        std::to_string(prompts.size()) + " prompts: " + std::to_string(same) + " same, " +
        std::to_string(changed) + " changed, " + std::to_string(errors) + " error";
    if (errors)
      d.verdict_line = "hearth-proof diff: ERROR (" + contract.name() + "): " + counts +
                       " (first: " + first_error + ")";
    else if (changed)
      d.verdict_line = "hearth-proof diff: CHANGED (" + contract.name() + "): " + counts +
                       " (first: " + first_change + ")";
    else
      d.verdict_line = "hearth-proof diff: SAME (" + contract.name() + "): " + counts;

    std::ostringstream md;
    md << "# hearth-proof diff: "
       << (errors    ? "ERROR"
           : changed ? "CHANGED"
                     : "SAME")
       << "\n\n"
       << "`" << a_name << "` vs `" << b_name << "`, suite " << show(a.at("suite").at("name"))
       << ", contract " << contract.name() << ": " << counts << ".\n\n";
    if (!d.json["context_differences"].empty()) {
      md << "| differs | " << cell(a_name) << " | " << cell(b_name) << " |\n| --- | --- | --- |\n";
      for (const json& c : d.json["context_differences"])
        md << "| " << c["key"].get<std::string>() << " | " << cell(show(c["a"])) << " | "
           << cell(show(c["b"])) << " |\n";
      md << "\n";
    }
    if (changed + errors == 0)
      md << "Every prompt gave the same output for every profile.\n";
    else
      md << "| prompt | verdict | profile | detail |\n| --- | --- | --- | --- |\n";
    for (const json& p : prompts) {
      const std::string v = p["verdict"].get<std::string>();
      if (v == "same") continue;
      if (p.contains("error")) {
        md << "| " << cell(p["id"].get<std::string>()) << " | **" << v << "** | | "
           << cell(p["error"].get<std::string>()) << " |\n";
        continue;
      }
      for (const json& item : p["profiles"]) {
        if (item.contains("comparison") && item["comparison"]["holds"].get<bool>()) continue;
        std::string detail = item.contains("error") ? item["error"].get<std::string>()
                             : item["comparison"]["holds"].get<bool>()
                                 ? std::string("same")
                                 : item["comparison"]["reason"].get<std::string>();
        if (item.contains("comparison") && item["comparison"]["first_divergence"].is_object()) {
          const json& fd = item["comparison"]["first_divergence"];
          detail += "; after " + fd["text_before"].dump() + ": " + fd["a_text"].dump() + " vs " +
                    fd["b_text"].dump();
        }
        md << "| " << cell(p["id"].get<std::string>()) << " | "
           << (v == "same" ? v : "**" + v + "**") << " | "
           << cell(item["profile"].get<std::string>()) << " | " << cell(detail) << " |\n";
      }
    }
    d.markdown = md.str();
    return d;
  } catch (const json::exception& e) {
    return error_outcome(std::string("a report is malformed: ") + e.what());
  }
}

}  // namespace hearth::proof
