// load_tokenizer, the one way programs load a model's tokenizer: a good shared image is used
// in place; a corrupted, truncated, foreign or already refused one is refused with a warning
// that says why, and tokenizer.json is parsed instead, giving the same ids; single-process
// loads go through the cache; a FIFO given as a tokenizer file is refused, not waited on.

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "image_writer.h"
#include "tokenizer_loader.h"
#include "tokenizer_test_util.h"

namespace hearth::tok::testing {
namespace {

namespace fs = std::filesystem;

class TokenizerLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = toy_config({"a", "b", "ab", " "}, {"a b"}).dump();
    image_ = std::make_shared<std::vector<std::byte>>(Tokenizer::build_image(text_));
  }

  // Inputs as a served worker has them, warnings collected.
  TokenizerInputs served(std::span<const std::byte> image) {
    TokenizerInputs in;
    in.json = text_;
    in.image = image;
    in.image_owner = image_;
    in.warn = [this](const std::string& line) { warnings_.push_back(line); };
    return in;
  }

  // Loads through `in`, expecting tokenizer.json to have been parsed after one warning naming
  // `reason`, with the ids of the parsed tokenizer.
  void expect_fallback(const TokenizerInputs& in, const std::string& reason) {
    warnings_.clear();
    const std::optional<LoadedTokenizer> t = load_tokenizer(in);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->origin, TokenizerOrigin::kParsed);
    EXPECT_EQ(t->tokenizer.encode("ab a b", false),
              Tokenizer::from_json(text_).encode("ab a b", false));
    ASSERT_EQ(warnings_.size(), 1u);
    EXPECT_NE(warnings_[0].find("the shared tokenizer image was refused"), std::string::npos)
        << warnings_[0];
    EXPECT_NE(warnings_[0].find(reason), std::string::npos) << warnings_[0];
  }

  std::string text_;
  std::shared_ptr<std::vector<std::byte>> image_;
  std::vector<std::string> warnings_;
};

TEST_F(TokenizerLoader, UsesAGoodSharedImage) {
  const std::optional<LoadedTokenizer> t = load_tokenizer(served(*image_));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->origin, TokenizerOrigin::kSharedImage);
  EXPECT_EQ(t->tokenizer.encode("ab a b", false),
            Tokenizer::from_json(text_).encode("ab a b", false));
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(TokenizerLoader, NoTokenizerJsonMeansNoTokenizer) {
  TokenizerInputs in = served(*image_);
  in.json = "";
  EXPECT_FALSE(load_tokenizer(in));
}

TEST_F(TokenizerLoader, CorruptedImageFallsBackToParsing) {
  std::vector<std::byte> bad = *image_;
  bad[bad.size() / 2] ^= std::byte{0x40};
  expect_fallback(served(bad), "tokenizer image: ");
}

TEST_F(TokenizerLoader, TruncatedImageFallsBackToParsing) {
  expect_fallback(served(std::span(*image_).first(image_->size() / 2)), "tokenizer image: ");
  expect_fallback(served(std::span(*image_).first(3)), "tokenizer image: ");
}

TEST_F(TokenizerLoader, ImageOfAnotherTokenizerJsonIsRefused) {
  // Well formed and sealed, but built from a different document.
  const std::vector<std::byte> other =
      Tokenizer::build_image(toy_config({"a", "b", "ab", " ", "abab"}, {"a b", "ab ab"}).dump());
  expect_fallback(served(other), "built from a different tokenizer.json");
}

TEST_F(TokenizerLoader, ImageRefusedOnReceiptFallsBackWithItsReason) {
  TokenizerInputs in = served({});
  in.image_refusal = "shared file tokenizer.image: the received memfd is not sealed";
  expect_fallback(in, "the received memfd is not sealed");
}

TEST_F(TokenizerLoader, SingleProcessGoesThroughTheCache) {
  const fs::path dir =
      fs::temp_directory_path() / ("hearth_loader_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TokenizerInputs in;
  in.json = text_;
  in.cache = TokenizerCacheOptions{};
  in.cache->dir = dir;
  EXPECT_EQ(load_tokenizer(in)->origin, TokenizerOrigin::kCachedImage);  // built and stored
  EXPECT_EQ(load_tokenizer(in)->origin, TokenizerOrigin::kCachedImage);  // opened
  EXPECT_FALSE(fs::is_empty(dir));
  in.cache.reset();
  EXPECT_EQ(load_tokenizer(in)->origin, TokenizerOrigin::kParsed);
  fs::remove_all(dir);
}

TEST(TokenizerFile, FifoIsRefusedNotWaitedOn) {
  const fs::path fifo = fs::temp_directory_path() / ("hearth_fifo_" + std::to_string(::getpid()));
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (auto load : {std::function<void()>([&] { Tokenizer::from_file(fifo); }),
                    std::function<void()>([&] { load_tokenizer_file(fifo); })}) {
    try {
      load();
      ADD_FAILURE() << "a FIFO loaded";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fifo.string()), std::string::npos) << e.what();
    }
  }
  fs::remove(fifo);
}

}  // namespace
}  // namespace hearth::tok::testing
