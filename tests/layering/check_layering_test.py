#!/usr/bin/env python3
"""Tests of tools/check_layering.py on small trees made here: a wrong include must fail."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "check_layering.py")

README = """# x
<!-- layering -->
1. `ipc`
2. `kernels`
3. `worker/engine`
4. `worker`
<!-- /layering -->
"""


def make_tree(files):
    root = tempfile.mkdtemp()
    for path, text in {"README.md": README, **files}.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


def run(root):
    p = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
    return p.returncode, p.stdout


class CheckLayering(unittest.TestCase):
    def test_allowed_includes_pass(self):
        root = make_tree({
            "worker/engine/a.h": '#include "kernels/k.h"\n#include "worker/engine/b.h"\n',
            "worker/main.cc": '#include "worker/engine/a.h"\n#include "ipc/x.h"\n#include <vector>\n',
            "kernels/k.h": "#pragma once\n",
        })
        self.assertEqual(run(root), (0, "layering: every include follows the layering list in README.md\n"))

    def test_an_include_reaching_up_fails_and_names_file_line_and_rule(self):
        root = make_tree({"kernels/a.cc": '// x\n#include "worker/engine/x.h"\n'})
        code, out = run(root)
        self.assertEqual(code, 1)
        self.assertIn("kernels/a.cc:2: includes worker/engine/x.h (worker/engine/)", out)
        self.assertIn("may include only from: ipc", out)

    def test_the_most_specific_row_owns_a_file(self):
        # worker/ comes after worker/engine/, so the engine may not include the worker.
        root = make_tree({"worker/engine/deep/a.cu": '#include "worker/main.h"\n'})
        self.assertEqual(run(root)[0], 1)

    def test_a_lowest_layer_includes_nothing_else(self):
        root = make_tree({"ipc/a.h": '#include "worker/main.h"\n'})
        code, out = run(root)
        self.assertEqual(code, 1)
        self.assertIn("may include only from: itself", out)

    def test_a_missing_table_is_an_error(self):
        root = make_tree({})
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("# no table\n")
        self.assertNotEqual(run(root)[0], 0)


if __name__ == "__main__":
    unittest.main()
