"""The shadow's view is never stale: whatever it cannot model exactly
is unknown, so every call it bets on is a call the real run makes.

Oracle: each program also runs for real (plain ``exec`` with recording tools); every
argument tuple the shadow launched (statements) or bet on (tail peeks) must be one the
real run passed. Each case has a negative control: the same program with the defence
switched off (monkeypatched) must be caught by the same check.

Cases: names bound by ``match`` patterns; aliases of a mutated list (mutation through
any reference, including a call into code the shadow cannot see); ``str``/``repr`` of
an iterator; a tail peek whose C callback (``sorted(key=...)``, ``map``) would mutate a
shared list; order of a set (iteration, ``str``, ``join``, dicts built from it); heap
addresses and internal names in text; hashes that depend on the hash seed.
"""

from __future__ import annotations

import sys

import pytest

import spectool.shadow.calls as calls
import spectool.shadow.expressions as expressions
import spectool.shadow.interpreter as interpreter
from shadow_driver import RecordingHost, TOOLS, drive
from spectool.shadow import Limits, ShadowInterpreter
from spectool.shadow.calls import CallsMixin


class Opaque:
    """A namespace object the shadow cannot copy; calling ``bump`` mutates a list."""

    def __init__(self, target: list) -> None:
        self.target = target

    def bump(self) -> None:
        self.target.append("bumped")


def real_calls(source: str, namespace: dict) -> list[tuple]:
    """Run ``source`` for real; the argument tuples ``llm_query`` received."""
    seen: list[tuple] = []

    def llm_query(*args):
        seen.append(args)
        return f"<{args[0]}>"

    def search(q):
        return ["hit"]  # truthy: blocks guarded by it run

    def write_file(target, text):   # a never tool that changes what it is passed
        if isinstance(target, list):
            target.append(text)

    exec(compile(source, "<cell>", "exec"), {"llm_query": llm_query, "search": search,
                                             "write_file": write_file, **namespace})
    return seen


class ObservingHost(RecordingHost):
    """Also observes never-tool calls (as the runtime's store does): the shadow gets a
    pending value bound to the real call instead of an unknown."""

    def observe(self, tool_name, args, kwargs):
        return ("observed", tool_name)

    def outcome(self, handle):
        if isinstance(handle, tuple):     # what real_calls' never tools return
            from spectool.shadow import Outcome
            return Outcome(value=["hit"] if handle[1] == "search" else None)
        return super().outcome(handle)


def shadow_bets(statements: list[str], namespace: dict, tail: str | None = None,
                observe: bool = False) -> list[tuple]:
    """What the shadow launched or bet on. ``observe``: never-tool calls are observed
    (their results known, as in the runtime); else they are unknown."""
    host = ObservingHost() if observe else RecordingHost()
    interp = ShadowInterpreter(namespace, TOOLS, host, Limits())
    for src in statements:
        drive(interp, src, host)
    bets = [args for tool, args, _, _ in host.launches if tool == "llm_query"]
    if tail is not None:
        bets += [b.args for b in interp.peek_tail(tail) if b.tool == "llm_query"]
    return bets


def fresh(namespace_factory):
    return namespace_factory() if namespace_factory else {}


CASES = {
    "match_capture": (
        ["x = 'before'", "match search('q'):\n    case [x]:\n        pass\n",
         "llm_query(x)"], None, None),
    "match_mapping_rest": (
        ["rest = {}", "match {'k': 1, 'j': 2}:\n    case {'k': 1, **rest} if search('q'):\n"
         "        pass\n", "llm_query(str(rest))"], None, None),
    "alias_mutated_in_skipped_block": (
        ["a = [1]", "b = a", "if search('q'):\n    b.append(2)\n", "llm_query(str(a))"],
        None, None),
    "alias_inside_container": (
        ["a = [1]", "d = {'k': a}", "if search('q'):\n    a.append(2)\n",
         "llm_query(str(d))"], None, None),
    "alias_from_namespace_read_later": (
        ["if search('q'):\n    b.append(2)\n", "llm_query(str(a))"],
        lambda: (lambda shared: {"a": shared, "b": shared})([1]), None),
    "mutation_by_unseen_code": (
        ["obj.bump()", "llm_query(str(items))"],
        lambda: (lambda items: {"items": items, "obj": Opaque(items)})([1]), None),
    "str_of_iterator": (
        ["it = iter([1, 2])", "llm_query(str(it))", "llm_query(f'{it!r}')",
         "llm_query(str(len(list(it))))"], None, None),
    "len_and_bool_of_a_generator": (
        ["g = (x for x in [])", "llm_query(str(bool(g)))"], None, None),
    "peek_sorted_key_mutates_shared_list": (
        ["ys = [3, 1, 2]"], None,
        "z = sorted([5, 4], key=lambda v: ys.append(v) or v)\nllm_query(str(ys))\n"),
    "peek_map_of_bound_append": (
        ["ys = [3, 1, 2]"], None, "z = list(map(ys.append, [9]))\nllm_query(str(ys))\n"),
    "peek_map_of_unbound_append": (
        ["ys = [3, 1, 2]"], None, "z = list(map(list.append, [ys], [9]))\nllm_query(str(ys))\n"),
    "never_tool_mutates_its_argument": (
        ["a = [1]", "b = {'k': a}", "write_file(a, 'x')", "llm_query(str(b))"], None, None),
}


def _names_only_rebound_by_targets(monkeypatch):
    """Defence off for match: pattern captures are not written names."""
    import ast

    from spectool.shadow import analysis
    original = analysis._facts

    def facts(nodes):
        written, bound, sliced = original(nodes)
        captured = {n.name for node in nodes for n in ast.walk(node)
                    if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name}
        captured |= {n.rest for node in nodes for n in ast.walk(node)
                     if isinstance(n, ast.MatchMapping) and n.rest}
        return written - captured, bound - captured, sliced

    monkeypatch.setattr(analysis, "_facts", facts)


def _no_poison(monkeypatch):
    monkeypatch.setattr(interpreter, "poison", lambda *a, **k: None)
    monkeypatch.setattr(calls, "poison", lambda *a, **k: None)
    monkeypatch.setattr(interpreter.CoreInterpreter, "_poison_all", lambda self, scope, in_peek=False: None)


def _no_text_guard(monkeypatch):
    monkeypatch.setattr(calls, "_guard_raw", lambda *a, **k: None)
    monkeypatch.setattr(calls, "consumes", lambda raw: True)
    monkeypatch.setattr(expressions, "text_safe", lambda v: True)


def _no_argument_poison(monkeypatch):
    monkeypatch.setattr(CallsMixin, "_poison_args", lambda self, args, kwargs: None)


def _no_callback_fence(monkeypatch):
    monkeypatch.setattr(CallsMixin, "_passable_raw", lambda self, func: func.raw)


DEFENCES_OFF = {
    "match_capture": _names_only_rebound_by_targets,
    "match_mapping_rest": _names_only_rebound_by_targets,
    "alias_mutated_in_skipped_block": _no_poison,
    "alias_inside_container": _no_poison,
    "alias_from_namespace_read_later": _no_poison,
    "mutation_by_unseen_code": _no_poison,
    "str_of_iterator": _no_text_guard,
    "len_and_bool_of_a_generator": _no_text_guard,
    "peek_sorted_key_mutates_shared_list": _no_poison,
    "peek_map_of_bound_append": _no_callback_fence,
    "peek_map_of_unbound_append": _no_callback_fence,
    "never_tool_mutates_its_argument": _no_argument_poison,
}


def check(case: str) -> tuple[list, list]:
    statements, factory, tail = CASES[case]
    source = "".join(s if s.endswith("\n") else s + "\n" for s in statements) + (tail or "")
    real = real_calls(source, fresh(factory))
    bets = shadow_bets(statements, fresh(factory), tail, observe=case in OBSERVED_CASES)
    return bets, real


# cases whose never-tool calls the shadow observes (it knows their results)
OBSERVED_CASES = {"never_tool_mutates_its_argument"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_bet_is_a_call_the_real_run_makes(case):
    bets, real = check(case)
    stale = [b for b in bets if b not in real]
    assert stale == [], f"stale bets {stale}; the real run called {real}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_negative_control_defence_off_bets_on_a_stale_view(case, monkeypatch):
    DEFENCES_OFF[case](monkeypatch)
    bets, real = check(case)
    assert [b for b in bets if b not in real], f"not caught: bets {bets}, real {real}"


# ------------------------------------------------------------ heap addresses, names

LEAKS = ("0x", "<", "SafeFunc", "Unknown", "Pending", "ShadowFunction", "ModuleProxy",
         "ToolRef")
TEXT_PROGRAMS = [
    "llm_query(str(object()))",
    "llm_query(repr(len))",
    "llm_query(str(type(1)))",
    "def f():\n    pass\nllm_query(str(f))\n",
    "llm_query(f'{(lambda: 0)}')",
    "import math\nllm_query(str(math))",
    "llm_query('%s' % (iter([]),))",
    "llm_query('{}'.format(map))",
    "llm_query(format(zip()))",
    "llm_query(str([iter([1])]))",
    "llm_query(str(hash('seeded per process')))",
    "llm_query(str(hash(('a', 1))))",
    "def f():\n    pass\nllm_query(type(f).__name__)\n",
    "llm_query(str(sorted))",
]


@pytest.mark.parametrize("program", TEXT_PROGRAMS)
def test_no_address_internal_name_or_seeded_hash_reaches_a_tool(program):
    bets = shadow_bets([program], {})
    assert bets == [], bets


def test_negative_control_text_guard_off_leaks(monkeypatch):
    _no_text_guard(monkeypatch)
    leaked = [b for p in TEXT_PROGRAMS for b in shadow_bets([p], {})]
    assert any(any(leak in str(b) for leak in LEAKS) for b in leaked)


def test_text_of_plain_data_is_still_known():
    bets = shadow_bets(["d = {'a': [1, (2, 3)], 'b': None}", "llm_query(str(d))",
                        "llm_query(f'{d!r} {1.5:.2f} {[1, 2]}')", "llm_query('%s-%d' % ('x', 3))",
                        "llm_query(str(hash(7)) + str({1}))"], {})
    assert bets == [("{'a': [1, (2, 3)], 'b': None}",),
                    ("{'a': [1, (2, 3)], 'b': None} 1.50 [1, 2]",), ("x-3",), ("7{1}",)]


# --------------------------------------------------------------------- set order

SET_PROGRAMS = [
    "llm_query(','.join(s))",
    "llm_query(str(s))",
    "llm_query(str(list(s)))",
    "llm_query(str([x for x in s]))",
    "llm_query(str({x: 1 for x in s}))",
    "llm_query(str(dict.fromkeys(s)))",
    "llm_query(str(next(iter(s))))",
    "llm_query(str(s.pop()))",
    "t = []\nfor x in s:\n    t.append(x)\nllm_query(str(t))\n",
    "llm_query(str([*s]))",
    "llm_query(str(sorted(s, key=len)))",
    "llm_query(str(max(s, key=len)))",
    "llm_query(str(sum({0.1, 0.2, 0.3, 1e16})))",
]


def _reordered_set() -> set:
    """A set whose copy iterates in another order than the set itself (insertion
    history, as a set of str would across processes with another hash seed)."""
    s = set(range(50))
    for i in range(46):
        s.discard(i)
    assert list(set(list(s))) != list(s)
    return s


@pytest.mark.parametrize("program", SET_PROGRAMS)
def test_set_order_never_reaches_a_tool(program):
    assert shadow_bets([program], {"s": {"a", "b", "c", "dd"}}) == []


def test_order_free_uses_of_a_set_stay_known():
    bets = shadow_bets(["llm_query(str(sorted(s)))", "llm_query(str(len(s)))",
                        "llm_query(str(sorted(s | {'e'})))", "llm_query(str('a' in s))",
                        "llm_query(str(max(s)))", "llm_query(str(sum({1, 2, 3})))"],
                       {"s": {"a", "b", "c"}})
    assert bets == [("['a', 'b', 'c']",), ("3",), ("['a', 'b', 'c', 'e']",), ("True",),
                    ("c",), ("6",)]


def test_negative_control_set_order_reaches_tools_without_the_guard(monkeypatch):
    _no_text_guard(monkeypatch)
    monkeypatch.setattr(expressions, "is_unordered", lambda v: False)
    s = _reordered_set()
    real = real_calls("llm_query(str([x for x in s]))\n", {"s": s})
    bets = shadow_bets(["llm_query(str([x for x in s]))"], {"s": s})
    assert bets and bets != real


# ------------------------------------------------------------------- import fence

FENCED = [
    ("idna", "e = 'x'.encode('idna')\nllm_query(str(e))"),
    ("punycode", "e = b'abc'.decode('punycode')\nllm_query(e)"),
    ("utf_7", "e = bytes('abc', 'utf_7')\nllm_query(str(e))"),
    ("cp1252", "e = str(b'abc', encoding='cp1252')\nllm_query(e)"),
]


@pytest.mark.parametrize("name,program", FENCED, ids=[n for n, _ in FENCED])
def test_codec_lookups_outside_the_allow_list_are_declined(name, program):
    before = set(sys.modules)
    assert shadow_bets([program], {}) == []
    assert set(sys.modules) - before == set()


def test_lazily_imported_helpers_are_imported_with_the_shadow():
    before = set(sys.modules)
    bets = shadow_bets(["import datetime", "d = datetime.datetime.strptime('2020', '%Y')",
                        "import collections",
                        "c = collections.Counter('abca').most_common(1)",
                        "llm_query(str(d) + str(c))", "llm_query('x'.encode('utf-8').decode())"],
                       {})
    assert bets == [("2020-01-01 00:00:00[('a', 2)]",), ("x",)]
    assert set(sys.modules) - before == set()


def test_negative_control_import_fence_off_imports(monkeypatch):
    monkeypatch.setattr(calls, "check_codec", lambda enc: None)
    import spectool.shadow.builtins as builtins
    # a codec no other test looks up (the codec registry caches a lookup for good)
    monkeypatch.setattr(builtins, "SAFE_CODECS", builtins.SAFE_CODECS | {"cp500"})
    monkeypatch.delitem(sys.modules, "encodings.cp500", raising=False)
    before = set(sys.modules)
    shadow_bets(["e = bytes('abc', 'cp500')", "f = 'abc'.encode('cp500')"], {})
    assert "encodings.cp500" in set(sys.modules) - before


# ------------------------------------------------------------ exception messages

ERROR_TEXT_CASES = {
    # the shadow writes its own message; CPython 3.11 words it differently
    "unbound_local": "def f():\n    y = y + 1\ntry:\n    f()\nexcept Exception as e:\n"
                     "    llm_query(str(e))\n",
    # CPython's text names the type: a generator is a list iterator in the shadow
    "generator_type_name": "try:\n    s = 'a' + (x for x in [])\nexcept TypeError as e:\n"
                           "    llm_query(str(e))\n",
    "shadow_written_message": "try:\n    sorted()\nexcept TypeError as e:\n"
                              "    llm_query(repr(e.args))\n",
}


@pytest.mark.parametrize("case", sorted(ERROR_TEXT_CASES))
def test_exception_text_the_real_run_may_word_otherwise_is_unknown(case):
    source = ERROR_TEXT_CASES[case]
    real = real_calls(source, {})
    bets = shadow_bets([source], {})
    assert [b for b in bets if b not in real] == [], (bets, real)


def test_negative_control_exception_text_unmarked_reaches_a_tool(monkeypatch):
    from spectool.shadow import internals

    def unmarked(self, exc, exact=False):
        BaseException.__init__(self)
        self.exc = exc

    monkeypatch.setattr(internals._UserError, "__init__", unmarked)
    stale = []
    for source in ERROR_TEXT_CASES.values():
        real = real_calls(source, {})
        stale += [b for b in shadow_bets([source], {}) if b not in real]
    assert len(stale) >= 2, stale


def test_cpython_text_on_plain_data_stays_known():
    source = "try:\n    int('x')\nexcept ValueError as e:\n    llm_query(str(e))\n"
    assert shadow_bets([source], {}) == real_calls(source, {}) == [
        ("invalid literal for int() with base 10: 'x'",)]


# ------------------------------------------------- random programs: no stale bet

class Bumper:
    """A REPL object the shadow cannot copy: ``bump`` mutates ``target`` for real."""

    def __init__(self, target: list) -> None:
        self.target = target

    def bump(self) -> None:
        self.target.append(9)

    def __bool__(self) -> bool:
        return True


def aliased_namespace() -> dict:
    shared = [1, 2]
    return {"L": shared, "M": shared, "D": {"k": shared, "j": [3]}, "obj": Bumper(shared),
            "flag": Bumper([]), "S": {"a", "bb", "c"}, "T": (shared, 1)}


SNIPPETS = [
    "a = L", "b = [L, 4]", "L.append(5)", "M.extend([6])", "D['k'].append(7)", "D['j'] = L",
    "if flag:\n    L.append(8)", "if flag:\n    M.pop()", "obj.bump()", "x = sorted(S)",
    "for s in S:\n    L.append(len(s))", "match [flag]:\n    case [q]:\n        L.append(1)",
    "w = [v for v in L if v > 1]", "T[0].append(3)", "def g():\n    M.append(11)", "g()",
    "c = {v: 1 for v in L}", "e = dict(D)", "e['k'].append(12)", "del M[0]", "L[:] = [0]",
    "M += [13]", "tmp = D.get('k')", "tmp.append(14)", "r = repr(D)", "S.add('zz')",
]
QUERIES = ["llm_query(str(L))", "llm_query(str(M))", "llm_query(str(D))", "llm_query(str(T))",
           "llm_query(str(a))", "llm_query(str(b))", "llm_query(str(sorted(S)))",
           "llm_query(str(e))", "llm_query(str(c))", "llm_query(str(w))", "llm_query(r)"]


def random_programs(seed: int, count: int):
    import random
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        parts = [rng.choice(SNIPPETS + QUERIES) for _ in range(rng.randint(2, 8))]
        source = "\n".join(parts + [rng.choice(QUERIES)]) + "\n"
        try:
            real = real_calls(source, aliased_namespace())
        except Exception:
            continue        # the real run raises (a name not bound yet): not a case
        out.append((source, real))
    return out


def stale_programs(programs) -> list:
    """The programs whose shadow launched or bet (tail peeks before each statement)
    on a call their real run never made."""
    from spectool.stream.segmenter import Segmenter, StatementClosed
    found = []
    for source, real in programs:
        seg = Segmenter()
        events = seg.feed("```repl\n" + source + "```\n") + seg.close()
        statements = [e.source for e in events if isinstance(e, StatementClosed)]
        host = RecordingHost()
        interp = ShadowInterpreter(aliased_namespace(), TOOLS, host, Limits())
        bets = []
        for i, stmt in enumerate(statements):
            bets += [b.args for b in interp.peek_tail("".join(statements[i:]))]
            drive(interp, stmt, host)
        bets += [args for _, args, _, _ in host.launches]
        if [b for b in bets if b not in real]:
            found.append(source)
    return found


PROGRAMS = random_programs(seed=12, count=400)


def test_random_aliasing_programs_never_get_a_stale_bet():
    assert stale_programs(PROGRAMS) == []


def test_negative_control_random_programs_catch_a_stale_view(monkeypatch):
    _no_poison(monkeypatch)
    monkeypatch.setattr(expressions, "is_unordered", lambda v: False)
    _no_text_guard(monkeypatch)
    assert len(stale_programs(PROGRAMS)) > 10


# a peek must never change the shadow's own state (it would then run the real statement
# on top of the peek's change): mutators called as values or unbound
PEEK_MUTATORS = [
    "ys = [3, 1, 2]\nlist.append(ys, 5)\nllm_query(str(ys))\n",
    "ys = [3, 1, 2]\nimport functools\nz = functools.reduce(list.append, [ys, 1])\n"
    "llm_query(str(ys))\n",
    "ys = [3, 1, 2]\nf = ys.append\nf(7)\nllm_query(str(ys))\n",
    "d = {}\ndict.update(d, {'z': 1})\nllm_query(str(d))\n",
]


def peek_mutator_programs():
    return [(source, real_calls(source, {})) for source in PEEK_MUTATORS]


def test_peeks_never_change_shared_state_through_mutators_as_values():
    assert stale_programs(peek_mutator_programs()) == []


def test_negative_control_peek_mutators_unfenced_leave_stale_bets(monkeypatch):
    monkeypatch.setattr(CallsMixin, "_peek_mutation", lambda self, raw, args: None)
    assert len(stale_programs(peek_mutator_programs())) >= 3


# ------------------------------------------- hash seeds: the real run in another process

SEEDED_PROGRAM = (
    "s = {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}\n"
    "llm_query(','.join(s))\n"
    "llm_query(str(s))\n"
    "d = {k: len(k) for k in s}\n"
    "llm_query(str(list(d)))\n"
    "llm_query(str(hash('alpha') % 1000))\n"
    "llm_query(str(sorted(s)))\n"
)


def real_calls_in_process(source: str, hash_seed: int) -> list[tuple]:
    """``real_calls`` in a fresh interpreter with the given PYTHONHASHSEED."""
    import json
    import os
    import subprocess
    runner = ("import json, sys\ncalls = []\n"
              "def llm_query(*a):\n    calls.append(list(a))\n    return 'x'\n"
              "exec(sys.stdin.read())\nprint(json.dumps(calls))\n")
    out = subprocess.run([sys.executable, "-c", runner], input=source, capture_output=True,
                         text=True, timeout=60, check=True,
                         env={**os.environ, "PYTHONHASHSEED": str(hash_seed)})
    return [tuple(c) for c in json.loads(out.stdout)]


def seeded_stale_bets() -> list:
    from spectool.stream.segmenter import Segmenter, StatementClosed
    seg = Segmenter()
    events = seg.feed("```repl\n" + SEEDED_PROGRAM + "```\n") + seg.close()
    bets = shadow_bets([e.source for e in events if isinstance(e, StatementClosed)], {})
    stale = []
    for seed in (1, 2, 3):
        real = real_calls_in_process(SEEDED_PROGRAM, seed)
        stale += [b for b in bets if b not in real]
    return stale


def test_bets_hold_whatever_the_real_processs_hash_seed():
    # only the order-free call (sorted) may be bet on; it is the same in every process
    assert seeded_stale_bets() == []


def test_negative_control_seed_dependent_values_reach_tools_without_guards(monkeypatch):
    _no_text_guard(monkeypatch)
    monkeypatch.setattr(expressions, "is_unordered", lambda v: False)
    assert seeded_stale_bets()
