#include "normalizer.h"

#include <vector>

#include "pattern.h"
#include "unicode.h"

namespace hearth::tok {
namespace {

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text, size_t& /*inserted_prefix*/) const override {
    text = nfc(text);
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text, size_t& inserted_prefix) const override {
    if (text.empty()) return;  // the reference leaves empty pieces alone
    text.insert(0, prefix_);
    inserted_prefix += prefix_.size();
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text, size_t& /*inserted_prefix*/) const override {
    text = pattern_.replace_all(text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& text, size_t& inserted_prefix) const override {
    for (const auto& part : parts_) part->normalize(text, inserted_prefix);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(get_string(j, "prepend", where));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        Pattern::from_json(require(j, "pattern", where), where + ".pattern"),
        get_string(j, "content", where));
  }
  if (type == "Sequence") {
    const Json& list = require(j, "normalizers", where);
    if (!list.is_array()) config_error(where + ".normalizers", "expected an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto part = make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unsupported_type(where, type, "NFC, Prepend, Replace, Sequence");
}

}  // namespace hearth::tok
