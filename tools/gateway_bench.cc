// hearth-gateway-bench: a bounded load test of an OpenAI-compatible server through HTTP.
// `--concurrency` clients each send streaming completions back to back until `--requests` are
// done or `--max-seconds` pass, then it reports throughput, time to first token and
// inter-token latency percentiles, as JSON and a table. Loopback addresses only: it refuses to
// load anything else.
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

namespace {

using json = nlohmann::json;
using hearth::bench::Clock;
using hearth::bench::percentile;

struct Sample {
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  int tokens = 0;
  std::vector<double> itl_s;
};

// One streaming request, timing each SSE chunk that carries text.
Sample run_one(httplib::Client& client, const json& body) {
  Sample s;
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
      if (chunk.contains("usage") && chunk["usage"].is_object())
        s.tokens = chunk["usage"].value("completion_tokens", s.tokens);
      // A token arrived: its chunk carries text or (asked for below) its logprob. Synthetic
      // tokenizers decode many tokens to nothing, so text alone would undercount them.
      if (chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      if (choice.value("text", "").empty() && choice["logprobs"].is_null()) continue;
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
  } else if (s.error.empty()) {
    s.ok = true;
  }
  s.e2e_s = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-gateway-bench: bounded streaming load test of an OpenAI-compatible server on this "
      "machine"};
  std::string host = "127.0.0.1", model = "fortunes", label;
  int port = 8000, concurrency = 8, requests = 64, prompt_tokens = 128, max_tokens = 256;
  double max_seconds = 300;
  app.add_option("--host", host, "server address (loopback only)");
  app.add_option("--port", port, "server port")->check(CLI::Range(1, 65535));
  app.add_option("--model", model, "model (NAME or NAME:PROFILE)");
  app.add_option("--concurrency", concurrency, "clients at once")->check(CLI::Range(1, 4096));
  app.add_option("--requests", requests, "requests in all")->check(CLI::Range(1, 1 << 20));
  app.add_option("--prompt-tokens", prompt_tokens, "prompt length in token ids")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-tokens", max_tokens, "tokens generated per request (ignore_eos)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-seconds", max_seconds, "stop sending after this long")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--label", label, "free-form label for the report (machine, settings)");
  CLI11_PARSE(app, argc, argv);
  if (host != "127.0.0.1" && host != "localhost" && host != "::1")
    throw std::runtime_error(
        "--host must be a loopback address: this tool loads only this machine");

  std::atomic<int> next{0};
  std::mutex mutex;
  std::vector<Sample> samples;
  const auto start = Clock::now();
  const auto stop_at = start + std::chrono::duration<double>(max_seconds);
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c)
    clients.emplace_back([&, c] {
      httplib::Client client(host, port);
      client.set_read_timeout(600, 0);
      while (Clock::now() < stop_at) {
        const int i = next++;
        if (i >= requests) break;
        // Distinct prompts of fixed length: token ids spread over a small range.
        json prompt = json::array();
        for (int t = 0; t < prompt_tokens; ++t) prompt.push_back(1 + (i * 7919 + t * 31) % 200);
        const json body = {{"model", model},
                           {"prompt", prompt},
                           {"max_tokens", max_tokens},
                           {"temperature", 0},
                           {"ignore_eos", true},
                           {"stream", true},
                           {"logprobs", 0},  // one chunk per token, for the latencies
                           {"stream_options", {{"include_usage", true}}}};
        Sample s = run_one(client, body);
        std::lock_guard lock(mutex);
        samples.push_back(std::move(s));
      }
      (void)c;
    });
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, itl, e2e;
  int ok = 0, tokens = 0;
  std::string first_error;
  for (const Sample& s : samples) {
    if (!s.ok) {
      if (first_error.empty()) first_error = s.error;
      continue;
    }
    ++ok;
    tokens += s.tokens;
    ttft.push_back(s.ttft_s);
    e2e.push_back(s.e2e_s);
    itl.insert(itl.end(), s.itl_s.begin(), s.itl_s.end());
  }
  const json report = {
      {"label", label},
      {"settings",
       {{"concurrency", concurrency},
        {"requests", requests},
        {"prompt_tokens", prompt_tokens},
        {"max_tokens", max_tokens},
        {"model", model}}},
      {"requests_ok", ok},
      {"requests_failed", int(samples.size()) - ok},
      {"first_error", first_error},
      {"wall_s", wall},
      {"output_tokens", tokens},
      {"output_tokens_per_s", tokens / wall},
      {"ttft_ms", {{"p50", percentile(ttft, 0.50) * 1e3}, {"p99", percentile(ttft, 0.99) * 1e3}}},
      {"itl_ms", {{"p50", percentile(itl, 0.50) * 1e3}, {"p99", percentile(itl, 0.99) * 1e3}}},
      {"e2e_s", {{"p50", percentile(e2e, 0.50)}, {"p99", percentile(e2e, 0.99)}}}};
  std::printf("%s\n", report.dump(2).c_str());
  std::printf(
      "\n| concurrency | requests ok | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms |\n"
      "| --- | --- | --- | --- | --- |\n| %d | %d/%zu | %.1f | %.1f / %.1f | %.2f / %.2f |\n",
      concurrency, ok, samples.size(), tokens / wall, percentile(ttft, 0.50) * 1e3,
      percentile(ttft, 0.99) * 1e3, percentile(itl, 0.50) * 1e3, percentile(itl, 0.99) * 1e3);
  return ok == int(samples.size()) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-gateway-bench", [&] { return run(argc, argv); });
}
