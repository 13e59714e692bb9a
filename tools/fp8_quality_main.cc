// hearth-fp8-quality: what quantizing a model's projections to fp8 costs in quality, on the CPU
// engine. The model is run twice, as loaded (bf16) and quantized at load (fp8, the server's
// --quantize fp8), over the same tokens; it prints the perplexity of each on text files (every
// window of up to the context length, starting with BOS, each token scored given the ones
// before it) and the mean KL(bf16 || fp8) of the next-token distributions at every position
// of the text windows and of every prompt of the proof suites. With --compare kv it compares
// the fp32 KV cache with kv_cache_dtype fp8_e4m3 instead, on the model as loaded ("bf16" is
// then the fp32 cache and "fp8" the fp8 one, in the report's names).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/main_guard.h"
#include "worker/engine/cpu_backend.h"
#include "worker/worker_model.h"

namespace {

using json = nlohmann::json;

// One model on the CPU engine, fed a sequence one token at a time from position 0.
class Scorer {
 public:
  Scorer(std::shared_ptr<const hearth::WeightStore> store, int context,
         hearth::KvCacheDtype kv = hearth::KvCacheDtype::Auto)
      : backend_(std::move(store), context, {}, nullptr, 1, {}, kv), table_((context + 15) / 16) {
    std::iota(table_.begin(), table_.end(), 0);
  }
  // log-softmax of the next-token logits after tokens[0..i], for every i.
  std::vector<std::vector<double>> log_probs(const std::vector<int32_t>& tokens) {
    std::vector<std::vector<double>> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      hearth::ForwardBatch batch;
      batch.entries.push_back({std::span(&tokens[i], 1), int(i), table_, true});
      backend_.forward(batch);
      const std::span<const float> logits = backend_.logits(0);
      double max = -INFINITY, sum = 0;
      for (float l : logits) max = std::max(max, double(l));
      for (float l : logits) sum += std::exp(double(l) - max);
      const double log_z = max + std::log(sum);
      std::vector<double> lp(logits.size());
      for (size_t v = 0; v < logits.size(); ++v) lp[v] = double(logits[v]) - log_z;
      out.push_back(std::move(lp));
    }
    return out;
  }

 private:
  hearth::CpuBackend backend_;
  std::vector<int32_t> table_;
};

struct Totals {
  double nll_bf16 = 0, nll_fp8 = 0, kl = 0;
  size_t scored = 0, positions = 0, argmax_agree = 0;
};

// Scores `tokens` in both models: next-token NLL of tokens[1..] and KL at every position.
void score(Scorer& bf16, Scorer& fp8, const std::vector<int32_t>& tokens, bool count_nll,
           Totals& t) {
  const auto a = bf16.log_probs(tokens), b = fp8.log_probs(tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    double kl = 0;
    for (size_t v = 0; v < a[i].size(); ++v) kl += std::exp(a[i][v]) * (a[i][v] - b[i][v]);
    t.kl += kl;
    ++t.positions;
    const auto arg = [](const std::vector<double>& x) {
      return std::max_element(x.begin(), x.end()) - x.begin();
    };
    t.argmax_agree += arg(a[i]) == arg(b[i]);
    if (count_nll && i + 1 < tokens.size()) {
      t.nll_bf16 -= a[i][tokens[i + 1]];
      t.nll_fp8 -= b[i][tokens[i + 1]];
      ++t.scored;
    }
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "hearth-fp8-quality: perplexity and next-token KL of a model as loaded (bf16) vs quantized "
      "to fp8 at load, on the CPU engine"};
  std::string model_dir;
  std::vector<std::string> texts, suites;
  int window = 0;
  std::string compare = "weights";
  app.add_option("--model", model_dir, "model directory (16-bit weights)")->required();
  app.add_option("--text", texts, "a text file to score (repeatable)");
  app.add_option("--suite", suites, "a proof suite .jsonl whose prompts to compare (repeatable)");
  app.add_option("--window", window, "tokens per text window (default: the context length)");
  app.add_option("--compare", compare,
                 "weights: bf16 vs fp8 weights (default); kv: the fp32 KV cache vs "
                 "kv_cache_dtype fp8_e4m3, both on the weights as loaded")
      ->check(CLI::IsMember({"weights", "kv"}));
  CLI11_PARSE(app, argc, argv);
  const bool kv = compare == "kv";

  const hearth::WorkerModel bf16_model = hearth::open_model_dir(model_dir, false);
  const hearth::WorkerModel fp8_model = kv ? bf16_model : hearth::open_model_dir(model_dir, true);
  const auto tokenizer = hearth::load_model_tokenizer(bf16_model);
  if (!tokenizer) throw std::runtime_error(model_dir + ": no tokenizer");
  const int context = bf16_model.store->config().max_position;
  if (window <= 0 || window > context) window = context;
  Scorer bf16(bf16_model.store, context),
      fp8(fp8_model.store, context,
          kv ? hearth::KvCacheDtype::Fp8E4m3 : hearth::KvCacheDtype::Auto);

  json report = {{"model", model_dir}, {"window", window}, {"compare", compare}};
  Totals text_totals;
  for (const std::string& path : texts) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot read");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> all = tokenizer->tokenizer.encode(ss.str(), true);
    // The first window holds BOS (add_special_tokens); later ones get it prepended.
    const int32_t bos = all.empty() ? 0 : all[0];
    for (size_t at = 0; at < all.size();) {
      std::vector<int32_t> w;
      if (at > 0) w.push_back(bos);
      while (w.size() < size_t(window) && at < all.size()) w.push_back(all[at++]);
      score(bf16, fp8, w, true, text_totals);
    }
    std::fprintf(stderr, "hearth-fp8-quality: %s: %zu tokens\n", path.c_str(), all.size());
  }
  if (text_totals.scored > 0)
    report["text"] = {
        {"scored_tokens", text_totals.scored},
        {"perplexity_bf16", std::exp(text_totals.nll_bf16 / double(text_totals.scored))},
        {"perplexity_fp8", std::exp(text_totals.nll_fp8 / double(text_totals.scored))},
        {"perplexity_ratio",
         std::exp((text_totals.nll_fp8 - text_totals.nll_bf16) / double(text_totals.scored))},
        {"mean_kl_nats", text_totals.kl / double(text_totals.positions)},
        {"argmax_agreement", double(text_totals.argmax_agree) / double(text_totals.positions)}};
  Totals all_suites;
  for (const std::string& path : suites) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot read");
    Totals t;
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const json request = json::parse(line);
      std::vector<int32_t> tokens =
          tokenizer->tokenizer.encode(request.at("prompt").get<std::string>(), true);
      if (tokens.size() > size_t(context)) tokens.resize(context);
      score(bf16, fp8, tokens, false, t);
    }
    report["suites"][path] = {
        {"positions", t.positions},
        {"mean_kl_nats", t.kl / double(std::max<size_t>(t.positions, 1))},
        {"argmax_agreement", double(t.argmax_agree) / double(std::max<size_t>(t.positions, 1))}};
    all_suites.kl += t.kl;
    all_suites.positions += t.positions;
    all_suites.argmax_agree += t.argmax_agree;
  }
  if (all_suites.positions > 0)
    report["suites_all"] = {
        {"positions", all_suites.positions},
        {"mean_kl_nats", all_suites.kl / double(all_suites.positions)},
        {"argmax_agreement", double(all_suites.argmax_agree) / double(all_suites.positions)}};
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-fp8-quality", [&] { return run(argc, argv); });
}
