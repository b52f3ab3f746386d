"""Segmenter: cells, statements and tails from arbitrarily split deltas."""

import ast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectool.stream.segmenter import (
    CellClosed, CellOpened, LineLexer, Segmenter, StatementClosed, TailChanged,
)

MESSAGE = '''I'll look at the data first.

```repl
lines = context.split("\\n")
def ask(chunk):
    """Ask about one chunk.
```
not a fence: inside a docstring
"""
    return llm_query(f"Label this: {chunk}")

results = []
for i in range(0, len(lines), 10):
    batch = "\\n".join(lines[i:i + 10])
    results.append(ask(batch))
else:
    print("done")
# a comment between statements
answer = {"a": (1,
                2), 'b': 'x # not a comment'}
s = 'tick ``` inside'
@decorate
def g(): pass
match = "soft keyword"
total = 1 + \\
    2
```
Some prose with ```inline``` backticks.

```json
{"not": "code"}
```

```python
x = "ünïcödé ✓"
y = llm_query(x)
'''


def run(deltas, languages=("repl", "python")):
    seg = Segmenter(languages)
    events = []
    for d in deltas:
        events.extend(seg.feed(d))
    events.extend(seg.close())
    return events


def structural(events):
    return [e for e in events if not isinstance(e, TailChanged)]


def test_cells_and_statements_of_a_message():
    events = structural(run([MESSAGE]))
    assert events[0] == CellOpened(1, "repl")
    stmts = [e for e in events if isinstance(e, StatementClosed) and e.cell == 1]
    sources = [s.source for s in stmts]
    assert sources[0] == 'lines = context.split("\\n")\n'
    assert sources[1].startswith("def ask(chunk):") and "return llm_query" in sources[1]
    assert sources[2] == "results = []\n"
    assert sources[3].startswith("for i in range") and sources[3].rstrip().endswith('print("done")')
    assert sources[4].startswith("answer = {") and sources[4].endswith("'x # not a comment'}\n")
    assert sources[5] == "s = 'tick ``` inside'\n"
    assert sources[6] == "@decorate\ndef g(): pass\n"
    assert sources[7] == 'match = "soft keyword"\n'
    assert sources[8] == "total = 1 + \\\n    2\n"
    assert [s.index for s in stmts] == list(range(9))
    assert stmts[0].lineno == 1 and stmts[1].lineno == 2 and stmts[2].lineno == 9
    for s in stmts:
        ast.parse(s.source)
    closed = [e for e in events if isinstance(e, CellClosed)]
    assert closed[0].cell == 1 and closed[0].complete
    assert closed[0].source.startswith('lines = context.split') and "match = " in closed[0].source
    ast.parse(closed[0].source)
    # the json block is skipped; the python cell is the second cell and is unfinished
    assert CellOpened(2, "python") in events
    assert closed[1] == CellClosed(2, 'x = "ünïcödé ✓"\ny = llm_query(x)\n', False)
    second = [e.source for e in events if isinstance(e, StatementClosed) and e.cell == 2]
    assert second == ['x = "ünïcödé ✓"\n', "y = llm_query(x)\n"]


def test_simple_statement_closes_at_its_newline_not_at_the_next_line():
    seg = Segmenter()
    events = seg.feed("```repl\nr = llm_query('a')")
    assert not any(isinstance(e, StatementClosed) for e in events)
    events = seg.feed("\n")
    assert StatementClosed(1, 0, "r = llm_query('a')\n", 1) in events


def test_compound_statement_closes_when_a_top_level_line_starts():
    seg = Segmenter()
    seg.feed("```repl\nfor c in chunks:\n    out.append(llm_query(c))\n")
    events = seg.feed("\n\n")
    assert not any(isinstance(e, StatementClosed) for e in events)
    events = seg.feed("p")
    assert [e.source for e in events if isinstance(e, StatementClosed)] == [
        "for c in chunks:\n    out.append(llm_query(c))\n"]


def test_tail_holds_the_open_statement_and_the_partial_line():
    seg = Segmenter()
    seg.feed("```repl\nx = 1\nfor c in chunks:\n")
    events = seg.feed("    llm_query(c)")
    tails = [e.tail for e in events if isinstance(e, TailChanged)]
    assert tails == ["for c in chunks:\n    llm_query(c)"]
    # no closing paren and no newline: no new tail report
    assert not [e for e in seg.feed(" + llm") if isinstance(e, TailChanged)]


def test_syntax_error_breaks_the_cell():
    events = run(["```repl\na = 1\nb = (2 +\n)\nc = 3\n```\n"])
    stmts = [e.source for e in events if isinstance(e, StatementClosed)]
    assert stmts == ["a = 1\n"]
    assert any(isinstance(e, CellClosed) and e.complete for e in events)


def test_indented_fence_is_dedented():
    events = run(["1. step\n   ```python\n   for i in x:\n       f(i)\n   y = 2\n   ```\n"])
    stmts = [e.source for e in events if isinstance(e, StatementClosed)]
    assert stmts == ["for i in x:\n    f(i)\n", "y = 2\n"]


def test_other_languages_and_four_backtick_fences_are_skipped():
    events = run(["````\n```repl\nx = 1\n```\n````\n```repl\ny = 2\n```\n"])
    stmts = [e.source for e in events if isinstance(e, StatementClosed)]
    assert stmts == ["y = 2\n"]
    assert run(["```repl\nz = 1\n```\n"], languages=("python",)) == []


def test_statement_in_a_cell_without_closing_fence_is_flushed_at_close():
    events = run(["```repl\nif a:\n    b = 1"])
    assert [e.source for e in events if isinstance(e, StatementClosed)] == ["if a:\n    b = 1\n"]
    assert events[-1] == CellClosed(1, "if a:\n    b = 1\n", False)


def test_lexer_tracks_strings_and_brackets_across_lines():
    lx = LineLexer()
    assert lx.feed_line('x = """abc') is False
    assert lx.feed_line("``` (") is False
    assert lx.feed_line('"""') is True
    assert lx.feed_line("y = [1,") is False
    assert lx.feed_line("  ')]'") is False
    assert lx.feed_line("]  # ) (") is True
    assert lx.feed_line(r"s = 'a\'b' + \ ") is True  # backslash then space: not a continuation
    assert lx.feed_line("s = 1 + \\") is False


def test_bytes_split_inside_a_utf8_character():
    data = MESSAGE.encode()
    cut = data.index("✓".encode()) + 1
    assert structural(run([data[:cut], data[cut:]])) == structural(run([MESSAGE]))


def work(text: str, step: int = 16) -> int:
    """Characters the segmenter processed (its ``scanned`` work counter) for ``text``
    fed in deltas of ``step`` characters. No statement-length bound: the long lines
    here are parsed and their tails reported, so the throttle itself is measured."""
    seg = Segmenter(max_statement_chars=10 ** 12)
    for i in range(0, len(text), step):
        seg.feed(text[i:i + step])
    seg.close()
    return seg.scanned


def long_cell(n: int) -> str:
    body = "".join(f"x{i} = f({i}, 'abc')\n" for i in range(n // 20))
    head = "".join("    " + line + "\n" for line in body.splitlines()[:50])
    return "```repl\nfor k in range(3):\n" + head + body + "```\n"


def long_call_line(n: int) -> str:
    return "```repl\nx = [" + "f(1), " * (n // 6) + "]\n```\n"


def long_escaped_string(n: int) -> str:
    return "```repl\nx = '" + "\\n" * (n // 2) + "'\n```\n"


def long_block(n: int) -> str:
    return "```repl\ndef g():\n" + "    y = f(1)\n" * (n // 13) + "```\n"


SHAPES = [long_cell, long_call_line, long_escaped_string, long_block]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.__name__ for s in SHAPES])
def test_work_is_linear_in_length_for_long_cells_and_very_long_lines(shape):
    # work per character stays bounded as the text grows 16-fold (a quadratic
    # segmenter's work per character would grow 16-fold too)
    per_char = [work(shape(n)) / len(shape(n)) for n in (20_000, 80_000, 320_000)]
    # (a short tail is reported on every change: a bounded constant per delta, which
    # weighs less per character as the text grows)
    assert per_char[1] <= per_char[0] * 1.25 and per_char[2] <= per_char[1] * 1.25
    assert per_char[2] < 20


def test_work_counter_catches_a_quadratic_tail_report(monkeypatch):
    """Negative control: with the long-tail throttle off (every change reported in
    full), the counter shows the quadratic growth on one long line."""
    import spectool.stream.segmenter as segmenter
    monkeypatch.setattr(segmenter, "TAIL_EAGER_CHARS", 10 ** 12)
    per_char = [work(long_call_line(n)) / len(long_call_line(n)) for n in (40_000, 160_000)]
    assert per_char[1] > per_char[0] * 3


def test_work_counter_catches_a_quadratic_string_scan(monkeypatch):
    """Negative control: a string scan that searches for the closing quote again after
    every backslash (the old ``_skip_string``) shows up in the counter."""
    from spectool_bench.segmenter_long_lines import naive_skip_string

    monkeypatch.setattr(LineLexer, "_skip_string", naive_skip_string)
    per_char = [work(long_escaped_string(n)) / len(long_escaped_string(n))
                for n in (10_000, 40_000)]
    assert per_char[1] > per_char[0] * 3


def test_a_long_tail_is_still_reported_as_it_grows():
    # the throttle delays reports of a long tail; it never drops the last state (no
    # statement-length bound here: it would withdraw a tail this long)
    text = long_call_line(20_000)[:-6]  # the line is still open
    seg = Segmenter(max_statement_chars=10 ** 12)
    tails = []
    for i in range(0, len(text), 16):
        tails += [e.tail for e in seg.feed(text[i:i + 16]) if isinstance(e, TailChanged)]
    assert len(tails) > 20 and tails == sorted(tails, key=len)
    assert len(text) - len(tails[-1]) - len("```repl\n") < len(text) // 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=len(MESSAGE.encode())), max_size=40),
       st.booleans())
def test_random_splits_give_the_same_events(cuts, as_bytes):
    data = MESSAGE.encode() if as_bytes else MESSAGE
    points = sorted(set(cuts))
    if not as_bytes:
        points = [p for p in points if p <= len(MESSAGE)]
    pieces = [data[a:b] for a, b in zip([0] + points, points + [len(data)])]
    events = run(pieces)
    assert structural(events) == structural(run([data]))
    # every reported tail is a piece of its cell's text (the open remainder)
    sources = {e.cell: e.source for e in events if isinstance(e, CellClosed)}
    for e in events:
        if isinstance(e, TailChanged):
            assert e.tail.rstrip("`") in sources[e.cell]


def test_feed_after_close_is_an_error():
    seg = Segmenter()
    seg.close()
    with pytest.raises(RuntimeError):
        seg.feed("x")


def test_fence_inside_unbalanced_brackets_still_closes_the_cell():
    events = run(["```repl\nx = 1\ny = f(2,\n```\nProse after the cell.\n```repl\nz = 3\n```\n"])
    assert [e.source for e in events if isinstance(e, StatementClosed)] == ["x = 1\n", "z = 3\n"]
    closed = [e for e in events if isinstance(e, CellClosed)]
    assert closed[0] == CellClosed(1, "x = 1\ny = f(2,\n", True)
    assert closed[1].cell == 2
