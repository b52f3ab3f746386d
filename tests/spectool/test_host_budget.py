"""The host's own work stays off the event loop or is bounded before it starts.

One class per kind of work that grows with a cell's data (``spectool.host_budget``):
hash-flooded containers, oversized call keys, large results copied for the shadow,
large named values sent to a shadow process, large deterministic results (huge stream
deltas, statements and cells: ``test_host_budget_cells.py``). Each test asserts the mechanism (the work was declined before it began,
or it ran somewhere other than the event loop's thread, or in slices), with spec equal
to baseline, and a negative control showing the same setup without the bound does the
work. No assertion is about time: the stall benchmark measures that
(``python -m spectool_bench.shadow_attacks stalls``).
"""

from __future__ import annotations

import threading

import anyio
import pytest

import spectool
import spectool.keys as keys
from spectool.shadow_host.process_driver import plain_outcome
from spectool.host_budget import LOOP_COPY_ITEMS
from spectool.shadow import hash_guard
from spectool.shadow.copying import PlainCopier
from spectool.shadow.values import Unknown
from spectool.speculation import Outcome
from shadow_driver import shadow as run_shadow
from host_budget_helpers import (baseline_turn, launched, pure_counter, same, spec_turn, spy,
                                 thread)

SAME_HASH = (1 << 61) - 1          # CPython hashes an int modulo this prime


def hostile_dict(n: int = 3_000) -> dict:
    return {i * SAME_HASH: i for i in range(n)}


def hostile_set(n: int = 3_000) -> set:
    return {(0, i * SAME_HASH) for i in range(n)}


# -- hash flooding ----------------------------------------------------------------------

def test_the_copier_refuses_containers_whose_members_share_one_hash():
    assert isinstance(PlainCopier(10 ** 6).copy(hostile_dict()), Unknown)
    assert isinstance(PlainCopier(10 ** 6).copy(hostile_set()), Unknown)
    assert isinstance(PlainCopier(10 ** 6).copy(frozenset(hostile_set())), Unknown)
    assert hash_guard.crowded(hostile_dict()) and hash_guard.crowded(hostile_set())


def test_negative_control_ordinary_containers_of_the_same_size_are_copied():
    d = {i: i for i in range(3_000)}
    s = {(0, i) for i in range(3_000)}
    assert PlainCopier(10 ** 6).copy(d) == d and PlainCopier(10 ** 6).copy(s) == s
    assert not hash_guard.crowded(d) and not hash_guard.crowded(s)
    # a few equal hashes (-1 and -2 share one) are far below the budget
    assert PlainCopier(10 ** 6).copy({-1: "a", -2: "b"}) == {-1: "a", -2: "b"}


def test_negative_control_without_the_guard_the_hostile_dict_is_rebuilt(monkeypatch):
    monkeypatch.setattr(hash_guard, "COLLISION_BUDGET", 10 ** 12)
    value = hostile_dict(300)
    assert PlainCopier(10 ** 6).copy(value) == value


def test_the_guards_own_walk_is_charged_to_the_copy_budget():
    from spectool.shadow.limits import LimitExceeded
    big_members = {tuple(range(i, i + 200)) for i in range(500)}     # 100k elements
    with pytest.raises(LimitExceeded):
        PlainCopier(20_000).copy(big_members)
    with pytest.raises(LimitExceeded):
        hash_guard.crowded(big_members, work=20_000)
    assert PlainCopier(200_000).copy(big_members) == big_members     # the control


def test_the_guard_hashes_no_user_object():
    hashed = []

    class Key:
        def __hash__(self):
            hashed.append(self)
            return 0

    assert not hash_guard.crowded([Key() for _ in range(100)] + [(Key(),)])
    assert hashed == []


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_a_named_hash_flooded_dict_declines_its_bets(anyio_backend, shadow):
    q, calls = pure_counter()
    spec = await spec_turn([q], {"d": hostile_dict()}, "r = q(len(d))\n", "print(r)\n",
                           shadow)
    q2, _ = pure_counter()
    base = await baseline_turn([q2], {"d": hostile_dict()}, "r = q(len(d))\nprint(r)\n")
    same(spec, base)
    assert launched(spec, "q") == [] and spec.stats.hits == 0 and calls == [3_000]


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_negative_control_an_ordinary_dict_of_that_size_is_bet_on(anyio_backend,
                                                                        shadow):
    q, calls = pure_counter()
    d = {i: i for i in range(3_000)}
    spec = await spec_turn([q], {"d": d}, "r = q(len(d))\n", "print(r)\n", shadow)
    assert launched(spec, "q") and spec.stats.hits == 1 and calls == [3_000]


BULK_INSERTS = ["s = set(xs)", "s = frozenset(xs)", "s = dict.fromkeys(xs)",
                "s = dict([(x, 1) for x in xs])", "s = set()\ns.update(xs)", "s = {*xs}",
                "s = set(xs[:100]) | set(xs[100:])", "s = {x: 1 for x in xs[:10]}\ns.update(zip(xs, xs))"]


@pytest.mark.parametrize("code", BULK_INSERTS)
def test_the_shadow_refuses_a_bulk_insertion_of_members_sharing_one_hash(code):
    interp, _ = run_shadow(code.split("\n"), {"xs": [i * SAME_HASH for i in range(3_000)]})
    assert type(interp.value_of("s")) is Unknown


@pytest.mark.parametrize("code", BULK_INSERTS)
def test_negative_control_the_shadow_builds_ordinary_containers_of_that_size(code):
    xs = list(range(3_000))
    interp, _ = run_shadow(code.split("\n"), {"xs": xs})
    namespace: dict = {"xs": xs}
    exec(code, namespace)
    assert interp.value_of("s") == namespace["s"]


# -- call keys ------------------------------------------------------------------------

def test_arguments_past_the_key_budget_have_no_key():
    big = "x" * (keys.MAX_KEY_CHARS + 1)
    assert keys.call_key((big,), {}) is None
    assert keys.call_key(([big],), {}) is None
    assert keys.call_key((), {"prompt": big}) is None
    assert keys.call_key((list(range(keys.MAX_KEY_NODES + 1)),), {}) is None
    assert keys.call_key((10 ** 4000,) * 1_000, {}) is None          # digits count too
    assert keys.canonical({"a": big}) is None


def test_negative_control_arguments_within_the_key_budget_have_keys():
    fits = "x" * (keys.MAX_KEY_CHARS - 64)
    assert keys.call_key((fits,), {}) is not None
    assert keys.call_key(([fits],), {}) is not None
    assert keys.call_key((list(range(keys.MAX_KEY_NODES - 16)),), {}) is not None
    assert keys.call_key((10 ** 4000,) * 10, {}) is not None


async def q_of_chars(monkeypatch, chars: int, shadow: str):
    """A spec turn that calls ``q`` with a string of ``chars`` characters, under a key
    budget of 5,000 characters: the result and ``q``'s calls."""
    monkeypatch.setattr(keys, "MAX_KEY_CHARS", 5_000)
    q, calls = pure_counter()
    return await spec_turn([q], {}, f"r = q('x' * {chars})\n", "print(r)\n", shadow), calls


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_an_oversized_argument_is_not_speculated_and_runs_as_in_baseline(
        anyio_backend, shadow, monkeypatch):
    spec, calls = await q_of_chars(monkeypatch, 6_000, shadow)
    q2, _ = pure_counter()
    base = await baseline_turn([q2], {}, "r = q('x' * 6_000)\nprint(r)\n")
    same(spec, base)
    assert launched(spec, "q") == [] and len(calls) == 1      # the real call, once
    assert spec.stats.misses == 1


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_negative_control_an_argument_within_the_budget_is_speculated(
        anyio_backend, shadow, monkeypatch):
    spec, calls = await q_of_chars(monkeypatch, 4_000, shadow)
    assert launched(spec, "q") and spec.stats.hits == 1 and len(calls) == 1


# -- copies made on the loop: observations, outcomes, names for a shadow process -------

def observe_tools(shadow_done: anyio.Event):
    """``rows`` (never) and ``q`` (pure); a call of ``q`` returns only once the shadow
    has run its second statement (``r = q(len(xs))``, which reads the observed ``rows``
    result): by then the shadow has bet on ``q`` or declined to, whoever came first."""
    calls: list = []

    @spectool.tool(name="rows")
    async def rows(n: int) -> list:
        return list(range(n))

    @spectool.tool(speculate="pure", name="q")
    async def q(x: object) -> int:
        calls.append(x)
        await shadow_done.wait()
        return 7

    return [rows, q], calls


def reached(res, tool: str) -> list:
    """The shadow's launches of ``tool``, or its joins of the real run's call."""
    return [e for e in res.trace.events
            if e.kind in ("launch", "bet", "join", "adopt") and e.data.get("tool") == tool]


@pytest.mark.anyio
async def test_a_large_never_result_reaches_the_shadow_as_unknown(anyio_backend):
    done = anyio.Event()
    tools, calls = observe_tools(done)
    n = LOOP_COPY_ITEMS + 1
    spec = await spec_turn(tools, {}, "xs = rows(%d)\n" % n, "r = q(len(xs))\nprint(r)\n",
                           "thread", second=done)
    ready = anyio.Event()
    ready.set()
    tools2, _ = observe_tools(ready)
    base = await baseline_turn(tools2, {}, "xs = rows(%d)\nr = q(len(xs))\nprint(r)\n" % n)
    same(spec, base)
    assert reached(spec, "q") == [] and calls == [n]
    assert spec.trace.of("observe")            # the shadow did wait for the real result


@pytest.mark.anyio
async def test_negative_control_a_small_never_result_is_observed(anyio_backend):
    done = anyio.Event()
    tools, calls = observe_tools(done)
    spec = await spec_turn(tools, {}, "xs = rows(100)\n", "r = q(len(xs))\nprint(r)\n",
                           "thread", second=done)
    assert reached(spec, "q") and 100 in calls and spec.stdout == "7\n"


def test_an_outcome_for_a_shadow_process_is_copied_within_the_loop_budget():
    big = list(range(LOOP_COPY_ITEMS + 1))
    value, error = plain_outcome(Outcome(value=big), 5_000_000)
    assert isinstance(value, Unknown) and error is None
    small = list(range(LOOP_COPY_ITEMS - 1))          # the control: copied whole
    value, _ = plain_outcome(Outcome(value=small), 5_000_000)
    assert value == small and value is not small


def spy_deferred_copies(monkeypatch) -> list:
    """The threads in which the process driver copied names past the loop budget."""
    from spectool.shadow_host.process_driver import ProcessShadowDriver
    return spy(monkeypatch, ProcessShadowDriver, "_copy_deferred",
               lambda self, deferred, names: (thread(), [name for name, _ in deferred]))


@pytest.mark.anyio
async def test_a_large_named_value_is_copied_for_a_shadow_process_off_the_loop(
        anyio_backend, monkeypatch):
    threads = spy_deferred_copies(monkeypatch)
    q, calls = pure_counter()
    xs = list(range(LOOP_COPY_ITEMS * 4))
    spec = await spec_turn([q], {"xs": xs}, "r = q(len(xs))\n", "print(r)\n", "process")
    q2, _ = pure_counter()
    base = await baseline_turn([q2], {"xs": list(xs)}, "r = q(len(xs))\nprint(r)\n")
    same(spec, base)
    assert launched(spec, "q") and spec.stats.hits == 1 and calls == [len(xs)]
    assert [names for _, names in threads] == [["xs"]]
    assert threading.get_ident() not in [t for t, _ in threads]


@pytest.mark.anyio
async def test_negative_control_a_small_named_value_is_copied_on_the_loop(anyio_backend,
                                                                         monkeypatch):
    threads = spy_deferred_copies(monkeypatch)
    q, calls = pure_counter()
    spec = await spec_turn([q], {"xs": list(range(100))}, "r = q(len(xs))\n",
                           "print(r)\n", "process")
    assert launched(spec, "q") and spec.stats.hits == 1 and threads == []


@pytest.mark.anyio
async def test_a_named_value_past_the_thread_budget_is_sent_as_unknown(anyio_backend,
                                                                      monkeypatch):
    from spectool.host_budget import OFFLOOP_COPY_ITEMS
    threads = spy_deferred_copies(monkeypatch)
    q, calls = pure_counter()
    xs = [str(i) for i in range(OFFLOOP_COPY_ITEMS + 1)]
    spec = await spec_turn([q], {"xs": xs}, "r = q(len(xs))\n", "print(r)\n", "process")
    assert launched(spec, "q") == [] and calls == [len(xs)]
    assert [names for _, names in threads] == [["xs"]]      # tried off the loop, declined


def names_sent(frame: bytes) -> dict:
    from spectool.shadow_host import protocol as proto
    _lease, (kind, names) = proto.decode_command(frame[4:])
    assert kind == "names"
    return names


@pytest.mark.anyio
@pytest.mark.parametrize("frozen", [True, False])
async def test_names_not_copied_when_the_real_run_starts_are_sent_as_unknown(
        anyio_backend, frozen):
    from spectool.shadow_host.process_driver import ProcessShadowDriver
    from spectool.trace import Trace
    xs = list(range(LOOP_COPY_ITEMS * 2))
    driver = ProcessShadowDriver({}, None, Trace(), None, {"xs": xs, "n": 3}, None)
    driver.feed_statement("r = len(xs) + n\n")
    if frozen:
        await driver.freeze()            # the real run starts before the shadow copied
    names = names_sent(await driver._names_frame())
    assert names["n"] == 3                            # small: copied at feed time
    if frozen:
        assert isinstance(names["xs"], Unknown)
    else:                                             # the control: copied whole
        assert names["xs"] == xs and names["xs"] is not xs


@pytest.mark.anyio
async def test_the_thread_shadow_copies_a_large_namespace_off_the_loop(anyio_backend,
                                                                      monkeypatch):
    from spectool.shadow_host.snapshot import ThreadSnapshot
    threads = spy(monkeypatch, ThreadSnapshot, "take", thread)
    q, calls = pure_counter()
    xs = list(range(LOOP_COPY_ITEMS * 4))
    spec = await spec_turn([q], {"xs": xs}, "r = q(len(xs))\n", "print(r)\n", "thread")
    loop_thread = threading.get_ident()
    # copied whole (the thread shadow keeps Limits.max_namespace_items) and bet on, in a
    # thread other than the loop's (the control: this test body runs on the loop's)
    assert launched(spec, "q") and spec.stats.hits == 1
    assert threads and loop_thread not in threads


# -- a deterministic tool's result, deep-copied for each real call ----------------------

def spy_deepcopy(monkeypatch, n: int) -> list:
    """The threads that deep-copied a tool result (a list of ``n`` lists)."""
    import copy
    return spy(monkeypatch, copy, "deepcopy", thread,
               when=lambda value, *args: (type(value) is list and len(value) == n
                                          and type(value[0]) is list))


def rows_tool(n: int, **options):
    """A tool ``rows`` (with these ``spectool.tool`` options) that returns ``n`` lists."""
    @spectool.tool(name="rows", **options)
    async def rows() -> list:
        return [[i] for i in range(n)]

    return rows


def deterministic_rows(n: int):
    return rows_tool(n, speculate="pure", deterministic=True)


@pytest.mark.anyio
@pytest.mark.parametrize("n", [LOOP_COPY_ITEMS, 10])
async def test_a_large_deterministic_result_is_copied_off_the_loop(anyio_backend, n,
                                                                  monkeypatch):
    threads = spy_deepcopy(monkeypatch, n)
    source = "a = rows()\nb = rows()\na[0].append(1)\nprint(len(a), len(b), b[0])\n"
    spec = await spectool.Runtime([deterministic_rows(n)], mode="spec",
                                  shadow="thread").run_cell(source)
    base = await baseline_turn([deterministic_rows(n)], {}, source)
    same(spec, base)
    loop_thread = threading.get_ident()
    assert threads                                       # each real call got a copy
    if n > 100:
        assert loop_thread not in threads
    else:                                                # the control: on the loop
        assert set(threads) == {loop_thread}


# -- a result measured against a tool's output cap ----------------------------------------

def spy_output_size(monkeypatch) -> list:
    import spectool.tools as tools_mod
    return spy(monkeypatch, tools_mod, "output_size", thread)


def capped_rows(n: int, cap: int):
    return rows_tool(n, max_output_bytes=cap)


@pytest.mark.anyio
@pytest.mark.parametrize("n", [LOOP_COPY_ITEMS, 10])
async def test_a_large_result_is_measured_against_its_cap_off_the_loop(anyio_backend, n,
                                                                      monkeypatch):
    threads = spy_output_size(monkeypatch)
    res = await spectool.Runtime([capped_rows(n, 10 ** 9)], mode="baseline").run_cell(
        "r = rows()\nprint(len(r))\n")
    assert res.error is None and res.stdout == f"{n}\n"
    if n > 100:
        assert threads and threading.get_ident() not in threads
    else:                                                # the control: on the loop
        assert threads == [threading.get_ident()]


@pytest.mark.anyio
async def test_a_large_result_over_its_cap_fails_the_same_in_spec_and_baseline(
        anyio_backend):
    source = "r = rows()\nprint(len(r))\n"
    cap = 1000
    spec = await spectool.Runtime([capped_rows(LOOP_COPY_ITEMS, cap)], mode="spec",
                                  shadow="thread").run_cell(source)
    base = await baseline_turn([capped_rows(LOOP_COPY_ITEMS, cap)], {}, source)
    assert type(spec.error).__name__ == type(base.error).__name__ == "ToolOutputTooLargeError"
    assert str(spec.error) == str(base.error)
