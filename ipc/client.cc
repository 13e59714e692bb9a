#include "ipc/client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "ipc/errors.h"
#include "ipc/peer_credentials.h"
#include "ipc/unix_socket.h"

namespace hearth::ipc {

Client::Client(UniqueFd socket, ClientOptions options) noexcept
    : socket_(std::move(socket)), options_(std::move(options)) {}

void check_server_uid(int socket, const std::string& path, std::optional<uid_t> expected) {
  const uid_t peer = peer_credentials(socket).uid;
  const std::string who = "the server at " + path + " runs as uid " + std::to_string(peer);
  if (expected) {
    if (peer != *expected)
      throw IpcError(who + ", not as the expected uid " + std::to_string(*expected));
    return;
  }
  const uid_t self = ::geteuid();
  if (peer == self || peer == 0) return;
  // Another user's server is trusted where only that user could have put the socket: in a
  // directory (not a link to one) it owns and nobody else may write to.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == peer &&
      (st.st_mode & (S_IWGRP | S_IWOTH)) == 0)
    return;
  throw IpcError(who + ": not this process's uid (" + std::to_string(self) +
                 "), not root, and not the owner of a socket directory only it can write to, so "
                 "anyone could have put it there; if uid " +
                 std::to_string(peer) +
                 " is the server you mean, name it (hearth-worker and hearth-ctl: --server-uid " +
                 std::to_string(peer) + ")");
}

Client Client::connect(const std::string& socket_path, ClientOptions options) {
  UniqueFd socket = connect_unix(socket_path);
  check_server_uid(socket.get(), socket_path, options.server_uid);
  Client client(std::move(socket), std::move(options));
  Frame reply = client.call(op::kHello, make_hello_args(client.options_.name));
  check_protocol_version(reply.body, "server");
  client.hello_ = std::move(reply.body);
  return client;
}

Frame Client::call(std::string_view op, nlohmann::json args) {
  if (!socket_) throw ConnectionClosed("the connection to the server is closed");
  const RequestId id = next_id_++;
  send_request(make_request(op, id, std::move(args)));
  return receive_reply(id);
}

void Client::send_request(const nlohmann::json& request) {
  try {
    send_frame(socket_.get(), request, {}, options_.max_frame_bytes);
  } catch (const ConnectionClosed&) {
    // The server may have refused us and hung up; its reason is waiting to be read.
    try {
      ReceiveOptions quick;
      quick.max_frame_bytes = options_.max_frame_bytes;
      quick.timeout = std::chrono::milliseconds(100);
      if (auto frame = receive_frame(socket_.get(), quick)) {
        const ReplyStatus status = parse_reply_status(frame->body);
        if (!status.ok) {
          socket_.reset();
          throw ProtocolError(status.code, status.message);
        }
      }
    } catch (const ProtocolError&) {
      throw;
    } catch (const IpcError&) {
      // Nothing readable: report the closed connection below.
    }
    fail_closed("the server closed the connection");
  } catch (const ProtocolError&) {
    throw;  // the request itself is too large; the connection is still fine
  } catch (const IpcError&) {
    socket_.reset();
    throw;
  }
}

Frame Client::receive_reply(RequestId id) {
  ReceiveOptions receive;
  receive.max_frame_bytes = options_.max_frame_bytes;
  if (options_.timeout.count() > 0) receive.timeout = options_.timeout;
  std::optional<Frame> frame;
  ReplyStatus status;
  try {
    frame = receive_frame(socket_.get(), receive);
    if (!frame) fail_closed("the server closed the connection before replying");
    status = parse_reply_status(frame->body);
  } catch (const IpcError&) {
    // Whatever went wrong, the byte stream can no longer be trusted to be at a frame boundary.
    socket_.reset();
    throw;
  }
  if (!status.id) {
    // A reply that answers no request is the server giving up on this connection.
    socket_.reset();
    throw ProtocolError(status.code, status.message);
  }
  if (*status.id != id) {
    socket_.reset();
    throw IpcError("reply for request " + std::to_string(*status.id) + " while waiting for " +
                   std::to_string(id));
  }
  if (!status.ok) throw ProtocolError(status.code, status.message);
  return std::move(*frame);
}

std::vector<UniqueFd> Client::import_allocations(std::string_view model,
                                                 std::span<const std::uint64_t> allocations) {
  std::vector<UniqueFd> fds;
  fds.reserve(allocations.size());
  for (std::size_t start = 0; start < allocations.size(); start += kMaxFdsPerFrame) {
    const auto batch =
        allocations.subspan(start, std::min(kMaxFdsPerFrame, allocations.size() - start));
    Frame reply = call(op::kImport, make_import_args(model, batch));
    const auto it = reply.body.find("allocations");
    const bool ids_match =
        it != reply.body.end() && it->is_array() && it->size() == batch.size() &&
        std::equal(batch.begin(), batch.end(), it->begin(),
                   [](std::uint64_t want, const nlohmann::json& got) {
                     return is_unsigned_integer(got) && got.get<std::uint64_t>() == want;
                   });
    if (!ids_match || reply.fds.size() != batch.size()) {
      throw IpcError("import of " + std::to_string(batch.size()) + " allocations of '" +
                     std::string(model) + "' returned " + std::to_string(reply.fds.size()) +
                     " descriptors for allocations " +
                     (it == reply.body.end() ? std::string("(none)") : it->dump()));
    }
    for (UniqueFd& fd : reply.fds) fds.push_back(std::move(fd));
  }
  return fds;
}

void Client::fail_closed(const std::string& what) {
  socket_.reset();
  throw ConnectionClosed(what);
}

}  // namespace hearth::ipc
