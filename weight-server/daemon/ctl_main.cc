// hearth-ctl: asks a running hearth-server what it serves (list, stats, a model's manifest), or
// (from the admin uid) to load, unload or stop. Prints the server's reply as JSON on stdout; a
// refusal goes to stderr with exit status 1.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/cli_checks.h"
#include "ipc/client.h"
#include "ipc/main_guard.h"
#include "ipc/protocol.h"

namespace {

using json = nlohmann::json;
namespace op = hearth::ipc::op;

int run(int argc, char** argv) {
  CLI::App app{"hearth-ctl: inspect and manage a running hearth-server"};
  app.set_version_flag("--version", "hearth-ctl 0.1.0");
  app.require_subcommand(1);
  std::string socket, dir, name, backend, quantize, model;
  int timeout_s = 600;
  app.add_option("--socket", socket, "the server's Unix socket")->required();
  app.add_option("--timeout", timeout_s, "seconds to wait for the reply (a load may take long)")
      ->check(hearth::integer_in(1, 7 * 24 * 3600));
  uid_t server_uid = 0;
  auto* server_uid_opt =
      app.add_option("--server-uid", server_uid,
                     "the uid the server must run as (default: yours, root's, or the owner of a "
                     "socket directory only it can write to)")
          ->check(CLI::Range(uid_t{0}, uid_t(-2)));
  CLI::App* list = app.add_subcommand("list", "models served, with their lease counts");
  CLI::App* stats = app.add_subcommand("stats",
                                       "models, bytes, clients, leases, uptime; memory: weights, "
                                       "KV per worker, free (per device: kv_devices)");
  CLI::App* manifest = app.add_subcommand(
      "manifest", "a served model's manifest: every tensor, per rank with its slice when sharded");
  manifest->add_option("model", model, "the served model's name")->required();
  CLI::App* load = app.add_subcommand("load", "admin: load a model directory and serve it");
  load->add_option("dir", dir, "HF model directory")->required()->check(CLI::ExistingDirectory);
  load->add_option("--name", name, "name to serve it under (default: the directory's basename)");
  load->add_option("--backend", backend, "vmm | memfd (default: the server's)")
      ->check(CLI::IsMember({"vmm", "memfd"}));
  load->add_option("--quantize", quantize,
                   "fp8: store a 16-bit model's projections in fp8 (per-channel e4m3), as "
                   "hearth-server --quantize fp8; none: as its files hold them (default: the "
                   "server's --quantize)")
      ->check(CLI::IsMember({"fp8", "none"}));
  CLI::App* unload = app.add_subcommand("unload", "admin: stop serving a model nobody leases");
  unload->add_option("model", model, "the served model's name")->required();
  CLI::App* shutdown =
      app.add_subcommand("shutdown", "admin: stop the server (replies in flight finish first)");
  CLI11_PARSE(app, argc, argv);

  std::string_view request;
  json args = json::object();
  if (*list) request = op::kList;
  if (*stats) request = op::kStats;
  if (*manifest) {
    request = op::kManifest;  // the files' descriptors that come with it are closed unread
    args["model"] = model;
  }
  if (*load) {
    request = op::kLoad;
    // The server resolves paths from its own working directory, not ours.
    args["dir"] = std::filesystem::absolute(dir).lexically_normal().string();
    if (!name.empty()) args["name"] = name;
    if (!backend.empty()) args["backend"] = backend;
    if (!quantize.empty()) args["quantize"] = quantize;
  }
  if (*unload) {
    request = op::kUnload;
    args["model"] = model;
  }
  if (*shutdown) request = op::kShutdown;

  hearth::ipc::ClientOptions options;
  options.name = "hearth-ctl";
  options.timeout = std::chrono::seconds(timeout_s);
  if (*server_uid_opt) options.server_uid = server_uid;
  hearth::ipc::Client client = hearth::ipc::Client::connect(socket, options);
  json reply = client.call(request, std::move(args)).body;
  reply.erase("id");
  reply.erase("ok");
  std::cout << reply.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-ctl", [&] { return run(argc, argv); });
}
