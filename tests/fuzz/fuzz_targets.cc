#include "tests/fuzz/fuzz_targets.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <optional>
#include <span>
#include <string>

#include "gateway/api_error.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"
#include "ipc/errors.h"
#include "base/json_limits.h"
#include "ipc/protocol.h"
#include "ipc/serve_limits.h"
#include "base/utf8.h"
#include "weight-server/model/hf_model.h"
#include "weight-server/model/model_config.h"
#include "weight-server/model/safetensors.h"
#include "worker/engine/profile.h"
#include "worker/engine/request.h"
#include "worker/serve_protocol.h"
#include "tokenizer/tokenizer.h"

namespace hearth::fuzz {

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw FuzzBug(what);
}

// A refusal must say which file it is about, in text that can be sent on as JSON.
void check_refusal(const std::runtime_error& e, std::string_view label) {
  const std::string_view message = e.what();
  check(message.find(label) != std::string_view::npos,
        "the error does not name " + std::string(label) + ": " + std::string(message));
  check(!find_invalid_utf8(message), "the error is not valid UTF-8: " + std::string(message));
}

// The default model's tokenizer, read once.
const Tokenizer& default_tokenizer() {
  static const Tokenizer tokenizer = [] {
    std::ifstream in(std::string(HEARTH_SOURCE_DIR) + "/models/hearth-tiny-fortunes/tokenizer.json",
                     std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return Tokenizer::from_json(text.str());
  }();
  return tokenizer;
}

}  // namespace

bool config_json(std::string_view data) {
  ModelConfig c;
  try {
    c = parse_model_config(parse_json(data, "config.json", kMaxEmbeddedJsonDepth), "config.json");
  } catch (const std::runtime_error& e) {
    check_refusal(e, "config.json");
    return false;
  }
  // Accepted: every size the engine derives is positive and within the caps, so no product of
  // them can wrap, and the tensor list is short.
  check(c.hidden > 0 && c.hidden <= kMaxModelDim, "hidden_size out of range");
  check(c.intermediate > 0 && c.intermediate <= kMaxModelDim, "intermediate_size out of range");
  check(c.q_dim() > 0 && c.q_dim() <= kMaxModelDim, "q_dim out of range");
  check(c.kv_dim() > 0 && c.kv_dim() <= c.q_dim(), "kv_dim out of range");
  check(c.vocab > 0 && c.vocab <= kMaxVocab, "vocab_size out of range");
  check(c.n_layers > 0 && c.n_layers <= kMaxLayers, "num_hidden_layers out of range");
  check(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim not positive and even");
  check(c.parameter_count() <= kMaxParameters, "parameter count over the cap");
  const std::vector<ExpectedTensor> tensors = expected_tensors(c);
  // 14 per layer at most, plus a scale beside each of the 7 projections of an fp8 model.
  check(tensors.size() <= 21 * size_t(c.n_layers) + 3, "too many expected tensors");
  for (const ExpectedTensor& t : tensors)
    for (int64_t d : t.shape) check(d > 0, "tensor '" + t.name + "' has an empty dimension");
  for (float f : rope_inverse_frequencies(c))
    check(std::isfinite(f) && f >= 0, "a RoPE frequency is not finite");
  return true;
}

bool tokenizer_json(std::string_view data) {
  std::optional<Tokenizer> tokenizer;
  try {
    tokenizer.emplace(Tokenizer::from_json(data));
  } catch (const std::runtime_error& e) {
    check_refusal(e, "tokenizer.json");
    return false;
  }
  // Accepted: encoding and decoding any text works, and streaming decodes what decode does.
  for (const std::string_view text :
       {std::string_view("Hello, world! 12345 caf\xc3\xa9\n\t "),
        std::string_view("\xff\xfe invalid \xc3"), std::string_view("")}) {
    const std::vector<int32_t> ids = tokenizer->encode(text, true);
    const std::string decoded = tokenizer->decode(ids, false);
    check(!find_invalid_utf8(decoded), "decode gave text that is not UTF-8");
    StreamDecoder stream(*tokenizer, false);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    check(streamed == decoded, "streamed decoding differs from decode");
  }
  const int32_t out_of_range[] = {-1, int32_t(tokenizer->vocab_size()), 1 << 30};
  tokenizer->decode(out_of_range, true);
  return true;
}

bool safetensors(std::string_view data) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data.data()),
                                         data.size());
  SafetensorsHeader header;
  try {
    header = parse_safetensors(image, "model.safetensors");
  } catch (const std::runtime_error& e) {
    check_refusal(e, "model.safetensors");
    return false;
  }
  for (const SafetensorsEntry& e : header.tensors) {
    check(e.file_offset <= image.size() && e.info.bytes <= image.size() - e.file_offset,
          "tensor '" + e.info.name + "' runs past the end of the file");
    check(e.info.numel() * dtype_size(e.info.dtype) == e.info.bytes,
          "tensor '" + e.info.name + "' has bytes that disagree with its shape");
  }
  return true;
}

bool profile_json(std::string_view data) {
  Profile profile;
  try {
    profile = parse_profile(data, "profile.json");
  } catch (const std::runtime_error& e) {
    check_refusal(e, "profile.json");
    return false;
  }
  // Accepted: what it prints reads back as the same profile.
  Profile again;
  apply_profile_json(again, profile_to_json(profile), "again");
  check(profile_to_json(again) == profile_to_json(profile), "a profile does not round-trip");
  return true;
}

namespace {

// A refused request: a 400 that names a field or says what is wrong, in a body that dumps.
bool refused(const gateway::ApiError& e) {
  check(e.status() == 400, "status " + std::to_string(e.status()) + ": " + e.what());
  check(!e.param().empty() || *e.what() != '\0', "an error that names nothing");
  try {
    (void)e.body().dump();
  } catch (const std::exception& x) {
    throw FuzzBug(std::string("the error body does not dump: ") + x.what());
  }
  return false;
}

// An accepted completion request: within every bound, and what it sends a worker fits its
// frame (checked, as the gateway does, before anything is sent).
void check_completion(const gateway::CompletionRequest& r) {
  check(r.n >= 1 && r.prompts.size() * size_t(r.n) <= 16, "n or the prompts out of range");
  check(r.settings.max_tokens >= 1, "max_tokens below 1");
  // The gateway reads settings through the engine's checks: the worker never refuses them.
  try {
    check_settings(r.settings);
  } catch (const SettingError& e) {
    throw FuzzBug(std::string("accepted settings fail the engine's check: ") + e.what());
  }
  check(r.cache_salt.size() <= gateway::kMaxCacheSaltBytes, "cache_salt over its bound");
  check(r.settings.stop.size() <= 16, "too many stop strings");
  for (const std::string& s : r.settings.stop)
    check(!s.empty() && s.size() <= gateway::kMaxStopStringBytes, "a stop string out of bounds");
  for (const gateway::PromptInput& p : r.prompts) {
    // A text prompt's stand-in ids: one per byte, as many as it could possibly have.
    const std::vector<int32_t> ids =
        p.text ? std::vector<int32_t>(p.text->size() + 1, 1) : p.tokens;
    gateway::check_prompt_fits(r, ids.size(), 4096);
    gateway::check_submit_size(r, gateway::worker_request_json(r, "cmpl-0-0", ids, 1),
                               ipc::max_submit_bytes(4096, 4096));
  }
}

}  // namespace

bool gateway_request(std::string_view data) {
  nlohmann::ordered_json body;
  try {
    body = gateway::parse_request_body(data);
  } catch (const gateway::ApiError& e) {
    return refused(e);
  }
  bool accepted = false;
  for (const gateway::Endpoint endpoint :
       {gateway::Endpoint::Completions, gateway::Endpoint::ChatCompletions}) {
    try {
      check_completion(gateway::parse_completion_request(body, endpoint, {}));
      accepted = true;
    } catch (const gateway::ApiError& e) {
      refused(e);
    }
  }
  try {
    gateway::parse_tokenize_request(body);
    accepted = true;
  } catch (const gateway::ApiError& e) {
    refused(e);
  }
  try {
    const gateway::DetokenizeRequest d = gateway::parse_detokenize_request(body);
    gateway::check_vocabulary(d.tokens, 4096, "tokens");
    accepted = true;
  } catch (const gateway::ApiError& e) {
    refused(e);
  }
  return accepted;
}

bool serve_request(std::string_view data) {
  // As the broker hands a frame to the worker: parsed within the depth limit, the envelope
  // checked (its refusals are the broker's, not the worker's).
  ipc::Request request;
  try {
    request = ipc::parse_request(parse_json(data, "frame"));
  } catch (const std::runtime_error&) {
    return false;
  }
  const std::string op = request.op;
  try {
    if (op == ipc::op::kSubmit) {
      RequestSettings defaults;
      const Request r =
          submit_request(submit_request_object(request.body), defaults, &default_tokenizer());
      check(!r.id.empty() && r.id.size() <= ipc::kMaxRequestIdBytes, "an id out of bounds");
      check(!find_invalid_utf8(r.id), "an id that is not UTF-8");
      for (const int32_t t : r.prompt) check(t >= 0, "a negative token id");
      // Settings are read through the engine's checks (request_settings.h): what the reader
      // took, the engine's check of the request takes too.
      try {
        check_request_settings(r.id, r.settings);
      } catch (const RequestError& e) {
        throw FuzzBug(std::string("an accepted submit fails the engine's check: ") + e.what());
      }
    } else if (op == ipc::op::kCancel) {
      const std::string id = cancel_request_id(request.body);
      check(!id.empty() && id.size() <= ipc::kMaxRequestIdBytes, "a cancel id out of bounds");
    } else if (op == ipc::op::kEvents || op == ipc::op::kStats) {
      check_no_arguments(request.body, op);
    } else {
      return false;  // the worker answers unknown_op without reading the body
    }
  } catch (const ipc::ProtocolError& e) {
    check(e.code() == ipc::ErrorCode::kBadRequest, "a refusal that is not bad_request");
    check_refusal(e, op);
    return false;
  }
  return true;
}

}  // namespace hearth::fuzz
