"""Settling the effects of speculative runs of idempotent and two_phase tools.

A ``pure`` speculation that the real run never claims is simply dropped. An
``idempotent`` or ``two_phase`` one has run (or was cancelled while running), so the
runtime must tell the tool. The rule (pinned in docs/INTERFACES.md):

* every speculative run of such a tool that started is *settled* exactly once, after
  the call itself has returned, raised or been cancelled;
* claimed by the real run: nothing more for ``idempotent`` (the real call received the
  result under the same key); for ``two_phase`` the real call commits it (the store's
  claim path, not this module);
* not claimed by the time the turn closes (or the turn is cancelled first):
  ``idempotent`` -> ``on_unclaimed(key, args, kwargs)``; ``two_phase`` ->
  ``abort(key, prepared)`` with ``prepared`` the value ``prepare`` returned, or None if
  it raised or was cancelled;
* a speculation that never started (still waiting for budget when it was taken over
  or cancelled) ran nothing and is not compensated.

The hook runs shielded from cancellation (the turn may be ending because its caller
cancelled it) and bounded by ``HOOK_TIMEOUT_S`` (or the tool's own timeout, if
longer), so a hanging hook cannot hang the turn; an error or a timeout of the hook is
recorded in the trace and never fails the turn.
"""

from __future__ import annotations

from typing import Any

import anyio

__all__ = ["settle", "HOOK_TIMEOUT_S", "decide"]

HOOK_TIMEOUT_S = 30.0


def decide(entry: Any) -> None:
    """The real run claimed the entry, or the turn closed without claiming it: the
    speculation task may now settle it (idempotent: once ``entry.claimed`` is final)."""
    event = entry.decided
    if event is not None and not event.is_set():
        event.set()


async def settle(entry: Any, trace: Any) -> None:
    """Wait until the entry is claimed or the turn has closed, then compensate an
    unclaimed run (see the module docstring). Called by the speculation task after the
    call settled, only when the tool function was invoked."""
    try:
        await entry.decided.wait()
    except anyio.get_cancelled_exc_class():
        if not entry.claimed:       # the turn is being cancelled: still compensate
            await _compensate(entry, trace)
        raise
    if not entry.claimed:
        await _compensate(entry, trace)


async def _compensate(entry: Any, trace: Any) -> None:
    if entry.compensated:
        return
    entry.compensated = True
    tool = entry.tool
    bound = max(HOOK_TIMEOUT_S, tool.timeout or 0.0)
    kind = "abort" if tool.speculate == "two_phase" else "on_unclaimed"
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(bound) as scope:
            try:
                if tool.speculate == "two_phase":
                    prepared = entry.value if entry.finished and entry.error is None \
                        and entry.ran_to_end else None
                    await tool.abort_prepared(entry.idempotency_key, prepared)
                else:
                    await tool.compensate(entry.idempotency_key, entry.args, entry.kwargs)
            except Exception as exc:  # a failing hook must not fail the turn
                trace.add("compensation_error", tool=tool.name, hook=kind, error=repr(exc))
                return
        if scope.cancelled_caught:
            trace.add("compensation_timeout", tool=tool.name, hook=kind, seconds=bound)
            return
    trace.add("compensated", tool=tool.name, hook=kind, occurrence=entry.occurrence)
