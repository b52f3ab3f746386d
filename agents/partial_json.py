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

Measured against the hand-written character scanner this replaced (its text:
``git show 39f795d:agents/partial_json.py``; both timed in one process, shared 2-core
machine): 2.0 vs 11.8 us per message on a typical 115-character argument object in
4-character fragments (6x faster); 4.6 vs 1.6 ms on a 21 KB object in 16-character
fragments (3x slower: it re-parses on every closing brace), a few ms for a message
that takes seconds to stream. Arguments are usually small, so this is the faster
choice. ``python -m spectool_agents.partial_json`` prints this tracker's figures.

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


def _measure() -> None:  # pragma: no cover - the comparison quoted in the docstring
    import json
    import time

    def tracked(fragments: list[str]) -> int | None:
        tracker = JsonTracker()
        return next((i for i, f in enumerate(fragments) if tracker.feed(f)), None)

    small = json.dumps({"query": "capital of France and the population of Paris", "k": 5,
                        "filters": {"lang": "en", "year": [2020, 2021]}})
    big = json.dumps({"items": [{"id": i, "text": "lorem ipsum dolor sit amet " * 3}
                                for i in range(200)]})
    for name, text, size, reps in (("small", small, 4, 2000), ("big", big, 16, 20)):
        fragments = [text[i:i + size] for i in range(0, len(text), size)]
        assert tracked(fragments) == len(fragments) - 1
        best = min(_timed(lambda: tracked(fragments), reps, time.perf_counter) for _ in range(3))
        print(f"{name}: {len(text)} chars in {size}-char fragments: {best * 1e6:.1f} us/message")


def _timed(fn: Any, reps: int, clock: Any) -> float:  # pragma: no cover
    t0 = clock()
    for _ in range(reps):
        fn()
    return (clock() - t0) / reps


if __name__ == "__main__":  # pragma: no cover
    _measure()
