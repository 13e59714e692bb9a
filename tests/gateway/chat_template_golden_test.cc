// Every committed chat template (Llama 2, Llama 3 / 3.1 / 3.2, Mistral Nemo, Qwen2.5, Qwen3)
// rendered over every committed conversation must match Python's jinja2 byte for byte, and
// fail where it failed (with the template's own message for raise_exception).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gateway/chat_template.h"
#include "tests/gateway/golden_files.h"

namespace hearth::gateway {
namespace {

using testing::golden_dir;
using testing::read_json;

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(golden_dir() + "/templates")) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> token(const OrderedJson& t, const char* key) {
  if (!t.contains(key) || t[key].is_null()) return std::nullopt;
  return t[key].get<std::string>();
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, MatchesJinja2) {
  const std::string name = GetParam();
  const OrderedJson tmpl = read_json(golden_dir() + "/templates/" + name + ".json");
  const OrderedJson expected = read_json(golden_dir() + "/expected/" + name + ".json");
  const OrderedJson conversations = read_json(golden_dir() + "/conversations.json");
  const ChatTemplate chat = ChatTemplate::load(tmpl["chat_template"].get<std::string>());
  const std::tm now = testing::parse_now(expected["now"].get<std::string>());

  ASSERT_EQ(expected["results"].size(), conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    const OrderedJson& conv = conversations[i];
    const OrderedJson& want = expected["results"][i];
    const std::string case_name = conv["name"].get<std::string>();
    ASSERT_EQ(want["case"], case_name);
    SCOPED_TRACE(name + " / " + case_name);

    ChatTemplateInput input;
    input.messages = conv["messages"];
    input.add_generation_prompt = conv["add_generation_prompt"].get<bool>();
    input.bos_token = token(tmpl, "bos_token");
    input.eos_token = token(tmpl, "eos_token");
    input.extra = conv["extra"];
    input.now = now;
    if (want.contains("output")) {
      EXPECT_EQ(chat.render(input), want["output"].get<std::string>());
      continue;
    }
    try {
      const std::string out = chat.render(input);
      ADD_FAILURE() << "jinja2 failed with \"" << want["error"].get<std::string>()
                    << "\" but hearth rendered:\n"
                    << out;
    } catch (const jinja::TemplateError& e) {
      if (want["raised"].get<bool>()) {
        EXPECT_EQ(e.kind(), jinja::TemplateError::Kind::kRaised) << e.what();
        EXPECT_EQ(e.message(), want["error"].get<std::string>());
      } else {
        EXPECT_EQ(e.kind(), jinja::TemplateError::Kind::kRuntime) << e.what();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string id = info.param;
                           for (char& c : id) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return id;
                         });

TEST(ChatTemplateGoldenFiles, AllTemplatesAndConversationsPresent) {
  // The suite above is only as good as its data: eight templates, every conversation shape.
  EXPECT_EQ(template_names().size(), 8u);
  EXPECT_GE(read_json(golden_dir() + "/conversations.json").size(), 30u);
}

}  // namespace
}  // namespace hearth::gateway
