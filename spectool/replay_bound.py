"""The lower bound of one replayed turn: no schedule of its calls can beat it.

Lower bound (per turn): ``max(T_stream, max_c (t_site(c) + L_c))``: ``T_stream`` is
the nominal time to stream the turn's text; ``t_site`` is when the first mention of a
sub-call tool's name (or of a function an earlier turn defined or aliased) had
streamed; ``L_c`` is the call's latency. Every call starts at the earliest moment any
runtime could know it, ignoring dependencies; no mode can beat it.

Text streams in chunks of ``CHARS_PER_TOKEN`` characters, chunk k at ``k / rate``
log seconds.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from .replay_log import BATCHED

__all__ = ["CHARS_PER_TOKEN", "SUB_CALLS", "n_chunks", "stream_time", "turn_bound"]

CHARS_PER_TOKEN = 4
SUB_CALLS = ("llm_query",) + BATCHED


def n_chunks(text: str) -> int:
    """How many chunks ``text`` streams in."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def stream_time(text: str, rate: float) -> float:
    """Log seconds until the last chunk of ``text`` is sent (chunk k at k / rate)."""
    return (n_chunks(text) - 1) / rate


_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)|^[ \t]*(\w+)[ \t]*=[ \t]*"
                      r"(?:lambda\b|[A-Za-z_]\w*[ \t]*$)", re.M)


def _earlier_names(texts: Sequence[str]) -> set[str]:
    """Functions earlier turns defined or aliased: calling one may call a tool."""
    names: set[str] = set()
    for text in texts:
        for m in _DEFINED.finditer(text):
            names.add(m.group(1) or m.group(2))
    return names


def _site_time(text: str, names: Sequence[str], rate: float) -> float:
    """Log seconds until the first mention of one of ``names`` had streamed (0 if none:
    the call may come from anywhere)."""
    best = None
    for name in names:
        m = re.search(rf"\b{re.escape(name)}\b", text)
        if m and (best is None or m.end() < best):
            best = m.end()
    return 0.0 if best is None else ((best - 1) // CHARS_PER_TOKEN) / rate


def turn_bound(text: str, rate: float, calls: Sequence[tuple[str, float]],
               earlier: Sequence[str] = ()) -> float:
    """The turn's lower bound (module docstring) for ``calls`` = [(tool, latency)]."""
    helpers = sorted(_earlier_names(earlier))
    bound = stream_time(text, rate)
    for name, latency in calls:
        names = (SUB_CALLS if name in SUB_CALLS else (name,)) + tuple(helpers)
        bound = max(bound, _site_time(text, names, rate) + latency)
    return bound

