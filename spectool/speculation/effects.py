"""Settling the effects of speculative runs of idempotent and two_phase tools.

A ``pure`` speculation that the real run never claims is simply dropped. An
``idempotent`` or ``two_phase`` one has run (or was cancelled while running), so the
runtime must tell the tool. The rule (pinned in docs/INTERFACES.md):

* every speculative run of such a tool that started is *settled* exactly once, after
  the call itself has returned, raised or been cancelled;
* claimed by the real run: nothing more for ``idempotent`` (the real call received the
  result under the same key); for ``two_phase`` the real call commits it (the store's
  claim path, not this module) once it has the prepared value; a real call cancelled
  before that (the turn was cancelled while it waited for ``prepare``) counts as
  unclaimed: the prepare is aborted;
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

from typing import Awaitable, Callable

import anyio

from ..tools import Tool
from ..trace import Trace
from .live import LiveEntry

__all__ = ["settle", "HOOK_TIMEOUT_S", "decide", "settled_by_real_run", "abort_cancelled"]

HOOK_TIMEOUT_S = 30.0


def decide(entry: LiveEntry, closing: bool = False) -> None:
    """The real run claimed the entry, or the turn closed (``closing``) without
    claiming it: the speculation task may now settle it. A two_phase entry is decided
    only once the real call has its prepared value (``settled_by_real_run``) or at
    turn end."""
    event = entry.decided
    if event is None or event.is_set():
        return
    if entry.tool.speculate == "two_phase" and not (closing or entry.committed):
        return
    event.set()


def settled_by_real_run(entry: LiveEntry) -> None:
    """two_phase: the real call received the prepared value (it commits it next) or
    the error ``prepare`` raised: nothing is left to abort."""
    entry.committed = True
    decide(entry)


def _unclaimed(entry: LiveEntry) -> bool:
    if entry.tool.speculate == "two_phase":
        return not entry.committed
    return not entry.claimed


async def settle(entry: LiveEntry, trace: Trace) -> None:
    """Wait until the entry is claimed or the turn has closed, then compensate an
    unclaimed run (see the module docstring). Called by the speculation task after the
    call settled, only when the tool function was invoked."""
    try:
        await entry.decided.wait()
    except anyio.get_cancelled_exc_class():
        if _unclaimed(entry):       # the turn is being cancelled: still compensate
            await _compensate(entry, trace)
        raise
    if _unclaimed(entry):
        await _compensate(entry, trace)


async def abort_cancelled(tool: Tool, key: str | list[str] | None, trace: Trace) -> None:
    """two_phase, a real (not speculative) call cancelled before it could commit (the
    turn was cancelled while ``prepare`` ran): ``abort(key, None)``, shielded."""
    await _run_hook(tool, trace, "abort", tool.abort_prepared, key, None)


async def _compensate(entry: LiveEntry, trace: Trace) -> None:
    if entry.compensated:
        return
    entry.compensated = True
    tool = entry.tool
    if tool.speculate == "two_phase":
        prepared = entry.value if entry.finished and entry.error is None \
            and entry.ran_to_end else None
        await _run_hook(tool, trace, "abort", tool.abort_prepared, entry.idempotency_key,
                        prepared, occurrence=entry.occurrence)
    else:
        await _run_hook(tool, trace, "on_unclaimed", tool.compensate, entry.idempotency_key,
                        entry.args, entry.kwargs, occurrence=entry.occurrence)


async def _run_hook(tool: Tool, trace: Trace, kind: str,
                    hook: Callable[..., Awaitable[object]], *args: object,
                    occurrence: int = -1) -> None:
    """Run a compensation hook shielded and bounded; trace what happened."""
    bound = max(HOOK_TIMEOUT_S, tool.timeout or 0.0)
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(bound) as scope:
            try:
                await hook(*args)
            except Exception as exc:  # a failing hook must not fail the turn
                trace.add("compensation_error", tool=tool.name, hook=kind, error=repr(exc))
                return
        if scope.cancelled_caught:
            trace.add("compensation_timeout", tool=tool.name, hook=kind, seconds=bound)
            return
    trace.add("compensated", tool=tool.name, hook=kind, occurrence=occurrence)
