#include "worker/engine/request_output.h"

namespace hearth {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Eos:
      return "eos";
    case FinishReason::Length:
      return "length";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "?";
}

}  // namespace hearth
