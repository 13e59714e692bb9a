// hearth-gateway-bench: a bounded load test of an OpenAI-compatible server through HTTP.
// `--concurrency` clients each send streaming completions back to back until `--requests` are
// done or `--max-seconds` pass, then it reports throughput, time to first token and
// inter-token latency percentiles, as JSON and a table. `--logprobs N` asks every completion for
// N top logprobs and checks they arrived with every token; `--mixed` sends issue 23's mixed
// lengths (tools/mixed_workload.h, the draw of hearth-bench --serve-bench --mixed) instead of
// fixed ones. Loopback addresses only: it refuses to load anything else.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/main_guard.h"
#include "tools/bench_stats.h"
#include "tools/mixed_workload.h"

namespace {

using json = nlohmann::json;
using hearth::bench::Clock;
using hearth::bench::percentile;

struct Sample {
  int index = 0;  // the request's number, its draw in --mixed
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  int tokens = 0, prompt_tokens = 0;
  int logprob_tokens = 0;  // tokens that came with their logprobs
  int top_entries = 0;     // top_logprobs entries over those tokens (the chosen one included)
  std::vector<double> itl_s;
};

// Counts a chunk's logprobs (the completions form: parallel arrays, one entry per token, each
// top_logprobs entry an object of 1 to N + 1 texts, fewer when texts coincide); false when
// they are malformed.
bool count_logprobs(const json& lp, int n, Sample& s) {
  if (!lp.is_object()) return false;
  const json &tokens = lp["tokens"], &values = lp["token_logprobs"], &tops = lp["top_logprobs"];
  if (!tokens.is_array() || !values.is_array() || !tops.is_array() ||
      values.size() != tokens.size() || tops.size() != tokens.size())
    return false;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (!values[t].is_number() && !values[t].is_null()) return false;
    if (!tops[t].is_object() || tops[t].empty() || int(tops[t].size()) > n + 1) return false;
    s.top_entries += int(tops[t].size());
  }
  s.logprob_tokens += int(tokens.size());
  return true;
}

// One streaming request, timing each SSE chunk that carries text or logprobs.
Sample run_one(httplib::Client& client, const json& body) {
  Sample s;
  const int n_logprobs = body.value("logprobs", 0);
  const auto start = Clock::now();
  std::optional<Clock::time_point> last;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("error")) {
        s.error = chunk["error"].value("message", "error event");
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        s.tokens = chunk["usage"].value("completion_tokens", s.tokens);
        s.prompt_tokens = chunk["usage"].value("prompt_tokens", s.prompt_tokens);
      }
      // A token arrived: its chunk carries text or (asked for below) its logprob. Synthetic
      // tokenizers decode many tokens to nothing, so text alone would undercount them.
      if (chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      if (choice.value("text", "").empty() && choice["logprobs"].is_null()) continue;
      if (!choice["logprobs"].is_null() && !count_logprobs(choice["logprobs"], n_logprobs, s))
        s.error = "malformed logprobs: " + choice["logprobs"].dump();
      const auto now = Clock::now();
      if (!last)
        s.ttft_s = std::chrono::duration<double>(now - start).count();
      else
        s.itl_s.push_back(std::chrono::duration<double>(now - *last).count());
      last = now;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!client.send(req, res, err)) {
    s.error = "HTTP error " + httplib::to_string(err);
  } else if (res.status != 200) {
    s.error = "HTTP " + std::to_string(res.status) + ": " + res.body;
  } else if (s.error.empty() && s.logprob_tokens != s.tokens) {
    // Every token must bring its logprobs: a run that drops them is not the run asked for.
    s.error = "logprobs came with " + std::to_string(s.logprob_tokens) + " of " +
              std::to_string(s.tokens) + " tokens";
  } else if (s.error.empty()) {
    s.ok = true;
  }
  s.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

std::string ms_pair(const std::vector<double>& v, const char* fmt) {
  char out[96];
  std::snprintf(out, sizeof out, fmt, percentile(v, 0.50) * 1e3, percentile(v, 0.99) * 1e3);
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-gateway-bench: bounded streaming load test of an OpenAI-compatible server on this "
      "machine"};
  std::string host = "127.0.0.1", model = "fortunes", label;
  int port = 8000, concurrency = 8, requests = 64, prompt_tokens = 128, max_tokens = 256;
  int logprobs = 0, vocab = 200;
  bool mixed = false;
  uint64_t seed = 23;
  hearth::bench::MixedLengths lengths;
  double max_seconds = 300;
  app.add_option("--host", host, "server address (loopback only)");
  app.add_option("--port", port, "server port")->check(CLI::Range(1, 65535));
  app.add_option("--model", model, "model (NAME or NAME:PROFILE)");
  app.add_option("--concurrency", concurrency, "clients at once")->check(CLI::Range(1, 4096));
  app.add_option("--requests", requests, "requests in all")->check(CLI::Range(1, 1 << 20));
  app.add_option("--prompt-tokens", prompt_tokens, "prompt length in token ids (not with --mixed)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-tokens", max_tokens,
                 "tokens generated per request (ignore_eos; not with --mixed)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--logprobs", logprobs,
                 "top logprobs per token (completions `logprobs`); every token must bring them")
      ->check(CLI::Range(0, 20));
  app.add_flag("--mixed", mixed,
               "mixed lengths: prompts and outputs uniform in their ranges, drawn from --seed as "
               "hearth-bench --serve-bench --mixed draws them");
  app.add_option("--seed", seed, "the --mixed draw's seed (23: hearth-bench's workload)");
  app.add_option("--vocab", vocab,
                 "--mixed prompt ids are drawn in [0, vocab) (the model's vocabulary: "
                 "hearth-bench's prompts)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--min-prompt", lengths.min_prompt, "--mixed: shortest prompt")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-prompt", lengths.max_prompt, "--mixed: longest prompt")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--min-output", lengths.min_output, "--mixed: fewest tokens generated")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-output", lengths.max_output, "--mixed: most tokens generated")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-seconds", max_seconds, "stop sending after this long")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--label", label, "free-form label for the report (machine, settings)");
  CLI11_PARSE(app, argc, argv);
  if (host != "127.0.0.1" && host != "localhost" && host != "::1")
    throw std::runtime_error(
        "--host must be a loopback address: this tool loads only this machine");
  if (lengths.max_prompt < lengths.min_prompt || lengths.max_output < lengths.min_output)
    throw std::runtime_error("--mixed lengths: a maximum below its minimum");
  const std::vector<hearth::bench::MixedDraw> draws =
      mixed ? hearth::bench::mixed_draws(seed, requests, lengths, vocab)
            : std::vector<hearth::bench::MixedDraw>{};

  std::atomic<int> next{0};
  std::mutex mutex;
  std::vector<Sample> samples;
  const auto start = Clock::now();
  const auto stop_at = start + std::chrono::duration<double>(max_seconds);
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c)
    clients.emplace_back([&] {
      httplib::Client client(host, port);
      client.set_read_timeout(600, 0);
      while (Clock::now() < stop_at) {
        const int i = next++;
        if (i >= requests) break;
        json prompt = json::array();
        int tokens = max_tokens;
        if (mixed) {
          prompt = draws[i].prompt;
          tokens = draws[i].max_tokens;
        } else {
          // Distinct prompts of fixed length: token ids spread over a small range.
          for (int t = 0; t < prompt_tokens; ++t) prompt.push_back(1 + (i * 7919 + t * 31) % 200);
        }
        const json body = {{"model", model},
                           {"prompt", prompt},
                           {"max_tokens", tokens},
                           {"temperature", 0},
                           {"ignore_eos", true},
                           {"stream", true},
                           // 0 still gives one chunk per token, for the latencies
                           {"logprobs", logprobs},
                           {"stream_options", {{"include_usage", true}}}};
        Sample s = run_one(client, body);
        s.index = i;
        std::lock_guard lock(mutex);
        samples.push_back(std::move(s));
      }
    });
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.index < b.index; });

  std::vector<double> ttft, itl, e2e;
  int ok = 0, tokens = 0, logprob_tokens = 0, top_entries = 0;
  std::string first_error;
  json per_request = json::array();  // what each request was and what came back
  for (const Sample& s : samples) {
    per_request.push_back({{"index", s.index},
                           {"ok", s.ok},
                           {"prompt_tokens", s.prompt_tokens},
                           {"completion_tokens", s.tokens}});
    if (!s.ok) {
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    ++ok;
    tokens += s.tokens;
    logprob_tokens += s.logprob_tokens;
    top_entries += s.top_entries;
    ttft.push_back(s.ttft_s);
    e2e.push_back(s.e2e_s);
    itl.insert(itl.end(), s.itl_s.begin(), s.itl_s.end());
  }
  const double itl_p50 = percentile(itl, 0.50), itl_p99 = percentile(itl, 0.99);
  const double itl_ratio = itl_p50 > 0 ? itl_p99 / itl_p50 : 0;
  json settings = {{"concurrency", concurrency},
                   {"requests", requests},
                   {"model", model},
                   {"logprobs", logprobs},
                   {"mixed", mixed}};
  if (mixed) {
    settings["seed"] = seed;
    settings["vocab"] = vocab;
    settings["prompt_tokens"] = {lengths.min_prompt, lengths.max_prompt};
    settings["max_tokens"] = {lengths.min_output, lengths.max_output};
  } else {
    settings["prompt_tokens"] = prompt_tokens;
    settings["max_tokens"] = max_tokens;
  }
  const json report = {
      {"label", label},
      {"settings", settings},
      {"requests_ok", ok},
      {"requests_failed", int(samples.size()) - ok},
      {"first_error", first_error},
      {"wall_s", wall},
      {"output_tokens", tokens},
      {"output_tokens_per_s", tokens / wall},
      {"logprob_tokens", logprob_tokens},
      {"top_logprob_entries", top_entries},
      {"ttft_ms", {{"p50", percentile(ttft, 0.50) * 1e3}, {"p99", percentile(ttft, 0.99) * 1e3}}},
      {"itl_ms", {{"p50", itl_p50 * 1e3}, {"p99", itl_p99 * 1e3}}},
      {"itl_p99_over_p50", itl_ratio},
      {"e2e_s", {{"p50", percentile(e2e, 0.50)}, {"p99", percentile(e2e, 0.99)}}},
      {"per_request", per_request}};
  std::printf("%s\n", report.dump(2).c_str());
  const std::string lengths_cell =
      mixed ? "mixed " + std::to_string(lengths.min_prompt) + "-" +
                  std::to_string(lengths.max_prompt) + " / " + std::to_string(lengths.min_output) +
                  "-" + std::to_string(lengths.max_output) + " (seed " + std::to_string(seed) + ")"
            : std::to_string(prompt_tokens) + " / " + std::to_string(max_tokens);
  std::printf(
      "\n| concurrency | prompt / output tokens | logprobs | requests ok | output tok/s | TTFT p50 "
      "/ p99 ms | ITL p50 / p99 ms | ITL p99/p50 |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
      "| %d | %s | %d | %d/%zu | %.1f | %s | %s | %.2f |\n",
      concurrency, lengths_cell.c_str(), logprobs, ok, samples.size(), tokens / wall,
      ms_pair(ttft, "%.1f / %.1f").c_str(), ms_pair(itl, "%.2f / %.2f").c_str(), itl_ratio);
  return ok == int(samples.size()) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-gateway-bench", [&] { return run(argc, argv); });
}
