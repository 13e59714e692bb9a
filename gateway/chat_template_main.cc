// hearth-chat-template: renders a model's chat template the way the gateway will, for people
// checking a model before serving it and for differential tests against Python's jinja2
// (tools/golden/fuzz_chat_template.py).
//
//   hearth-chat-template --model DIR --messages chat.json [--add-generation-prompt]
//   hearth-chat-template --jsonl < requests.jsonl
//
// In --jsonl mode each input line is {"template", "messages", "add_generation_prompt",
// "bos_token", "eos_token", "extra", "now"} (all but template and messages optional) and each
// output line is {"output": text} or {"error": what, "kind": ..., "message": ...}.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "gateway/chat_template.h"

namespace {

using hearth::gateway::ChatTemplate;
using hearth::gateway::ChatTemplateInput;
using hearth::gateway::OrderedJson;
using hearth::jinja::TemplateError;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kind_name(TemplateError::Kind kind) {
  switch (kind) {
    case TemplateError::Kind::kSyntax:
      return "syntax";
    case TemplateError::Kind::kUnsupported:
      return "unsupported";
    case TemplateError::Kind::kRuntime:
      return "runtime";
    case TemplateError::Kind::kRaised:
      return "raised";
    case TemplateError::Kind::kLimit:
      return "limit";
  }
  return "error";
}

std::optional<std::tm> parse_now(const OrderedJson& v) {
  if (!v.is_string()) return std::nullopt;
  std::tm tm{};
  if (std::sscanf(v.get<std::string>().c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    throw std::invalid_argument("'now' must look like 2025-03-07T14:05:09");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);
  return tm;
}

std::optional<std::string> optional_string(const OrderedJson& request, const char* key) {
  const auto it = request.find(key);
  if (it == request.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

int run_jsonl() {
  std::map<std::string, ChatTemplate> parsed;  // templates repeat across lines
  std::string line;
  while (std::getline(std::cin, line)) {
    OrderedJson result;
    try {
      const OrderedJson request = OrderedJson::parse(line);
      const std::string source = request.at("template").get<std::string>();
      auto it = parsed.find(source);
      if (it == parsed.end()) it = parsed.emplace(source, ChatTemplate::load(source)).first;
      ChatTemplateInput input;
      input.messages = request.at("messages");
      input.add_generation_prompt = request.value("add_generation_prompt", false);
      input.bos_token = optional_string(request, "bos_token");
      input.eos_token = optional_string(request, "eos_token");
      input.extra = request.value("extra", OrderedJson::object());
      input.now = parse_now(request.value("now", OrderedJson()));
      result["output"] = it->second.render(input);
    } catch (const TemplateError& e) {
      result = {{"error", e.what()}, {"kind", kind_name(e.kind())}, {"message", e.message()}};
    } catch (const std::exception& e) {
      result = {{"error", e.what()}, {"kind", "input"}};
    }
    std::cout << result.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) << '\n'
              << std::flush;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-chat-template: render a chat template with hearth's Jinja subset, as transformers' "
      "apply_chat_template renders it"};
  std::string model_dir;
  std::string template_file;
  std::string messages_file;
  std::string extra_json = "{}";
  std::string template_name;
  bool add_generation_prompt = false;
  bool jsonl = false;
  app.add_option("--model", model_dir, "model directory with tokenizer_config.json");
  app.add_option("--template", template_file, "a file holding the template text instead");
  app.add_option("--name", template_name, "which of several named templates (default: default)");
  app.add_option("--messages", messages_file, "JSON file with the messages array");
  app.add_option("--extra", extra_json, "JSON object of extra variables (tools, ...)");
  app.add_flag("--add-generation-prompt", add_generation_prompt, "end with the assistant header");
  app.add_flag("--jsonl", jsonl, "render one JSON request per stdin line (see source header)");
  CLI11_PARSE(app, argc, argv);

  if (jsonl) return run_jsonl();
  try {
    if (model_dir.empty() == template_file.empty()) {
      throw std::invalid_argument("give exactly one of --model and --template");
    }
    if (messages_file.empty()) throw std::invalid_argument("--messages is required");
    ChatTemplateInput input;
    std::string source;
    if (!model_dir.empty()) {
      const auto config = nlohmann::json::parse(read_file(model_dir + "/tokenizer_config.json"));
      auto c = ChatTemplate::from_tokenizer_config(config, template_name);
      source = std::move(c.source);
      input.bos_token = c.bos_token;
      input.eos_token = c.eos_token;
    } else {
      source = read_file(template_file);
    }
    input.messages = OrderedJson::parse(read_file(messages_file));
    input.extra = OrderedJson::parse(extra_json);
    input.add_generation_prompt = add_generation_prompt;
    std::cout << ChatTemplate::load(source).render(input);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hearth-chat-template: " << e.what() << "\n";
    return 1;
  }
}
