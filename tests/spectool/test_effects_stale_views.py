"""Stale views that could reach the real run: the namespace snapshot the shadow reads is
private and taken at turn start, off the event loop; a real run ahead of the shadow, or
a shadow held back behind it, never leaves a bet on a view the real run did not see;
a dict built from a set never reuses a result computed in a different key order.

Each guard has a negative control that switches it off and shows the check fails.
Ordering uses anyio Events and the trace listener; nothing sleeps.
"""

from __future__ import annotations

import anyio
import pytest

import spectool
from effects_helpers import Ledger, claimed_keys, stream_then
from rt_helpers import EventGate, chunks, fenced


def test_namespace_snapshot_is_private_and_taken_at_turn_start():
    from spectool.runtime import _snapshot
    shared = [1]
    variables = {"a": shared, "b": shared, "t": (shared, "x")}
    snap = _snapshot(variables)
    snap.take()                                        # the runtime: in a worker thread
    shared.append(2)                                   # the real run changes it later
    assert snap["a"] == [1] and snap["a"] is snap["b"] and snap["t"][0] is snap["a"]


def test_a_snapshot_cut_short_reads_as_unknown_never_half_copied():
    from spectool.runtime import _snapshot
    from spectool.shadow import Unknown
    variables = {"a": [1, 2, 3], "big": list(range(100_000)), "b": [4]}
    snap = _snapshot(variables)
    snap.stop()                                        # the real run starts at once
    snap.take()
    assert all(type(snap[name]) is Unknown for name in variables)


@pytest.mark.anyio
async def test_the_namespace_is_copied_off_the_event_loop(anyio_backend, monkeypatch):
    monkeypatch.setenv("SPECTOOL_SHADOW", "thread")   # the patches act on this process
    import threading

    import spectool.shadow.copying as copying
    threads = []
    original = copying.snapshot

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(copying, "snapshot", spy)
    loop_thread = threading.get_ident()
    rt = spectool.Runtime([], mode="spec", namespace={"xs": list(range(1000))})
    res = await rt.run_cell("y = len(xs)\n")
    assert res.namespace["y"] == 1000 and threads and loop_thread not in threads


def test_negative_control_a_shallow_snapshot_shows_later_changes():
    shared = [1]
    shallow = dict({"a": shared})                      # the old _snapshot
    shared.append(2)
    assert shallow["a"] != [1]


STALE_CELL = "xs.append(2)\nsync()\nhold()\nr = post(str(xs))\n"


async def run_real_ahead(mode: str, ledger: Ledger, released=None) -> spectool.TurnResult:
    post = ledger.tool()
    gate = EventGate("shadow_statement", 4)

    @spectool.tool
    def sync() -> int:                                 # a never tool: the real run is here
        if released is not None:
            released.set()
        return 0

    @spectool.tool(speculate="pure")
    async def hold() -> int:                           # the real run waits for the shadow
        with anyio.move_on_after(10):
            await gate.seen.wait()
        return 0

    rt = spectool.Runtime([post, sync, hold], mode=mode, namespace={"xs": [1]},
                          on_event=gate)
    return await rt.run(chunks(fenced(STALE_CELL)))


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_real_run_ahead_of_the_shadow_never_leaves_a_stale_bet(anyio_backend, mode):
    """However far the real run is ahead when the shadow first reads ``xs``, the shadow
    sees the turn-start value and launches only the call the real run makes."""
    ledger = Ledger()
    res = await run_real_ahead(mode, ledger)
    assert res.error is None and res.namespace["xs"] == [1, 2]
    assert ledger.compensated == []                    # no bet on [1, 2, 2]
    ledger.check(claimed_keys(res.namespace))


def hold_back_shadow(monkeypatch):
    """The lazy shadow starts only once the real run reached ``sync()`` (after it
    appended to ``xs``)."""
    import threading

    import spectool.shadow.interpreter as interpreter
    released = threading.Event()
    original_init = interpreter.CoreInterpreter.__init__

    def held_back(self, *args, **kwargs):
        released.wait(10)                              # in the shadow's worker thread
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(interpreter.CoreInterpreter, "__init__", held_back)
    return released


@pytest.mark.anyio
async def test_shadow_held_back_behind_the_real_run_still_sees_turn_start(anyio_backend,
                                                                        monkeypatch):
    ledger = Ledger()
    res = await run_real_ahead("lazy", ledger, hold_back_shadow(monkeypatch))
    assert res.error is None and res.namespace["xs"] == [1, 2]
    assert ledger.compensated == []                    # no bet on [1, 2, 2]
    ledger.check(claimed_keys(res.namespace))


@pytest.mark.anyio
async def test_negative_control_a_late_lazy_copy_bets_on_a_stale_view(anyio_backend,
                                                                      monkeypatch):
    """The old behaviour (no copy at turn start: the shadow copies live objects when it
    first reads them), with the lazy shadow held back until the real run appended."""
    monkeypatch.setenv("SPECTOOL_SHADOW", "thread")   # the patches act on this process
    import spectool.shadow.copying as copying
    monkeypatch.setattr(copying, "snapshot", lambda variables, max_items, stop=None:
                        dict(variables))
    ledger = Ledger()
    res = await run_real_ahead("lazy", ledger, hold_back_shadow(monkeypatch))
    assert res.namespace["xs"] == [1, 2]
    assert [args for _, args, _ in ledger.compensated] == [("[1, 2, 2]",)]


def reordered_set() -> set:
    """A set whose copy iterates in another order than itself (insertion history; a
    set of str would differ across processes with another hash seed)."""
    s = set(range(50))
    for i in range(46):
        s.discard(i)
    assert list(set(list(s))) != list(s)
    return s


async def keys_of_dict_from_set(mode: str) -> list:
    @spectool.tool(speculate="pure")
    async def keys_of(d: dict) -> list:
        return list(d)

    gate = EventGate("shadow_statement", 2)
    rt = spectool.Runtime([keys_of], mode=mode, namespace={"s": reordered_set()},
                          on_event=gate)
    head = "```repl\nd = {str(k): k for k in s}\nr = keys_of(d)\n"
    stream = stream_then(head, gate, "```\n") if mode == "spec" else chunks(head + "```\n")
    return (await rt.run(stream)).namespace["r"]


@pytest.mark.anyio
async def test_dict_built_from_a_set_never_reuses_a_differently_ordered_result(anyio_backend):
    """spec equals baseline when a dict is built from a set whose shadow copy iterates
    in another order."""
    assert await keys_of_dict_from_set("spec") == await keys_of_dict_from_set("baseline")


@pytest.mark.anyio
async def test_negative_control_sorted_dict_keys_and_free_set_order(anyio_backend,
                                                                   monkeypatch):
    monkeypatch.setenv("SPECTOOL_SHADOW", "thread")   # the patches act on this process
    import spectool.keys as keys
    import spectool.shadow.calls as calls
    import spectool.shadow.expressions as expressions
    monkeypatch.setattr(expressions, "is_unordered", lambda v: False)
    monkeypatch.setattr(calls, "_guard_raw", lambda *a, **k: None)
    tree = keys._tree

    def sorted_tree(value, depth, *budget):
        out = tree(value, depth, *budget)
        return ["d", *sorted(out[1:], key=lambda kv: kv[0])] if type(value) is dict else out

    monkeypatch.setattr(keys, "_tree", sorted_tree)
    assert await keys_of_dict_from_set("spec") != await keys_of_dict_from_set("baseline")
