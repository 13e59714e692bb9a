// Model directories written to hurt the server (issue 12): each must be refused when it is
// loaded, with a message that names the file at fault, and nothing may crash, hang or leak.
// What the server does accept must reach a worker: its manifest fits in a reply frame.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "ipc/frame.h"
#include "ipc/frame_reader.h"
#include "tests/ipc/test_util.h"
#include "tools/synth_model.h"
#include "weight-server/daemon/served_model.h"
#include "weight-server/model/hf_model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A tiny synthetic model in a fresh directory.
class HostileModel : public ::testing::Test {
 protected:
  void SetUp() override { fresh_model(); }
  fs::path dir() const { return tmp_ / "model"; }
  void fresh_model() {
    fs::remove_all(dir());
    write_synthetic_model(dir(), SynthOptions{});
  }

  // Sets config.json's `key`.
  void set_config_key(const std::string& key, const json& value) {
    json config = json::parse(slurp(dir() / "config.json"));
    config[key] = value;
    write(dir() / "config.json", config.dump());
  }

  // Adds `"key": value` (raw JSON text, which may be too deep to parse) to config.json.
  void add_config_key(const std::string& key, const std::string& raw_value) {
    std::string text = slurp(dir() / "config.json");
    text.insert(text.find('{') + 1, "\"" + key + "\": " + raw_value + ",");
    write(dir() / "config.json", text);
  }

  std::unique_ptr<ServedModel> load() { return load_from(dir()); }
  static std::unique_ptr<ServedModel> load_from(const fs::path& dir) {
    ServeOptions options;
    options.backend = "memfd";
    options.threads = 1;
    return load_served_model({dir, "m"}, options);
  }

  // Loading must fail with a message holding every fragment; returns the message.
  std::string expect_refused(std::initializer_list<std::string> fragments) {
    try {
      load();
      ADD_FAILURE() << "loaded, expected an error";
      return "";
    } catch (const std::runtime_error& e) {
      for (const std::string& f : fragments)
        EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      return e.what();
    }
  }

  // The reply a worker gets for `manifest` goes through the frame codec both ways.
  static void expect_attachable(const ServedModel& served) {
    const std::string frame = ipc::encode_frame({{"ok", true}, {"manifest", served.manifest}});
    const json body = ipc::parse_frame_payload(std::string_view(frame).substr(4));
    EXPECT_EQ(parse_manifest(body.at("manifest")).model, "m");
  }

  test::TempDir tmp_;
};

std::string nested_array(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST_F(HostileModel, DeeplyNestedConfigIsRefused) {
  add_config_key("deep", nested_array(100000));
  expect_refused({"config.json", "nested deeper than"});
}

TEST_F(HostileModel, ConfigTooDeepToTravelInAManifestIsRefused) {
  // Loaded before, then every worker failed: the frame around the manifest was too deep.
  add_config_key("deep", nested_array(63));
  expect_refused({"config.json", "nested deeper than"});
}

TEST_F(HostileModel, NestedConfigWithinTheLimitLoadsAndAttaches) {
  add_config_key("deep", nested_array(20));
  expect_attachable(*load());
}

// Issue 12 (security): with --admin-uid, an admin could link a file of its model directory to
// one only the server may read, and every allowed uid then read it through `manifest`; a
// config.json linked to a secret leaked its first bytes in the parse error.
TEST_F(HostileModel, FilesLinkedOutOfTheDirectoryAreRefused) {
  const fs::path secret = tmp_ / "secret";
  write(secret, "hunter2 is the password");
  for (const std::string name : {"tokenizer_config.json", "tokenizer.json",
                                 "generation_config.json", "config.json", "model.safetensors"}) {
    for (const fs::path& target : {secret, fs::path("../secret"), fs::path("/dev/zero")}) {
      SCOPED_TRACE(name + " -> " + target.string());
      fresh_model();
      fs::remove(dir() / name);
      fs::create_symlink(target, dir() / name);
      const std::string what = expect_refused({name, "outside the model directory"});
      EXPECT_EQ(what.find("hunter2"), std::string::npos) << what;
    }
  }
}

TEST_F(HostileModel, LinksThatStayInsideTheDirectoryAreFollowed) {
  fs::create_directory(dir() / "files");
  fs::rename(dir() / "tokenizer.json", dir() / "files" / "tokenizer.json");
  fs::create_symlink("files/tokenizer.json", dir() / "tokenizer.json");
  fs::rename(dir() / "model.safetensors", dir() / "files" / "weights");
  fs::create_symlink("./files/../files/weights", dir() / "model.safetensors");
  expect_attachable(*load());
}

// A Hugging Face cache snapshot links every file to ../../blobs/HASH: those links are followed,
// within the repository's folder and no further.
TEST_F(HostileModel, HuggingFaceCacheSnapshotsLoad) {
  const fs::path repo = tmp_ / "hub/models--org--tiny";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir())) {
    const std::string blob = "blob" + std::to_string(n++);
    fs::rename(e.path(), repo / "blobs" / blob);
    fs::create_symlink("../../blobs/" + blob, snapshot / e.path().filename());
  }
  expect_attachable(*load_from(snapshot));

  // One link out of the repository is refused like any other.
  write(tmp_ / "hub/outside.json", "{}");
  fs::remove(snapshot / "generation_config.json");
  fs::create_symlink("../../../outside.json", snapshot / "generation_config.json");
  try {
    load_from(snapshot);
    ADD_FAILURE() << "loaded a file from outside the repository";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model directory"), std::string::npos)
        << e.what();
  }
}

// Issue 12: tokenizer files that are not UTF-8 loaded, then every `manifest` failed with
// "the server could not encode its reply".
TEST_F(HostileModel, TextFilesThatAreNotUtf8AreRefused) {
  for (const std::string name : {"tokenizer.json", "tokenizer_config.json"}) {
    SCOPED_TRACE(name);
    fresh_model();
    write(dir() / name, "{\"model\": \"caf\xe9\"}");
    expect_refused({name, "UTF-8", "byte 14"});
  }
}

// Issue 12: a model path that is not UTF-8 loaded, then broke `list` and `stats` for everyone.
TEST_F(HostileModel, ModelPathsThatAreNotUtf8AreRefused) {
  const fs::path odd = tmp_ / "mod\xe8le";
  fs::rename(dir(), odd);
  try {
    load_from(odd);
    ADD_FAILURE() << "loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
}

// Issue 12: a tokenizer.json over the reply frame's 64 MiB loaded, then could not be attached.
// Issue 16: files travel as memfds beside the manifest, so such a file no longer limits it; one
// hearth cannot build a tokenizer from is shared without an image.
TEST_F(HostileModel, FilesLargerThanAFrameAreSharedBesideTheManifest) {
  const std::string text =
      "{\"padding\": \"" + std::string(ipc::kDefaultMaxFrameBytes, 'x') + "\"}";
  write(dir() / "tokenizer.json", text);
  const std::unique_ptr<ServedModel> served = load();
  expect_attachable(*served);
  const Manifest m = parse_manifest(served->manifest);
  ASSERT_NE(m.file("tokenizer.json"), nullptr);
  EXPECT_EQ(m.file("tokenizer.json")->bytes, text.size());
  EXPECT_EQ(m.file("tokenizer.image"), nullptr);
  EXPECT_LT(served->manifest.dump().size(), size_t(1) << 20);
}

// Issue 12: 1024 heads x head_dim 4194304 wrapped q_dim to 0; the server happened to refuse the
// model (its manifest check differs) while the single-process worker ran it into a null
// pointer. One validation now refuses it for both, before any tensor is looked at.
TEST_F(HostileModel, WrappingSizesAreRefusedByServerAndWorkerAlike) {
  set_config_key("num_attention_heads", 1024);
  set_config_key("num_key_value_heads", 1024);
  set_config_key("head_dim", 4194304);
  const std::string served = expect_refused({"config.json", "head_dim"});
  try {
    HfModel::open(dir());  // what the single-process worker opens
    ADD_FAILURE() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(e.what(), served);
  }
}

// Issue 12: a FIFO in the model directory blocked the load forever (the worker, or the
// server's load thread, after which `shutdown` never finished). Every file is tried as one.
TEST_F(HostileModel, FifosAreRefusedWithoutBlocking) {
  for (const std::string name : {"config.json", "model.safetensors", "tokenizer.json",
                                 "tokenizer_config.json", "generation_config.json"}) {
    SCOPED_TRACE(name);
    fresh_model();
    const fs::path fifo = dir() / name;
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto loading = std::async(std::launch::async, [&]() -> std::string {
      try {
        load();
        return "loaded";
      } catch (const std::exception& e) {
        return e.what();
      }
    });
    if (loading.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "the load blocked on the FIFO";
      // A writer releases the blocked open, so that the test can end.
      for (;;) {
        const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (w >= 0) {
          ::close(w);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    const std::string what = loading.get();
    EXPECT_NE(what.find(name), std::string::npos) << what;
    EXPECT_NE(what.find("not a regular file"), std::string::npos) << what;
  }
}

TEST_F(HostileModel, DirectoriesInPlaceOfFilesAreRefused) {
  fs::remove(dir() / "tokenizer.json");
  fs::create_directory(dir() / "tokenizer.json");
  expect_refused({"tokenizer.json", "directory"});
}

}  // namespace
}  // namespace hearth
