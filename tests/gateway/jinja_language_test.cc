// The language subset, construct by construct, against Python's jinja2: each case of
// expected/language.json (tools/golden/make_chat_template_golden.py language) is a small
// template and context with the output jinja2 gave, or the error it raised.
#include <string>

#include <gtest/gtest.h>

#include "gateway/jinja/template.h"
#include "tests/gateway/golden_files.h"

namespace hearth::jinja {
namespace {

using gateway::testing::golden_dir;
using gateway::testing::read_json;

std::string render(const std::string& source, const nlohmann::ordered_json& context,
                   const std::tm& now) {
  DictData vars;
  for (const auto& [k, v] : context.items()) vars.set(Value::string(k), from_json(v));
  RenderOptions options;
  options.now = now;
  return Template::parse(source).render(vars, options);
}

TEST(JinjaLanguage, MatchesJinja2ConstructByConstruct) {
  const auto golden = read_json(golden_dir() + "/expected/language.json");
  const std::tm now = gateway::testing::parse_now(golden["now"].get<std::string>());
  ASSERT_GE(golden["results"].size(), 80u);
  for (const auto& c : golden["results"]) {
    const std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(c["case"].get<std::string>() + ": " + source);
    if (c.contains("output")) {
      try {
        EXPECT_EQ(render(source, c["context"], now), c["output"].get<std::string>());
      } catch (const TemplateError& e) {
        ADD_FAILURE() << "hearth failed: " << e.what();
      }
      continue;
    }
    try {
      const std::string out = render(source, c["context"], now);
      ADD_FAILURE() << "jinja2 failed with \"" << c["error"].get<std::string>()
                    << "\" but hearth rendered: " << out;
    } catch (const TemplateError& e) {
      if (c["raised"].get<bool>()) {
        EXPECT_EQ(e.kind(), TemplateError::Kind::kRaised) << e.what();
        EXPECT_EQ(e.message(), c["error"].get<std::string>());
      } else {
        EXPECT_EQ(e.kind(), TemplateError::Kind::kRuntime) << e.what();
        EXPECT_GT(e.line(), 0) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace hearth::jinja
