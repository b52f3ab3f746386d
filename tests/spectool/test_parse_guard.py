"""Every AST build in spectool goes through ``spectool._parse.parse`` (and its guard).

CPython 3.11 races when two threads build ``ast`` objects at once (see
``spectool._parse``); the shadow driver installs one lock around all of spectool's
parses. Pinned here: no other parse call exists in the package, the runtime's
parses hold the installed guard, and the guard is a lock once a shadow exists.
"""

from __future__ import annotations

import ast
import contextlib
import pathlib

import pytest

import spectool
from spectool import _parse

ROOT = pathlib.Path(spectool.__file__).parent


def direct_parse_calls(path: pathlib.Path) -> list[int]:
    """Lines that build an AST without ``_parse.parse``: ``ast.parse(...)`` or a
    ``compile(...)`` with a flags argument (PyCF_ONLY_AST)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "parse" and \
                isinstance(func.value, ast.Name) and func.value.id == "ast":
            lines.append(node.lineno)
        elif isinstance(func, ast.Name) and func.id == "compile" and \
                (len(node.args) >= 4 or any(k.arg == "flags" for k in node.keywords)):
            lines.append(node.lineno)
    return lines


def test_no_parse_bypasses_the_guarded_parse():
    found = {str(p.relative_to(ROOT)): direct_parse_calls(p) for p in ROOT.rglob("*.py")
             if p.name != "_parse.py"}
    assert {k: v for k, v in found.items() if v} == {}


def test_negative_control_a_direct_parse_is_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import ast\ntree = ast.parse('x')\ncode = compile('x', 'f', 'exec', 1024)\n")
    assert direct_parse_calls(module) == [2, 3]


class CountingGuard(contextlib.AbstractContextManager):
    def __init__(self) -> None:
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.anyio
async def test_a_spec_turn_parses_under_the_guard_and_the_shadow_installs_a_lock(monkeypatch):
    spectool.Runtime(tools=[], mode="spec")             # imports the shadow driver
    assert type(_parse._guard).__name__ == "RLock"
    guard = CountingGuard()
    monkeypatch.setattr(_parse, "_guard", guard)
    runtime = spectool.Runtime(tools=[], mode="spec")
    result = await runtime.run(["```repl\nx = 1\nfor i in range(2):\n", "    x += i\n```\n"])
    assert result.namespace["x"] == 2
    assert guard.entered >= 2                           # segmenter and shadow parses
