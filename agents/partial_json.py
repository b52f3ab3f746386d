"""Incremental JSON-completeness tracking for streamed tool-call arguments.

OpenAI-style function calls stream their ``arguments`` as fragments of one JSON
text. ``JsonTracker`` is fed those fragments and says the moment the top-level value
has closed. The parsing is pydantic-core's (``pydantic_core.from_json``, Rust),
not hand-written: a top-level object / array / string can only close on a fragment
that contains its closing character (``}`` / ``]`` / ``"``), so the text is parsed
only then; "EOF while parsing" means still open, any other parse error means the
text can never become valid (``invalid``). Bare scalars (``42``, ``true``) are
complete only at ``finish()`` (``123`` may follow ``12``). The parsed value is kept,
so ``value()`` costs nothing after completion.

Measured against the hand-written character scanner it replaced, both timed in one
process, interleaved (``.venv/bin/python -m spectool_bench.partial_json_bench``;
shared 2-core machine, load ~6): 3.3 vs 24.2 us per message for a typical
115-character argument object in 4-character fragments (7x faster); 9.5 vs 2.8 ms
for a 21 KB object in 16-character fragments (3x slower: it re-parses on every
closing brace), a few ms for a message that takes seconds to stream. Arguments are
usually small, so this is the faster choice.

Pure: no I/O imports.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

__all__ = ["JsonTracker", "IncompleteJson"]

_WHITESPACE = " \t\r\n"
_CLOSER = {"{": "}", "[": "]", '"': '"'}   # top-level kind -> the character it closes on


class IncompleteJson(ValueError):
    """``value()`` was asked for before the top-level JSON value closed."""


class JsonTracker:
    """Tracks whether the JSON text fed so far holds one complete top-level value."""

    __slots__ = ("_parts", "_closer", "_scalar", "complete", "invalid", "_value", "_error")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._closer: str | None = None   # set by the first non-whitespace character
        self._scalar = False              # the top-level value is a number / literal
        self.complete = False             # the top-level value has closed (and parses)
        self.invalid = False              # can never parse (malformed or trailing text)
        self._value: Any = None
        self._error: ValueError | None = None

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, fragment: str) -> bool:
        """Add a fragment; returns ``complete``."""
        if not fragment:
            return self.complete
        self._parts.append(fragment)
        if self.invalid:
            return False
        if self.complete:
            if fragment.strip(_WHITESPACE):
                self.complete = False
                self._fail(ValueError("text after the complete JSON value"))
            return self.complete
        if self._closer is None and not self._scalar:
            head = fragment.lstrip(_WHITESPACE)
            if not head:
                return False
            self._closer = _CLOSER.get(head[0])
            self._scalar = self._closer is None
        if self._closer is not None and self._closer in fragment:
            self._parse(final=False)
        return self.complete

    def _parse(self, *, final: bool) -> None:
        try:
            self._value = from_json(self.text)
        except ValueError as exc:
            if final or "EOF while parsing" not in str(exc):
                self._fail(exc)
            return
        self.complete = True

    def _fail(self, error: ValueError) -> None:
        self.invalid, self._error = True, error

    def finish(self) -> bool:
        """End of stream: a bare scalar (``42``, ``true``) is parsed (complete) now."""
        if self._scalar and not self.complete and not self.invalid:
            self._parse(final=True)
        return self.complete

    @property
    def empty(self) -> bool:
        """Nothing but whitespace so far (OpenAI sends ``""`` for no-argument calls)."""
        return self._closer is None and not self._scalar

    def value(self) -> Any:
        """The parsed value; raises ``IncompleteJson``, or ``ValueError`` if malformed."""
        if self.invalid:
            raise ValueError(f"invalid JSON {self.text[:80]!r}: {self._error}")
        if not self.complete:
            raise IncompleteJson(f"JSON not complete yet: {self.text[:80]!r}")
        return self._value
