"""The shadow interpreter: restricted evaluation of a streaming cell (pure, no I/O)."""

from .builtins import ModuleProxy, SafeFunc
from .interpreter import ShadowInterpreter, StatementRecord
from .limits import LimitExceeded, Limits, ShadowDeclined
from .values import (
    Handle, Outcome, Pending, ShadowHost, TailBet, ToolInfo, Unknown, WaitFor, is_opaque,
)

__all__ = [
    "ShadowInterpreter",
    "StatementRecord",
    "ShadowHost",
    "Handle",
    "WaitFor",
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
