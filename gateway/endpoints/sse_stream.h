// A streaming completion's response: its session's SSE chunks as they come, a 504 event past the
// deadline, and the session cancelled when the client goes away mid-stream.
#pragma once

#include <memory>

#include "gateway/completion_session.h"
#include "gateway/http/message.h"

namespace hearth::gateway {

// `admitted` is held until the stream ends, so the request counts as in flight until then.
void stream_session(http::Response& res, std::shared_ptr<CompletionSession> session,
                    CompletionSession::Clock::time_point deadline,
                    std::shared_ptr<const void> admitted);

}  // namespace hearth::gateway
