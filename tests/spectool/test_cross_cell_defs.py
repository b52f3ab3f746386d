"""Functions defined in an earlier cell are speculated in later cells: the runtime
replays their ``def`` into the next turns' shadow while the name still holds the
function the real run made."""

from __future__ import annotations

import anyio
import pytest

import spectool
import spectool.runtime
from rt_helpers import GatedStream

DEF = "```repl\ndef f(a):\n    return q('p:' + a)\n```\n"
USE = "```repl\nout = [f(a) for a in ['x', 'y']]\n"


def make(log):
    @spectool.tool(speculate="pure")
    async def q(x: str) -> str:
        log.append(x)
        return x.upper()
    return q


@pytest.mark.anyio
async def test_a_helper_from_an_earlier_cell_is_speculated(anyio_backend):
    log: list[str] = []
    launched = anyio.Event()

    def on_event(ev):
        if ev.kind in ("launch", "bet") and ev.data.get("tool") == "q":
            launched.set()

    async with spectool.Runtime([make(log)], mode="spec", on_event=on_event) as rt:
        await rt.run([DEF])
        with anyio.fail_after(20):   # the cell cannot end before the shadow launched q
            res = await rt.run(GatedStream(USE, launched, "print(out)\n```\n"))
    assert res.stdout == "['P:X', 'P:Y']\n"
    assert res.stats.hits >= 1 and res.stats.executions == len(log) == 2


@pytest.mark.anyio
async def test_a_rebound_name_is_not_replayed(anyio_backend):
    log: list[str] = []
    async with spectool.Runtime([make(log)], mode="spec") as rt:
        await rt.run([DEF])
        await rt.run(["```repl\nf = lambda a: q('other:' + a)\n```\n"])
        res = await rt.run([USE + "print(out)\n```\n"])
    assert res.stdout == "['OTHER:X', 'OTHER:Y']\n"
    assert not any(e.data.get("tool") == "q" for e in res.trace.of("launch") + res.trace.of("bet"))
    assert rt._defs == {}


@pytest.mark.anyio
async def test_negative_control_without_replay_nothing_is_launched(anyio_backend, monkeypatch):
    monkeypatch.setattr(spectool.runtime._Turn, "_remember_defs", lambda self, results: None)
    log: list[str] = []
    async with spectool.Runtime([make(log)], mode="spec") as rt:
        await rt.run([DEF])
        res = await rt.run([USE + "print(out)\n```\n"])
    assert res.stdout == "['P:X', 'P:Y']\n"
    assert res.stats.dispatched == 0 and res.stats.hits == 0
