// One completion request in flight: the worker requests of its choices (prompts x n), the
// events they stream back on the worker connection's thread, and what the HTTP thread has yet
// to send. Streaming turns each event into an SSE chunk at once; otherwise the response is
// built when every choice has finished. A client that goes away, or a deadline, cancels every
// choice in the worker (their KV blocks are freed at once).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway/metrics.h"
#include "gateway/model_catalog.h"
#include "gateway/openai_response.h"
#include "gateway/worker_connection.h"

namespace hearth::gateway {

class CompletionSession : public std::enable_shared_from_this<CompletionSession> {
 public:
  using Clock = std::chrono::steady_clock;

  CompletionSession(CompletionRequest request, ResponseMeta meta, const ModelEntry& model,
                    std::shared_ptr<WorkerConnection> worker, Metrics& metrics);

  // Submits every choice. `prompts[i]` are the token ids of request.prompts[i]. Throws ApiError
  // (400 for a request the worker refuses, 429 when it is full, 503 when it is gone); choices
  // already submitted are cancelled first.
  void start(const std::vector<std::vector<int32_t>>& prompts, uint64_t seed);

  // Streaming: the next SSE text to send, waiting until `deadline`; an empty string when the
  // deadline passed with nothing new, nullopt once everything (up to [DONE]) has been taken.
  std::optional<std::string> next_sse(Clock::time_point deadline);

  // Non-streaming: waits for every choice and returns the response. Throws ApiError: 500 when
  // the worker failed a choice, 504 past the deadline, 499 once `client_gone` (asked every
  // kClientCheck while waiting) says nobody will read the answer; on both the choices are
  // cancelled in the worker, as a stream's are when its client leaves.
  nlohmann::json wait_response(Clock::time_point deadline,
                               const std::function<bool()>& client_gone = nullptr);
  static constexpr std::chrono::milliseconds kClientCheck{100};

  // Stops every unfinished choice in the worker. Idempotent.
  void cancel();

 private:
  void on_event(int choice, const nlohmann::json& event);
  void finish_choice(int choice, const nlohmann::json& event);
  void release(int choice, std::vector<ToolCallPiece> pieces, std::vector<TokenLogprob> lps);
  std::string token_text(int32_t id) const;
  void record_metrics();

  CompletionRequest request_;
  ResponseMeta meta_;
  const ModelEntry& model_;
  std::shared_ptr<WorkerConnection> worker_;
  Metrics& metrics_;
  std::vector<std::string> request_ids_;  // per choice, as submitted to the worker

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<ChoiceState> choices_;
  std::vector<bool> done_, first_chunk_sent_;
  std::deque<std::string> pending_sse_;
  std::optional<std::string> failure_;  // a choice failed in the worker
  int finished_ = 0;
  bool stream_closed_ = false;  // [DONE] queued
  bool cancelled_ = false;

  // Metrics: when each choice's tokens arrived.
  Clock::time_point start_;
  std::vector<std::optional<Clock::time_point>> last_token_;
  std::vector<size_t> logprob_offset_;  // per choice: bytes of token text streamed so far
  double ttft_s_ = -1;
  std::vector<double> inter_token_s_;
  std::vector<ChoiceTimes> choice_times_;  // of the choices that finished (stop or length)
};

}  // namespace hearth::gateway
