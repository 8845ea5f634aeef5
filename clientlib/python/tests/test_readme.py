"""The Python client's README (clientlib/python/README.md): its snippets parse, the names they use
exist, and the make targets it names are in the Makefile."""

import ast
import os
import re
import unittest

import fusebox
from fusebox import requests_adapter

from .harness import REPO


def python_section():
    with open(os.path.join(REPO, "clientlib", "python", "README.md"), encoding="utf-8") as f:
        return f.read()


class ReadmeTest(unittest.TestCase):
    def test_snippets_parse_and_name_real_things(self):
        sec = python_section()
        blocks = re.findall(r"```python\n(.*?)```", sec, re.S)
        self.assertGreaterEqual(len(blocks), 2)
        for b in blocks:
            ast.parse(b)
        for name in re.findall(r"`fusebox\.(\w+)", sec):
            self.assertTrue(hasattr(fusebox, name), "the README names fusebox.%s" % name)
        for name in ("NON_RETRYABLE", "IDEMPOTENT", "IDEMPOTENT_WITH_KEY", "OpenError", "ForcedOpenError",
                     "ThrottledError", "ConcurrencyLimitError", "BudgetExhaustedError"):
            self.assertIn(name, sec)
            self.assertTrue(hasattr(fusebox, name))
        self.assertTrue(hasattr(requests_adapter, "FuseboxAdapter"))
        opts = re.search(r"Options of `call`: (.*?)\.\n", sec, re.S).group(1)
        code = fusebox.Dependency._loop.__code__
        params = set(code.co_varnames[:code.co_argcount]) | {"fallback"}
        for opt in re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", opts)):
            self.assertIn(opt, params, "the README lists a call option %s that does not exist" % opt)

    def test_dependency_snippet_runs(self):
        # The README shows how to get a Dependency (client.dependency) before
        # calling its status(): the snippet runs on a client without an agent.
        blocks = re.findall(r"```python\n(.*?)```", python_section(), re.S)
        snippet = [b for b in blocks if "client.dependency(" in b and ".status()" in b]
        self.assertEqual(len(snippet), 1, "the README has no snippet getting a Dependency and its status()")
        client = fusebox.Client(no_agent=True, service="readme")
        try:
            env = {"fusebox": fusebox, "client": client, "order": {}, "print": lambda *a: None,
                   "get_rate": lambda order, timeout: 42}
            exec(snippet[0], env)
            self.assertEqual(env["rate"], 42)
            self.assertIsInstance(env["shipping"], fusebox.Dependency)
            self.assertIsInstance(env["st"], fusebox.Status)
            self.assertFalse(env["st"].from_agent)
        finally:
            client.close()

    def test_make_targets_exist(self):
        with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
            mk = f.read()
        for target in set(re.findall(r"`make ([a-z-]+)", python_section())):
            self.assertRegex(mk, r"(?m)^%s:" % re.escape(target))
