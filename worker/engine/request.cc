#include "worker/engine/request.h"

namespace hearth {

RequestError::RequestError(std::string request_id, std::string field, const std::string& why)
    : std::runtime_error((request_id.empty() ? "" : "request '" + request_id + "': ") + field +
                         ": " + why),
      request_id_(std::move(request_id)),
      field_(std::move(field)),
      reason_(why) {}

void check_request_settings(const std::string& id, const RequestSettings& s) {
  try {
    check_settings(s);
  } catch (const SettingError& e) {
    throw RequestError(id, e.field(), e.reason());
  }
}

}  // namespace hearth
