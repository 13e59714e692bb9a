#!/usr/bin/env python3
"""Checks every project include against the layering table in README.md.

The table between the `<!-- layering -->` markers is the rule: each row names a folder and the
folders its sources may include from. A file belongs to the most specific folder listed; an
include names a project file by its path from the repository root ("worker/engine/x.h"), and
is allowed when that path lies in the file's own folder or in one the row lists. System and
library headers (<...>) are not checked; neither are quoted includes that are not project paths.

usage: tools/check_layering.py [ROOT]     exit 1 and one line per violation when any is found
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_rules(readme):
    """{folder: [allowed folders]} from the README's layering table."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"<!-- layering -->(.*?)<!-- /layering -->", text, re.S)
    if not m:
        sys.exit(f"{readme}: no <!-- layering --> table")
    rules = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue  # header, separator or prose
        folder = cells[0].strip("`/")
        allowed = re.findall(r"`([^`]+)`", cells[1])
        rules[folder] = [a.strip("/") for a in allowed if a != "nothing"]
    if not rules:
        sys.exit(f"{readme}: the layering table has no rows")
    return rules


def owner(path, folders):
    """The most specific listed folder holding `path`, or None."""
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def check(root):
    rules = read_rules(os.path.join(root, "README.md"))
    top_levels = {f.split("/")[0] for f in rules}
    violations = []
    for folder in sorted(rules):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mine = owner(path, rules)
                if mine != folder:
                    continue  # a more specific row owns it; checked there
                text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
                for inc in INCLUDE.findall(text):
                    if inc.split("/")[0] not in top_levels:
                        continue  # a sibling-relative or third-party quoted include
                    target = owner(inc, rules)
                    if target is None or target == mine or target in rules[mine]:
                        continue
                    line = text[: text.find(f'"{inc}"')].count("\n") + 1
                    violations.append(f"{path}:{line}: includes {inc} ({target}/), but "
                                      f"{mine}/ may include only from: "
                                      f"{', '.join(rules[mine]) or 'itself'}")
    return violations


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    violations = check(os.path.abspath(root))
    for v in violations:
        print(v)
    if violations:
        print(f"layering: {len(violations)} include(s) against the table in README.md")
        return 1
    print("layering: every include follows the table in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
