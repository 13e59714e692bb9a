#include "post_processor.h"

#include <map>
#include <sstream>
#include <variant>

namespace hearth::tok {
namespace {

class ByteLevelPostProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>& /*ids*/, bool /*add_special_tokens*/) const override {}
};

class TemplatePostProcessor final : public PostProcessor {
 public:
  // One step of the single-sequence template: the encoded text, or fixed special ids.
  using Step = std::variant<std::monostate, std::vector<int32_t>>;

  explicit TemplatePostProcessor(std::vector<Step> steps) : steps_(std::move(steps)) {}

  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Step& step : steps_) {
      if (std::holds_alternative<std::monostate>(step)) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        const auto& special = std::get<std::vector<int32_t>>(step);
        out.insert(out.end(), special.begin(), special.end());
      }
    }
    ids = std::move(out);
  }

 private:
  std::vector<Step> steps_;
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& part : parts_) part->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> make_template(const Json& j, const std::string& where,
                                             const std::function<bool(int32_t)>& known_id) {
  // special_tokens: name -> {"id": name, "ids": [...], "tokens": [...]}
  std::map<std::string, std::vector<int32_t>> specials;
  if (const auto it = j.find("special_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) config_error(where + ".special_tokens", "expected an object");
    for (const auto& [name, def] : it->items()) {
      const std::string at = where + ".special_tokens." + name;
      const Json& ids = require(def, "ids", at);
      if (!ids.is_array()) config_error(at + ".ids", "expected an array of ids");
      std::vector<int32_t> v;
      for (const Json& id : ids) {
        if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX) {
          config_error(at + ".ids", "invalid id " + id.dump());
        }
        const auto value = static_cast<int32_t>(id.get<uint64_t>());
        if (!known_id(value)) {
          config_error(at + ".ids", "id " + std::to_string(value) + " is not in the vocabulary");
        }
        v.push_back(value);
      }
      specials[name] = std::move(v);
    }
  }
  auto special_ids = [&](const std::string& name, const std::string& at) {
    const auto it = specials.find(name);
    if (it == specials.end()) {
      config_error(at, "special token '" + name + "' is not defined in special_tokens");
    }
    return it->second;
  };

  const Json& single = require(j, "single", where);
  const std::string at = where + ".single";
  std::vector<TemplatePostProcessor::Step> steps;
  if (single.is_string()) {
    // Shorthand such as "<s> $A </s>" (pieces may carry a ":type_id" suffix).
    std::istringstream in(single.get<std::string>());
    std::string piece;
    while (in >> piece) {
      const size_t colon = piece.rfind(':');
      if (colon != std::string::npos && colon > 0) piece = piece.substr(0, colon);
      if (piece == "$" || piece == "$A" || piece == "$0") {
        steps.emplace_back(std::monostate{});
      } else if (piece.starts_with("$")) {
        config_error(at, "'" + piece + "' is not the single sequence");
      } else {
        steps.emplace_back(special_ids(piece, at));
      }
    }
  } else if (single.is_array()) {
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string step_at = at + "[" + std::to_string(i) + "]";
      const Json& step = single[i];
      if (step.contains("Sequence")) {
        const std::string id = get_string(step.at("Sequence"), "id", step_at + ".Sequence");
        if (id != "A") config_error(step_at, "sequence '" + id + "' in a single template");
        steps.emplace_back(std::monostate{});
      } else if (step.contains("SpecialToken")) {
        steps.emplace_back(special_ids(
            get_string(step.at("SpecialToken"), "id", step_at + ".SpecialToken"), step_at));
      } else {
        config_error(step_at, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
  } else {
    config_error(at, "expected an array or a string");
  }
  return std::make_unique<TemplatePostProcessor>(std::move(steps));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const std::string& where,
                                                   const std::function<bool(int32_t)>& known_id) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, where);
  if (type == "TemplateProcessing") return make_template(j, where, known_id);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPostProcessor>();
  if (type == "Sequence") {
    const Json& list = require(j, "processors", where);
    if (!list.is_array()) config_error(where + ".processors", "expected an array");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto part =
          make_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]", known_id);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePostProcessor>(std::move(parts));
  }
  unsupported_type(where, type, "ByteLevel, Sequence, TemplateProcessing");
}

}  // namespace hearth::tok
