// What the Jinja subset refuses and how it survives hostile input: unsupported constructs are
// refused when the template is parsed (naming the construct and line), syntax errors name
// their line, and templates or requests built to exhaust the stack, memory or time fail with
// a limit error instead. Plus the chat front end's own contract.
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "gateway/chat_template.h"
#include "gateway/jinja/template.h"

namespace hearth::jinja {
namespace {

using Kind = TemplateError::Kind;

// Parses `source` expecting an error of `kind` whose text contains `needle`; returns it.
TemplateError parse_error(const std::string& source, Kind kind, const std::string& needle) {
  try {
    Template::parse(source);
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), kind) << source << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << source << " -> " << e.what();
    return e;
  }
  ADD_FAILURE() << "parsed without error: " << source;
  return TemplateError(Kind::kSyntax, 0, "");
}

std::string render(const std::string& source, const nlohmann::ordered_json& context = {},
                   const RenderLimits& limits = {}) {
  DictData vars;
  if (context.is_object()) {
    for (const auto& [k, v] : context.items()) vars.set(Value::string(k), from_json(v));
  }
  RenderOptions options;
  options.limits = limits;
  return Template::parse(source).render(vars, options);
}

TemplateError render_error(const std::string& source, Kind kind,
                           const nlohmann::ordered_json& context = {},
                           const RenderLimits& limits = {}) {
  try {
    const std::string out = render(source, context, limits);
    ADD_FAILURE() << "rendered without error (" << out.size()
                  << " bytes): " << source.substr(0, 200);
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), kind) << source.substr(0, 200) << " -> " << e.what();
    return e;
  }
  return TemplateError(Kind::kSyntax, 0, "");
}

TEST(JinjaRefusal, UnsupportedTagsNameTheTagAndLine) {
  for (const char* tag :
       {"include 'x.j2'", "import 'm' as m", "from 'm' import f", "extends 'b'", "block body",
        "call m()", "filter upper", "autoescape true", "do x", "trans"}) {
    const std::string source = "line one\n{% if true %}\n{% " + std::string(tag) + " %}";
    const TemplateError e = parse_error(source, Kind::kUnsupported, "is not supported");
    EXPECT_EQ(e.line(), 3) << tag;
    EXPECT_NE(e.message().find(std::string(tag).substr(0, std::string(tag).find(' '))),
              std::string::npos)
        << e.what();
  }
  parse_error("{% frobnicate %}", Kind::kSyntax, "unknown tag 'frobnicate'");
}

TEST(JinjaRefusal, UnsupportedFiltersTestsMethodsAndFunctions) {
  parse_error("{{ x|format(1) }}", Kind::kUnsupported, "filter 'format'");
  parse_error("{{ x|safe }}", Kind::kUnsupported, "filter 'safe'");
  parse_error("{{ x|urlencode }}", Kind::kUnsupported, "filter 'urlencode'");
  parse_error("{{ x is prime }}", Kind::kUnsupported, "test 'prime'");
  parse_error("{{ xs|map('e')|list }}", Kind::kUnsupported, "filter 'e' (used by map)");
  parse_error("{{ xs|select('prime')|list }}", Kind::kUnsupported, "test 'prime' (used by select)");
  parse_error("{{ xs|rejectattr('a', 'prime')|list }}", Kind::kUnsupported, "(used by rejectattr)");
  parse_error("{{ x.format(1) }}", Kind::kUnsupported, "method 'format'");
  parse_error("{{ xs.append(1) }}", Kind::kUnsupported, "immutable sandbox");
  parse_error("{{ d.update({}) }}", Kind::kUnsupported, "immutable sandbox");
  parse_error("{{ lipsum(2) }}", Kind::kUnsupported, "function 'lipsum'");
  parse_error("{{ caller() }}", Kind::kUnsupported, "caller()");
  parse_error("{{ namespace(*args) }}", Kind::kUnsupported, "*args");
  parse_error("{{ range(**kw) }}", Kind::kUnsupported, "**kwargs");
  parse_error("{{ fs[0](1) }}", Kind::kUnsupported, "calling the result");
  parse_error("{{ undefined_function(1) }}", Kind::kUnsupported, "function 'undefined_function'");
  parse_error("{% for x in xs recursive %}{% endfor %}", Kind::kUnsupported, "recursive");
  parse_error("{% set x | upper %}a{% endset %}", Kind::kUnsupported, "filtered block");
  parse_error("{% for (a, (b, c)) in x %}{% endfor %}", Kind::kUnsupported, "nested tuple");
  parse_error("{% if x %}{% macro m() %}{% endmacro %}{% endif %}", Kind::kUnsupported,
              "top level");
  parse_error("{{ '\\N{EM DASH}' }}", Kind::kUnsupported, "named escapes");
  parse_error("{{ 99999999999999999999 }}", Kind::kUnsupported, "64 bits");
}

TEST(JinjaRefusal, MacrosMayBeCalledAboveTheirDefinition) {
  EXPECT_EQ(render("{% macro m() %}M{% endmacro %}{{ m() }}"), "M");
  // Calling it before the definition ran is jinja2's runtime error, not a parse refusal.
  render_error("{{ m() }}{% macro m() %}M{% endmacro %}", Kind::kRuntime);
}

TEST(JinjaRefusal, SyntaxErrorsNameTheirLine) {
  EXPECT_EQ(parse_error("a\nb\n{{ 1 + }}", Kind::kSyntax, "unexpected").line(), 3);
  EXPECT_EQ(
      parse_error("{% if x %}\nopen", Kind::kSyntax, "needs 'elif' or 'else' or 'endif'").line(),
      2);
  parse_error("{% endif %}", Kind::kSyntax, "no block to close");
  parse_error("{% for x in y %}{% endif %}", Kind::kSyntax, "no block to close");
  parse_error("{{ 'open }}", Kind::kSyntax, "unterminated string");
  parse_error("{{ x ]}}", Kind::kSyntax, "unexpected ']'");
  parse_error("{{ (x] }}", Kind::kSyntax, "expected ')'");
  parse_error("{{ x", Kind::kSyntax, "unclosed '{{'");
  parse_error("{# never closed", Kind::kSyntax, "comment");
  parse_error("{% raw %}never closed", Kind::kSyntax, "endraw");
  parse_error("{% break %}", Kind::kSyntax, "outside of a for loop");
  parse_error("{% set true = 1 %}", Kind::kSyntax, "can't assign");
  parse_error("{{ x is defined is defined }}", Kind::kSyntax, "chain");
  parse_error("{{ dict(a=1, 2) }}", Kind::kSyntax, "positional argument follows keyword");
  parse_error("{{ \xff }}", Kind::kSyntax, "UTF-8");
  parse_error("{{ x é }}", Kind::kSyntax, "unexpected character");
}

TEST(JinjaRefusal, RuntimeErrorsNameTheirLine) {
  const TemplateError raised =
      render_error("one\ntwo\n{{ raise_exception('bad roles') }}", Kind::kRaised);
  EXPECT_EQ(raised.line(), 3);
  EXPECT_EQ(raised.message(), "bad roles");
  const TemplateError undefined = render_error("\n\n\n{{ missing.attr }}", Kind::kRuntime);
  EXPECT_EQ(undefined.line(), 4);
  EXPECT_EQ(undefined.message(), "'missing' is undefined");
  EXPECT_NE(render_error("{{ 2 ** 64 }}", Kind::kRuntime).message().find("64-bit integers"),
            std::string::npos);
}

// ---- hostile templates: the stack ----------------------------------------------------------

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaHostile, DeepBlockNestingIsRefused) {
  const std::string source = repeat("{% if true %}", 10000) + "x" + repeat("{% endif %}", 10000);
  parse_error(source, Kind::kLimit, "nested deeper");
  const std::string loops = repeat("{% for x in [1] %}", 10000) + repeat("{% endfor %}", 10000);
  parse_error(loops, Kind::kLimit, "nested deeper");
}

TEST(JinjaHostile, DeepExpressionsAreRefused) {
  parse_error("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}", Kind::kLimit,
              "nested deeper");
  parse_error("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}", Kind::kLimit, "nested deeper");
  parse_error("{{ " + repeat("not ", 5000) + "x }}", Kind::kLimit, "nested deeper");
  parse_error("{{ " + repeat("-", 5000) + "1 }}", Kind::kLimit, "nested deeper");
  // Long flat chains build deep trees too: bounded by the expression depth.
  parse_error("{{ 1" + repeat(" + 1", 5000) + " }}", Kind::kLimit, "expression nested");
  parse_error("{{ x" + repeat("|trim", 5000) + " }}", Kind::kLimit, "expression nested");
  parse_error("{{ x" + repeat(".a", 5000) + " }}", Kind::kLimit, "expression nested");
  parse_error("{{ x" + repeat(" and x", 5000) + " }}", Kind::kLimit, "expression nested");
  // As deep as the source size limit allows.
  parse_error("{{ " + repeat("not ", 250000) + "x }}", Kind::kLimit, "nested deeper");
  // Shallow but long is fine.
  EXPECT_EQ(render("{{ 1" + repeat(" + 1", 200) + " }}"), "201");
}

TEST(JinjaHostile, OversizedSourceIsRefused) {
  parse_error(std::string((1 << 20) + 1, 'x'), Kind::kLimit, "bytes");
}

TEST(JinjaHostile, UnboundedMacroRecursionStops) {
  render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", Kind::kLimit);
}

// ---- hostile templates: time and memory ----------------------------------------------------

TEST(JinjaHostile, HugeLoopsStopAtTheWorkBudget) {
  // The default budget is what bounds a runaway template; keep it a fraction of a second.
  EXPECT_LE(RenderLimits{}.max_work, 10'000'000u);
  RenderLimits limits;
  limits.max_work = 1'000'000;  // so this test is quick under the sanitizers too
  // 10^10 iterations without a budget.
  const TemplateError loops = render_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      Kind::kLimit, {}, limits);
  EXPECT_NE(loops.message().find("steps"), std::string::npos) << loops.what();
  // Exponential macro recursion, within the call depth.
  render_error(
      "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30) }}",
      Kind::kLimit, {}, limits);
  render_error("{{ range(100001)|length }}", Kind::kRuntime);
}

TEST(JinjaHostile, OutputAndStringsAreBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  render_error("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", Kind::kLimit, {}, limits);
  render_error("{{ 'x' * 1000000000000 }}", Kind::kLimit, {}, limits);
  render_error("{{ [1] * 1000000000000 }}", Kind::kLimit, {}, limits);
  render_error(
      "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      Kind::kLimit, {}, limits);
  render_error(
      "{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}",
      Kind::kLimit, {}, limits);
  render_error("{{ ('ab' * 1000)|replace('a', 'x' * 10000) }}", Kind::kLimit, {}, limits);
  render_error(
      "{% set ns = namespace(s='x') %}{% set b %}{% for i in range(100000) %}"
      "{{ 'y' * 64 }}{% endfor %}{% endset %}",
      Kind::kLimit, {}, limits);
}

TEST(JinjaHostile, DeepValuesAndCyclesAreRefused) {
  render_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}",
      Kind::kLimit);
  render_error("{% set ns = namespace() %}{% set ns.me = ns %}", Kind::kRuntime);
  render_error("{% set ns = namespace() %}{% set ns.l = [ns] %}", Kind::kRuntime);
  // Deeply nested request JSON (content is client data).
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  render_error("{{ x }}", Kind::kLimit, {{"x", deep}});
}

TEST(JinjaHostile, TemplatesRenderConcurrently) {
  const Template t = Template::parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content|trim }};{% endfor %}{{ messages|tojson }}");
  DictData vars;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < 50; ++i) messages.push_back({{"role", "user"}, {"content", " hi "}});
  vars.set(Value::string("messages"), from_json(messages));
  const std::string expected = t.render(vars);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) mismatches[k] += t.render(vars) != expected;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace hearth::jinja

namespace hearth::gateway {
namespace {

TEST(ChatTemplateFrontEnd, PassesTransformersVariables) {
  const ChatTemplate t = ChatTemplate::load(
      "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
      "{{ add_generation_prompt }}|{{ messages|length }}|{{ custom }}|{{ unk_token is defined }}");
  ChatTemplateInput input;
  input.messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  input.add_generation_prompt = true;
  input.bos_token = "<s>";
  input.eos_token = "</s>";
  input.extra = OrderedJson::parse(R"({"custom": 7})");
  EXPECT_EQ(t.render(input), "<s>|</s>|True|True|True|1|7|False");
  // Extra variables override special tokens, as transformers' kwargs do.
  input.extra = OrderedJson::parse(R"({"bos_token": "B", "tools": []})");
  EXPECT_EQ(t.render(input).substr(0, 10), "B|</s>|Fal");
  input.extra = OrderedJson::parse(R"({"messages": []})");
  EXPECT_THROW(t.render(input), std::invalid_argument);
  input.extra = OrderedJson::object();
  input.messages = OrderedJson::object();
  EXPECT_THROW(t.render(input), std::invalid_argument);
}

TEST(ChatTemplateFrontEnd, TojsonKeepsTheRequestKeyOrder) {
  const OrderedJson messages = OrderedJson::parse(
      R"([{"role": "user", "content": "x", "zeta": 1, "alpha": {"b": 2, "a": 1}}])");
  EXPECT_EQ(render_chat("{{ messages[0]|tojson }}", messages, false, std::nullopt, std::nullopt),
            R"({"role": "user", "content": "x", "zeta": 1, "alpha": {"b": 2, "a": 1}})");
}

TEST(ChatTemplateFrontEnd, StrftimeNowReadsTheGivenClock) {
  const ChatTemplate t = ChatTemplate::load("{{ strftime_now('%d %b %Y') }}");
  ChatTemplateInput input;
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 6;
  now.tm_mday = 26;
  input.now = now;
  EXPECT_EQ(t.render(input), "26 Jul 2024");
  input.now.reset();
  EXPECT_EQ(t.render(input).size(), 11u);  // today, in the same format
}

TEST(ChatTemplateFrontEnd, ReadsTokenizerConfig) {
  const auto plain = nlohmann::json::parse(
      R"({"chat_template": "{{ x }}", "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}})");
  const ChatTemplateConfig c = ChatTemplate::from_tokenizer_config(plain);
  EXPECT_EQ(c.source, "{{ x }}");
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "</s>");

  const auto named = nlohmann::json::parse(
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
          "bos_token": null})");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(named).source, "D");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(named, "tool_use").source, "T");
  EXPECT_FALSE(ChatTemplate::from_tokenizer_config(named).bos_token.has_value());
  EXPECT_THROW(ChatTemplate::from_tokenizer_config(named, "rag"), std::invalid_argument);
  EXPECT_THROW(
      ChatTemplate::from_tokenizer_config(nlohmann::json::parse(R"({"bos_token": "<s>"})")),
      std::invalid_argument);
  EXPECT_THROW(
      ChatTemplate::from_tokenizer_config(nlohmann::json::parse(R"({"chat_template": 3})")),
      std::invalid_argument);
}

TEST(ChatTemplateFrontEnd, RefusesAtLoadNotAtRender) {
  try {
    ChatTemplate::load("{% for m in messages %}\n{{ m.content|wordwrap(20) }}\n{% endfor %}");
    FAIL() << "loaded a template using an unsupported filter";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.kind(), jinja::TemplateError::Kind::kUnsupported);
    EXPECT_EQ(e.line(), 2);
    EXPECT_STREQ(e.what(), "chat template line 2: unsupported: filter 'wordwrap' is not supported");
  }
}

}  // namespace
}  // namespace hearth::gateway
