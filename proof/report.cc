#include "proof/report.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <stdexcept>

namespace hearth::proof {

using json = nlohmann::json;

namespace {

std::string relative_to(const std::filesystem::path& p, const std::filesystem::path& base) {
  return p.empty() ? std::string() : p.lexically_relative(base).string();
}

json run_json(const RunResult& r, const ReportContext& ctx, const std::string& text) {
  json j{{"profile", (*ctx.profiles)[r.spec.profile].label},
         {"repeat", r.spec.repeat},
         {"status", r.ok() ? "ok" : "error"},
         {"exit", r.exit ? json(r.exit->describe()) : json()},
         {"wall_ms", r.wall_ms},
         {"stdout", relative_to(r.stdout_path, ctx.out_dir)},
         {"stderr", relative_to(r.stderr_path, ctx.out_dir)}};
  if (!r.ok()) {
    j["error"] = r.error;
    j["stderr_tail"] = r.stderr_tail;
    return j;
  }
  const Generation& g = *r.generation;
  j["prompt_tokens"] = g.prompt_tokens;
  j["generated_tokens"] = g.tokens.size();
  j["stop"] = g.stop;
  j["tokens"] = g.tokens;
  json logprobs = json::array();
  for (double lp : g.logprobs) logprobs.push_back(std::isnan(lp) ? json() : json(lp));
  j["logprobs"] = logprobs;
  j["pieces"] = g.pieces;
  j["text"] = text;
  j["timings"] = g.timings;
  return j;
}

json side(const ReportContext& ctx, const RunSpec& s) {
  return {{"profile", (*ctx.profiles)[s.profile].label}, {"repeat", s.repeat}};
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace

Contract repeat_contract() {
  return {Contract::Kind::Logprob, 0.0};
}

json build_report(const ReportContext& ctx, const std::vector<RunResult>& results) {
  const Suite& suite = *ctx.suite;
  const auto& profiles = *ctx.profiles;
  const RunnerOptions& opt = *ctx.options;
  const size_t P = profiles.size(), R = size_t(opt.repeat);
  if (results.size() != suite.prompts.size() * P * R)
    throw std::logic_error("build_report: one result per run expected");
  auto at = [&](size_t prompt, size_t profile, size_t repeat) -> const RunResult& {
    return results[(prompt * P + profile) * R + repeat];
  };

  json prompts = json::array();
  size_t pass = 0, fail = 0, error = 0, failed_runs = 0;
  for (size_t i = 0; i < suite.prompts.size(); ++i) {
    const SuitePrompt& sp = suite.prompts[i];
    std::vector<std::string> texts(P * R);
    json runs = json::array();
    bool any_error = false;
    for (size_t f = 0; f < P; ++f)
      for (size_t k = 0; k < R; ++k) {
        const RunResult& r = at(i, f, k);
        if (r.ok()) texts[f * R + k] = ctx.detokenizer->text(*r.generation);
        any_error |= !r.ok();
        failed_runs += !r.ok();
        runs.push_back(run_json(r, ctx, texts[f * R + k]));
      }

    // Every profile against the reference (the first), then each profile's repeats against its
    // first run. A pair with a failed run is listed as not compared, never silently skipped.
    json comparisons = json::array();
    bool violated = false;
    auto add = [&](const char* kind, const Contract& contract, size_t fa, size_t ka, size_t fb,
                   size_t kb) {
      const RunResult &a = at(i, fa, ka), &b = at(i, fb, kb);
      json c;
      if (a.ok() && b.ok()) {
        c = to_json(compare(contract, *a.generation, *b.generation, texts[fa * R + ka],
                            texts[fb * R + kb]));
        violated |= !c["holds"].get<bool>();
      } else {
        c = {{"holds", nullptr}, {"reason", "not compared: a run failed"}};
      }
      c["kind"] = kind;
      c["contract"] = contract.name();
      c["a"] = side(ctx, a.spec);
      c["b"] = side(ctx, b.spec);
      comparisons.push_back(std::move(c));
    };
    for (size_t f = 1; f < P; ++f) add("profile", ctx.contract, 0, 0, f, 0);
    for (size_t f = 0; f < P; ++f)
      for (size_t k = 1; k < R; ++k) add("repeat", repeat_contract(), f, 0, f, k);

    const char* verdict = any_error ? "error" : violated ? "fail" : "pass";
    (any_error ? error : violated ? fail : pass)++;
    json prompt_tokens;
    for (size_t f = 0; f < P && prompt_tokens.is_null(); ++f)
      if (at(i, f, 0).ok()) prompt_tokens = at(i, f, 0).generation->prompt_tokens;
    const std::optional<int> limit = token_limit(sp, opt.budget);
    prompts.push_back({{"id", sp.id},
                       {"line", sp.line},
                       {"prompt", sp.text ? json(*sp.text) : json(sp.tokens)},
                       {"meta", sp.meta},
                       {"prompt_tokens", prompt_tokens},
                       {"max_tokens", limit ? json(*limit) : json()},
                       {"verdict", verdict},
                       {"violated", violated},
                       {"comparisons", comparisons},
                       {"runs", runs}});
  }

  json profile_list = json::array();
  for (const ProofProfile& p : profiles)
    profile_list.push_back({{"label", p.label},
                            {"path", p.path.string()},
                            {"xxh3", p.checksum},
                            {"settings", p.settings}});
  const char* verdict = error ? "error" : fail ? "fail" : "pass";
  return {{"format", kReportFormat},
          {"version", kReportVersion},
          {"command", ctx.command},
          {"cwd", ctx.cwd},
          {"started", ctx.started},
          {"finished", ctx.finished},
          {"machine", ctx.machine},
          {"hearth", ctx.hearth},
          {"model", ctx.model},
          {"suite",
           {{"name", suite.name},
            {"path", std::filesystem::absolute(suite.path).lexically_normal().string()},
            {"xxh3", suite.checksum},
            {"prompts", suite.prompts.size()}}},
          {"settings",
           {{"contract", ctx.contract.name()},
            {"repeat_contract", repeat_contract().name()},
            {"budget", opt.budget ? json(*opt.budget) : json()},
            {"concurrency", opt.batched ? json() : json(opt.concurrency)},  // batched: n/a
            {"repeat", opt.repeat},
            {"timeout_s", opt.timeout.count() / 1000.0},
            {"text_source", ctx.detokenizer->source()},
            {"batched", opt.batched},
            {"batched_workers",
             opt.batched ? batched_workers_json(plan_batched_workers(*ctx.profiles), *ctx.profiles)
                         : json()}}},
          {"profiles", profile_list},
          {"summary",
           {{"verdict", verdict},
            {"prompts", suite.prompts.size()},
            {"pass", pass},
            {"fail", fail},
            {"error", error},
            {"runs", results.size()},
            {"failed_runs", failed_runs}}},
          {"prompts", prompts}};
}

int exit_code(const json& report) {
  const std::string v = report.at("summary").at("verdict").get<std::string>();
  return v == "pass" ? kExitHolds : v == "fail" ? kExitViolated : kExitError;
}

std::string verdict_line(const json& report, const std::filesystem::path& out_dir) {
  const json& s = report.at("summary");
  const json& settings = report.at("settings");
  const size_t n = s.at("prompts").get<size_t>(), fail = s.at("fail").get<size_t>(),
               error = s.at("error").get<size_t>();
  const std::string contract = settings.at("contract").get<std::string>();
  std::string first_error, first_violation;
  for (const json& p : report.at("prompts")) {
    if (first_error.empty() && p.at("verdict") == "error")
      for (const json& r : p.at("runs"))
        if (r.at("status") == "error") {
          first_error = quoted(p.at("id").get<std::string>()) + ", " +
                        r.at("profile").get<std::string>() + " run " +
                        std::to_string(r.at("repeat").get<int>()) + ": " +
                        r.at("error").get<std::string>();
          break;
        }
    if (first_violation.empty() && p.at("violated").get<bool>())
      for (const json& c : p.at("comparisons"))
        if (c.at("holds") == false) {
          first_violation =
              quoted(p.at("id").get<std::string>()) + ", " +
              c.at("a").at("profile").get<std::string>() + " vs " +
              c.at("b").at("profile").get<std::string>() +
              (c.at("kind") == "repeat"
                   ? " (repeat " + std::to_string(c.at("b").at("repeat").get<int>()) + ")"
                   : "") +
              ": " + c.at("reason").get<std::string>();
          break;
        }
  }
  const std::string where = " [" + (out_dir / "report.md").string() + "]";
  const size_t profiles = report.at("profiles").size();
  const std::string runs =
      std::to_string(n) + " prompts x " + std::to_string(profiles) +
      (profiles == 1 ? " profile" : " profiles") +
      (settings.at("repeat").get<int>() > 1
           ? " x " + std::to_string(settings.at("repeat").get<int>()) + " repeats"
           : "");
  size_t violated = 0;
  for (const json& p : report.at("prompts")) violated += p.at("violated").get<bool>();
  if (error > 0)
    return "hearth-proof: ERROR (" + contract + "): " + std::to_string(error) + " of " +
           std::to_string(n) + " prompts have failed runs (first: " + first_error + ")" +
           (violated ? "; " + std::to_string(violated) + " violate the contract" : "") + where;
  if (fail > 0)
    return "hearth-proof: FAIL (" + contract + "): " + std::to_string(fail) + " of " +
           std::to_string(n) + " prompts violate the contract (first: " + first_violation + ")" +
           where;
  return "hearth-proof: PASS (" + contract + "): " + runs + ", every contract holds" + where;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write: " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot write: " + ec.message());
}

std::string report_json_text(const json& report) {
  // Indented, except that each prompt (with its token arrays) is one line: readable, and a
  // line diff of two reports lines up prompt by prompt. Invalid UTF-8 (there should be none)
  // is replaced rather than losing the whole report.
  auto dump = [](const json& v, int indent) {
    return v.dump(indent, ' ', false, json::error_handler_t::replace);
  };
  // The verdict and settings first; then identities; the bulky per-prompt data last.
  std::vector<std::string> order = {"format", "version",  "summary", "settings", "suite",
                                    "model",  "profiles", "hearth",  "machine",  "command",
                                    "cwd",    "started",  "finished"};
  for (const auto& [key, value] : report.items())
    if (key != "prompts" && std::find(order.begin(), order.end(), key) == order.end())
      order.push_back(key);
  order.push_back("prompts");
  std::string out = "{\n";
  bool first = true;
  for (const std::string& key : order) {
    if (!report.contains(key)) continue;
    const json& value = report[key];
    out += std::string(first ? "" : ",\n") + " " + dump(json(key), -1) + ": ";
    first = false;
    if (key == "prompts" && value.is_array()) {
      out += "[";
      for (size_t i = 0; i < value.size(); ++i)
        out += std::string(i ? ",\n  " : "\n  ") + dump(value[i], -1);
      out += value.empty() ? "]" : "\n ]";
    } else {
      std::string v = dump(value, 1);
      for (size_t at = 0; (at = v.find('\n', at)) != std::string::npos; at += 2)
        v.insert(at + 1, " ");
      out += v;
    }
  }
  return out + "\n}\n";
}

void write_report(const json& report, const std::filesystem::path& out_dir) {
  write_file_atomically(out_dir / "report.json", report_json_text(report));
  write_file_atomically(out_dir / "report.md", render_markdown(report));
}

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace hearth::proof
