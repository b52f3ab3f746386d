"""Incremental JSON-completeness tracking for streamed tool-call arguments.

OpenAI-style function calls stream their ``arguments`` as fragments of one JSON
text. ``JsonTracker`` is fed those fragments and says, in O(new characters), the
moment the top-level value has closed: braces and brackets are counted outside
strings only, and string state follows escapes (``\\"``, ``\\\\``, ``\\u....``), so
``{"q": "a } \\" {"}`` is complete only at its last brace. Completeness is a
structural test; ``value()`` then parses the text with ``json.loads`` (a balanced
but malformed text such as ``{"a": tru}`` raises there and is never speculated).

Pure: no I/O imports.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JsonTracker", "IncompleteJson"]

_WHITESPACE = " \t\r\n"


class IncompleteJson(ValueError):
    """``value()`` was asked for before the top-level JSON value closed."""


class JsonTracker:
    """Tracks whether the JSON text fed so far holds one complete top-level value."""

    __slots__ = ("_parts", "_depth", "_in_string", "_escape", "_started", "_closer",
                 "complete", "invalid", "_cached")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._started = False
        self._closer = ""        # "" until the first value character; "}" "]" '"' or "scalar"
        self.complete = False    # the top-level value has closed
        self.invalid = False     # structurally impossible (unbalanced or trailing text)
        self._cached: Any = _UNSET

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, fragment: str) -> bool:
        """Add a fragment; returns ``complete``."""
        if not fragment:
            return self.complete
        self._parts.append(fragment)
        self._cached = _UNSET
        for ch in fragment:
            self._step(ch)
        return self.complete

    def _step(self, ch: str) -> None:
        if self.invalid:
            return
        if self.complete:
            if ch not in _WHITESPACE:
                self.invalid = True
                self.complete = False
            return
        if not self._started:
            if ch in _WHITESPACE:
                return
            self._started = True
            if ch in "{[":
                self._closer = ch
                self._depth = 1
            elif ch == '"':
                self._closer = '"'
                self._in_string = True
            else:
                self._closer = "scalar"  # numbers / literals: complete only at finish()
            return
        if self._closer == "scalar":
            return
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                if self._closer == '"':
                    self.complete = True
            return
        if ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self.complete = True
            elif self._depth < 0:
                self.invalid = True

    def finish(self) -> bool:
        """End of stream: a bare scalar (``42``, ``true``) counts as complete now."""
        if self._closer == "scalar" and not self.invalid:
            self.complete = True
        return self.complete

    @property
    def empty(self) -> bool:
        """Nothing but whitespace so far (OpenAI sends ``""`` for no-argument calls)."""
        return not self._started

    def value(self) -> Any:
        """The parsed value; raises ``IncompleteJson`` or ``json.JSONDecodeError``."""
        if not self.complete:
            raise IncompleteJson(f"JSON not complete yet: {self.text[:80]!r}")
        if self._cached is _UNSET:
            self._cached = json.loads(self.text)
        return self._cached


class _Unset:
    __slots__ = ()


_UNSET: Any = _Unset()
