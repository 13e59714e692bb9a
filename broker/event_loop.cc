#include "broker/event_loop.h"

#include <cstdio>

#include "broker/uv_handle.h"

namespace hearth::broker {

EventLoop::EventLoop() : loop_(std::make_unique<uv_loop_t>()) {
  check_uv(uv_loop_init(loop_.get()), "uv_loop_init");
}

EventLoop::~EventLoop() {
  // Closing handles finish within one iteration; NOWAIT cannot block on a handle left active.
  uv_run(loop_.get(), UV_RUN_NOWAIT);
  if (uv_loop_close(loop_.get()) != 0) {
    // A handle is still open: a bug in its owner. Leaking the loop is safer than freeing memory
    // libuv still points at.
    std::fprintf(stderr, "hearth: event loop destroyed with open handles; leaking it\n");
    (void)loop_.release();
  }
}

}  // namespace hearth::broker
