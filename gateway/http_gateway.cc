#include "gateway/http_gateway.h"

#include <random>

#include "gateway/api_error.h"
#include "gateway/completion_session.h"
#include "gateway/http/server.h"
#include "gateway/request_json.h"
#include "gateway/token_request.h"

namespace hearth::gateway {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Never throws for any message: ApiError::body() holds only valid UTF-8.
void send_error(http::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.retry_after_s()) res.set_header("Retry-After", std::to_string(*e.retry_after_s()));
  res.set_content(e.body().dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

const ModelEntry& find_model(const ModelCatalog& catalog, const std::string& name) {
  const ModelEntry* m = catalog.find(name);
  if (!m)
    throw ApiError(404, "invalid_request_error",
                   "the model '" + name + "' does not exist (GET /v1/models lists them)", "model");
  return *m;
}

std::string render_chat(const ModelEntry& model, const ordered_json& messages,
                        bool add_generation_prompt, const ordered_json& extra) {
  if (!model.chat_template)
    throw ApiError(400, "invalid_request_error", model.chat_template_error, "messages");
  ChatTemplateInput in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  in.extra = extra;
  try {
    return model.chat_template->render(in);
  } catch (const std::exception& e) {
    throw ApiError(400, "invalid_request_error",
                   std::string("the chat template refused the messages: ") + e.what(), "messages");
  }
}

// Token ids of one prompt as the model's tokenizer gives them: text gets the post-processor's
// special tokens, a rendered chat template already holds them.
std::vector<int32_t> tokenize(const ModelEntry& model, const PromptInput& p,
                              const CompletionRequest& r) {
  std::vector<int32_t> ids;
  if (!p.messages.is_null() && !p.messages.empty()) {
    ids = model.tokenizer->encode(
        render_chat(model, p.messages, r.add_generation_prompt, r.template_extra),
        /*add_special_tokens=*/false);
  } else if (p.text) {
    ids = model.tokenizer->encode(*p.text, /*add_special_tokens=*/true);
  } else {
    ids = p.tokens;
  }
  check_prompt_fits(r, ids.size(), model.context_length);
  return ids;
}

// /tokenize and /detokenize: their bodies checked, then the model's tokenizer.
std::string tokenize_response(const ModelCatalog& catalog, const ordered_json& body) {
  const TokenizeRequest r = parse_tokenize_request(body);
  const ModelEntry& model = find_model(catalog, split_model_profile(r.model).first);
  const std::vector<int32_t> ids =
      r.prompt ? model.tokenizer->encode(*r.prompt, r.add_special_tokens)
               : model.tokenizer->encode(
                     render_chat(model, r.messages, r.add_generation_prompt, json::object()),
                     r.add_special_tokens);
  return json{{"count", ids.size()}, {"max_model_len", model.context_length}, {"tokens", ids}}
      .dump();
}

std::string detokenize_response(const ModelCatalog& catalog, const ordered_json& body) {
  const DetokenizeRequest r = parse_detokenize_request(body);
  const ModelEntry& model = find_model(catalog, split_model_profile(r.model).first);
  check_vocabulary(r.tokens, model.tokenizer->vocab_size(), "tokens");
  return json{{"prompt", model.tokenizer->decode(r.tokens, false)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

// Decrements the in-flight count when the last owner lets go (the handler, or the stream).
class Admission {
 public:
  explicit Admission(std::atomic<int>& count) : count_(count) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  ~Admission() { --count_; }

 private:
  std::atomic<int>& count_;
};

}  // namespace

HttpGateway::HttpGateway(HttpOptions options, const ModelCatalog& catalog, WorkerPool& pool,
                         Metrics& metrics)
    : options_(std::move(options)),
      catalog_(catalog),
      pool_(pool),
      metrics_(metrics),
      server_(std::make_unique<http::Server>([this] {
        http::ServerOptions o;
        o.max_connections = options_.max_connections;
        o.limits.max_body_bytes = options_.max_body_bytes;
        o.request_timeout = options_.read_timeout;
        o.write_timeout = std::chrono::seconds(30);
        o.keep_alive_timeout = std::chrono::seconds(5);
        return o;
      }())) {
  routes();
}

HttpGateway::~HttpGateway() = default;

void HttpGateway::bind() {
  port_ = server_->bind(options_.host, options_.port);  // listens with a SOMAXCONN backlog
}

void HttpGateway::run() {
  server_->run();
}

void HttpGateway::stop() {
  server_->stop();
}

void HttpGateway::routes() {
  http::Server& s = *server_;

  s.set_pre_routing_handler([this](const http::Request& req, http::Response& res) {
    const bool protected_path =
        req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
    if (options_.api_key && protected_path &&
        req.get_header_value("Authorization") != "Bearer " + *options_.api_key) {
      send_error(res, ApiError(401, "authentication_error",
                               "a valid API key is required (Authorization: Bearer KEY)"));
      return http::HandlerResponse::Handled;
    }
    return http::HandlerResponse::Unhandled;
  });

  // Statuses the server answers itself (400, 404, 405, 408, 413, 431, ...) get OpenAI bodies
  // naming what was wrong.
  s.set_error_handler([](const http::Request&, http::Response& res) {
    if (!res.body.empty()) return;
    const std::string message =
        res.error_message.empty() ? "HTTP " + std::to_string(res.status) : res.error_message;
    res.set_content(ApiError(res.status, "invalid_request_error", message).body().dump(),
                    "application/json");
  });

  s.set_exception_handler([](const http::Request&, http::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", e.what()));
    } catch (...) {
      send_error(res, ApiError(500, "server_error", "unknown failure"));
    }
  });

  s.Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{}", "application/json");
  });

  s.Get("/metrics", [this](const http::Request&, http::Response& res) {
    const WorkerPoolStats w = pool_.stats();
    metrics_.set_workers(w.alive, w.restarts);
    for (const auto& [model, connection] : pool_.connections()) {
      try {
        const json st = connection->call("stats");
        EngineSnapshot snap;
        snap.running = st.value("running", 0);
        snap.waiting = st.value("waiting", 0);
        const double total = st.value("kv_blocks_total", 0.0);
        snap.kv_usage = total > 0 ? st.value("kv_blocks_used", 0.0) / total : 0.0;
        snap.prefix_queries = st.value("prefix_cache_queries", int64_t(0));
        snap.prefix_hits = st.value("prefix_cache_hits", int64_t(0));
        metrics_.set_engine(model, snap);
      } catch (const std::exception&) {
        // A worker that just exited: its series keep their last values.
      }
    }
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });

  s.Get("/v1/models", [this](const http::Request&, http::Response& res) {
    json data = json::array();
    for (const std::string& name : catalog_.names()) {
      const ModelEntry& m = *catalog_.find(name);
      auto entry = [&](const std::string& id) {
        return json{{"id", id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "hearth"},
                    {"root", name},
                    {"max_model_len", m.context_length}};
      };
      data.push_back(entry(name));
      for (const std::string& profile : pool_.profile_names())
        if (!profile.empty()) data.push_back(entry(name + ":" + profile));
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });

  auto completion = [this](Endpoint endpoint) {
    return [this, endpoint](const http::Request& req, http::Response& res) {
      const ordered_json body = parse_request_body(req.body);
      const std::string model_field = request_model(body);
      const ModelEntry& model = find_model(catalog_, split_model_profile(model_field).first);
      CompletionRequest request = parse_completion_request(body, endpoint, model.defaults);
      std::vector<std::vector<int32_t>> prompts;
      for (const PromptInput& p : request.prompts) prompts.push_back(tokenize(model, p, request));

      if (++in_flight_ > options_.max_in_flight) {
        --in_flight_;
        throw ApiError(429, "rate_limit_error",
                       "too many requests in flight (" + std::to_string(options_.max_in_flight) +
                           "); retry shortly",
                       "", 1);
      }
      auto admission = std::make_shared<Admission>(in_flight_);

      ResponseMeta meta;
      meta.id = std::string(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") +
                std::to_string(unix_now()) + "-" + std::to_string(next_id_++);
      meta.created = unix_now();
      meta.model = request.model;
      const uint64_t seed =
          request.seed_given ? request.settings.sampling.seed : std::random_device{}();
      const bool stream = request.stream;
      auto session = std::make_shared<CompletionSession>(
          std::move(request), meta, model,
          pool_.get(model.name, split_model_profile(model_field).second), metrics_);
      session->start(prompts, seed);
      const auto deadline = Clock::now() + options_.request_timeout;

      if (!stream) {
        res.set_content(
            session->wait_response(deadline).dump(-1, ' ', false, json::error_handler_t::replace),
            "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [session, deadline](size_t, http::DataSink& sink) {
            while (true) {
              // A client that left is noticed while waiting for tokens, not at the next write.
              if (sink.client_gone()) return false;
              if (Clock::now() > deadline) {
                session->cancel();
                const std::string timeout =
                    sse_event(ApiError(504, "timeout_error", "the request ran out of time").body());
                sink.write(timeout.data(), timeout.size());
                sink.done();
                return true;
              }
              std::optional<std::string> out =
                  session->next_sse(std::min(deadline, Clock::now() + std::chrono::seconds(1)));
              if (!out) {
                sink.done();
                return true;
              }
              if (!out->empty() && !sink.write(out->data(), out->size())) return false;
            }
          },
          [session, admission](bool success) {
            if (!success) session->cancel();  // the client went away mid-stream
          });
    };
  };
  s.Post("/v1/completions", completion(Endpoint::Completions));
  s.Post("/v1/chat/completions", completion(Endpoint::ChatCompletions));

  s.Post("/tokenize", [this](const http::Request& req, http::Response& res) {
    res.set_content(tokenize_response(catalog_, parse_request_body(req.body)), "application/json");
  });

  s.Post("/detokenize", [this](const http::Request& req, http::Response& res) {
    res.set_content(detokenize_response(catalog_, parse_request_body(req.body)),
                    "application/json");
  });
}

}  // namespace hearth::gateway
