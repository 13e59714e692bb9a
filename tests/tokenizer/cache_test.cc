// The tokenizer image cache: a miss builds and stores, a hit opens the stored image, an edited
// tokenizer.json misses, and a damaged image or an unusable directory costs a warning but
// never the tokenizer.

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "image_format.h"
#include "tokenizer_cache.h"
#include "tokenizer_test_util.h"

namespace hearth::tok::testing {
namespace {

namespace fs = std::filesystem;

json config_a() {
  return toy_config({"a", "b", "ab", " "}, {"a b"});
}
json config_b() {  // config_a with one more merge: "abab" changes
  return toy_config({"a", "b", "ab", " ", "abab"}, {"a b", "ab ab"});
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

class TokenizerCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hearth_cache_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Options with the cache in `dir` that collect warnings instead of printing them.
  TokenizerCacheOptions options(const fs::path& dir) {
    TokenizerCacheOptions o;
    o.dir = dir;
    o.warn = [this](const std::string& message) { warnings_.push_back(message); };
    return o;
  }

  std::vector<fs::path> files_in(const fs::path& dir) const {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) files.push_back(e.path());
    return files;
  }

  fs::path root_;
  std::vector<std::string> warnings_;
};

TEST_F(TokenizerCache, MissStoresAndHitOpensTheImage) {
  const fs::path dir = root_ / "new" / "cache";  // created, parents too
  const std::string text = config_a().dump();
  const CachedTokenizer first = load_tokenizer_cached(text, options(dir));
  EXPECT_EQ(first.source, TokenizerSource::kBuilt);
  ASSERT_TRUE(fs::exists(first.image));
  EXPECT_EQ(first.image.parent_path(), dir);
  EXPECT_NE(first.image.filename().string().find(".v" + std::to_string(kImageVersion) + "."),
            std::string::npos)
      << first.image;
  EXPECT_EQ(mode_of(first.image), 0644u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(root_ / "new"), 0700u);
  EXPECT_EQ(files_in(dir).size(), 1u) << "a temporary file was left behind";

  const CachedTokenizer second = load_tokenizer_cached(text, options(dir));
  EXPECT_EQ(second.source, TokenizerSource::kCacheHit);
  EXPECT_EQ(second.image, first.image);
  const Tokenizer parsed = Tokenizer::from_json(text);
  for (const char* s : {"ab a", "abab", "ba  b"}) {
    EXPECT_EQ(first.tokenizer.encode(s, false), parsed.encode(s, false)) << s;
    EXPECT_EQ(second.tokenizer.encode(s, false), parsed.encode(s, false)) << s;
  }
  EXPECT_TRUE(warnings_.empty()) << warnings_.front();
}

TEST_F(TokenizerCache, AnEditedTokenizerJsonMisses) {
  const fs::path dir = root_ / "cache";
  const fs::path model = root_ / "model";
  fs::create_directories(model);
  std::ofstream(model / "tokenizer.json") << config_a().dump();
  const CachedTokenizer a = load_tokenizer_file_cached(model, options(dir));
  EXPECT_EQ(a.source, TokenizerSource::kBuilt);
  EXPECT_EQ(a.tokenizer.encode("abab", false), (std::vector<int32_t>{2, 2}));

  std::ofstream(model / "tokenizer.json") << config_b().dump();
  const CachedTokenizer b = load_tokenizer_file_cached(model / "tokenizer.json", options(dir));
  EXPECT_EQ(b.source, TokenizerSource::kBuilt) << "the old image was used for a new tokenizer";
  EXPECT_NE(b.image, a.image);
  EXPECT_EQ(b.tokenizer.encode("abab", false), (std::vector<int32_t>{4}));
  EXPECT_EQ(load_tokenizer_file_cached(model, options(dir)).source, TokenizerSource::kCacheHit);
  EXPECT_TRUE(warnings_.empty());
}

json config_c() {  // config_a with another merge: "ba" is one token
  return toy_config({"a", "b", "ab", " ", "ba"}, {"a b", "b a"});
}

// The cache stays within its byte budget: adding an image removes the least recently used
// (a hit counts as a use), never the image just added.
TEST_F(TokenizerCache, AddingAnImageRemovesTheLeastRecentlyUsedBeyondTheBudget) {
  const fs::path dir = root_ / "cache";
  const fs::path a = load_tokenizer_cached(config_a().dump(), options(dir)).image;
  const fs::path b = load_tokenizer_cached(config_b().dump(), options(dir)).image;
  const uint64_t size_c =
      fs::file_size(load_tokenizer_cached(config_c().dump(), options(root_ / "scratch")).image);
  // a older than b: without the hit below, a would go first.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(a, now - std::chrono::hours(2));
  fs::last_write_time(b, now - std::chrono::hours(1));
  EXPECT_EQ(load_tokenizer_cached(config_a().dump(), options(dir)).source,
            TokenizerSource::kCacheHit);

  TokenizerCacheOptions budget = options(dir);
  budget.max_bytes = fs::file_size(a) + size_c;  // room for two of the three
  const CachedTokenizer c = load_tokenizer_cached(config_c().dump(), budget);
  EXPECT_EQ(c.source, TokenizerSource::kBuilt);
  EXPECT_TRUE(fs::exists(a)) << "the recently used image was removed";
  EXPECT_FALSE(fs::exists(b)) << "the least recently used image was kept over the budget";
  EXPECT_TRUE(fs::exists(c.image));
  EXPECT_TRUE(warnings_.empty());
}

// A budget smaller than one image keeps only the newest; a process that has a removed image
// mapped keeps using it (it is unlinked, never truncated).
TEST_F(TokenizerCache, ATrimmedImageStaysUsableWhereItIsMapped) {
  const fs::path dir = root_ / "cache";
  TokenizerCacheOptions none = options(dir);
  none.max_bytes = 0;
  const CachedTokenizer built = load_tokenizer_cached(config_a().dump(), none);
  ASSERT_TRUE(fs::exists(built.image));  // the image just added stays, whatever the budget
  const CachedTokenizer mapped = load_tokenizer_cached(config_a().dump(), none);
  ASSERT_EQ(mapped.source, TokenizerSource::kCacheHit);
  const CachedTokenizer other = load_tokenizer_cached(config_b().dump(), none);
  EXPECT_FALSE(fs::exists(built.image));
  EXPECT_EQ(files_in(dir), std::vector<fs::path>{other.image});
  EXPECT_EQ(mapped.tokenizer.encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(TokenizerCache, ADamagedImageIsReportedAndReplaced) {
  const fs::path dir = root_ / "cache";
  const std::string text = config_a().dump();
  const fs::path image = load_tokenizer_cached(text, options(dir)).image;
  {
    std::fstream f(image, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(image) - 1));
    f.put('\x55');
  }
  const CachedTokenizer again = load_tokenizer_cached(text, options(dir));
  EXPECT_EQ(again.source, TokenizerSource::kBuilt);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find(image.string()), std::string::npos) << warnings_[0];
  EXPECT_NE(warnings_[0].find("checksum mismatch"), std::string::npos) << warnings_[0];
  EXPECT_EQ(again.tokenizer.encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_EQ(load_tokenizer_cached(text, options(dir)).source, TokenizerSource::kCacheHit);

  // An image of another tokenizer under this one's name (a collision, or a copied file).
  const fs::path other = load_tokenizer_cached(config_b().dump(), options(dir)).image;
  fs::copy_file(other, image, fs::copy_options::overwrite_existing);
  warnings_.clear();
  const CachedTokenizer swapped = load_tokenizer_cached(text, options(dir));
  EXPECT_EQ(swapped.source, TokenizerSource::kBuilt);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("different tokenizer.json"), std::string::npos) << warnings_[0];
  EXPECT_EQ(swapped.tokenizer.encode("abab", false), (std::vector<int32_t>{2, 2}));
}

TEST_F(TokenizerCache, AnUnusableDirectoryFallsBackToParsing) {
  // A regular file where the directory should be: unusable even for root.
  const fs::path file = root_ / "not-a-dir";
  std::ofstream(file) << "x";
  for (const fs::path& dir : {file, file / "cache"}) {
    warnings_.clear();
    const CachedTokenizer t = load_tokenizer_cached(config_a().dump(), options(dir));
    EXPECT_EQ(t.source, TokenizerSource::kParsed) << dir;
    EXPECT_TRUE(t.image.empty());
    EXPECT_EQ(t.tokenizer.encode("ab", false), (std::vector<int32_t>{2}));
    ASSERT_EQ(warnings_.size(), 1u) << dir;
    EXPECT_NE(warnings_[0].find(file.string()), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find("continuing without the cache"), std::string::npos) << warnings_[0];
  }
}

TEST_F(TokenizerCache, DisabledMeansParsedAndNothingWritten) {
  TokenizerCacheOptions o = options(root_ / "cache");
  o.enabled = false;
  const CachedTokenizer t = load_tokenizer_cached(config_a().dump(), o);
  EXPECT_EQ(t.source, TokenizerSource::kParsed);
  EXPECT_FALSE(fs::exists(root_ / "cache"));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(TokenizerCache, AnInvalidTokenizerIsRefusedAsWhenParsed) {
  json bad = config_a();
  bad["pre_tokenizer"] = {{"type", "Whitespace"}};
  try {
    load_tokenizer_cached(bad.dump(), options(root_ / "cache"));
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer: type 'Whitespace'"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(files_in(root_ / "cache").empty());
  EXPECT_THROW(load_tokenizer_file_cached(root_ / "missing", options(root_ / "cache")),
               std::runtime_error);
}

TEST_F(TokenizerCache, ConcurrentLoadersShareOneImage) {
  const fs::path dir = root_ / "cache";
  const std::string text = config_a().dump();
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> ids(4);
  for (size_t k = 0; k < ids.size(); ++k) {
    threads.emplace_back([&, k] {
      ids[k] = load_tokenizer_cached(text, options(dir)).tokenizer.encode("ab", false);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& v : ids) EXPECT_EQ(v, (std::vector<int32_t>{2}));
  EXPECT_EQ(files_in(dir).size(), 1u);
  EXPECT_EQ(load_tokenizer_cached(text, options(dir)).source, TokenizerSource::kCacheHit);
}

// Restores an environment variable when it goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(TokenizerCache, DefaultDirectoryFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv own("HEARTH_TOKENIZER_IMAGE_CACHE", nullptr);
  EXPECT_EQ(default_tokenizer_cache_dir(), fs::path("/home/someone/.cache/hearth/tokenizers"));
  {
    ScopedEnv relative("XDG_CACHE_HOME", "relative/path");  // ignored, as the spec says
    EXPECT_EQ(default_tokenizer_cache_dir(), fs::path("/home/someone/.cache/hearth/tokenizers"));
  }
  ScopedEnv set_xdg("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(default_tokenizer_cache_dir(), fs::path("/xdg/hearth/tokenizers"));
  {
    ScopedEnv set_own("HEARTH_TOKENIZER_IMAGE_CACHE", "/elsewhere");
    EXPECT_EQ(default_tokenizer_cache_dir(), fs::path("/elsewhere"));
  }
  {
    ScopedEnv off("HEARTH_TOKENIZER_IMAGE_CACHE", "off");
    EXPECT_EQ(default_tokenizer_cache_dir(), std::nullopt);
    TokenizerCacheOptions o;
    o.warn = [this](const std::string& m) { warnings_.push_back(m); };
    EXPECT_EQ(load_tokenizer_cached(config_a().dump(), o).source, TokenizerSource::kParsed);
    EXPECT_TRUE(warnings_.empty()) << "disabling the cache is not a problem to report";
  }
  ScopedEnv no_home("HOME", nullptr);
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(default_tokenizer_cache_dir(), std::nullopt);
  TokenizerCacheOptions o;
  o.warn = [this](const std::string& m) { warnings_.push_back(m); };
  EXPECT_EQ(load_tokenizer_cached(config_a().dump(), o).source, TokenizerSource::kParsed);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("no cache directory"), std::string::npos) << warnings_[0];
}

}  // namespace
}  // namespace hearth::tok::testing
