#include "worker/engine/engine.h"

#include <algorithm>
#include <optional>

#include "worker/engine/cache_domain.h"
#include "worker/engine/stop_matcher.h"
#include "worker/engine/structured/grammar.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

SchedulerOptions scheduler_options(const EngineOptions& options, const Backend& backend) {
  SchedulerOptions s{options.max_batch_tokens, options.max_running, options.decode_step_tokens};
  if (backend.max_sequences() > 0) s.max_running = std::min(s.max_running, backend.max_sequences());
  return s;
}

}  // namespace

// A request in flight: its sequence and the state that turns sampled tokens into output.
struct Engine::Live {
  Live(Request r, const Tokenizer* tokenizer)
      : request(std::move(r)), matcher(request.settings.stop) {
    if (tokenizer) decoder.emplace(*tokenizer, /*skip_special_tokens=*/true);
  }
  Request request;
  Sequence seq;
  std::optional<StreamDecoder> decoder;
  StopMatcher matcher;
  std::optional<structured::GrammarMatcher> grammar;  // structured output
  Clock::time_point submitted = Clock::now();
  std::optional<Clock::time_point> scheduled, prompt_done, first_token;
};

Engine::Engine(Backend& backend, const EngineOptions& options, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_ids, std::string_view model_identity)
    : backend_(backend),
      memory_(backend.kv_memory()),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      kv_(backend.kv_pool().num_blocks, backend.kv_pool().block_size,
          options.prefix_cache && backend.paged_kv(), backend.kv_memory() != nullptr),
      scheduler_(scheduler_options(options, backend), kv_),
      cache_domain_(cache_domain_key(options, backend.name(), model_identity)) {
  // The provider learns the domain only now: the engine computes it after the backend, hence
  // after the memory, exists.
  if (SharedKv* shared = memory_ ? memory_->shared() : nullptr;
      shared && options.kv_share && kv_.prefix_caching()) {
    shared->set_domain(cache_domain_);
    kv_.share(shared);
  }
}

Engine::~Engine() = default;

void Engine::submit(Request request) {
  const std::string& id = request.id;
  check_request_settings(id, request.settings);
  if (live_.contains(id)) throw RequestError(id, "id", "a request with this id is still running");
  const int prompt = int(request.prompt.size());
  if (prompt == 0) throw RequestError(id, "prompt", "the prompt is empty");
  const int vocab = backend_.vocab_size();
  try {
    check_logit_bias_ids(request.settings.sampling.logit_bias, vocab);
  } catch (const SettingError& e) {
    throw RequestError(id, e.field(), e.reason());
  }
  for (int i = 0; i < prompt; ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      throw RequestError(id, "prompt",
                         "token id " + std::to_string(request.prompt[i]) + " at position " +
                             std::to_string(i) + " is outside the vocabulary (" +
                             std::to_string(vocab) + ")");
  const int context = backend_.context_length();
  const int max_tokens = request.settings.max_tokens;
  if (prompt > context)
    throw RequestError(
        id, "prompt",
        std::to_string(prompt) + " tokens exceed the context length " + std::to_string(context));
  if (int64_t(prompt) + max_tokens > context)
    throw RequestError(id, "max_tokens",
                       std::to_string(prompt) + " prompt tokens + " + std::to_string(max_tokens) +
                           " max_tokens exceed the context length " + std::to_string(context));
  // The last token is sampled, never run: a sequence holds at most prompt + max_tokens - 1.
  const int64_t positions = int64_t(prompt) + std::max(max_tokens - 1, 0);
  const int blocks = kv_.blocks_for(positions);
  // A leased pool may grow to its reservation: a request that fits that waits for memory.
  const int pool_blocks = memory_ ? memory_->max_blocks() : kv_.pool().total();
  if (blocks > pool_blocks)
    throw RequestError(id, "max_tokens",
                       "prompt + max_tokens need " + std::to_string(blocks) +
                           " KV blocks, more than the whole pool (" + std::to_string(pool_blocks) +
                           " blocks of " + std::to_string(kv_.block_size()) + " tokens)");

  std::shared_ptr<const structured::Grammar> grammar;
  if (request.settings.structured.format != OutputFormat::Text) grammar = grammar_for(request);

  auto live = std::make_unique<Live>(std::move(request), tokenizer_);
  Live& l = *live;
  if (grammar) l.grammar.emplace(std::move(grammar));
  l.seq.id = next_sequence_++;
  l.seq.tokens = l.request.prompt;
  l.seq.prompt_tokens = prompt;
  if (kv_.prefix_caching())
    l.seq.chain_root = chain_root_key(cache_domain_, l.request.settings.cache_salt);
  live_.emplace(l.request.id, std::move(live));
  if (max_tokens == 0) {  // nothing to compute
    RequestOutput out;
    finish(l, FinishReason::Length, {}, out);
    pending_.push_back(std::move(out));
    return;
  }
  by_sequence_[l.seq.id] = &l;
  scheduler_.add(l.seq);
}

structured::GrammarCache& Engine::grammars() {
  std::call_once(grammars_made_, [&] {
    // The vocabulary's bytes, once: ids the model has beyond the tokenizer's are never allowed.
    std::vector<std::string> bytes(size_t(backend_.vocab_size()));
    for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = tokenizer_->token_bytes(int32_t(t));
    grammars_ = std::make_unique<structured::GrammarCache>(
        std::make_shared<const structured::Vocabulary>(std::move(bytes), eos_ids_));
  });
  return *grammars_;
}

void Engine::prepare(const Request& request) {
  if (request.settings.structured.format == OutputFormat::Text || !tokenizer_ ||
      !backend_.token_masks())
    return;
  try {
    grammars().get(request.settings.structured);
  } catch (const std::exception&) {
    // submit() compiles it again and refuses the request with the reason, in order.
  }
}

std::shared_ptr<const structured::Grammar> Engine::grammar_for(const Request& request) {
  const StructuredOutput& s = request.settings.structured;
  const char* field = s.format == OutputFormat::Regex ? "guided_regex" : "guided_json";
  if (!tokenizer_)
    throw RequestError(request.id, field, "structured output needs the model's tokenizer");
  if (!backend_.token_masks())
    throw RequestError(request.id, field,
                       "structured output is not supported by the " + backend_.name() +
                           " backend (use the batched CUDA engine or the CPU)");
  try {
    return grammars().get(s);
  } catch (const structured::GrammarError& e) {
    throw RequestError(request.id, field, e.what());
  }
}

bool Engine::cancel(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  RequestOutput out;
  finish(*it->second, FinishReason::Cancelled, {}, out);
  pending_.push_back(std::move(out));
  return true;
}

bool Engine::fail(const std::string& id, const std::string& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  RequestOutput out;
  finish(*it->second, FinishReason::Error, error, out);
  pending_.push_back(std::move(out));
  return true;
}

bool Engine::hold(const std::string& id, bool held) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  Sequence& seq = it->second->seq;
  if (seq.held != held) held_ += held ? 1 : -1;
  seq.held = held;
  return true;
}

std::vector<std::string> Engine::live_ids() const {
  std::vector<std::string> ids;
  ids.reserve(live_.size());
  for (const auto& [id, live] : live_) ids.push_back(id);
  return ids;
}

void Engine::finish(Live& live, FinishReason reason, std::string error, RequestOutput& out) {
  const Clock::time_point now = Clock::now();
  out.id = live.request.id;
  FinishOutput& f = out.finish.emplace();
  f.reason = reason;
  f.error = std::move(error);
  f.prompt_tokens = live.seq.prompt_tokens;
  f.generated_tokens = live.seq.generated();
  f.cached_tokens = live.seq.cached_prompt_tokens;
  f.preemptions = live.seq.preemptions;
  if (live.scheduled) f.timings.queue_ms = ms_between(live.submitted, *live.scheduled);
  if (live.scheduled && live.prompt_done)
    f.timings.prefill_ms = ms_between(*live.scheduled, *live.prompt_done);
  if (live.first_token) {
    f.timings.ttft_ms = ms_between(live.submitted, *live.first_token);
    f.timings.decode_ms = ms_between(*live.first_token, now);
  }
  if (reason != FinishReason::Error) {
    if (live.decoder && !live.matcher.matched())
      f.final_visible = live.matcher.append(live.decoder->finish());
    f.final_visible += live.matcher.flush();
  }
  ++counters_.finished;
  if (reason == FinishReason::Cancelled) ++counters_.cancelled;
  if (live.seq.held) --held_;
  scheduler_.remove(live.seq);
  by_sequence_.erase(live.seq.id);
  live_.erase(live.request.id);  // `live` is gone from here on
}

void Engine::emit_token(Live& live, const SampleResult& sampled, RequestOutput& out) {
  Sequence& seq = live.seq;
  const RequestSettings& settings = live.request.settings;
  if (!live.first_token) live.first_token = Clock::now();
  seq.tokens.push_back(sampled.token);
  ++counters_.generated_tokens;

  // A token the mask allowed always advances; one that does not means no token could
  // continue the text (a vocabulary that cannot spell what the grammar needs).
  const bool off_grammar = live.grammar && !live.grammar->advance(sampled.token);

  TokenOutput& t = out.tokens.emplace_back();
  t.token = sampled.token;
  t.logprob = sampled.logprob;
  t.top_logprobs = sampled.top;
  if (live.decoder) t.text = live.decoder->push(sampled.token);
  t.visible = live.matcher.append(t.text);

  if (off_grammar)
    return finish(live, FinishReason::Error,
                  live.grammar->complete()
                      ? "structured output: the text is complete, but the model names no "
                        "end-of-sequence token to end it with"
                      : "structured output: no token of the vocabulary continues the text "
                        "within its grammar",
                  out);
  const bool eos = !settings.ignore_eos &&
                   std::find(eos_ids_.begin(), eos_ids_.end(), sampled.token) != eos_ids_.end();
  if (eos) return finish(live, FinishReason::Eos, {}, out);
  if (live.matcher.matched()) return finish(live, FinishReason::Stop, {}, out);
  // The next step would run the new token at position tokens.size() - 1.
  if (seq.generated() >= settings.max_tokens || int(seq.tokens.size()) > backend_.context_length())
    return finish(live, FinishReason::Length, {}, out);
}

std::vector<RequestOutput> Engine::fail_step(std::span<const SequenceId> sequences,
                                             const std::string& error) {
  std::vector<RequestOutput> outs;
  for (SequenceId seq : sequences) {
    auto it = by_sequence_.find(seq);  // some may have finished before the failure
    if (it == by_sequence_.end()) continue;
    RequestOutput& out = outs.emplace_back();
    finish(*it->second, FinishReason::Error, error, out);
  }
  return outs;
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  if (memory_) grow_kv();
  for (RequestOutput& out : pending_) outputs.push_back(std::move(out));
  pending_.clear();
  const Schedule schedule = scheduler_.schedule();
  if (schedule.empty()) {
    // Requests wait for memory another worker holds: pause rather than spin.
    if (memory_ && scheduler_.waiting() > 0 && scheduler_.running() == 0)
      memory_->wait_for_memory();
    if (memory_) shrink_kv();
    return outputs;
  }
  ++counters_.steps;
  counters_.last_step_sequences = int(schedule.chunks.size());
  counters_.last_step_tokens = schedule.tokens;

  const Clock::time_point now = Clock::now();
  ForwardBatch batch;
  batch.entries.reserve(schedule.chunks.size());
  std::vector<SequenceId> ids;
  for (const ScheduledChunk& c : schedule.chunks) {
    ids.push_back(c.seq->id);
    Live& live = *by_sequence_.at(c.seq->id);
    if (!live.scheduled) live.scheduled = now;
    batch.entries.push_back({std::span(c.seq->tokens).subspan(c.start, c.count), c.start,
                             kv_.block_table(c.seq->id), c.wants_logits()});
  }

  std::vector<SampleRequest> samples;
  std::vector<SequenceId> sampled;  // whose token each sample is
  try {
    backend_.forward(batch);
    for (size_t i = 0; i < schedule.chunks.size(); ++i) {
      const ScheduledChunk& c = schedule.chunks[i];
      c.seq->computed = c.start + c.count;
      counters_.forwarded_tokens += c.count;
      if (!c.wants_logits()) continue;
      const Live& live = *by_sequence_.at(c.seq->id);
      const RequestSettings& s = live.request.settings;
      samples.push_back({int(i), s.sampling, c.seq->tokens, uint64_t(c.seq->generated()),
                         s.logprobs,
                         live.grammar ? live.grammar->mask() : std::span<const uint32_t>()});
      sampled.push_back(c.seq->id);
    }
    const std::vector<SampleResult> results = backend_.sample(samples);
    // Only now, with the step known to have worked (a GPU reports a failed forward when it is
    // waited on), do the blocks it filled become findable, and before a finish frees them.
    for (const ScheduledChunk& c : schedule.chunks)
      kv_.cache_full_blocks(*c.seq, c.start, c.start + c.count);
    // Other workers may read them from now on, for the same reason.
    kv_.publish_queued();
    const Clock::time_point done = Clock::now();
    for (size_t i = 0; i < results.size(); ++i) {
      Live& live = *by_sequence_.at(sampled[i]);
      if (!live.prompt_done) live.prompt_done = done;
      RequestOutput& out = outputs.emplace_back();
      out.id = live.request.id;
      emit_token(live, results[i], out);
    }
  } catch (const std::exception& e) {
    // Nothing is guaranteed about the pool after a failed step: no cached block is trusted.
    kv_.forget_cached_blocks();
    std::vector<RequestOutput> failed =
        fail_step(ids, std::string("the ") + backend_.name() + " backend failed: " + e.what());
    for (RequestOutput& f : failed) outputs.push_back(std::move(f));
  }
  if (memory_) shrink_kv();
  return outputs;
}

void Engine::grow_kv() {
  // What the live sequences lack to hold every token they know, beyond what is free.
  auto lacking_blocks = [&] {
    int64_t lacking = 0;
    for (const auto& [seq, live] : by_sequence_)
      lacking += kv_.blocks_needed(seq, int(live->seq.tokens.size()));
    return lacking - kv_.pool().free();
  };
  int64_t lacking = lacking_blocks();
  if (lacking <= 0 || kv_.pool().total() >= memory_->max_blocks()) return;
  const Clock::time_point now = Clock::now();
  if (now < next_grow_) return;
  // Short: first find the waiting requests' prefixes, since blocks other workers computed need
  // no room in this pool (cached local ones are free blocks already: they change nothing).
  if (kv_.sharing()) {
    scheduler_.find_ahead();
    lacking = lacking_blocks();
    if (lacking <= 0) return;
  }
  try {
    const int asked = int(std::min<int64_t>(lacking, memory_->max_blocks()));
    counters_.kv_lease_asked_blocks += uint64_t(asked);
    const int got = memory_->grow(asked);
    if (got > 0) {
      kv_.grow(got);
      ++counters_.kv_lease_grows;
    } else {
      next_grow_ = now + std::chrono::milliseconds(10);
    }
  } catch (const std::exception& e) {
    // The provider is gone (the server stopped): the requests without blocks can never run.
    std::vector<Live*> stranded;
    for (const auto& [seq, live] : by_sequence_)
      if (kv_.block_table(seq).empty()) stranded.push_back(live);
    for (Live* live : stranded) {
      RequestOutput& out = pending_.emplace_back();
      finish(*live, FinishReason::Error, std::string("cannot lease KV memory: ") + e.what(), out);
    }
  }
}

void Engine::shrink_kv() {
  if (!live_.empty()) return;
  const int per_chunk = memory_->blocks_per_chunk();
  const int context = kv_.blocks_for(backend_.context_length());
  const int keep = std::min(kv_.pool().total(), (context + per_chunk - 1) / per_chunk * per_chunk);
  if (keep >= kv_.pool().total() || !kv_.shrink(keep)) return;
  ++counters_.kv_lease_shrinks;
  try {
    memory_->shrink(keep);
  } catch (const std::exception&) {
    // The blocks are gone from the pool either way; the server takes back whatever it still
    // counts when the connection closes.
  }
}

bool Engine::has_work() const {
  return !live_.empty() || !pending_.empty();
}

bool Engine::can_step() const {
  return !pending_.empty() || int(live_.size()) > held_;
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  s.held = held_;
  s.running = scheduler_.running();
  s.waiting = scheduler_.waiting();
  s.kv_blocks_used = kv_.pool().used();
  s.kv_blocks_total = kv_.pool().total();
  s.kv_block_size = kv_.block_size();
  s.preemptions = scheduler_.preemptions();
  s.prefix_cache_queries = scheduler_.prefix_cache_queries();
  s.prefix_cache_hits = scheduler_.prefix_cache_hits();
  s.prefix_cache_blocks = kv_.cached_blocks();
  s.prefix_cache_evicted_blocks = kv_.evicted_blocks();
  s.kv_share = kv_.sharing();
  s.kv_share_hit_tokens = scheduler_.shared_hit_tokens();
  s.kv_share_hit_blocks = scheduler_.shared_hit_tokens() / uint64_t(kv_.block_size());
  s.kv_share_published_blocks = kv_.shared_published_blocks();
  s.kv_share_lookups = kv_.shared_lookups();
  if (memory_) {
    s.kv_lease = true;
    s.kv_lease_chunks = memory_->chunks();
    s.kv_lease_bytes = memory_->bytes();
  }
  return s;
}

}  // namespace hearth
