#pragma once

// A real hearth-gateway for the gateway tests: its own weight server (memfd) with the default
// model, CPU batching workers, a free port on 127.0.0.1, and a cpp-httplib client to it.

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/child_process.h"
#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {

using json = nlohmann::json;

inline std::string gateway_binary(const std::string& name) {
  if (const char* env = std::getenv("HEARTH_BIN_DIR")) return std::string(env) + "/" + name;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

// Whether `args` holds `flag`.
inline bool names_flag(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

// A test gateway's command line: the default model as "fortunes" on its own weight server
// (memfd), CPU workers, a free port, then `extra`. A test that names the server's backend (a
// GPU test) names the workers' too, so neither default is given.
inline std::vector<std::string> gateway_command(const std::vector<std::string>& extra) {
  const bool own_backend = names_flag(extra, "--backend");
  std::vector<std::string> argv = {
      gateway_binary("hearth-gateway"), "--model",
      (source_dir() / "models/hearth-tiny-fortunes").string() + ":fortunes"};
  if (!own_backend) argv.insert(argv.end(), {"--backend", "memfd"});
  argv.insert(argv.end(), {"--port", "0"});
  if (!own_backend) argv.insert(argv.end(), {"--worker-arg=--backend", "--worker-arg=cpu"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

class GatewayProcess {
 public:
  // `extra` is appended to the gateway's arguments (limits, profiles, an API key file); the
  // plain chat template comes first unless a test names its own. Its stderr goes to `log`, by
  // default a file in the process's scratch directory (log_text() reads it for failures).
  explicit GatewayProcess(std::vector<std::string> extra = {},
                          const std::filesystem::path& log = {}) {
    if (!names_flag(extra, "--chat-template"))
      extra.insert(extra.begin(),
                   {"--chat-template", (source_dir() / "gateway/templates/plain.jinja").string()});
    const std::vector<std::string> argv = gateway_command(extra);
    log_ = log.empty() ? process_scratch_dir() / ("gateway-" + std::to_string(counter()++) + ".log")
                       : log;
    process_ = std::make_unique<ChildProcess>(
        ChildProcess::spawn(ChildProcess::Options(argv)
                                .stdout_to(ChildProcess::Stream::pipe())
                                .stderr_to(ChildProcess::Stream::file(log_))));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (auto line = process_->stdout_pipe().read_line(deadline)) {
      const std::string prefix = "listening on http://127.0.0.1:";
      if (line->rfind(prefix, 0) == 0) {
        port_ = std::stoi(line->substr(prefix.size()));
        break;
      }
    }
    if (port_ == 0) throw std::runtime_error("hearth-gateway did not start: " + log_text());
  }

  ~GatewayProcess() {
    if (process_) {
      process_->signal(SIGTERM);
      if (!process_->wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(20)))
        process_->kill_group();
    }
  }

  int port() const { return port_; }
  ChildProcess& process() { return *process_; }
  std::string log_text() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::unique_ptr<httplib::Client> client(int timeout_s = 120) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(timeout_s, 0);
    c->set_write_timeout(timeout_s, 0);
    return c;
  }

  // POST a JSON body; the response status and body (parsed when it is JSON).
  struct Reply {
    int status = 0;
    std::string body;
    json parsed() const { return json::parse(body, nullptr, false); }
    httplib::Headers headers;
  };
  Reply post(const std::string& path, const json& body,
             const httplib::Headers& headers = {}) const {
    auto r = client()->Post(path.c_str(), headers, body.dump(), "application/json");
    if (!r)
      throw std::runtime_error("no HTTP response from the gateway for " + path + " (" +
                               httplib::to_string(r.error()) + ")");
    return {r->status, r->body, r->headers};
  }
  Reply get(const std::string& path, const httplib::Headers& headers = {}) const {
    auto r = client()->Get(path.c_str(), headers);
    if (!r)
      throw std::runtime_error("no HTTP response from the gateway for " + path + " (" +
                               httplib::to_string(r.error()) + ")");
    return {r->status, r->body, r->headers};
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::unique_ptr<ChildProcess> process_;
  std::filesystem::path log_;
  int port_ = 0;
};

// A /v1/completions body for the default model, `extra` fields added or replaced.
inline json completion(const std::string& prompt, int max_tokens, json extra = json::object()) {
  json body = {{"model", "fortunes"}, {"prompt", prompt}, {"max_tokens", max_tokens}};
  body.update(extra);
  return body;
}

// The data lines of an SSE body, parsed; "[DONE]" as a string.
inline std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end;
  }
  return out;
}

}  // namespace hearth::test
