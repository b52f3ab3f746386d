"""Shared pieces of the host-budget tests: spec and baseline turns, and spies that record
where (in which thread) the host did a piece of work."""

from __future__ import annotations

import threading

import anyio

import spectool


def pure_counter(name: str = "q"):
    calls: list = []

    @spectool.tool(speculate="pure", name=name)
    async def q(x: object) -> int:
        calls.append(x)
        return 7

    return q, calls


async def spec_turn(tools, namespace, first: str, rest: str, shadow: str,
                    second: anyio.Event | None = None):
    """A spec turn: ``first`` (one statement) streams, the stream waits until the shadow
    has run it, then ``rest`` streams. ``second`` is set once the shadow has run a
    second statement. Returns the result; fails at once, instead of waiting out the
    deadline, when no shadow worker takes the turn."""
    ran = anyio.Event()
    unavailable: list = []

    def on_event(event):
        if event.kind == "shadow_statement":
            ran.set()
            if second is not None and event.data.get("n", 0) >= 2:
                second.set()
        elif event.kind == "shadow_unavailable":   # no shadow will run ``first``: go on
            unavailable.append(event)
            ran.set()

    async def stream():
        yield "Here.\n```repl\n" + first
        await ran.wait()
        yield rest + "```\nDone.\n"

    rt = spectool.Runtime(tools, mode="spec", shadow=shadow, namespace=namespace,
                          on_event=on_event)
    with anyio.fail_after(60):
        result = await rt.run(stream())
    assert not unavailable, "no shadow worker took the turn, so it shows nothing of the shadow"
    return result


async def baseline_turn(tools, namespace, source: str):
    rt = spectool.Runtime(tools, mode="baseline", namespace=namespace)
    return await rt.run_cell(source)


def launched(res, tool: str) -> list:
    return [e for e in res.trace.events
            if e.kind in ("launch", "bet") and e.data.get("tool") == tool]


def same(spec, base) -> None:
    strip = lambda ns: {k: v for k, v in ns.items() if not callable(v)}  # noqa: E731
    assert (spec.stdout, type(spec.error), strip(spec.namespace)) == \
        (base.stdout, type(base.error), strip(base.namespace))


def spy(monkeypatch, owner, name: str, record, when=None) -> list:
    """Wrap ``owner.name``: each call (for which ``when`` holds, if given) first appends
    ``record(*args)`` to the returned list, then runs the real one."""
    seen: list = []
    real = getattr(owner, name)

    def wrapper(*args):
        if when is None or when(*args):
            seen.append(record(*args))
        return real(*args)

    monkeypatch.setattr(owner, name, wrapper)
    return seen


def thread(*args) -> int:
    """A ``record`` for ``spy``: the thread the call ran in."""
    return threading.get_ident()

