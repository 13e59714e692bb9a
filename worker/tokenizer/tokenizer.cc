#include "tokenizer.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ipc/json_limits.h"
#include "tokenizer_impl.h"

namespace hearth {

Tokenizer::Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json) {
  // The shared reader of outside JSON: the readers below copy and print values, which
  // recurses, so a deep document is refused first; its messages never quote the text.
  const tok::Json root = parse_json(tokenizer_json, "tokenizer.json");
  try {
    return Tokenizer(std::make_shared<const tok::TokenizerImpl>(root));
  } catch (const tok::Json::exception& e) {
    // Defensive: a shape the readers did not anticipate still gets a clear message.
    throw std::runtime_error(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open tokenizer file " + file.string());
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read tokenizer file " + file.string());
  try {
    return from_json(content.str());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  impl_->encode(text, add_special_tokens, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* t = impl_->token_of(id);
    if (t == nullptr) continue;
    if (skip_special_tokens && impl_->is_special_content(*t)) continue;
    tokens.push_back(*t);
  }
  std::string out;
  if (const tok::Decoder* decoder = impl_->decoder()) {
    decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
    return out;
  }
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (k > 0) out.push_back(' ');
    out += tokens[k];
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const int32_t id = impl_->added().token_to_id(token); id >= 0) return id;
  if (const int32_t id = impl_->model().token_to_id(token); id >= 0) return id;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = impl_->content_of(id);
  return t == nullptr ? std::string() : *t;
}

size_t Tokenizer::vocab_size() const {
  return impl_->model().vocab_size() + impl_->added().count_outside(impl_->model());
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added().find(id);
  return t != nullptr && t->special;
}

}  // namespace hearth
