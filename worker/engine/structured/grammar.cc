#include "worker/engine/structured/grammar.h"

#include <algorithm>

#include "worker/engine/structured/json_schema_language.h"
#include "worker/engine/structured/regex_language.h"

namespace hearth::structured {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos)
    : bytes(std::move(token_bytes)), trie(bytes), eos_ids(std::move(eos)) {}

bool mask_allows(std::span<const uint32_t> mask, int32_t token) {
  return token >= 0 && size_t(token) / 32 < mask.size() &&
         (mask[size_t(token) / 32] >> (token % 32) & 1u);
}

namespace {

void set_bit(std::vector<uint32_t>& mask, int32_t token) {
  if (token >= 0 && size_t(token) / 32 < mask.size())
    mask[size_t(token) / 32] |= 1u << (token % 32);
}

}  // namespace

Grammar::Grammar(ByteDfa dfa, std::shared_ptr<const Vocabulary> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), end_only_(vocab_->words(), 0u) {
  for (int32_t e : vocab_->eos_ids) set_bit(end_only_, e);
  masks_.resize(size_t(dfa_.states()));
}

std::span<const uint32_t> Grammar::mask(int32_t state) const {
  std::unique_ptr<std::vector<uint32_t>>& m = masks_[size_t(state)];
  if (!m) {
    m = std::make_unique<std::vector<uint32_t>>(vocab_->words(), 0u);
    vocab_->trie.allowed(dfa_, state, *m);
    if (dfa_.accepting(state))
      for (int32_t e : vocab_->eos_ids) set_bit(*m, e);
  }
  return *m;
}

namespace {

LangPtr format_language(const StructuredOutput& s) {
  switch (s.format) {
    case OutputFormat::JsonObject:
      return json_object_language();
    case OutputFormat::JsonSchema:
      return json_schema_language(s.spec);
    case OutputFormat::Regex:
      return regex_language(s.spec);
    case OutputFormat::Text:
      break;
  }
  return nullptr;
}

}  // namespace

LangPtr structured_language(const StructuredOutput& s) {
  try {
    if (LangPtr lang = format_language(s)) {
      if (s.prefix.empty() && s.suffix.empty()) return lang;
      return seq({literal(s.prefix), std::move(lang), literal(s.suffix)});
    }
  } catch (const SchemaError& e) {
    throw GrammarError(e.what());
  } catch (const RegexError& e) {
    throw GrammarError(e.what());
  }
  throw GrammarError("plain text has no grammar");
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t max_entries,
                           int max_states)
    : vocab_(std::move(vocab)),
      max_entries_(std::max<size_t>(max_entries, 1)),
      max_states_(max_states) {}

size_t GrammarCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

uint64_t GrammarCache::compiled() const {
  std::lock_guard lock(mutex_);
  return compiled_;
}

std::shared_ptr<const Grammar> GrammarCache::get(const StructuredOutput& s) {
  // Format, the prefix's length, then prefix, spec and suffix: no two outputs share a key.
  std::string key(1, char('0' + int(s.format)));
  key += std::to_string(s.prefix.size()) + ':' + std::to_string(s.suffix.size()) + ':';
  key += s.prefix + s.spec + s.suffix;
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: a lookup of another spec does not wait for this one. Two threads
  // compiling the same spec at once both finish; the first to insert wins.
  const LangPtr lang = structured_language(s);
  std::shared_ptr<const Grammar> g;
  try {
    g = std::make_shared<const Grammar>(ByteDfa::compile(lang, max_states_), vocab_);
  } catch (const LanguageTooLarge& e) {
    throw GrammarError(std::string(e.what()) +
                       ": simplify the schema (smaller length, item or number bounds)");
  } catch (const std::runtime_error& e) {
    throw GrammarError(e.what());
  }
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  ++compiled_;
  entries_.emplace_front(key, g);
  index_[key] = entries_.begin();
  if (entries_.size() > max_entries_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
  return g;
}

std::span<const uint32_t> GrammarMatcher::mask() const {
  return ended_ ? g_->end_only() : g_->mask(state_);
}

bool GrammarMatcher::advance(int32_t token) {
  if (!mask_allows(mask(), token)) return false;
  const std::vector<int32_t>& eos = g_->vocab().eos_ids;
  if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
    ended_ = true;
    return true;
  }
  const int32_t next = g_->dfa().walk(state_, g_->vocab().bytes[size_t(token)]);
  if (next == ByteDfa::kDead) return false;  // the state stays where it was
  state_ = next;
  return true;
}

}  // namespace hearth::structured
