// report.md: the human side of report.json — what ran where, a table of verdicts, then every
// divergence and every error with the text around it.
#include <map>
#include <sstream>

#include "proof/report.h"

namespace hearth::proof {

using json = nlohmann::json;

namespace {

// Text shown as a JSON string literal in a code span, so whitespace and control characters are
// visible and nothing in it can break the table.
std::string code(const std::string& s) {
  const std::string lit = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string cell;
  for (char c : lit) cell += c == '|' ? std::string("\\|") : std::string(1, c);
  return cell.find('`') == std::string::npos ? "`" + cell + "`" : "`` " + cell + " ``";
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string str(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string tokens(const json& ids) {
  std::string s;
  for (const json& t : ids) s += (s.empty() ? "" : " ") + t.dump();
  return "[" + s + "]";
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

// The settings where `p` differs from the reference profile.
std::string differences(const json& ref, const json& p) {
  std::string out;
  for (const auto& [k, v] : p.items())
    if (k != "name" && (!ref.contains(k) || ref[k] != v))
      out += (out.empty() ? "" : ", ") + k + "=" + v.dump();
  return out.empty() ? "(reference)" : out;
}

void header(std::ostringstream& md, const json& r) {
  const json& s = r.at("summary");
  std::string verdict = s.at("verdict").get<std::string>();
  for (char& c : verdict) c = char(std::toupper(static_cast<unsigned char>(c)));
  md << "# hearth-proof: " << verdict << "\n\n";
  md << s.at("prompts") << " prompts: " << s.at("pass") << " pass, " << s.at("fail") << " fail, "
     << s.at("error") << " error (" << s.at("runs") << " worker runs, " << s.at("failed_runs")
     << " failed).\n\n";

  const json& set = r.at("settings");
  const json& m = r.at("model");
  md << "| | |\n| --- | --- |\n";
  md << "| suite | " << cell(str(r.at("suite").at("name"))) << " (" << r.at("suite").at("prompts")
     << " prompts, xxh3 `" << str(r.at("suite").at("xxh3")) << "`) |\n";
  md << "| contract | " << str(set.at("contract"))
     << " (repeats: " << str(set.at("repeat_contract")) << "; text from "
     << str(set.at("text_source")) << ") |\n";
  md << "| budget | " << str(set.at("budget")) << " tokens per prompt |\n";
  if (set.value("batched", false)) {
    md << "| batched / repeat | yes: ";
    const json& workers = set.at("batched_workers");
    for (size_t w = 0; w < workers.size(); ++w) {
      std::string labels;
      for (const json& l : workers[w].at("profiles"))
        labels += (labels.empty() ? "" : ", ") + str(l);
      md << (w ? "; " : "") << "worker " << w + 1 << " ran " << cell(labels);
    }
    md << " / " << str(set.at("repeat")) << " |\n";
  } else {
    md << "| concurrency / repeat | " << str(set.at("concurrency")) << " / "
       << str(set.at("repeat")) << " |\n";
  }
  if (m.value("mode", "") == "served")
    md << "| model | served: " << cell(str(m.at("name"))) << " at " << cell(str(m.at("socket")))
       << " (" << str(m.value("backend", json())) << " backend)";
  else
    md << "| model | " << cell(str(m.value("path", json()))) << " (single-process)";
  md << ", " << str(m.value("tensors", json())) << " tensors, weights digest `"
     << str(m.value("weights_digest", json())) << "` |\n";
  const json& h = r.at("hearth");
  md << "| hearth | " << str(h.value("version", json())) << ", commit `"
     << str(h.value("git_commit", json())) << "` |\n";
  if (h.contains("worker"))
    md << "| worker | " << cell(str(h["worker"].value("path", json()))) << " (xxh3 `"
       << str(h["worker"].value("xxh3", json())) << "`) |\n";
  const json& mc = r.at("machine");
  md << "| machine | " << cell(str(mc.value("hostname", json()))) << ": "
     << cell(str(mc.value("cpu", json()))) << ", " << str(mc.value("logical_cpus", json()))
     << " CPUs, " << cell(str(mc.value("os", json()))) << " |\n";
  for (const json& g : mc.value("gpus", json::array()))
    md << "| GPU | "
       << cell(g.contains("error")
                   ? str(g["error"])
                   : str(g.value("name", json())) + ", driver " + str(g.value("driver", json())) +
                         ", " + str(g.value("uuid", json())))
       << " |\n";
  md << "| when | " << str(r.at("started")) << " to " << str(r.at("finished")) << " |\n";
  md << "| command | `" << cell(str(r.at("command"))) << "` (in "
     << cell(str(r.value("cwd", json()))) << ") |\n\n";

  md << "## Profiles\n\n| # | profile | file | settings that differ from the reference |\n| --- | "
        "--- | --- | --- |\n";
  const json& profiles = r.at("profiles");
  for (size_t i = 0; i < profiles.size(); ++i)
    md << "| " << i << " | " << cell(str(profiles[i].at("label"))) << " | "
       << cell(str(profiles[i].at("path"))) << " | "
       << cell(differences(profiles[0].at("settings"), profiles[i].at("settings"))) << " |\n";
  md << "\n";
}

void prompt_table(std::ostringstream& md, const json& r) {
  std::string order;
  for (const json& prof : r.at("profiles"))
    order += (order.empty() ? "" : " / ") + prof.at("label").get<std::string>();
  md << "## Prompts\n\n| prompt | verdict | prompt tokens | generated tokens (" << cell(order)
     << ") | first divergence or error |\n| --- | --- | --- | --- | --- |\n";
  for (const json& p : r.at("prompts")) {
    std::string generated;
    for (const json& run : p.at("runs")) {
      if (run.at("repeat") != 0) continue;
      generated +=
          (generated.empty() ? "" : " / ") +
          (run.at("status") == "ok" ? run.at("generated_tokens").dump() : std::string("error"));
    }
    std::string divergence;
    for (const json& c : p.at("comparisons"))
      if (c.at("holds") == false) {
        divergence = c.at("a").at("profile").get<std::string>() + " vs " +
                     c.at("b").at("profile").get<std::string>() +
                     (c.at("kind") == "repeat" ? " r" + c.at("b").at("repeat").dump() : "") + ": " +
                     c.at("reason").get<std::string>();
        break;
      }
    if (p.at("verdict") == "error")
      for (const json& run : p.at("runs"))
        if (run.at("status") == "error") {
          divergence = run.at("profile").get<std::string>() + " r" + run.at("repeat").dump() +
                       ": " + run.at("error").get<std::string>();
          break;
        }
    std::string verdict = p.at("verdict").get<std::string>();
    if (verdict != "pass") verdict = "**" + verdict + "**";
    md << "| " << cell(str(p.at("id"))) << " | " << verdict << " | " << str(p.at("prompt_tokens"))
       << " | " << generated << " | " << cell(divergence) << " |\n";
  }
  md << "\n";
}

void divergences(std::ostringstream& md, const json& r) {
  bool any = false;
  for (const json& p : r.at("prompts"))
    for (const json& c : p.at("comparisons")) {
      if (c.at("holds") != false) continue;
      if (!any) md << "## Divergences\n\n";
      any = true;
      const std::string a =
          c.at("a").at("profile").get<std::string>() + " r" + c.at("a").at("repeat").dump();
      const std::string b =
          c.at("b").at("profile").get<std::string>() + " r" + c.at("b").at("repeat").dump();
      md << "### " << cell(str(p.at("id"))) << ": " << a << " vs " << b << "\n\n";
      md << c.at("reason").get<std::string>() << " (contract " << str(c.at("contract"))
         << "; max |logprob difference| over the shared tokens " << str(c.at("max_logprob_delta"))
         << ")\n\n";
      if (c.contains("first_divergence") && !c["first_divergence"].is_null()) {
        const json& d = c["first_divergence"];
        md << "- first differing token: index " << d.at("index") << "\n";
        md << "- text before: " << code(str(d.at("text_before"))) << "\n";
        md << "- " << a << ": " << tokens(d.at("a_tokens")) << " " << code(str(d.at("a_text")))
           << "\n";
        md << "- " << b << ": " << tokens(d.at("b_tokens")) << " " << code(str(d.at("b_text")))
           << "\n";
      }
      if (c.contains("text_divergence")) {
        const json& d = c["text_divergence"];
        md << "- first differing text byte: " << d.at("offset") << ", after "
           << code(str(d.at("text_before"))) << ": " << a << " " << code(str(d.at("a_text")))
           << ", " << b << " " << code(str(d.at("b_text"))) << "\n";
      }
      md << "\n";
    }
}

void errors(std::ostringstream& md, const json& r) {
  bool any = false;
  for (const json& p : r.at("prompts"))
    for (const json& run : p.at("runs")) {
      if (run.at("status") != "error") continue;
      if (!any) md << "## Errors\n\n";
      any = true;
      md << "### " << cell(str(p.at("id"))) << ": " << str(run.at("profile")) << " r"
         << run.at("repeat") << "\n\n";
      md << run.at("error").get<std::string>() << " (" << str(run.at("exit")) << ", stdout `"
         << str(run.at("stdout")) << "`, stderr `" << str(run.at("stderr")) << "`)\n\n";
      const std::string tail = str(run.value("stderr_tail", json("")));
      if (!tail.empty() && tail != "-")
        md << "```\n" << tail << (tail.back() == '\n' ? "" : "\n") << "```\n\n";
    }
}

void timings(std::ostringstream& md, const json& r) {
  struct Sum {
    size_t runs = 0, tokens = 0;
    double wall = 0, ttft = 0, decode_ms = 0, prefill = 0;
  };
  std::map<std::string, Sum> by_profile;
  for (const json& p : r.at("prompts"))
    for (const json& run : p.at("runs")) {
      if (run.at("status") != "ok") continue;
      Sum& s = by_profile[run.at("profile").get<std::string>()];
      const json& t = run.at("timings");
      ++s.runs;
      s.wall += run.at("wall_ms").get<double>();
      s.ttft += t.value("ttft_ms", 0.0);
      s.prefill += t.value("prefill_ms", 0.0);
      s.decode_ms += t.value("decode_ms", 0.0);
      const size_t n = run.at("generated_tokens").get<size_t>();
      s.tokens += n > 0 ? n - 1 : 0;  // decode time covers every token after the first
    }
  md << "## Timings (successful runs; informational, not part of the verdict)\n\n"
        "| profile | runs | mean wall ms | mean prefill ms | mean TTFT ms | decode tokens/s |\n"
        "| --- | --- | --- | --- | --- | --- |\n";
  for (const json& prof : r.at("profiles")) {
    const std::string label = prof.at("label").get<std::string>();
    const Sum& s = by_profile[label];
    if (s.runs == 0) {
      md << "| " << cell(label) << " | 0 | - | - | - | - |\n";
      continue;
    }
    md << "| " << cell(label) << " | " << s.runs << " | " << fixed(s.wall / s.runs, 1) << " | "
       << fixed(s.prefill / s.runs, 2) << " | " << fixed(s.ttft / s.runs, 2) << " | "
       << (s.decode_ms > 0 ? fixed(s.tokens * 1000.0 / s.decode_ms, 1) : std::string("-"))
       << " |\n";
  }
  md << "\n";
}

}  // namespace

std::string render_markdown(const json& report) {
  std::ostringstream md;
  header(md, report);
  prompt_table(md, report);
  divergences(md, report);
  errors(md, report);
  timings(md, report);
  return md.str();
}

}  // namespace hearth::proof
