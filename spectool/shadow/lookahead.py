"""Lookahead while blocked: bets on later loop iterations while one waits.

Statement mode runs a loop iteration by iteration; when iteration i reads the content
of a pending call it waits (``WaitFor``), and the independent calls of iterations
i+1.. would only be launched once it gets there: the calls run one after another.

Before such a wait, the interpreter peeks over the rest of the current iteration (the
loop-body statements after the one that waits, which is tainted first: what it writes
is not known yet) and then the *remaining* iterations of every enclosing module-level
``for`` loop (innermost first) in the tail module's peek mode. Running the rest of the
iteration first is what keeps the view fresh: a name the body re-binds after the call
(``prompt = ...`` for the next iteration, ``note = out[:6]``) holds the next
iteration's value, or is unknown, never the current iteration's stale one. The peek runs
over a copy-on-write view of the globals, waiting for nothing (a pending value reads as
unknown), launching nothing and mutating no shared state. Each tool call with known
arguments becomes a ``TailBet``. :func:`before_wait` and :func:`refresh` return the
bets; ``spectool.shadow.orchestrate`` yields them as a ``Lookahead`` event just before
the statement's ``WaitFor``, and the runtime launches them like tail bets (pure tools
only); statement mode adopts them when it reaches the same calls; those never adopted
are withdrawn at the end of the statement. Loops are tracked only by an interpreter
made with ``loops=True``.

A call of a later iteration whose bet has already *finished* reads as its result in
the peek when the caller passes ``ask(tool, args, kwargs, occurrence) -> Outcome |
None`` (the store's ``lookahead_outcome``; the peek gets a copy of the plain value, as
a statement-mode wait would), so a chain inside one iteration (``r = f(x)``; ``g(r)``)
can be bet on link by link: the driver calls :func:`refresh` whenever a speculation
finishes while the shadow is blocked.

Only loops over a sequence the shadow holds (list, tuple, range, str, dict keys) are
looked ahead: their remaining items are read by index without touching the loop's
iterator. Each loop iteration is looked ahead once before its first wait (and again on
refresh); iterations per lookahead are bounded by ``Limits.max_tail_iterations``, each
lookahead by the tail's step and time budget, and all lookaheads of one interpreter by
``LOOKAHEAD_MAX_SECONDS`` of CPU time (counted neither against the statement nor the
cell: lookahead never makes the shadow give up earlier).
"""

from __future__ import annotations

import ast
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .internals import (
    LoopFrame, _Break, _Continue, _PeekDone, _Return, _Uncertain, _UnknownValue, _UserError,
    _WouldWait,
)
from .limits import LimitExceeded, ShadowDeclined
from . import analysis
from .copying import PlainCopier
from .scope import Scope
from .tail import PEEK_MAX_SECONDS, PEEK_MAX_STEPS
from .values import TailBet, Touched, Unknown
from .peeking import peeking

if TYPE_CHECKING:
    from .interpreter import CoreInterpreter

__all__ = ["before_wait", "refresh", "active", "Ask"]

# the driver's view of finished bets: (tool, args, kwargs, occurrence) -> Outcome | None
Ask = Callable[[str, tuple, dict, int], object]

LOOKAHEAD_MAX_SECONDS = 2.0

_SEQUENCES = (list, tuple, range, str)
_STOP = (_UserError, _Uncertain, _PeekDone, _Return, _UnknownValue, _WouldWait,
         ShadowDeclined, LimitExceeded, Touched, RecursionError, MemoryError)


def _frames(interp: "CoreInterpreter") -> list[LoopFrame]:
    if interp._peeks.lookahead_seconds > LOOKAHEAD_MAX_SECONDS or interp._peek:
        return []
    return [f for f in interp._loop_frames
            if type(f.iterable) in _SEQUENCES or type(f.iterable) is dict]


def active(interp: "CoreInterpreter") -> bool:
    """Would :func:`refresh` look ahead now (the shadow is blocked inside a loop)?"""
    return bool(_frames(interp))


def before_wait(interp: "CoreInterpreter", ask: Ask | None = None) -> list[TailBet]:
    """Bets to place just before statement mode waits (it is suspended at its
    ``WaitFor``, so the time spent here is not the statement's)."""
    frames = _frames(interp)
    known = len(interp._outcomes)
    if not frames or frames[-1].looked == (frames[-1].consumed, frames[-1].position, known):
        return []
    for frame in frames:
        frame.looked = (frame.consumed, frame.position, known)
    return _look(interp, frames, ask)


def refresh(interp: "CoreInterpreter", ask: Ask | None = None) -> list[TailBet]:
    """Look ahead again while blocked (a speculation has finished since the last
    time). Only while the statement is suspended at its ``WaitFor``."""
    frames = _frames(interp)
    return _look(interp, frames, ask) if frames else []


def _look(interp: "CoreInterpreter", frames: list[LoopFrame], ask: Ask | None) -> list[TailBet]:
    t0 = time.thread_time()
    try:
        return _peek(interp, frames, ask)
    finally:
        interp._peeks.lookahead_seconds += time.thread_time() - t0


def _known_result(interp: "CoreInterpreter", ask: Ask | None):
    """The peek's view of finished bets: a copy of the plain value, or None."""
    if not callable(ask):
        return None
    copier = PlainCopier(interp._limits.max_namespace_items)

    def known(name: str, args: tuple, kwargs: dict, occurrence: int):
        try:
            outcome = ask(name, args, kwargs, occurrence)
            if outcome is None or getattr(outcome, "error", None) is not None:
                return None
            value = copier.copy(outcome.value)
        except Exception:  # LimitExceeded included: not known
            return None
        return None if value is None or isinstance(value, Unknown) else value

    return known


def _remaining(iterable: object, consumed: int, limit: int) -> list:
    if type(iterable) is dict:
        return list(itertools.islice(iter(iterable), consumed, consumed + limit))
    return list(iterable[consumed:consumed + limit])  # type: ignore[index]


def _peek(interp: "CoreInterpreter", frames: list[LoopFrame], ask: Ask | None) -> list[TailBet]:
    limit = interp._limits.max_tail_iterations
    with peeking(interp, PEEK_MAX_STEPS, PEEK_MAX_SECONDS, handling=list(interp._handling),
                 known=_known_result(interp, ask)) as bets:
        for frame in reversed(frames):  # innermost first: its iterations come soonest
            try:
                items = _remaining(frame.iterable, frame.consumed, limit)
            except Exception:
                continue
            if not _run_rest(interp, frame):
                break
            if not _run_iterations(interp, frame.node, items, limit):
                break
    return bets


def _run_rest(interp: "CoreInterpreter", frame: LoopFrame) -> bool:
    """Peek over the rest of the current iteration: the statement that waits (or holds
    the inner loop that waits) is tainted, then the body statements after it run.
    False when control after it is unknown (later iterations get no bets)."""
    body = frame.node.body
    current = body[frame.position:frame.position + 1]
    if not current or analysis.escapes(current):
        return False     # it may break, continue or raise: what follows is unknown
    scope = interp._module
    try:
        interp._taint_nodes(current, scope)
        gen = interp._exec_block(body[frame.position + 1:], scope)
        next(gen)
        gen.close()      # peek mode never waits; stop if it ever tried
        return False
    except StopIteration:
        return True
    except _Continue:
        return True
    except (_Break, _PeekDone, LimitExceeded, RecursionError, MemoryError):
        return False
    except _STOP:
        return False


def _run_iterations(interp: "CoreInterpreter", node: ast.For, items: list, limit: int) -> bool:
    """Peek over the given iterations of one loop; False once the budget is spent."""
    scope = interp._module
    for item in items:
        interp._peeks.iterations += 1
        if interp._peeks.iterations > limit:
            return False
        gen = _iteration(interp, node, item, scope)
        try:
            next(gen)
            gen.close()  # peek mode never waits; stop if it ever tried
            return False
        except StopIteration:
            pass
        except _Continue:
            pass
        except _Break:
            return True
        except (_PeekDone, LimitExceeded, RecursionError, MemoryError):
            return False
        except _STOP:
            return True  # control after this iteration is unknown: no later bets
    return True


def _iteration(interp: "CoreInterpreter", node: ast.For, item: object, scope: Scope):
    target = node.target
    if type(target) is ast.Name:
        interp._store(target.id, item, scope)
    else:
        yield from interp._assign(target, item, scope)
    yield from interp._exec_block(node.body, scope)
