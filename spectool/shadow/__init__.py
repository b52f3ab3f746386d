"""The shadow interpreter: restricted evaluation of a streaming cell (pure, no I/O).

``interpreter.CoreInterpreter`` evaluates statements as a stream of events
(``Launch``, ``Observe``, ``WaitFor``); ``tail`` (peeking at the open tail) and
``lookahead`` (bets on later loop iterations) build on it and return bets;
``orchestrate.ShadowInterpreter`` composes them (``Lookahead`` events) for the
drivers in ``spectool.shadow_host``.
"""

from .builtins import ModuleProxy, SafeFunc
from .interpreter import CoreInterpreter, StatementRecord
from .limits import LimitExceeded, Limits, ShadowDeclined
from .orchestrate import ShadowInterpreter, until_wait
from .values import (
    Event, Handle, Launch, Lookahead, Observe, Outcome, Pending, ShadowHost, TailBet, ToolInfo,
    Unknown, WaitFor, is_opaque,
)

__all__ = [
    "ShadowInterpreter",
    "CoreInterpreter",
    "StatementRecord",
    "ShadowHost",
    "Handle",
    "Event",
    "Launch",
    "Observe",
    "Lookahead",
    "WaitFor",
    "until_wait",
    "Outcome",
    "ToolInfo",
    "TailBet",
    "Pending",
    "Unknown",
    "is_opaque",
    "Limits",
    "ShadowDeclined",
    "LimitExceeded",
    "SafeFunc",
    "ModuleProxy",
]
