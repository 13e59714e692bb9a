#!/usr/bin/env python3
"""Builds proof/suites/long.jsonl: prompts of 2k-4k tokens cut from the license texts in
proof/suites/text/ (verbatim copies of Debian's /usr/share/common-licenses, see text/README.md).

The cut is by characters at paragraph boundaries, so the suite does not depend on any one
tokenizer; every tokenizer given with --tokenizer then counts each prompt, the counts go into
the prompt's "meta", and the script fails if any count falls outside [--min-tokens,
--max-tokens] (defaults: at least 2048, and at most 3840 so a 256-token budget fits a context
of 4096, the worker's default cap). The output is byte-for-byte reproducible.

    python3 proof/suites/make_long_suite.py --tokenize build/bin/hearth-tokenize \\
        --tokenizer hearth-tiny-fortunes=models/hearth-tiny-fortunes \\
        --tokenizer llama3=build/tokenizer-cache/llama3
"""
import argparse
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent

# (file, title): read in this order; each is cut into consecutive windows.
SOURCES = [
    ("GPL-3.txt", "the GNU General Public License, version 3"),
    ("LGPL-2.1.txt", "the GNU Lesser General Public License, version 2.1"),
    ("GFDL-1.3.txt", "the GNU Free Documentation License, version 1.3"),
    ("MPL-2.0.txt", "the Mozilla Public License, version 2.0"),
    ("Apache-2.0.txt", "the Apache License, version 2.0"),
]
# A window holds as many whole paragraphs as fit in MAX_CHARS and at least MIN_CHARS: about
# 2,200-2,400 Llama 3 tokens and 3,000-3,700 tokens of the 4096-entry default-model tokenizer.
MIN_CHARS = 9_800
MAX_CHARS = 10_900
INTRO = "Here is an excerpt from {title}:\n\n"
OUTRO = "\n\nIn plain words, this part of the license says that"


def paragraphs(text):
    """Blank-line separated paragraphs, each with its own line breaks kept."""
    out, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line.rstrip())
        elif current:
            out.append("\n".join(current))
            current = []
    if current:
        out.append("\n".join(current))
    return out


def windows(paras):
    """Consecutive runs of whole paragraphs, each as long as fits in MAX_CHARS; a run shorter
    than MIN_CHARS (a short tail) is skipped."""
    start = 0
    while start < len(paras):
        end, size = start, 0
        while end < len(paras) and size + len(paras[end]) + 2 <= MAX_CHARS:
            size += len(paras[end]) + 2
            end += 1
        end = max(end, start + 1)  # a single paragraph over MAX_CHARS still moves on
        if size >= MIN_CHARS:
            yield start, end
        start = end


def build_prompts():
    prompts = []
    for name, title in SOURCES:
        paras = paragraphs((HERE / "text" / name).read_text(encoding="utf-8"))
        for part, (start, end) in enumerate(windows(paras), 1):
            body = "\n\n".join(paras[start:end])
            stem = name[: -len(".txt")].lower()
            prompts.append({
                "id": f"long-{stem}-{part}",
                "prompt": INTRO.format(title=title) + body + OUTRO,
                "meta": {"source": f"text/{name}", "paragraphs": [start + 1, end], "chars": None},
            })
    for p in prompts:
        p["meta"]["chars"] = len(p["prompt"])
    return prompts


def count_tokens(tokenize, tokenizer, texts):
    """Token counts (with special tokens, as a worker encodes a prompt) from hearth-tokenize."""
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    done = subprocess.run([tokenize, "--tokenizer", tokenizer, "--add-special-tokens"], input=stdin,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"make_long_suite: {tokenize} failed on {tokenizer}: {done.stderr.strip()}")
    return [len(json.loads(line)) for line in done.stdout.splitlines()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenize", required=True, help="the hearth-tokenize binary")
    ap.add_argument("--tokenizer", action="append", default=[], metavar="NAME=PATH",
                    help="count tokens with this tokenizer.json or model folder (repeatable)")
    ap.add_argument("--min-tokens", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=3840)
    ap.add_argument("--out", default=str(HERE / "long.jsonl"))
    args = ap.parse_args()
    if not args.tokenizer:
        ap.error("give at least one --tokenizer NAME=PATH")

    prompts = build_prompts()
    problems = []
    for spec in args.tokenizer:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"--tokenizer {spec}: expected NAME=PATH")
        counts = count_tokens(args.tokenize, path, [p["prompt"] for p in prompts])
        for p, n in zip(prompts, counts):
            p["meta"].setdefault("tokens", {})[name] = n
            if not args.min_tokens <= n <= args.max_tokens:
                problems.append(f"{p['id']}: {n} {name} tokens, outside [{args.min_tokens}, {args.max_tokens}]")
    if problems:
        sys.exit("make_long_suite: " + "; ".join(problems))

    with open(args.out, "w", encoding="utf-8", newline="\n") as out:
        for p in prompts:
            out.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"make_long_suite: {len(prompts)} prompts -> {args.out}")


if __name__ == "__main__":
    main()
