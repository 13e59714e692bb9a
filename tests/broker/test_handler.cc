#include "test_handler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "ipc/protocol.h"

namespace hearth::test {
namespace {

using broker::Reply;
using ipc::ErrorCode;
using ipc::ProtocolError;

constexpr const char* kModel = "test";

UniqueFd allocation_fd(std::uint64_t id) {
  UniqueFd fd(::memfd_create("hearth-test-allocation", MFD_CLOEXEC));
  const std::string content = "allocation " + std::to_string(id);
  if (!fd ||
      ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    throw std::runtime_error("memfd_create failed");
  }
  return fd;
}

void require_model(const std::string& model) {
  if (model != kModel) throw ProtocolError(ErrorCode::kNotFound, "no model named '" + model + "'");
}

}  // namespace

Reply TestHandler::handle(broker::Session& session, const ipc::Request& request) {
  const std::string& op = request.op;
  if (op == ipc::op::kList) return Reply::ok({{"models", {kModel}}});
  if (op == ipc::op::kStats) {
    nlohmann::json fields = {{"broker", session.broker().stats().to_json()}, {"leases", leases()}};
    // "pad": N makes the reply N bytes larger, to fill a client's socket in tests.
    if (const auto pad = request.body.find("pad"); pad != request.body.end()) {
      fields["pad"] = std::string(ipc::uint_field(request.body, "pad"), 'p');
    }
    // "later": true answers on a later loop iteration, the way a slow handler would.
    if (request.body.value("later", false)) {
      return later(session, request, [fields = std::move(fields)] { return Reply::ok(fields); });
    }
    return Reply::ok(std::move(fields));
  }
  if (op == ipc::op::kManifest) {
    const std::string& model = ipc::string_field(request.body, "model");
    if (model == "explode") throw std::runtime_error("the handler blew up");
    require_model(model);
    return Reply::ok({{"model", kModel}, {"allocations", {0, 1, 2, 3}}});
  }
  if (op == ipc::op::kImport) return import(session, request);
  if (op == ipc::op::kRelease) {
    require_model(ipc::string_field(request.body, "model"));
    std::lock_guard lock(mutex_);
    leases_.erase(session.id());
    session.set_holds_lease(false);
    return Reply::ok();
  }
  if (op == ipc::op::kLoad) {
    const std::string name = ipc::optional_string_field(request.body, "model").value_or(kModel);
    // A memfd travels with the reply, so a refused completion shows whether it is closed.
    return later(session, request, [name] {
      std::vector<UniqueFd> fds;
      fds.push_back(allocation_fd(99));
      return Reply::ok({{"loaded", name}}, std::move(fds));
    });
  }
  if (op == ipc::op::kUnload) return Reply::ok({{"unloaded", kModel}});
  throw ProtocolError(ErrorCode::kUnknownOp, "the test handler has no '" + op + "'");
}

Reply TestHandler::import(broker::Session& session, const ipc::Request& request) {
  const ipc::ImportRequest import = ipc::parse_import_request(request);
  require_model(import.model);
  std::vector<UniqueFd> fds;
  for (std::uint64_t id : import.allocations) fds.push_back(allocation_fd(id));
  {
    std::lock_guard lock(mutex_);
    leases_[session.id()] = 1;
  }
  session.set_holds_lease(true);
  return Reply::ok(ipc::make_import_result(import.allocations), std::move(fds));
}

Reply TestHandler::later(broker::Session& session, const ipc::Request& request,
                         std::function<Reply()> make_reply) {
  broker::Broker& broker = session.broker();
  auto complete = [this, &broker, client = session.id(), id = request.id,
                   make_reply = std::move(make_reply)] {
    if (!broker.complete(client, id, make_reply())) {
      std::lock_guard lock(mutex_);
      ++late_completions_refused_;
    }
  };
  {
    std::lock_guard lock(mutex_);
    broker_ = &broker;
    if (replies_held_) {
      parked_.push_back(std::move(complete));
      return Reply::deferred();
    }
  }
  broker.post(std::move(complete));
  return Reply::deferred();
}

void TestHandler::on_connect(broker::Session& session) {
  std::lock_guard lock(mutex_);
  connects_.push_back({session.id(), session.pid(), session.uid(), session.is_admin()});
}

void TestHandler::on_disconnect(broker::Session& session) {
  std::lock_guard lock(mutex_);
  leases_.erase(session.id());  // a crashed worker's lease ends with its connection
  disconnects_.push_back({session.id(), session.pid(), session.uid(), session.is_admin()});
}

void TestHandler::hold_replies() {
  std::lock_guard lock(mutex_);
  replies_held_ = true;
}

void TestHandler::release_replies() {
  std::vector<std::function<void()>> parked;
  broker::Broker* broker;
  {
    std::lock_guard lock(mutex_);
    replies_held_ = false;
    parked.swap(parked_);
    broker = broker_;
  }
  if (parked.empty()) return;
  // All in one loop iteration, so that they pile up as they would behind a slow reader.
  broker->post([parked = std::move(parked)] {
    for (const auto& complete : parked) complete();
  });
}

std::vector<TestHandler::Event> TestHandler::connects() const {
  std::lock_guard lock(mutex_);
  return connects_;
}

std::vector<TestHandler::Event> TestHandler::disconnects() const {
  std::lock_guard lock(mutex_);
  return disconnects_;
}

int TestHandler::leases() const {
  std::lock_guard lock(mutex_);
  int total = 0;
  for (const auto& [client, n] : leases_) total += n;
  return total;
}

int TestHandler::late_completions_refused() const {
  std::lock_guard lock(mutex_);
  return late_completions_refused_;
}

std::size_t TestHandler::parked_replies() const {
  std::lock_guard lock(mutex_);
  return parked_.size();
}

}  // namespace hearth::test
