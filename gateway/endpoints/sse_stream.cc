#include "gateway/endpoints/sse_stream.h"

#include <algorithm>

#include "gateway/api_error.h"
#include "gateway/openai_response.h"

namespace hearth::gateway {

void stream_session(http::Response& res, std::shared_ptr<CompletionSession> session,
                    CompletionSession::Clock::time_point deadline,
                    std::shared_ptr<const void> admitted) {
  using Clock = CompletionSession::Clock;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session, deadline](size_t, http::DataSink& sink) {
        while (true) {
          // A client that left is noticed while waiting for tokens, not at the next write.
          if (sink.client_gone()) return false;
          if (Clock::now() > deadline) {
            session->cancel();
            // Like every other end of a stream: the error, then [DONE], so that a client
            // waiting for [DONE] is not left to guess whether more would come.
            const std::string timeout =
                sse_event(ApiError(504, "timeout_error", "the request ran out of time").body()) +
                kSseDone;
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
      [session, admitted](bool success) {
        if (!success) session->cancel();  // the client went away mid-stream
      });
}

}  // namespace hearth::gateway
