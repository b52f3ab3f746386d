"""Incremental detokenisation: UTF-8 safe deltas and stop strings (held back, split across pushes)."""

from __future__ import annotations

import pytest

from token_spec.detokenize import IncrementalText


class ByteTokenizer:
    """One token per UTF-8 byte: the worst case for splitting characters."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


TEXT = "naïve café — 日本語 🙂 done"


def feed(inc: IncrementalText, ids, chunk: int):
    deltas = []
    for i in range(0, len(ids), chunk):
        delta, stopped = inc.push(ids[i : i + chunk])
        deltas.append(delta)
        if stopped:
            return deltas, True
    return deltas, False


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_deltas_never_split_a_character(chunk):
    tok = ByteTokenizer()
    inc = IncrementalText(tok)
    deltas, stopped = feed(inc, tok.encode(TEXT), chunk)
    deltas.append(inc.finish())
    assert not stopped
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == TEXT


def test_incomplete_final_character_is_dropped_at_finish():
    tok = ByteTokenizer()
    inc = IncrementalText(tok, stop=("abX",))
    ids = tok.encode("ab🙂")[:-1]  # the emoji's last byte never arrives
    delta, _ = inc.push(ids)
    assert delta == ""  # "ab" may still become the stop string "abX"
    assert inc.finish() == "ab"  # released, but not the broken emoji
    assert inc.text == "ab"


@pytest.mark.parametrize("chunk", [1, 2, 4, 7])
def test_stop_string_split_across_pushes_cuts_the_text_and_is_never_emitted(chunk):
    tok = ByteTokenizer()
    inc = IncrementalText(tok, stop=("END", "日本"))
    deltas, stopped = feed(inc, tok.encode("hello wor日本ld END more"), chunk)
    assert stopped and inc.stopped
    assert "".join(deltas) == "hello wor"
    assert inc.finish() == ""
    with pytest.raises(RuntimeError):
        inc.push([65])


def test_held_back_prefix_of_a_stop_string_is_released_when_it_does_not_complete():
    tok = ByteTokenizer()
    inc = IncrementalText(tok, stop=("STOP",))
    assert inc.push(tok.encode("abc ST")) == ("abc ", False)  # "ST" might start "STOP"
    assert inc.push(tok.encode("O")) == ("", False)
    assert inc.push(tok.encode("RM")) == ("STORM", False)
    assert inc.finish() == ""


def test_earliest_stop_string_wins():
    tok = ByteTokenizer()
    inc = IncrementalText(tok, stop=("cd", "b"))
    assert inc.push(tok.encode("abcd")) == ("a", True)


@pytest.mark.model
def test_real_tokenizer_multibyte_text_token_by_token(target):
    ids = target.tokenizer.encode(TEXT, add_special_tokens=False)
    assert len(ids) > len(TEXT.split())  # several tokens, some inside a character
    inc = IncrementalText(target.tokenizer)
    deltas, _ = feed(inc, ids, 1)
    deltas.append(inc.finish())
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == TEXT
