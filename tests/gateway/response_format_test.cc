// response_format, guided_json and guided_regex read into the engine's structured-output
// setting and written into the worker's request; every wrong shape a 400 naming the field.
#include <gtest/gtest.h>

#include <string>

#include "gateway/api_error.h"
#include "gateway/openai_request.h"
#include "gateway/request_json.h"
#include "tests/gateway/api_error_of.h"

namespace hearth::gateway {
namespace {

CompletionRequest parse(const std::string& extra) {
  return parse_completion_request(
      parse_request_body(R"({"model": "m", "prompt": "x", )" + extra + "}"), Endpoint::Completions,
      {});
}

TEST(ResponseFormat, MapsOntoTheEnginesSetting) {
  EXPECT_EQ(parse(R"("response_format": {"type": "text"})").settings.structured,
            StructuredOutput{});
  EXPECT_EQ(parse(R"("response_format": {"type": "json_object"})").settings.structured,
            (StructuredOutput{OutputFormat::JsonObject, ""}));
  const CompletionRequest r = parse(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"b": {},
      "a": {"type": "integer"}}}}})");
  // The schema's text keeps the client's property order (properties are generated in it).
  EXPECT_EQ(
      r.settings.structured,
      (StructuredOutput{OutputFormat::JsonSchema,
                        R"({"type":"object","properties":{"b":{},"a":{"type":"integer"}}})"}));
  const nlohmann::json w = worker_request_json(r, "id", {1, 2}, 7);
  EXPECT_EQ(w.at("guided_json"), r.settings.structured.spec);
  EXPECT_EQ(parse(R"("guided_regex": "[0-9]+")").settings.structured,
            (StructuredOutput{OutputFormat::Regex, "[0-9]+"}));
  EXPECT_EQ(parse(R"("guided_json": {"type": "boolean"})").settings.structured,
            (StructuredOutput{OutputFormat::JsonSchema, R"({"type":"boolean"})"}));
  EXPECT_EQ(worker_request_json(parse(R"("response_format": {"type": "json_object"})"), "i", {1}, 1)
                .at("guided_json_object"),
            true);
  EXPECT_FALSE(worker_request_json(parse("\"n\": 1"), "i", {1}, 1).contains("guided_json"));
}

TEST(ResponseFormat, WrongShapesAreA400NamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("response_format": {"type": "yaml"})", "response_format.type"},
      {R"("response_format": {"type": "json_object", "x": 1})", "response_format.x"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a"}})",
       "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})",
       "response_format.json_schema.name"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {},
          "strict": "yes"}})",
       "response_format.json_schema.strict"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {},
          "extra": 1}})",
       "response_format.json_schema.extra"},
      {R"("guided_json": 5)", "guided_json"},
      {R"("guided_regex": ["a"])", "guided_regex"},
      {R"("guided_regex": "")", "guided_regex"},
      {R"("response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex"},
      {R"("guided_json": ")" + std::string(70000, 'x') + "\"", "guided_json"},
  };
  for (const auto& [extra, param] : cases) {
    const ApiError e = error_of([&] { parse(extra); });
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(e.param(), param) << extra << ": " << e.what();
  }
}

}  // namespace
}  // namespace hearth::gateway
