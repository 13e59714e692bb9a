// Compiled structured-output grammars: a byte automaton plus, per automaton state, the
// vocabulary's allowed-token bitmask, computed the first time a request reaches that state
// and kept with the grammar. Grammars are compiled once per (format, spec) and cached per
// engine (one engine, one tokenizer); a request walks its grammar with a GrammarMatcher.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "worker/engine/request_settings.h"
#include "worker/engine/structured/byte_language.h"
#include "worker/engine/structured/token_trie.h"

namespace hearth::structured {

// Automaton states one grammar may have; a schema needing more is refused (GrammarError).
inline constexpr int kMaxGrammarStates = 50'000;
// Compiled grammars an engine keeps, least recently used out first.
inline constexpr size_t kMaxCachedGrammars = 32;

// A specification the compiler refuses: unsupported, malformed or too large. what() says why.
class GrammarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The tokenizer's side of every grammar: each token's bytes, their trie, the end tokens.
struct Vocabulary {
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);
  std::vector<std::string> bytes;
  TokenTrie trie;
  std::vector<int32_t> eos_ids;
  size_t words() const { return (bytes.size() + 31) / 32; }
};

class Grammar {
 public:
  Grammar(ByteDfa dfa, std::shared_ptr<const Vocabulary> vocab);
  const ByteDfa& dfa() const { return dfa_; }
  const Vocabulary& vocab() const { return *vocab_; }
  // Tokens allowed in `state` (end tokens only where the text is complete), one bit each;
  // (vocab + 31) / 32 words, valid as long as the grammar. Not thread-safe: the engine's
  // thread is its only user.
  std::span<const uint32_t> mask(int32_t state) const;
  // Only the end tokens: for a request whose text is complete and that ignores EOS.
  std::span<const uint32_t> end_only() const { return end_only_; }

 private:
  ByteDfa dfa_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<uint32_t> end_only_;
  mutable std::vector<std::unique_ptr<std::vector<uint32_t>>> masks_;
};

// The byte language of a format and spec (JSON schema, regex, any JSON object). Throws
// GrammarError.
LangPtr structured_language(const StructuredOutput& s);

// Safe to share between threads: a serving worker compiles a request's grammar on the thread
// that reads the request, so the engine's thread finds it compiled (a large schema takes
// ~0.35 s, which would stall every other stream's step).
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const Vocabulary> vocab,
                        size_t max_entries = kMaxCachedGrammars,
                        int max_states = kMaxGrammarStates);
  // The compiled grammar of `s` (not Text), from the cache or compiled now. Throws
  // GrammarError.
  std::shared_ptr<const Grammar> get(const StructuredOutput& s);
  size_t size() const;
  uint64_t compiled() const;

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  size_t max_entries_;
  int max_states_;
  mutable std::mutex mutex_;  // the entries and the count; never held while compiling
  uint64_t compiled_ = 0;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> entries_;  // most recent first
  std::unordered_map<std::string, decltype(entries_)::iterator> index_;
};

// One request's place in its grammar.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {}
  // The tokens the next step may sample.
  std::span<const uint32_t> mask() const;
  // Moves past `token`; false when the grammar does not allow it (the mask was not applied).
  bool advance(int32_t token);
  bool complete() const { return ended_ || g_->dfa().accepting(state_); }

 private:
  std::shared_ptr<const Grammar> g_;
  int32_t state_ = 0;
  bool ended_ = false;  // an end token was taken
};

bool mask_allows(std::span<const uint32_t> mask, int32_t token);

}  // namespace hearth::structured
