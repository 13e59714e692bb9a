// Malformed or unsupported tokenizer.json files are refused with a message that names the
// problem and where it is.

#include <gtest/gtest.h>

#include <functional>

#include "tokenizer_test_util.h"

namespace hearth::tok::testing {
namespace {

// Expects loading to throw std::runtime_error whose message contains every fragment.
void expect_refused(const std::string& document, const std::vector<std::string>& fragments) {
  try {
    Tokenizer::from_json(document);
    ADD_FAILURE() << "accepted: " << document.substr(0, 200);
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos) << "message lacks '" << f << "': " << message;
    }
  }
}

void expect_refused(const std::function<void(json&)>& edit,
                    const std::vector<std::string>& fragments) {
  json config = toy_config({"a", "b", "ab"}, {"a b"});
  edit(config);
  expect_refused(config.dump(), fragments);
}

TEST(ConfigErrors, InvalidJson) {
  expect_refused("{\"model\": ", {"tokenizer.json: invalid JSON"});
  expect_refused("", {"tokenizer.json: invalid JSON"});
  expect_refused("[1, 2]", {"expected an object"});
  // Found by fuzzing: a number too large for a double escaped as nlohmann's out_of_range, and
  // the message quoted the bytes read so far, which could end inside a character.
  expect_refused("{\"version\": 1e400}", {"tokenizer.json: invalid JSON", "number overflow"});
  try {
    Tokenizer::from_json("{\"model\": \"caf\xc3\xa9\"x}");
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find("last read"), std::string::npos) << e.what();
  }
}

// Issue 12: a deeply nested value where the readers print it (a merge, a vocabulary id)
// exhausted the stack while the error message was built.
TEST(ConfigErrors, DeeplyNestedValuesAreRefusedWithoutRecursing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string document = toy_config({"a", "b", "ab"}, {"a b"}).dump();
  // As a merge, and as a vocabulary entry's id.
  const std::pair<std::string, std::string> places[] = {{"\"merges\":[", ""},
                                                        {"\"vocab\":{", "\"x\":"}};
  for (const auto& [anchor, key] : places) {
    std::string text = document;
    const size_t pos = text.find(anchor);
    ASSERT_NE(pos, std::string::npos) << anchor;
    text.insert(pos + anchor.size(), key + deep + ",");
    expect_refused(text, {"tokenizer.json", "nested deeper than"});
  }
}

TEST(ConfigErrors, UnsupportedComponentsAreNamed) {
  expect_refused([](json& c) { c["model"]["type"] = "WordPiece"; },
                 {"model", "'WordPiece'", "BPE"});
  expect_refused([](json& c) { c["model"]["type"] = "Unigram"; }, {"'Unigram'"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {{"type", "Whitespace"}};
      },
      {"pre_tokenizer", "'Whitespace'", "not supported"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", {{{"type", "Digits"}}, {{"type", "Punctuation"}}}}};
      },
      {"pre_tokenizer.pretokenizers[1]", "'Punctuation'"});
  expect_refused([](json& c) { c["normalizer"] = {{"type", "NFKC"}}; }, {"normalizer", "'NFKC'"});
  expect_refused([](json& c) { c["normalizer"] = {{"type", "Lowercase"}}; }, {"'Lowercase'"});
  expect_refused(
      [](json& c) {
        c["decoder"] = {{"type", "WordPiece"}};
      },
      {"decoder", "'WordPiece'"});
  expect_refused(
      [](json& c) {
        c["post_processor"] = {{"type", "RobertaProcessing"}};
      },
      {"post_processor", "'RobertaProcessing'"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {{"split", true}};
      },
      {"pre_tokenizer", "'type'"});
  expect_refused([](json& c) { c["truncation"] = {{"max_length", 512}}; }, {"truncation"});
  expect_refused([](json& c) { c["padding"] = {{"strategy", {{"Fixed", 8}}}}; }, {"padding"});
  expect_refused([](json& c) { c["model"]["dropout"] = 0.1; }, {"dropout"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
      },
      {"pre_tokenizer.pattern.Regex", "(a"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"String", "a"}}}, {"behavior", "Sideways"}};
      },
      {"'Sideways'"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
      },
      {"replacement", "exactly one character"});
  expect_refused(
      [](json& c) {
        c["pre_tokenizer"] = {
            {"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
      },
      {"'sometimes'"});
}

TEST(ConfigErrors, BadMerges) {
  expect_refused([](json& c) { c["model"]["merges"] = {"a c"}; },
                 {"model.merges[0]", "'c'", "not in the vocabulary"});
  expect_refused(
      [](json& c) {
        c["model"]["merges"] = {"a b", "b b"};
      },
      {"model.merges[1]", "merged token 'bb'"});
  expect_refused([](json& c) { c["model"]["merges"] = {"ab"}; },
                 {"model.merges[0]", "two tokens separated by one space"});
  expect_refused([](json& c) { c["model"]["merges"] = {"a b c"}; }, {"model.merges[0]"});
  expect_refused([](json& c) { c["model"]["merges"] = {json::array({"a"})}; }, {"model.merges[0]"});
  expect_refused([](json& c) { c["model"]["merges"] = 7; }, {"model.merges", "array"});
}

TEST(ConfigErrors, MissingVocabularyEntries) {
  expect_refused([](json& c) { c["model"].erase("vocab"); }, {"model", "'vocab'"});
  expect_refused([](json& c) { c.erase("model"); }, {"'model'"});
  expect_refused([](json& c) { c["model"]["vocab"]["x"] = -4; }, {"model.vocab", "'x'", "-4"});
  expect_refused([](json& c) { c["model"]["unk_token"] = "<unk>"; },
                 {"model.unk_token", "'<unk>'", "not in the vocabulary"});
  expect_refused(
      [](json& c) {
        c["post_processor"] = {{"type", "TemplateProcessing"},
                               {"single",
                                {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                               {"special_tokens", json::object()}};
      },
      {"post_processor.single[0]", "'<s>'", "not defined"});
  expect_refused(
      [](json& c) {
        c["post_processor"] = {
            {"type", "TemplateProcessing"},
            {"single", "<s> $A"},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {99}}, {"tokens", {"<s>"}}}}}}};
      },
      {"post_processor.special_tokens.<s>.ids", "99", "not in the vocabulary"});
  expect_refused(
      [](json& c) {
        c["added_tokens"] = {{{"id", 5}}};
      },
      {"added_tokens[0]", "'content'"});
}

// Issue 21: an added token's declared id of 2^31-1 was silently replaced by the next free id.
// The vocabulary here is the model's 3 tokens and one added: ids 0 to 3.
TEST(ConfigErrors, AddedTokenIdsMustBeWithinTheVocabulary) {
  const auto added = [](int64_t id) {
    return [id](json& c) {
      c["added_tokens"] = {{{"id", id}, {"content", "<x>"}, {"special", true}}};
    };
  };
  expect_refused(added(2147483647), {"tokenizer.json", "added_tokens[0].id",
                                     "2147483647 is outside the vocabulary", "ids 0 to 3"});
  expect_refused(added(4), {"added_tokens[0].id", "4 is outside the vocabulary (ids 0 to 3"});
  json config = toy_config({"a", "b", "ab"}, {"a b"});
  added(3)(config);
  const Tokenizer tokenizer = Tokenizer::from_json(config.dump());
  EXPECT_EQ(tokenizer.token_to_id("<x>"), 3);
}

TEST(ConfigErrors, FromFileNamesThePath) {
  try {
    Tokenizer::from_file("/nonexistent/model/dir");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model/dir"), std::string::npos);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "hearth_tok_errors";
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "tokenizer.json") << "{\"model\": {\"type\": \"WordPiece\"}}"; }
  try {
    Tokenizer::from_file(dir);  // a directory holding tokenizer.json
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
    EXPECT_NE(message.find("'WordPiece'"), std::string::npos) << message;
  }
  std::filesystem::remove_all(dir);
}

TEST(ConfigErrors, AcceptsOlderSpellings) {
  json config = toy_config({"a", "b", "ab"}, {"a b"});
  config["model"].erase("type");  // old files: BPE implied by merges
  config["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", true}};
  config["padding"] = {{"strategy", "BatchLongest"}};
  EXPECT_NO_THROW(Tokenizer::from_json(config.dump()));
}

}  // namespace
}  // namespace hearth::tok::testing
