#!/usr/bin/env python3
"""Differential test of hearth's Jinja subset against Python's jinja2 on random inputs.

Two kinds of random input, both rendered by jinja2 (as transformers renders chat templates,
make_chat_template_golden.py's compile_template) and by `hearth-chat-template --jsonl`:

  chats        random conversations (roles, unicode and whitespace content, tool calls and
               results with random JSON arguments, null and mapping content, thinking blocks,
               tools, builtin tools, flags) over every committed template in
               tests/gateway/golden/templates/;
  expressions  random expressions over literals, operators, filters, tests, subscripts and
               slices, printed by {{ ... }}.

Outputs must be byte-identical; where jinja2 fails hearth must fail too (with the same text
for raise_exception). Mismatches are printed with the request that reproduces them.

    /usr/bin/python3 tools/golden/fuzz_chat_template.py --binary build/bin/hearth-chat-template \
        --chats 3000 --expressions 20000 --seed 1
"""
import argparse
import copy
import json
import os
import random
import re
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))
import make_chat_template_golden as golden  # noqa: E402

FRAGMENTS = ["", " ", "  ", "\n", "\n\n", "\t", "x", "Hello", "world", "é", "日本語", "🙂", "👩‍💻",
             "\u00a0", "\u2003", "\u3000", "'", '"', "\\", "\\n", "{{", "}}", "{%", "%}", "<think>",
             "</think>", "<tool_response>", "</tool_response>", "[INST]", "<|eot_id|>", "0", "1.5",
             "true", "None", "\r\n", "\x01", "\u2028"]
ROLES = ["system", "user", "assistant", "tool", "ipython", "user", "assistant", "user"]


def rand_text(r, parts=6):
    return "".join(r.choice(FRAGMENTS) for _ in range(r.randint(0, parts)))


def rand_json(r, depth=0):
    kind = r.randint(0, 9 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return r.choice([True, False])
    if kind == 2:
        return r.randint(-10**12, 10**12) if r.random() < 0.3 else r.randint(-5, 300)
    if kind == 3:
        return r.choice([0.0, -0.0, 0.1, 1.5, 3.0, 1e16, 1e15, 123.456, 1e-5, 1e-4, 2.5e-7, 1e300,
                         r.uniform(-1e6, 1e6)])
    if kind in (4, 5):
        return rand_text(r, 4)
    if kind in (6, 7):
        return [rand_json(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {rand_text(r, 2) or "k": rand_json(r, depth + 1) for _ in range(r.randint(0, 3))}


def rand_tool(r):
    return {"type": "function",
            "function": {"name": r.choice(["get_weather", "search", "brave_search", "calc"]),
                         "description": rand_text(r),
                         "parameters": {"type": "object", "properties": rand_json(r, 1)}}}


def rand_message(r):
    role = r.choice(ROLES)
    m = {"role": role}
    c = r.random()
    if c < 0.05:
        m["content"] = None
    elif c < 0.08:
        m["content"] = rand_json(r, 1)
    elif c < 0.15 and role == "assistant":
        m["content"] = "<think>" + rand_text(r) + "</think>" + rand_text(r)
    else:
        m["content"] = rand_text(r)
    if role == "assistant" and r.random() < 0.3:
        m["tool_calls"] = [{"id": r.choice(["abcDEF123", "short", "xyzXYZ789"]), "type": "function",
                            "function": {"name": r.choice(["get_weather", "brave_search"]),
                                         "arguments": rand_json(r, 1) if r.random() < 0.8
                                         else json.dumps(rand_json(r, 1))}}
                           for _ in range(r.randint(1, 2))]
    if role == "assistant" and r.random() < 0.1:
        m["reasoning_content"] = rand_text(r)
    if role == "tool" and r.random() < 0.7:
        m["tool_call_id"] = r.choice(["abcDEF123", "short"])
    return m


def rand_chat(r):
    msgs = [rand_message(r) for _ in range(r.randint(1, 7))]
    if r.random() < 0.5:
        msgs[0] = {"role": "system", "content": rand_text(r)}
    extra = {}
    if r.random() < 0.4:
        extra["tools"] = [rand_tool(r) for _ in range(r.randint(0, 2))]
    for key, gen in [("enable_thinking", lambda: r.choice([True, False])),
                     ("date_string", lambda: rand_text(r, 2)),
                     ("builtin_tools", lambda: ["brave_search", "code_interpreter"]),
                     ("tools_in_user_message", lambda: r.choice([True, False])),
                     ("custom_tools", lambda: [rand_tool(r)])]:
        if r.random() < 0.1:
            extra[key] = gen()
    return msgs, r.random() < 0.6, extra


LITERALS = ["0", "1", "-2", "7", "2.5", "0.1", "1e3", "true", "false", "none", "''", "'a'",
            "'Hé llo'", "' x '", "'a,b'", "[]", "[1, 2, 3]", "['b', 'a']", "(1, 'x')", "{}",
            "{'k': 1, 'j': [2]}", "x", "s", "xs", "d", "missing"]
BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in",
          "and", "or"]
FILTERS = ["trim", "length", "upper", "lower", "first", "last", "list", "string", "tojson",
           "reverse", "sort", "unique", "join(', ')", "default('d')", "int", "float", "abs",
           "items", "capitalize", "title", "sum", "min", "max", "select", "reject('none')",
           "map('string')", "indent(2)", "round(1)", "wordcount", "replace('a', 'b')"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "sequence", "iterable", "odd", "even", "true", "false", "boolean", "lower", "upper"]
SUBSCRIPTS = ["0", "-1", "1:", ":-1", "::-1", "::2", "x", "'a'"]
CONTEXT = {"x": 5, "s": "héllo wörld", "xs": [3, 1, 2], "d": {"b": 2, "a": [1, None]}}


def rand_expr(r, depth=0):
    k = r.randint(0, 9 if depth < 4 else 0)
    if k <= 2:
        return r.choice(LITERALS)
    if k == 3:
        return f"({rand_expr(r, depth + 1)} {r.choice(BINARY)} {rand_expr(r, depth + 1)})"
    if k == 4:
        return f"{rand_expr(r, depth + 1)}|{r.choice(FILTERS)}"
    if k == 5:
        return f"({rand_expr(r, depth + 1)} is {r.choice(['', 'not '])}{r.choice(TESTS)})"
    if k == 6:
        return f"{rand_expr(r, depth + 1)}[{r.choice(SUBSCRIPTS)}]"
    if k == 7:
        return f"({rand_expr(r, depth + 1)} if {rand_expr(r, depth + 1)} else {rand_expr(r, depth + 1)})"
    if k == 8:
        return f"(not {rand_expr(r, depth + 1)})"
    return f"[{rand_expr(r, depth + 1)}, {rand_expr(r, depth + 1)}]"


def python_render(source, messages, agp, bos, eos, extra):
    t = {"chat_template": source, "bos_token": bos, "eos_token": eos}
    return golden.render(t, {"name": "", "messages": messages, "add_generation_prompt": agp,
                             "extra": extra})


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/bin/hearth-chat-template")
    p.add_argument("--chats", type=int, default=2000)
    p.add_argument("--expressions", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--show", type=int, default=10, help="mismatches to print")
    args = p.parse_args()
    r = random.Random(args.seed)
    warnings.filterwarnings("ignore")  # Python's compiler remarks on constant subscripts

    template_dir = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gateway",
                                "golden", "templates")
    templates = []
    for f in sorted(os.listdir(template_dir)):
        with open(os.path.join(template_dir, f), encoding="utf-8") as fh:
            templates.append(json.load(fh))

    requests, expected = [], []
    for _ in range(args.chats):
        t = r.choice(templates)
        msgs, agp, extra = rand_chat(r)
        requests.append({"template": t["chat_template"], "messages": msgs,
                         "add_generation_prompt": agp, "bos_token": t["bos_token"],
                         "eos_token": t["eos_token"], "extra": extra,
                         "now": golden.NOW.isoformat()})
        expected.append(python_render(t["chat_template"], copy.deepcopy(msgs), agp,
                                      t["bos_token"], t["eos_token"], copy.deepcopy(extra)))
    for _ in range(args.expressions):
        source = "{{ " + rand_expr(r) + " }}"
        requests.append({"template": source, "messages": [], "extra": CONTEXT,
                         "now": golden.NOW.isoformat()})
        try:
            compiled = golden.compile_template(source)
        except Exception as e:  # jinja2 refuses it too: skip
            requests.pop()
            continue
        try:
            # A fresh copy each time: jinja2's indent filter extends a list it is given in place.
            context = copy.deepcopy(CONTEXT)
            expected.append({"output": compiled.render(messages=[], tools=None, documents=None,
                                                        add_generation_prompt=False, **context)})
        except Exception as e:
            expected.append({"error": str(e),
                             "raised": type(e) is golden.jinja2.exceptions.TemplateError})

    proc = subprocess.run([args.binary, "--jsonl"], check=True, capture_output=True,
                          input="\n".join(json.dumps(q, ensure_ascii=False) for q in requests) + "\n",
                          encoding="utf-8", errors="surrogateescape")
    # Split on \n only: outputs may hold U+2028 and friends, which splitlines() also breaks on.
    got = [json.loads(line) for line in proc.stdout.split("\n") if line]
    assert len(got) == len(requests), (len(got), len(requests))

    mismatches = 0
    kinds = {"output": 0, "error": 0, "unsupported": 0, "unprintable": 0}
    for q, want, have in zip(requests, expected, got):
        if have.get("kind") == "unsupported":
            kinds["unsupported"] += 1  # refused by design (named in the error); not a mismatch
            continue
        if (re.search(r"0x[0-9a-f]{6,}>", want.get("output", "")) or
                ("output" in want and "cannot print a" in have.get("message", ""))):
            # jinja2 printed (or computed with) a generator's memory address; hearth refuses.
            kinds["unprintable"] += 1
            ok = "error" in have
            if not ok:
                mismatches += 1
            continue
        if "output" in want:
            ok = have.get("output") == want["output"]
            kinds["output"] += 1
        else:
            ok = "error" in have and (not want["raised"] or have.get("message") == want["error"])
            kinds["error"] += 1
        if not ok:
            mismatches += 1
            if mismatches <= args.show:
                shown = dict(q)
                if len(shown["template"]) > 200:
                    shown["template"] = shown["template"][:60] + "..."
                print("MISMATCH", json.dumps(shown, ensure_ascii=False))
                print("  jinja2:", json.dumps(want, ensure_ascii=False)[:600])
                print("  hearth:", json.dumps(have, ensure_ascii=False)[:600])
    print(f"{len(requests)} cases ({kinds['output']} outputs, {kinds['error']} errors, "
          f"{kinds['unsupported']} refused as unsupported, {kinds['unprintable']} printing "
          f"generators): {mismatches} mismatches")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
