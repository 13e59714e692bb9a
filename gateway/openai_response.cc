#include "gateway/openai_response.h"

#include <cmath>

namespace hearth::gateway {

using json = nlohmann::json;

namespace {

bool is_chat(const CompletionRequest& r) {
  return r.endpoint == Endpoint::ChatCompletions;
}

// JSON has no NaN or infinity: a logprob of -inf (a token with zero probability under the
// filters, reported raw) is written as OpenAI writes its floor, a very negative number.
json logprob_value(double lp) {
  if (std::isnan(lp)) return json();
  return std::isinf(lp) ? -9999.0 : lp;
}

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

json chat_logprobs(const std::vector<TokenLogprob>& tokens,
                   const std::function<std::string(int32_t)>& token_text) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string text = token_text(id);
      top.push_back({{"token", text}, {"logprob", logprob_value(lp)}, {"bytes", utf8_bytes(text)}});
    }
    content.push_back({{"token", t.text},
                       {"logprob", logprob_value(t.logprob)},
                       {"bytes", utf8_bytes(t.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The legacy completions form: parallel arrays, text_offset counted in bytes of the choice's
// text from `offset`.
json completion_logprobs(const std::vector<TokenLogprob>& tokens, size_t offset,
                         const std::function<std::string(int32_t)>& token_text) {
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    texts.push_back(t.text);
    lps.push_back(logprob_value(t.logprob));
    // The chosen token is always listed beside its alternatives, as OpenAI's API states
    // ("up to logprobs+1 elements") and vLLM does: logprobs 0 gives it alone.
    json top = json::object();
    top[t.text] = logprob_value(t.logprob);
    for (const auto& [id, lp] : t.top) top[token_text(id)] = logprob_value(lp);
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.text.size();
  }
  return {
      {"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_of(const CompletionRequest& request, const std::vector<ChoiceState>& choices) {
  int prompt = 0, completion = 0, cached = 0;
  for (const ChoiceState& c : choices) {
    // A prompt is counted once however many choices (n) were generated from it.
    if (c.index % request.n == 0) {
      prompt += c.prompt_tokens;
      cached += c.cached_tokens;
    }
    completion += c.completion_tokens;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

}  // namespace

std::optional<std::string> finish_reason_of(const std::string& stop) {
  if (stop == "eos" || stop == "stop") return "stop";
  if (stop == "length") return "length";
  return std::nullopt;
}

json make_response(const CompletionRequest& request, const ResponseMeta& meta,
                   const std::vector<ChoiceState>& choices,
                   const std::function<std::string(int32_t)>& token_text) {
  json out_choices = json::array();
  for (const ChoiceState& c : choices) {
    json choice = {{"index", c.index},
                   {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json()}};
    if (is_chat(request)) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        // OpenAI: content null unless the model wrote text before its calls.
        if (c.text.empty()) choice["message"]["content"] = json();
        json calls = json::array();
        for (const auto& [id, call] : c.tool_calls)
          calls.push_back({{"id", id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        choice["message"]["tool_calls"] = std::move(calls);
      }
      choice["logprobs"] = request.want_logprobs ? chat_logprobs(c.logprobs, token_text) : json();
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          request.want_logprobs ? completion_logprobs(c.logprobs, 0, token_text) : json();
    }
    out_choices.push_back(std::move(choice));
  }
  return {{"id", meta.id},
          {"object", is_chat(request) ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", out_choices},
          {"usage", usage_of(request, choices)}};
}

json make_chunk(const CompletionRequest& request, const ResponseMeta& meta, int index,
                const std::string& delta_text, const std::vector<TokenLogprob>& logprobs,
                const std::optional<std::string>& finish_reason, bool first,
                const std::function<std::string(int32_t)>& token_text, size_t text_offset) {
  json choice = {{"index", index},
                 {"finish_reason", finish_reason ? json(*finish_reason) : json()}};
  if (is_chat(request)) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!delta_text.empty() || (first && !finish_reason)) delta["content"] = delta_text;
    choice["delta"] = delta;
    choice["logprobs"] =
        request.want_logprobs && !logprobs.empty() ? chat_logprobs(logprobs, token_text) : json();
  } else {
    choice["text"] = delta_text;
    choice["logprobs"] = request.want_logprobs && !logprobs.empty()
                             ? completion_logprobs(logprobs, text_offset, token_text)
                             : json();
  }
  json chunk = {{"id", meta.id},
                {"object", is_chat(request) ? "chat.completion.chunk" : "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({choice})}};
  if (request.include_usage) chunk["usage"] = json();  // OpenAI: null on all but the last chunk
  return chunk;
}

std::vector<json> make_tool_call_chunks(const CompletionRequest& request, const ResponseMeta& meta,
                                        int index, int call_index, const std::string& id,
                                        const ParsedToolCall& call, bool first) {
  std::vector<json> out;
  const json heads[] = {{{"index", call_index},
                         {"id", id},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", ""}}}},
                        {{"index", call_index}, {"function", {{"arguments", call.arguments}}}}};
  for (const json& head : heads) {
    json chunk = make_chunk(request, meta, index, "", {}, std::nullopt, first, {});
    json& delta = chunk["choices"][0]["delta"];
    delta.erase("content");
    delta["tool_calls"] = json::array({head});
    out.push_back(std::move(chunk));
    first = false;
  }
  return out;
}

json make_usage_chunk(const CompletionRequest& request, const ResponseMeta& meta,
                      const std::vector<ChoiceState>& choices) {
  return {{"id", meta.id},
          {"object", is_chat(request) ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_of(request, choices)}};
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace hearth::gateway
