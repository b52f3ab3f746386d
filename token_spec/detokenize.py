"""Incremental detokenisation with stop strings: emit only text that can no longer change.

Byte-level BPE tokens may split a UTF-8 character; decoding a prefix of the ids then
ends in U+FFFD replacement characters that a later token turns into the real
character. UTF-8 decoding is prefix-stable apart from that incomplete tail, so the
stable text after ``n`` ids is ``decode(ids[:n])`` with trailing U+FFFD removed, and
every emitted delta is a piece of the final text: ``"".join(deltas) == final text``.

Stop strings: the text is cut at the earliest occurrence of any stop string (the stop
string itself is not emitted). To never emit text that a stop string might later
claim, the longest suffix of the stable text that is a proper prefix of a stop string
is held back until the next tokens decide it. If the generation ends inside a
multi-byte character, the incomplete character is dropped (so no delta ever carries
a U+FFFD made from a split character).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["IncrementalText"]

REPLACEMENT = "\ufffd"


class IncrementalText:
    """Accumulates ids; ``push`` returns (new safe text, stopped)."""

    def __init__(self, tokenizer, stop: Sequence[str] = ()) -> None:
        self._tok = tokenizer
        self.stop = tuple(stop)
        self._max_stop = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.emitted = 0  # characters of the text already handed out
        self.text = ""  # the stable text so far (may include held-back characters)
        self.stopped = False

    def _decode(self) -> str:
        return self._tok.decode(self.ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _stop_at(self) -> int | None:
        if not self.stop:
            return None
        start = max(0, self.emitted - self._max_stop)
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def _holdback(self) -> int:
        text = self.text
        for n in range(min(self._max_stop - 1, len(text) - self.emitted), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.stop):
                return n
        return 0

    def push(self, ids: Sequence[int]) -> tuple[str, bool]:
        if self.stopped:
            raise RuntimeError("push() after a stop string ended the text")
        self.ids.extend(int(i) for i in ids)
        self.text = self._decode().rstrip(REPLACEMENT)
        cut = self._stop_at()
        if cut is not None:
            self.stopped = True
            self.text = self.text[:cut]
            delta = self.text[self.emitted :]
            self.emitted = len(self.text)
            return delta, True
        safe = max(self.emitted, len(self.text) - self._holdback())
        delta = self.text[self.emitted : safe]
        self.emitted = safe
        return delta, False

    def finish(self) -> str:
        """The generation ended without a stop string: release everything held back.

        A generation cut (by max_tokens) inside a multi-byte character ends before that
        character: its incomplete bytes are dropped, never emitted as U+FFFD."""
        if self.stopped:
            return ""
        self.text = self._decode().rstrip(REPLACEMENT)
        delta = self.text[self.emitted :]
        self.emitted = len(self.text)
        return delta
