"""No bet on a name whose value changed where the shadow could not see it.

Classes (each against a real run of the same cells, with a negative control that puts
the old behaviour back):

* a helper from an earlier cell whose function object no longer does what its source
  says (code swapped, defaults replaced, a default computed from a name changed since,
  a mutable default the calls so far have grown) is not replayed from source;
* an allow-listed module or builtin an earlier cell patched reads as unknown;
* a tool's name rebound or unbound inside the cell: ``except ... as q`` (a known error,
  or a call in the ``try`` body that raises only for real), ``del q``,
  ``globals()[...]``, ``exec``, ``vars()``, ``setattr`` on a module, an attribute
  assignment to a module.

The oracle: every call the shadow launched or bet on is one the baseline run made,
and spec gives baseline's namespace and error. Ordering: the message stays open until
the shadow has run every statement fed to it (replayed definitions included), or has
reached a real call it must wait for.
"""

from __future__ import annotations

import ast
import builtins
import math
import textwrap

import anyio
import pytest

import spectool
import spectool.runtime
import spectool.shadow.interpreter as interpreter
from spectool.cell_defs import replayable
from spectool.shadow.rebinding import may_rebind, patched_names
from spectool.shadow.statements import StatementsMixin


@pytest.fixture(autouse=True)
def restore_patched_modules(monkeypatch):
    """Cells below patch ``textwrap.dedent``/``builtins.ascii`` in this process: undo it."""
    monkeypatch.setattr(textwrap, "dedent", textwrap.dedent)
    monkeypatch.setattr(builtins, "ascii", builtins.ascii)
    monkeypatch.setattr(math, "sqrt", math.sqrt)


class Turns:
    """Runs setup cells, then a streamed last cell; records what ``q`` was called with
    and what the shadow launched or bet."""

    def __init__(self, mode: str, shadow: str, wait_all: bool = False,
                 executor: str = "inprocess") -> None:
        self.called: list[str] = []
        self.launched: list[str] = []
        self.caught_up = anyio.Event()
        self.fed = 1 << 30      # statements the shadow gets this turn (set per turn)
        turns = self

        @spectool.tool(speculate="pure")
        async def q(x: str) -> str:
            turns.called.append(x)
            return "<" + x + ">"

        @spectool.tool
        def boom() -> None:
            raise ValueError("only for real")

        def on_event(event) -> None:
            if event.kind in ("launch", "bet") and event.data.get("tool") == "q":
                turns.launched.append(event.data["args"][0])
            if event.kind == "shadow_statement" and event.data["n"] >= turns.fed:
                turns.caught_up.set()
            if (event.kind == "observe" and event.data.get("tool") == "boom"
                    and not wait_all):
                turns.caught_up.set()   # it may wait for the real run from here on

        self.mode = mode
        self.rt = spectool.Runtime([q, boom], mode=mode, shadow=shadow, on_event=on_event,
                                   admission=False, executor=executor)

    async def run(self, setup: list[str], last: str):
        for cell in setup:
            res = await self.rt.run_cell(cell)
            assert res.error is None, res.error
        self.called.clear()
        self.launched.clear()
        turns = self

        async def stream():
            # the definitions replayed at turn start, then the cell's statements
            turns.fed = len(turns.rt._defs) + len(ast.parse(last).body)
            yield "```repl\n" + last + "w = 0\n"
            if turns.mode == "spec":
                await turns.caught_up.wait()
            yield "```\n"

        with anyio.fail_after(60):
            res = await self.rt.run(stream())
        await self.rt.aclose()
        ns = {k: repr(v) for k, v in res.namespace.items()   # no functions, no addresses
              if not callable(v) and " at 0x" not in repr(v)}
        return ns, repr(res.error)


async def check(setup: list[str], last: str, shadow: str = "thread",
                wait_all: bool = False, executor: str = "inprocess") -> list[str]:
    """Spec equals baseline and bets only on calls baseline made; returns the bets.
    ``wait_all``: the message stays open until the shadow ran every statement, even
    past a real call (only for a shadow that does not wait for that call)."""
    base = Turns("baseline", shadow, executor=executor)
    base_out = await base.run(setup, last)
    spec = Turns("spec", shadow, wait_all, executor)
    spec_out = await spec.run(setup, last)
    assert spec_out == base_out
    stale = [x for x in spec.launched if x not in base.called]
    assert stale == [], f"bets on calls the real run never made: {stale}"
    return spec.launched


HELPERS = {
    "defaults_replaced": (["def f(x, n=1):\n    return x * n\n", "f.__defaults__ = (3,)\n"],
                          "r = q(f('a'))\n"),
    "kwdefaults_changed": (["def f(x, *, n=1):\n    return x * n\n",
                            "f.__kwdefaults__['n'] = 2\n"], "r = q(f('a'))\n"),
    "code_swapped": (["def f(x):\n    return x\n", "def g(x):\n    return x + x\n",
                      "f.__code__ = g.__code__\n"], "r = q(f('a'))\n"),
    "mutable_default_grown": (["def f(x, seen=[]):\n    seen.append(x)\n    return str(len(seen))\n",
                               "f('z')\n"], "r = q(f('a'))\n"),
    "default_from_a_changed_name": (["N = 2\ndef f(x, n=N):\n    return x * n\n", "N = 5\n"],
                                    "r = q(f('a'))\n"),
    "changed_in_its_own_cell": (["def f(x, n=1):\n    return x * n\nf.__defaults__ = (4,)\n"],
                                "r = q(f('a'))\n"),
}
UNCHANGED = (["def f(x, n=2, *, sep='-', t=(1, 'a', -0.5)):\n"
              "    return sep.join([x * n for _ in t[:2]])\n"], "r = q(f('a'))\n")


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(HELPERS))
async def test_a_changed_helper_is_not_replayed(anyio_backend, case):
    setup, last = HELPERS[case]
    assert await check(setup, last) == []


@pytest.mark.anyio
async def test_an_unchanged_helper_is_still_replayed(anyio_backend):
    assert await check(*UNCHANGED) == ["aa-aa"]


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["defaults_replaced", "code_swapped", "mutable_default_grown",
                                  "default_from_a_changed_name"])
async def test_negative_control_replaying_every_helper_bets_on_stale_code(
        anyio_backend, monkeypatch, case):
    monkeypatch.setattr(spectool.runtime, "replayable", lambda obj, tree: True)
    with pytest.raises(AssertionError, match="never made"):
        await check(*HELPERS[case])


def _def(source: str) -> tuple[object, ast.Module]:
    ns: dict = {}
    exec(source, ns)
    tree = ast.parse(source)
    return ns[tree.body[0].name], tree


def test_replayable_unit():
    assert replayable(*_def("def f(x, n=2, *, k=None):\n    return [x for _ in range(n)]\n"))
    fn, tree = _def("def f(x, n=2):\n    return x\n")
    fn.__defaults__ = (2.0,)                       # equal, but another type
    assert not replayable(fn, tree)
    fn, tree = _def("def f(x, n=-0.0):\n    return x\n")
    fn.__defaults__ = (0.0,)
    assert not replayable(fn, tree)
    assert not replayable(*_def("def f(x, n=[]):\n    return x\n"))   # mutable default
    assert not replayable(*_def("def f(x, n=len('ab')):\n    return x\n"))   # computed
    assert not replayable(lambda x: x, ast.parse("def f(x):\n    return x\n"))


# ---------------------------------------------------------------- patched modules

PATCHES = {
    "module_function": (["import textwrap\ntextwrap.dedent = lambda v: 'patched'\n"],
                        "import textwrap\nr = q(textwrap.dedent(' a'))\n"),
    "from_import": (["import math\nmath.sqrt = lambda v: -1.0\n"],
                    "from math import sqrt\nr = q(str(sqrt(4)))\n"),
    "builtin": (["import builtins\nbuiltins.ascii = lambda v: 'patched'\n"],
                "r = q(ascii('x'))\n"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["thread", "process"])
@pytest.mark.parametrize("case", sorted(PATCHES))
async def test_a_module_patched_by_an_earlier_cell_is_unknown(anyio_backend, shadow, case):
    assert await check(*PATCHES[case], shadow=shadow) == []


@pytest.mark.anyio
async def test_unpatched_modules_are_still_used(anyio_backend):
    assert await check([], "import textwrap\nr = q(textwrap.dedent(' a'))\n") == ["a"]


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(PATCHES))
async def test_negative_control_ignoring_patches_bets_on_the_shadow_copy(
        anyio_backend, monkeypatch, case):
    monkeypatch.setattr(spectool.runtime, "_turn_limits", lambda limits, patches: limits)
    with pytest.raises(AssertionError, match="never made"):
        await check(*PATCHES[case])


SUBPROCESS_PATCHES = {
    **PATCHES,
    "aliased_module": (["import textwrap as tw\n", "tw.dedent = lambda v: 'patched'\n"],
                       "import textwrap\nr = q(textwrap.dedent(' a'))\n"),
    "through_setattr": (["import textwrap\nsetattr(textwrap, 'dedent', lambda v: 'p')\n"],
                        "import textwrap\nr = q(textwrap.dedent(' a'))\n"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(SUBPROCESS_PATCHES))
async def test_a_module_patched_in_the_subprocess_executor_is_unknown(anyio_backend, case):
    assert await check(*SUBPROCESS_PATCHES[case], executor="subprocess") == []


@pytest.mark.anyio
async def test_negative_control_patches_in_the_subprocess_executor_unread(anyio_backend,
                                                                          monkeypatch):
    monkeypatch.setattr(spectool.runtime._Turn, "_remember_patches", lambda self, results: None)
    with pytest.raises(AssertionError, match="never made"):
        await check(*SUBPROCESS_PATCHES["aliased_module"], executor="subprocess")


def test_patched_by_unit():
    from spectool.shadow.rebinding import PATCHABLE, patched_by
    aliases: dict[str, str] = {}
    assert patched_by(ast.parse("import textwrap as tw\nimport json"), aliases) == set()
    assert aliases == {"tw": "textwrap", "json": "json"}
    assert patched_by(ast.parse("tw.dedent = f\ndel json.dumps"), aliases) == {
        "textwrap", "json"}
    assert patched_by(ast.parse("obj.attr = 1\nx = tw.dedent"), aliases) == set()
    assert patched_by(ast.parse("exec(s)"), aliases) == PATCHABLE


def test_patched_names_unit(monkeypatch):
    assert patched_names() == frozenset()
    monkeypatch.setattr(textwrap, "wrap", lambda *a, **k: [])
    monkeypatch.setattr(builtins, "ascii", lambda v: v)
    assert patched_names() == {"textwrap", "ascii"}


# ---------------------------------------------------------------- rebinding in the cell

REBINDINGS = {
    "except_as_known_error": "try:\n    raise ValueError('v')\nexcept ValueError as q:\n    pass\n"
                             "r = q('a')\n",
    "except_as_real_error": "try:\n    boom()\nexcept ValueError as q:\n    pass\nr = q('a')\n",
    "except_as_in_a_loop": "for i in range(2):\n    try:\n        boom()\n"
                           "    except ValueError as q:\n        pass\nr = q('a')\n",
    "del_tool": "del q\nr = q('a')\n",
    "globals_item": "globals()['q'] = lambda v: 'fake'\nr = q('a')\n",
    "globals_update": "globals().update(q=str.upper)\nr = q('a')\n",
    "exec": "exec(\"q = lambda v: 'fake'\")\nr = q('a')\n",
    "exec_in_a_skipped_block": "if len(str(boom)) > 0:\n    exec(\"q = str.upper\")\nr = q('a')\n",
    "vars_item": "vars()['q'] = str.upper\nr = q('a')\n",
    # a function whose body rebinds: defining it changes nothing, calling it may
    "helper_rebinding_when_called": ("def swap():\n    globals()['q'] = str.upper\n"
                                     "swap()\nr = q('a')\n"),
    "module_attribute": "import textwrap\ntextwrap.dedent = str.upper\nr = q(textwrap.dedent('a'))\n",
    "setattr_module": "import textwrap\nsetattr(textwrap, 'dedent', str.upper)\n"
                      "r = q(textwrap.dedent('a'))\n",
    "rebound_name_in_globals": "x = 'a'\nglobals()['x'] = 'b'\nr = q(x)\n",
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(REBINDINGS))
async def test_a_name_rebound_behind_the_shadow_is_never_bet_on(anyio_backend, case):
    await check(["x = 0\n"], REBINDINGS[case])


@pytest.mark.anyio
async def test_names_bound_after_an_exec_are_known_again(anyio_backend):
    launched = await check([], "exec('pass')\ny = 'b'\nf = str.upper\n")
    assert launched == []
    assert await check([], "x = 'a'\nr = q(x)\nexec('pass')\n") == ["a"]   # before it


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["exec", "exec_in_a_skipped_block", "globals_item",
                                  "globals_update", "rebound_name_in_globals", "vars_item"])
async def test_negative_control_without_the_rebinding_scan_bets_are_stale(
        anyio_backend, monkeypatch, case):
    monkeypatch.setattr(interpreter, "may_rebind", lambda tree, *names: False)
    with pytest.raises(AssertionError, match="never made"):
        await check(["x = 0\n"], REBINDINGS[case])


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["except_as_known_error", "del_tool"])
async def test_negative_control_an_unbound_tool_name_that_still_resolves_is_stale(
        anyio_backend, monkeypatch, case):
    def old_unbind(self, name, scope):       # popped, but the tool name still resolves
        self._owner(name, scope).vars.pop(name, None)

    monkeypatch.setattr(StatementsMixin, "_unbind", old_unbind)
    with pytest.raises(AssertionError, match="never made"):
        await check(["x = 0\n"], REBINDINGS[case])


@pytest.mark.anyio
async def test_negative_control_a_try_body_assumed_not_to_raise_is_stale(anyio_backend,
                                                                         monkeypatch):
    def settle_nothing(self, calls):
        return
        yield  # pragma: no cover

    monkeypatch.setattr(StatementsMixin, "_settle_try_body", settle_nothing)
    with pytest.raises(AssertionError, match="never made"):
        await check(["x = 0\n"], REBINDINGS["except_as_real_error"], wait_all=True)


@pytest.mark.anyio
async def test_a_try_whose_calls_succeed_keeps_its_results(anyio_backend):
    last = "try:\n    r = q('a')\nexcept ValueError:\n    r = 'none'\ns = q(r)\n"
    assert await check([], last) == ["a", "<a>"]


def test_may_rebind_unit():
    def scan(src):
        return may_rebind(ast.parse(src), {"tw"})
    for src in ("exec('x')", "eval('1')", "globals()", "vars()", "locals()",
                "__import__('os')", "setattr(o, 'a', 1)", "import builtins",
                "from sys import modules", "tw.dedent = f", "del tw.wrap",
                "json.dumps = f", "tw.x += 1", "if c:\n    exec('y')\n"):
        assert scan(src), src
    for src in ("x = 1", "obj.attr = 1", "d['k'] = 1", "print(globals_count)",
                "import textwrap as tw2"):
        assert not scan(src), src


@pytest.mark.anyio
async def test_defining_a_function_whose_body_rebinds_keeps_the_shadow_betting(anyio_backend):
    """A definition runs only its header: a helper that would use ``globals()`` or
    ``setattr`` when called does not make every name unknown by being defined, so the
    calls after it are still bet on (a harness that defines such helpers in its first
    cell would otherwise never speculate again)."""
    launched = await check(["x = 0\n"], "def swap(v):\n    setattr(v, 'n', 1)\n"
                                         "r = q('a')\n")
    assert launched == ["a"]


@pytest.mark.anyio
async def test_negative_control_a_called_rebinding_helper_unseen_gives_a_stale_bet(
        anyio_backend, monkeypatch):
    from spectool.shadow import rebinding
    monkeypatch.setattr(rebinding, "body_rebinds", lambda fn: False)
    with pytest.raises(AssertionError, match="never made"):
        await check(["x = 0\n"], REBINDINGS["helper_rebinding_when_called"])
