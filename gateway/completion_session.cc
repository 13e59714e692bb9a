#include "gateway/completion_session.h"

#include <atomic>

#include "gateway/api_error.h"
#include "gateway/tool_calls/forced_tool_call.h"
#include "gateway/tool_calls/tool_call_chunks.h"
#include "ipc/errors.h"

namespace hearth::gateway {

using json = nlohmann::json;

namespace {

// Worker request ids: unique within the gateway process, readable in worker logs.
std::string next_request_id(const std::string& response_id, int choice) {
  return response_id + "-" + std::to_string(choice);
}

// The worker's refusal of a request ("request 'ID': FIELD: why") as the client's 400: the
// worker's id is the gateway's own, never shown; FIELD becomes `param`, named as this endpoint
// names it. The gateway checks the context itself first (check_prompt_fits); a worker whose
// profile gives it a shorter context is caught here, with the same code.
ApiError refusal_error(const std::string& message, const std::string& request_id,
                       Endpoint endpoint) {
  std::string rest = message;
  const std::string prefix = "request '" + request_id + "': ";
  if (rest.starts_with(prefix)) rest = rest.substr(prefix.size());
  std::string param;
  if (const size_t colon = rest.find(": "); colon != std::string::npos && colon < 32) {
    param = rest.substr(0, colon);
    if (param == "prompt" && endpoint == Endpoint::ChatCompletions) param = "messages";
  }
  ApiError e(400, "invalid_request_error", rest, param);
  if (rest.find("exceed the context length") != std::string::npos)
    e.with_code("context_length_exceeded");
  return e;
}

ApiError submit_error(const ipc::IpcError& e, const std::string& request_id, Endpoint endpoint) {
  if (const auto* p = dynamic_cast<const ipc::ProtocolError*>(&e)) {
    switch (p->code()) {
      case ipc::ErrorCode::kBadRequest:
      case ipc::ErrorCode::kTooLarge:
        return refusal_error(p->message(), request_id, endpoint);
      case ipc::ErrorCode::kBusy:
        return ApiError(429, "rate_limit_error", "the worker's queue is full: " + p->message(), "",
                        1);
      case ipc::ErrorCode::kShuttingDown:
        return ApiError(503, "server_error", "the worker is shutting down", "", 1);
      default:
        break;
    }
  }
  return ApiError(503, "server_error", std::string("the worker is unavailable: ") + e.what(), "",
                  1);
}

// A request without max_tokens may run to the end of what the worker holds for one sequence
// (its context, or its whole KV pool if smaller), capped by generation_config.json's
// max_new_tokens: vLLM's default, so a long prompt is not refused for a budget nobody asked for.
// A worker that does not say is taken to hold the model's whole context.
int default_max_tokens(const CompletionRequest& r, size_t prompt_tokens,
                       int64_t max_sequence_tokens) {
  if (max_sequence_tokens <= 0) return r.settings.max_tokens;  // nothing known: only the cap
  const int64_t room = max_sequence_tokens - int64_t(prompt_tokens);
  if (room < 1)
    throw bad_param(r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt",
                    "is " + std::to_string(prompt_tokens) +
                        " tokens, which leaves no room for a token in the worker's " +
                        std::to_string(max_sequence_tokens) + " tokens per sequence");
  return int(std::min<int64_t>(room, r.settings.max_tokens));
}

}  // namespace

CompletionSession::CompletionSession(CompletionRequest request, ResponseMeta meta,
                                     const ModelEntry& model,
                                     std::shared_ptr<WorkerConnection> worker, Metrics& metrics)
    : request_(std::move(request)),
      meta_(std::move(meta)),
      model_(model),
      worker_(std::move(worker)),
      metrics_(metrics),
      start_(Clock::now()) {
  const size_t n = request_.prompts.size() * size_t(request_.n);
  choices_.resize(n);
  done_.assign(n, false);
  first_chunk_sent_.assign(n, false);
  last_token_.resize(n);
  logprob_offset_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    choices_[i].index = int(i);
    request_ids_.push_back(next_request_id(meta_.id, int(i)));
  }
  if (request_.tools.parse) {
    for (ChoiceState& c : choices_)
      c.tool_parser =
          std::make_shared<ToolCallParser>(model_.tool_format, request_.tools.parallel ? 0 : 1);
    // A forced Mistral call's grammar writes the array without its [TOOL_CALLS] token.
    if (request_.tools.forced && forced_call_primes_parser(model_.tool_format))
      for (ChoiceState& c : choices_) c.tool_parser->feed(tool_call_start(model_.tool_format));
  }
}

void CompletionSession::start(const std::vector<std::vector<int32_t>>& prompts, uint64_t seed) {
  // Each choice's callback owns the session until the choice's last event: a client that left
  // (or a deadline) cancels, and the worker's "cancelled" end must still find the session to be
  // counted as an abort in the metrics. Every choice ends (its last event, or fail_all when the
  // worker dies), so the cycle through the connection always breaks.
  std::shared_ptr<CompletionSession> self = shared_from_this();
  // Every choice's submit is built and checked before the first is sent: one the worker could
  // not read is a 400 here, not a submit that costs the connection.
  std::vector<json> submits;
  for (size_t i = 0; i < choices_.size(); ++i) {
    // Choice j of a prompt samples with seed + j: n choices differ, and each is reproducible
    // by asking for it alone with that seed.
    const uint64_t choice_seed = seed + uint64_t(i % size_t(request_.n));
    const std::vector<int32_t>& prompt = prompts[i / size_t(request_.n)];
    submits.push_back(worker_request_json(request_, request_ids_[i], prompt, choice_seed));
    if (!request_.max_tokens_given)
      submits.back()["max_tokens"] =
          default_max_tokens(request_, prompt.size(),
                             worker_->max_sequence_tokens() > 0 ? worker_->max_sequence_tokens()
                                                                : model_.context_length);
    check_submit_size(request_, submits.back(), worker_->max_request_bytes());
  }
  if (request_.echo) {
    // Each choice's text starts with its prompt (as given, or its token ids decoded, as vLLM
    // does); streamed, as each choice's first chunk, before any token can arrive.
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < choices_.size(); ++i) {
      const size_t p = i / size_t(request_.n);
      const PromptInput& input = request_.prompts[p];
      choices_[i].text =
          input.text ? *input.text : model_.tokenizer->decode(prompts[p], /*skip_special=*/false);
      if (request_.stream)
        pending_sse_.push_back(
            sse_event(make_chunk(request_, meta_, int(i), choices_[i].text, {}, std::nullopt, true,
                                 [this](int32_t id) { return token_text(id); })));
    }
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    {
      std::lock_guard lock(mutex_);
      choices_[i].prompt_tokens = int(prompts[i / size_t(request_.n)].size());
    }
    try {
      worker_->submit(std::move(submits[i]),
                      [self, i](const json& event) { self->on_event(int(i), event); });
    } catch (const ipc::IpcError& e) {
      for (size_t j = 0; j < i; ++j) worker_->cancel(request_ids_[j]);
      throw submit_error(e, request_ids_[i], request_.endpoint);
    }
  }
}

std::string CompletionSession::token_text(int32_t id) const {
  const int32_t one[] = {id};
  return model_.tokenizer->decode(one, /*skip_special_tokens=*/false);
}

void CompletionSession::on_event(int i, const json& event) {
  std::lock_guard lock(mutex_);
  if (done_[i]) return;
  ChoiceState& c = choices_[i];
  if (event.value("done", false)) {
    finish_choice(i, event);
    changed_.notify_all();
    return;
  }
  // A token: its visible text (stop strings held back by the worker) and its logprobs.
  const auto now = Clock::now();
  if (ttft_s_ < 0) ttft_s_ = std::chrono::duration<double>(now - start_).count();
  if (last_token_[i])
    inter_token_s_.push_back(std::chrono::duration<double>(now - *last_token_[i]).count());
  last_token_[i] = now;
  ++c.completion_tokens;
  // "visible": the text safe to show (stop strings and their possible starts held back).
  std::string text = event.value("visible", event.value("text", ""));
  std::vector<TokenLogprob> lps;
  if (request_.want_logprobs && event.contains("token")) {
    TokenLogprob t;
    t.token = event["token"].get<int32_t>();
    t.text = token_text(t.token);
    t.logprob = event.contains("logprob") && event["logprob"].is_number()
                    ? event["logprob"].get<double>()
                    : std::numeric_limits<double>::quiet_NaN();
    if (event.contains("top_logprobs"))
      for (const json& alt : event["top_logprobs"])
        t.top.emplace_back(alt.at("token").get<int32_t>(),
                           alt.at("logprob").is_number()
                               ? alt["logprob"].get<double>()
                               : -std::numeric_limits<double>::infinity());
    c.logprobs.push_back(t);
    lps.push_back(std::move(t));
  }
  if (c.tool_parser) {
    // A special token that opens a call (left out of the worker's text) goes back in.
    const std::string_view start = tool_call_start(model_.tool_format);
    if (special_marker(model_.tool_format) && event.value("text", "").empty() &&
        event.contains("token") && token_text(event["token"].get<int32_t>()) == start)
      text += start;
    release(i, c.tool_parser->feed(text), std::move(lps));
    return;
  }
  c.text += text;
  if (request_.stream && (!text.empty() || !lps.empty())) {
    // This token's text_offset: the tokens before it, counted as the whole response counts.
    const size_t offset = logprob_offset_[i];
    for (const TokenLogprob& t : lps) logprob_offset_[i] += t.text.size();
    pending_sse_.push_back(sse_event(make_chunk(
        request_, meta_, i, text, lps, std::nullopt, !first_chunk_sent_[i],
        [this](int32_t id) { return token_text(id); }, offset)));
    first_chunk_sent_[i] = true;
    changed_.notify_all();
  }
}

// Called with mutex_ held: what a choice's tool-call parser released, as content and calls
// (and as chunks, streaming), in the order the model wrote them.
void CompletionSession::release(int i, std::vector<ToolCallPiece> pieces,
                                std::vector<TokenLogprob> lps) {
  bool first = !first_chunk_sent_[i];
  const auto chunks =
      release_tool_pieces(request_, meta_, model_.tool_format, choices_[i], std::move(pieces),
                          std::move(lps), first, [this](int32_t id) { return token_text(id); });
  first_chunk_sent_[i] = !first;
  for (const json& chunk : chunks) pending_sse_.push_back(sse_event(chunk));
  if (!chunks.empty()) changed_.notify_all();
}

// Called with mutex_ held.
void CompletionSession::finish_choice(int i, const json& event) {
  ChoiceState& c = choices_[i];
  done_[i] = true;
  ++finished_;
  const std::string stop = event.value("stop", "error");
  std::string tail = event.value("visible", "");  // text held back until the end
  if (c.tool_parser) {
    std::vector<ToolCallPiece> pieces = c.tool_parser->feed(tail);
    for (ToolCallPiece& p : c.tool_parser->finish()) pieces.push_back(std::move(p));
    release(i, std::move(pieces), {});
    tail.clear();
  }
  c.text += tail;
  if (event.contains("prompt_tokens")) c.prompt_tokens = event["prompt_tokens"].get<int>();
  if (event.contains("cached_tokens")) c.cached_tokens = event["cached_tokens"].get<int>();
  c.finish_reason = finish_reason_of(stop);
  if (c.finish_reason) {
    // The worker's own times for this sequence: waiting, prompt, generation.
    const json timings = event.value("timings", json::object());
    choice_times_.push_back({timings.value("queue_ms", 0.0) / 1000,
                             timings.value("prefill_ms", 0.0) / 1000,
                             timings.value("decode_ms", 0.0) / 1000});
  }
  if (c.finish_reason && !c.tool_calls.empty()) c.finish_reason = "tool_calls";
  if (!c.finish_reason && stop != "cancelled" && !failure_)
    failure_ = event.value("error", "the worker failed the request (" + stop + ")");
  if (request_.stream && c.finish_reason) {
    pending_sse_.push_back(
        sse_event(make_chunk(request_, meta_, i, tail, {}, c.finish_reason, !first_chunk_sent_[i],
                             [this](int32_t id) { return token_text(id); })));
    first_chunk_sent_[i] = true;
  }
  if (finished_ == int(choices_.size())) {
    if (request_.stream) {
      if (failure_) {
        // OpenAI's streaming error shape: an error object in the data, then the end.
        pending_sse_.push_back(sse_event(ApiError(500, "server_error", *failure_).body()));
      } else if (request_.include_usage) {
        pending_sse_.push_back(sse_event(make_usage_chunk(request_, meta_, choices_)));
      }
      pending_sse_.push_back(kSseDone);
      stream_closed_ = true;
    }
    record_metrics();
  }
}

void CompletionSession::record_metrics() {
  RequestRecord r;
  r.model = request_.model_name;
  r.finish_reason = failure_ ? "error" : cancelled_ ? "abort" : "stop";
  for (const ChoiceState& c : choices_) {
    if (c.finish_reason == "length" && !failure_ && !cancelled_) r.finish_reason = "length";
    if (c.index % request_.n == 0) r.prompt_tokens += c.prompt_tokens;
    r.generation_tokens += c.completion_tokens;
  }
  r.choices = std::move(choice_times_);
  r.ttft_s = ttft_s_;
  r.e2e_s = std::chrono::duration<double>(Clock::now() - start_).count();
  r.inter_token_s = std::move(inter_token_s_);
  metrics_.record(r);
}

std::optional<std::string> CompletionSession::next_sse(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return !pending_sse_.empty() || stream_closed_; });
  if (pending_sse_.empty()) return stream_closed_ ? std::nullopt : std::optional<std::string>("");
  std::string out;
  while (!pending_sse_.empty()) {  // everything ready goes out in one write
    out += pending_sse_.front();
    pending_sse_.pop_front();
  }
  return out;
}

json CompletionSession::wait_response(Clock::time_point deadline,
                                      const std::function<bool()>& client_gone) {
  std::unique_lock lock(mutex_);
  const auto all_done = [&] { return finished_ == int(choices_.size()); };
  while (!all_done()) {
    // The socket is asked between waits, without the lock: the worker's events keep coming.
    const auto until = client_gone ? std::min(deadline, Clock::now() + kClientCheck) : deadline;
    if (changed_.wait_until(lock, until, all_done)) break;
    if (Clock::now() >= deadline) {
      lock.unlock();
      cancel();
      throw ApiError(504, "timeout_error", "the request did not finish within its time limit");
    }
    lock.unlock();
    const bool gone = client_gone && client_gone();
    if (gone) {
      cancel();
      throw ApiError(499, "client_closed_request",
                     "the client closed the connection before the response was ready");
    }
    lock.lock();
  }
  if (failure_) throw ApiError(500, "server_error", *failure_);
  return make_response(request_, meta_, choices_, [this](int32_t id) { return token_text(id); });
}

void CompletionSession::cancel() {
  std::vector<std::string> open;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) return;
    cancelled_ = true;
    for (size_t i = 0; i < choices_.size(); ++i)
      if (!done_[i]) open.push_back(request_ids_[i]);
  }
  for (const std::string& id : open) worker_->cancel(id);
}

}  // namespace hearth::gateway
