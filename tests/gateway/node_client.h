// The gateway tests' outside judges: a `node --test` script of tests/gateway/node run against
// the real gateway with the official openai npm client (installed by tools/run-tests.sh), and
// python3-jsonschema's verdict on an answer.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ipc/child_process.h"
#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {

inline std::filesystem::path openai_npm_dir() {
  return source_dir() / "tests/gateway/node";
}
inline bool openai_npm_installed() {
  return std::filesystem::exists(openai_npm_dir() / "node_modules/openai");
}
// The reason a test skips without the client, with the command that installs it.
inline std::string openai_npm_missing() {
  return "the openai npm client is not installed (cd " + openai_npm_dir().string() + " && npm ci)";
}

struct NodeTestRun {
  bool finished = false;  // false: still running at the deadline (then killed)
  bool success = false;   // exit status 0
  std::string out, err;
  // node --test's own summary says no test failed.
  bool none_failed() const { return out.find("# fail 0") != std::string::npos; }
};

// Runs tests/gateway/node/<script> with `env` added to the environment.
inline NodeTestRun run_node_test(const std::string& script, const std::vector<std::string>& env,
                                 std::chrono::seconds limit = std::chrono::seconds(300)) {
  TempDir tmp;
  ChildProcess node = ChildProcess::spawn(
      ChildProcess::Options({"node", "--test", (openai_npm_dir() / script).string()})
          .with_env(env)
          .stdout_to(ChildProcess::Stream::pipe())
          .stderr_to(ChildProcess::Stream::file(tmp.path() / "node.err")));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  NodeTestRun run;
  run.out = node.stdout_pipe().read_to_end(deadline);
  const auto status = node.wait_until(deadline);
  std::ifstream err_in(tmp.path() / "node.err");
  run.err.assign(std::istreambuf_iterator<char>(err_in), {});
  run.finished = status.has_value();
  run.success = status && status->success();
  return run;
}

// python3-jsonschema's verdict on `instance` (JSON text) under `schema` (JSON text).
inline bool json_schema_validates(const std::string& schema, const std::string& instance) {
  TempDir dir;
  std::ofstream(dir.path() / "schema.json") << schema;
  std::ofstream(dir.path() / "instance.json") << instance;
  const std::string cmd =
      "python3 -c 'import json, sys, jsonschema; "
      "jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))' " +
      (dir.path() / "schema.json").string() + " " + (dir.path() / "instance.json").string();
  return std::system(cmd.c_str()) == 0;
}

}  // namespace hearth::test
