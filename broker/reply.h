#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/errors.h"
#include "base/unique_fd.h"

namespace hearth::broker {

// A handler's answer to one request: results with FDs to attach, an error, or "deferred" (the
// handler will answer later through Broker::complete). The broker adds "id" and "ok", sends the
// FDs with the reply and closes its copies once the kernel has them, or when the client is gone.
struct Reply {
  enum class Kind { kOk, kError, kDeferred };

  Kind kind = Kind::kOk;
  nlohmann::json fields = nlohmann::json::object();  // merged into {"id", "ok": true, ...}
  std::vector<UniqueFd> fds;                         // at most ipc::kMaxFdsPerFrame
  ipc::ErrorCode error_code = ipc::ErrorCode::kInternal;
  std::string error_message;

  static Reply ok(nlohmann::json fields = nlohmann::json::object(),
                  std::vector<UniqueFd> fds = {}) {
    Reply r;
    r.fields = std::move(fields);
    r.fds = std::move(fds);
    return r;
  }
  static Reply error(ipc::ErrorCode code, std::string message) {
    Reply r;
    r.kind = Kind::kError;
    r.error_code = code;
    r.error_message = std::move(message);
    return r;
  }
  static Reply deferred() {
    Reply r;
    r.kind = Kind::kDeferred;
    return r;
  }
};

}  // namespace hearth::broker
