"""Shared pieces of the effect tests: a ledger of what an idempotent tool did, the
store they run against, and a message that streams on only once the shadow launched."""

from __future__ import annotations

import anyio

import spectool
from rt_helpers import EventGate
from spectool.speculation import Budget, Store
from spectool.trace import Trace, TurnStats


class Ledger:
    """Records what an idempotent tool did: runs started, runs settled, compensations."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.settled: list[str] = []
        self.compensated: list[tuple[str, tuple, dict]] = []
        self.order_ok = True

    def tool(self, name: str = "post", gate: anyio.Event | None = None):
        ledger = self

        def on_unclaimed(key, args, kwargs):
            # after the call settled: its run has returned, raised or been cancelled
            ledger.order_ok &= key in ledger.settled
            ledger.compensated.append((key, args, kwargs))

        @spectool.tool(speculate="idempotent", name=name, on_unclaimed=on_unclaimed)
        async def post(body: str, *, idempotency_key: str) -> str:
            ledger.started.append(idempotency_key)
            try:
                if gate is not None:
                    await gate.wait()
                await anyio.lowlevel.checkpoint()
                return idempotency_key
            finally:
                ledger.settled.append(idempotency_key)

        return post

    def check(self, claimed: set[str]) -> None:
        """No run unless claimed or compensated (exactly once, after settling)."""
        keys = [k for k, _, _ in self.compensated]
        assert len(keys) == len(set(keys)), "a run was compensated twice"
        assert not set(keys) & claimed, "a claimed run was compensated"
        unaccounted = set(self.started) - claimed - set(keys)
        assert not unaccounted, f"ran, neither claimed nor compensated: {unaccounted}"
        assert self.order_ok, "a hook ran before its call settled"


def claimed_keys(namespace: dict) -> set[str]:
    return {v for v in namespace.values() if isinstance(v, str) and ":post:" in v}


async def stream_then(text: str, gate: EventGate, rest: str):
    """Yield ``text``, wait until the shadow launched, then yield ``rest``."""
    for i in range(0, len(text), 9):
        yield text[i:i + 9]
        await anyio.lowlevel.checkpoint()
    await gate.seen.wait()
    yield rest


async def open_store(tools, tg, max_in_flight=16):
    return Store({t.name: t for t in tools}, tg, budget=Budget(max_in_flight, 1 << 20),
                 trace=Trace(), stats=TurnStats(), turn_id="rid:t1")
