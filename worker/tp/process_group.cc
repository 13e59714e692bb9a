#include "worker/tp/process_group.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "ipc/errors.h"
#include "ipc/frame.h"

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

std::string rank_name(int rank, pid_t pid) {
  return "tensor-parallel rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

}  // namespace

std::filesystem::path default_follower_binary() {
  if (const char* env = std::getenv("HEARTH_TP_FOLLOWER"); env && *env) return env;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this executable to find hearth-tp-follower");
  return self.parent_path() / "hearth-tp-follower";
}

TpProcessGroup::TpProcessGroup(SharedExchange exchange, std::chrono::milliseconds barrier_timeout)
    : exchange_(std::move(exchange)), barrier_timeout_(barrier_timeout) {}

std::shared_ptr<TpProcessGroup> TpProcessGroup::start(TpHello hello,
                                                      const TpProcessOptions& options,
                                                      const TpAllReduceHandshake* gpu,
                                                      const TpReadyHook& ready) {
  const std::filesystem::path binary =
      options.follower_binary.empty() ? default_follower_binary() : options.follower_binary;
  hello.barrier_timeout_ms = int(options.barrier_timeout.count());
  std::shared_ptr<TpProcessGroup> group(
      new TpProcessGroup(SharedExchange::create(hello.world_size, 0, options.exchange_floats),
                         options.barrier_timeout));
  for (int r = 1; r < hello.world_size; ++r) {
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
      throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
    auto f = std::make_unique<Follower>();
    f->rank = r;
    f->channel.reset(ends[0]);
    const UniqueFd child_end(ends[1]);
    f->process.emplace(
        ChildProcess::spawn(ChildProcess::Options({binary.string(), "--channel-fd", "0"})
                                .stdin_from(ChildProcess::Stream::descriptor(child_end.get()))
                                .stderr_to(ChildProcess::Stream::inherit())));
    hello.rank = r;
    if (hello.backend == "cuda") hello.device = r;  // rank r on GPU r
    const int fds[2] = {group->exchange_.fd(), gpu ? gpu->leader_fd : -1};
    try {
      ipc::send_frame(f->channel.get(), hello_message(hello),
                      std::span<const int>(fds, gpu ? 2 : 1));
    } catch (const std::exception&) {
      group->followers_.push_back(std::move(f));
      group->fail(group->describe_death(*group->followers_.back()) + " before its hello");
    }
    group->followers_.push_back(std::move(f));
  }
  const Clock::time_point deadline = Clock::now() + options.start_timeout;
  std::vector<nlohmann::json> shares;  // GPU ranks: each follower's all-reduce share
  std::vector<UniqueFd> share_fds;
  for (auto& f : group->followers_) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<ipc::Frame> answer;
    try {
      answer = ipc::receive_frame(f->channel.get(),
                                  {.timeout = std::max(left, std::chrono::milliseconds(1))});
    } catch (const ipc::TimeoutError&) {
      group->fail(rank_name(f->rank, f->process->pid()) + " did not load its pieces within " +
                  std::to_string(options.start_timeout.count()) + " ms");
    } catch (const std::exception& e) {
      group->fail(rank_name(f->rank, f->process->pid()) + ": " + e.what());
    }
    if (!answer) group->fail(group->describe_death(*f) + " before it was ready");
    try {
      expect_ready(answer->body, f->rank);
      if (gpu) {
        const auto share = answer->body.find("all_reduce");
        if (share == answer->body.end() || !share->is_object() || answer->fds.size() != 1)
          throw std::runtime_error("tensor-parallel rank " + std::to_string(f->rank) +
                                   "'s ready carried no all-reduce share and descriptor");
        gpu->import(f->rank, *share, answer->fds[0].get());
        shares.push_back(*share);
        share_fds.push_back(std::move(answer->fds[0]));
      }
      if (ready) ready(f->rank, answer->body);
    } catch (const std::exception& e) {
      group->fail(e.what());
    }
  }
  if (gpu) {
    // Each follower: the other followers' shares (rank 0's came with its hello).
    for (size_t i = 0; i < group->followers_.size(); ++i) {
      std::vector<nlohmann::json> others;
      std::vector<int> fds;
      for (size_t j = 0; j < group->followers_.size(); ++j)
        if (j != i) others.push_back(shares[j]), fds.push_back(share_fds[j].get());
      Follower& f = *group->followers_[i];
      try {
        ipc::send_frame(f.channel.get(), peers_message(others), fds);
      } catch (const std::exception&) {
        group->fail(group->describe_death(f) + " before it met its peers");
      }
    }
  }
  return group;
}

TpProcessGroup::~TpProcessGroup() {
  for (auto& f : followers_) {
    try {
      if (f->process && f->process->running()) ipc::send_frame(f->channel.get(), stop_message());
    } catch (const std::exception&) {
      // Gone already: reaped below.
    }
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  for (auto& f : followers_)
    if (f->process) f->process->wait_until(deadline);
  // ChildProcess's destructor kills and reaps whatever did not stop.
}

pid_t TpProcessGroup::follower_pid(int rank) const {
  if (rank < 1 || rank > int(followers_.size()))
    throw std::out_of_range("no follower of rank " + std::to_string(rank));
  return followers_[size_t(rank - 1)]->process->pid();
}

void TpProcessGroup::fail(const std::string& why) {
  if (failed_.empty()) failed_ = why;
  throw std::runtime_error(failed_);
}

std::string TpProcessGroup::describe_death(Follower& f) {
  // Its channel closed: it exited, or is about to. Its status names the cause.
  const std::optional<ExitStatus> status =
      f.process->wait_until(Clock::now() + std::chrono::seconds(2));
  return rank_name(f.rank, f.process->pid()) +
         (status ? " exited: " + status->describe() : " closed its channel");
}

std::string TpProcessGroup::dead_peer() {
  for (auto& f : followers_) {
    pollfd p{f->channel.get(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    // A follower speaks after ready only to say why it gives up; or its channel closed.
    try {
      if (auto frame =
              ipc::receive_frame(f->channel.get(), {.timeout = std::chrono::milliseconds(1000)});
          frame && message_type(frame->body) == "error" && frame->body.contains("message") &&
          frame->body["message"].is_string())
        return rank_name(f->rank, f->process->pid()) +
               " failed: " + frame->body["message"].get<std::string>();
    } catch (const std::exception&) {
      // Closed mid-frame, or garbage: either way the rank is lost.
    }
    return describe_death(*f);
  }
  return "";
}

void TpProcessGroup::check_followers() {
  if (!failed_.empty()) throw std::runtime_error(failed_);
  if (const std::string dead = dead_peer(); !dead.empty()) fail(dead);
}

std::string TpProcessGroup::probe_failure() {
  try {
    check_followers();
  } catch (const std::exception&) {
    // failed_ holds why.
  }
  return failed_;
}

nlohmann::json TpProcessGroup::request(int rank, const nlohmann::json& message,
                                       std::chrono::milliseconds timeout) {
  if (!failed_.empty()) throw std::runtime_error(failed_);
  if (rank < 1 || rank > int(followers_.size()))
    throw std::out_of_range("no follower of rank " + std::to_string(rank));
  Follower& f = *followers_[size_t(rank - 1)];
  try {
    ipc::send_frame(f.channel.get(), message);
  } catch (const std::exception&) {
    const std::string dead = dead_peer();
    fail(dead.empty() ? describe_death(f) : dead);
  }
  std::optional<ipc::Frame> answer;
  try {
    answer = ipc::receive_frame(f.channel.get(), {.timeout = timeout});
  } catch (const ipc::TimeoutError&) {
    fail(rank_name(f.rank, f.process->pid()) + " did not answer a \"" + message_type(message) +
         "\" within " + std::to_string(timeout.count()) + " ms");
  } catch (const std::exception& e) {
    fail(rank_name(f.rank, f.process->pid()) + ": " + e.what());
  }
  if (!answer) fail(describe_death(f));
  if (message_type(answer->body) == "error") {
    const auto why = answer->body.find("message");
    fail(rank_name(f.rank, f.process->pid()) + " failed: " +
         (why != answer->body.end() && why->is_string() ? why->get<std::string>()
                                                        : std::string("(no reason)")));
  }
  if (!answer->fds.empty())
    fail(rank_name(f.rank, f.process->pid()) + " answered with descriptors");
  return std::move(answer->body);
}

void TpProcessGroup::begin_forward(const ForwardBatch& batch) {
  if (!failed_.empty()) throw std::runtime_error(failed_);
  const nlohmann::json plan = forward_message(batch);
  for (auto& f : followers_) {
    try {
      ipc::send_frame(f->channel.get(), plan);
    } catch (const std::exception&) {
      const std::string dead = dead_peer();
      fail(dead.empty() ? describe_death(*f) : dead);
    }
  }
}

void TpProcessGroup::exchange(
    std::span<const float> mine,
    const std::function<void(std::span<const std::span<const float>>)>& use) {
  if (!failed_.empty()) throw std::runtime_error(failed_);
  try {
    exchange_.exchange(mine, use, barrier_timeout_, [this] { return dead_peer(); });
  } catch (const std::exception& e) {
    fail(e.what());  // out of step for good: no later exchange can pair up
  }
}

}  // namespace hearth
