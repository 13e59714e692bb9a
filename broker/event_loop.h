#pragma once

#include <uv.h>

#include <memory>

namespace hearth::broker {

// Owns a uv_loop_t. Destroy every UvHandle on it first: the destructor then runs the loop until
// their close callbacks have released them, and closes the loop.
class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  uv_loop_t* get() const noexcept { return loop_.get(); }

 private:
  std::unique_ptr<uv_loop_t> loop_;
};

}  // namespace hearth::broker
