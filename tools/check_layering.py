#!/usr/bin/env python3
"""Checks every project include against the layering table in README.md.

The list between the `<!-- layering -->` markers is the rule: one line of folders, lowest first
("1. `base`"), and a folder's sources may include from the folder itself and every folder before
it. A file belongs to the most specific folder listed; an include names a project file by its
path from the repository root ("worker/engine/x.h"), and is allowed when that path lies in the
file's own folder or in one listed before it. System and
library headers (<...>) are not checked; neither are quoted includes that are not project paths.

usage: tools/check_layering.py [ROOT]     exit 1 and one line per violation when any is found
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_rules(readme):
    """{folder: [folders it may include from]} from the README's layering list."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"<!-- layering -->(.*?)<!-- /layering -->", text, re.S)
    if not m:
        sys.exit(f"{readme}: no <!-- layering --> list")
    line = re.findall(r"^\s*\d+\.\s+`([^`]+)`", m.group(1), re.M)
    if not line:
        sys.exit(f"{readme}: the layering list names no folder")
    folders = [f.strip("/") for f in line]
    if len(set(folders)) != len(folders):
        sys.exit(f"{readme}: the layering list names a folder twice")
    return {f: folders[:i] for i, f in enumerate(folders)}


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
        print(f"layering: {len(violations)} include(s) against the layering list in README.md")
        return 1
    print("layering: every include follows the layering list in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
