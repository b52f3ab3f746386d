"""Values the shadow interpreter passes around, and its protocol with the host.

``Pending`` (a launched speculative call) and ``Unknown`` (a value the shadow could not
know) are opaque: every special method that C code could call on them (comparison,
hashing, truthiness, arithmetic, conversion, iteration, formatting) raises ``Touched``,
a ``BaseException`` that no user-level ``except`` in the shadow ever sees. The
interpreter catches it, resolves the pending values in the operation's arguments (or
gives up with an unknown result) and retries. So a value that is unknown or not yet
back can sit in a list, be appended, counted with ``len`` or moved around freely, and
only an operation that really reads it waits for it (pending) or becomes unknown.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Handle",
    "ShadowHost",
    "WaitFor",
    "Launch",
    "Observe",
    "Lookahead",
    "Event",
    "Outcome",
    "ToolInfo",
    "TailBet",
    "Pending",
    "Unknown",
    "Touched",
    "is_opaque",
]


@runtime_checkable
class Handle(Protocol):
    """Opaque to the shadow: the runtime's store entry for a launched call."""


class ShadowHost(Protocol):
    """What ``ShadowInterpreter.run_statement`` (the host-callback form of the event
    stream, ``spectool.shadow.orchestrate``) calls. Optional, looked up by name:
    ``observe(tool_name, args, kwargs) -> Handle | None`` (answers ``Observe``),
    ``lookahead(bets)`` (takes ``Lookahead`` bets; without it no lookahead) and
    ``lookahead_outcome(tool_name, args, kwargs, occurrence) -> Outcome | None``
    (finished lookahead bets)."""

    def launch(self, tool_name: str, args: tuple, kwargs: dict, *, origin: str) -> Handle | None:
        """Non-blocking. Start (or join) a speculative call; None = declined.
        origin: "statement" | "tail"."""


@dataclass(frozen=True)
class WaitFor:
    """An event of a statement: it reads a call's content; send back the ``Outcome``
    of this handle."""

    handle: Any


@dataclass(frozen=True)
class Launch:
    """An event of a statement: it starts a speculatable call with known arguments;
    send back the call's handle (None: declined, the call is unknown)."""

    tool: str
    args: tuple
    kwargs: dict
    origin: str = "statement"


@dataclass(frozen=True)
class Observe:
    """An event of a statement: it makes a call the shadow may not start; send back a
    handle bound to the real call (None: its result is unknown)."""

    tool: str
    args: tuple
    kwargs: dict


@dataclass(frozen=True)
class Lookahead:
    """An event of a statement about to wait inside a loop: bets on the calls of
    later iterations (``spectool.shadow.lookahead``); send back None."""

    bets: tuple["TailBet", ...]


# what a statement's event stream yields (``spectool.shadow.orchestrate``)
Event = WaitFor | Launch | Observe | Lookahead


@dataclass(frozen=True)
class Outcome:
    """What a finished call produced: the answer to a ``WaitFor`` (the speculation
    store's entries give the same)."""

    value: object = None
    error: BaseException | None = None


@dataclass(frozen=True)
class ToolInfo:
    """What the shadow needs to know about one tool (built by the runtime from ``Tool``).

    ``batched_of``: this tool takes a list as its first argument and is equivalent to
    calling the named tool once per element (``llm_query_batched`` -> ``"llm_query"``);
    the shadow then launches one call of that tool per element and the result is a
    list of pending values.
    """

    name: str
    speculate: Literal["pure", "idempotent", "two_phase", "never"] = "never"
    signature: inspect.Signature | None = None
    batched_of: str | None = None

    @property
    def speculatable(self) -> bool:
        return self.speculate in ("pure", "idempotent", "two_phase")


@dataclass(frozen=True)
class TailBet:
    """A call the shadow expects in the open tail: launch it with origin="tail".

    ``occurrence`` counts identical calls (same tool, same canonical key) launched or
    bet earlier in this cell, starting at 0. ``key`` is ``spectool.keys.call_key``.
    """

    tool: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    occurrence: int = 0
    key: str = ""


class Touched(BaseException):
    """Raised when C code reads an opaque value (internal to the shadow)."""

    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value


def _touch(self, *args, **kwargs):
    raise Touched(self)


class _Opaque:
    __slots__ = ()
    __hash__ = _touch  # type: ignore[assignment]


for _name in (
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __bool__ __len__ __iter__ __reversed__ "
    "__contains__ __getitem__ __setitem__ __delitem__ __str__ __repr__ __format__ "
    "__bytes__ __int__ __float__ __complex__ __index__ __round__ __trunc__ __floor__ "
    "__ceil__ __neg__ __pos__ __abs__ __invert__ __fspath__ __call__ __enter__ __exit__ "
    "__length_hint__ __next__ "
    "__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ "
    "__matmul__ __rmatmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__ "
    "__mod__ __rmod__ __divmod__ __rdivmod__ __pow__ __rpow__ __lshift__ __rlshift__ "
    "__rshift__ __rrshift__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__"
).split():
    setattr(_Opaque, _name, _touch)


class Pending(_Opaque):
    """The result of a launched speculative call, not read yet."""

    __slots__ = ("handle", "tool")

    def __init__(self, handle: object, tool: str) -> None:
        object.__setattr__(self, "handle", handle)
        object.__setattr__(self, "tool", tool)


class Unknown(_Opaque):
    """A value the shadow cannot know. Each unknown is distinct (no false equality).

    ``plain``: the value is known to be plain data (a list whose contents the shadow
    lost track of, say), so calling one of its methods runs no user code; an unknown
    that may be any object (a user object from the namespace, the result of an unknown
    call) is not plain. ``foreign``: it is (or holds) an object from the caller's
    namespace that is not plain data, whose methods run user code."""

    __slots__ = ("reason", "plain", "foreign")

    def __init__(self, reason: str = "", plain: bool = False, foreign: bool = False) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "plain", plain)
        object.__setattr__(self, "foreign", foreign)


def is_opaque(value: object) -> bool:
    return isinstance(value, _Opaque)
