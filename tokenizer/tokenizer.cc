#include "tokenizer.h"

#include <memory>
#include <stdexcept>

#include "base/digest.h"
#include "base/mapped_file.h"
#include "image_builder.h"
#include "image_reader.h"
#include "image_writer.h"
#include "tokenizer_impl.h"

namespace hearth {
namespace {

// The pipeline over `tables`; errors in the settings are reported as in tokenizer.json.
std::shared_ptr<const tok::TokenizerImpl> make_impl(const tok::Json& settings,
                                                    const tok::BpeTables& tables,
                                                    std::shared_ptr<const void> storage) {
  try {
    return std::make_shared<const tok::TokenizerImpl>(settings, tables, std::move(storage));
  } catch (const tok::Json::exception& e) {
    // Defensive: a shape the readers did not anticipate still gets a clear message.
    throw std::runtime_error(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json) {
  tok::TokenizerParts parts = tok::build_tokenizer_parts(tokenizer_json);
  auto tables = std::make_shared<const tok::BpeTableData>(std::move(parts.tables));
  return Tokenizer(make_impl(parts.settings, tables->view(), tables));
}

std::vector<std::byte> Tokenizer::build_image(std::string_view tokenizer_json) {
  const tok::TokenizerParts parts = tok::build_tokenizer_parts(tokenizer_json);
  make_impl(parts.settings, parts.tables.view(), nullptr);  // refuses what from_json refuses
  return tok::write_image(parts.settings.dump(), parts.tables, xxh3_128(tokenizer_json));
}

Tokenizer Tokenizer::from_image(std::span<const std::byte> image,
                                std::shared_ptr<const void> owner) {
  const tok::ImageContents contents = tok::read_image(image);
  tok::Json settings;
  try {
    settings = tok::Json::parse(contents.settings.begin(), contents.settings.end());
  } catch (const tok::Json::parse_error& e) {
    throw std::runtime_error(std::string("tokenizer image: settings are not valid JSON: ") +
                             e.what());
  }
  try {
    return Tokenizer(make_impl(settings, contents.tables, std::move(owner)));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("tokenizer image: settings: ") + e.what());
  }
}

Tokenizer Tokenizer::from_image_file(const std::filesystem::path& path) {
  auto mapping =
      std::make_shared<const MappedFile>(MappedFile::open(path, MappedFile::Prefault::kYes));
  try {
    return from_image(mapping->bytes(), mapping);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path.string() + ": " + e.what());
  }
}

std::filesystem::path tokenizer_json_path(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) ? path / "tokenizer.json" : path;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  const std::filesystem::path file = tokenizer_json_path(path);
  // A mapping, not a copy: it refuses FIFOs and other non-regular files rather than blocking.
  std::optional<MappedFile> content;
  try {
    content = MappedFile::open(file, MappedFile::Prefault::kYes);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("cannot open tokenizer file ") + e.what());
  }
  try {
    return from_json(content->text());
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
    const std::optional<std::string_view> t = impl_->token_of(id);
    if (!t) continue;
    if (skip_special_tokens && impl_->is_special_content(*t)) continue;
    tokens.emplace_back(*t);
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
  return std::string(impl_->content_of(id).value_or(std::string_view()));
}

size_t Tokenizer::vocab_size() const {
  return impl_->model().vocab_size() + impl_->added().count_outside(impl_->model());
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added().find(id);
  return t != nullptr && t->special;
}

}  // namespace hearth
