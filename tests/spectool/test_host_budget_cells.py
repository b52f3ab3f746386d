"""The host's work on huge cells stays off the event loop or is bounded before it starts:
huge stream deltas are segmented a slice at a time, statements and tails past the
length bounds are not parsed, and a huge cell is compiled in a child process (or off the
loop in baseline). Each test asserts the mechanism, with spec equal to baseline, and a
negative control shows the same setup without the bound does the work. No assertion is
about time (``python -m spectool_bench.shadow_attacks stalls`` measures that).
"""

from __future__ import annotations

import pytest

import spectool
import spectool.execution._compile as compile_mod
import spectool.runtime as runtime_mod
import spectool.stream.segmenter as segmenter_mod
from spectool.execution._compile import compile_cell
from spectool.host_budget import DELTA_SLICE_CHARS
from spectool.stream.segmenter import Segmenter, StatementClosed, TailChanged
from host_budget_helpers import baseline_turn, launched, pure_counter, same, spy


# -- the segmenter: huge deltas, huge statements, huge tails -----------------------------

def test_a_statement_past_the_length_bound_is_not_parsed(monkeypatch):
    parsed: list = []
    real = segmenter_mod.parse_ast
    monkeypatch.setattr(segmenter_mod, "parse_ast",
                        lambda src, *a: parsed.append(len(src)) or real(src, *a))
    long = "x = [" + "1, " * 20_000 + "]\n"
    seg = Segmenter(max_statement_chars=10_000)
    events = seg.feed("```repl\na = 1\n" + long + "b = 2\n```\n") + seg.close()
    closed = [e.source for e in events if isinstance(e, StatementClosed)]
    assert closed == ["a = 1\n"] and seg.too_long == 1      # the cell's rest is skipped
    assert max(parsed) < 10_000


def test_negative_control_an_unbounded_segmenter_parses_the_long_statement():
    long = "x = [" + "1, " * 20_000 + "]\n"
    seg = Segmenter(max_statement_chars=10 ** 9)
    events = seg.feed("```repl\na = 1\n" + long + "b = 2\n```\n") + seg.close()
    closed = [e for e in events if isinstance(e, StatementClosed)]
    assert [e.source for e in closed] == ["a = 1\n", long, "b = 2\n"]
    assert closed[1].tree is not None and seg.too_long == 0


def test_statements_past_the_message_bound_are_not_parsed():
    seg = Segmenter(max_parsed_statements=50)
    body = "".join(f"v{i} = {i}\n" for i in range(80))
    events = seg.feed("```repl\n" + body + "```\n") + seg.close()
    assert sum(isinstance(e, StatementClosed) for e in events) == 50 and seg.too_long == 1


def test_baseline_segmenting_parses_nothing(monkeypatch):
    parsed: list = []
    monkeypatch.setattr(segmenter_mod, "parse_ast", lambda *a: parsed.append(a))
    seg = Segmenter(parse=False)
    events = seg.feed("```repl\na = 1\nb = (\n```\n") + seg.close()
    assert [e.tree for e in events if isinstance(e, StatementClosed)] == [None, None]
    assert parsed == []
    Segmenter().feed("```repl\na = 1\n")                 # the control parses
    assert parsed


def test_a_tail_past_the_length_bound_is_withdrawn_not_reported():
    seg = Segmenter(max_statement_chars=1_000)
    events = seg.feed("```repl\nx = f(1)")
    assert [e.tail for e in events if isinstance(e, TailChanged)] == ["x = f(1)"]
    events = seg.feed(" + g(2)" * 300)
    assert [e.tail for e in events if isinstance(e, TailChanged)] == [""]
    control = Segmenter(max_statement_chars=10 ** 9)
    control.feed("```repl\nx = f(1)")
    tails = [e.tail for e in control.feed(" + g(2)" * 300) if isinstance(e, TailChanged)]
    assert tails and len(tails[-1]) > 1_000


def feed_sizes(monkeypatch) -> list:
    return spy(monkeypatch, Segmenter, "feed", lambda self, delta: len(delta))


BIG_CELL = "".join(f"v{i} = {i} + 1\n" for i in range(3_000)) + "print(v2999)\n"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_a_huge_delta_is_segmented_a_slice_at_a_time(anyio_backend, mode,
                                                          monkeypatch):
    sizes = feed_sizes(monkeypatch)
    message = "Here.\n```repl\n" + BIG_CELL + "```\n"
    rt = spectool.Runtime([], mode=mode, shadow="thread")
    res = await rt.run([message])                       # one delta of ~40 KB
    assert res.error is None and res.stdout == "3000\n"
    assert len(sizes) > 10 and max(sizes) <= DELTA_SLICE_CHARS


@pytest.mark.anyio
async def test_negative_control_without_slicing_the_delta_is_segmented_at_once(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(runtime_mod, "DELTA_SLICE_CHARS", 10 ** 9)
    sizes = feed_sizes(monkeypatch)
    message = "Here.\n```repl\n" + BIG_CELL + "```\n"
    res = await spectool.Runtime([], mode="baseline").run([message])
    assert res.stdout == "3000\n" and max(sizes) == len(message)


@pytest.mark.anyio
async def test_a_statement_too_long_to_parse_is_traced_and_spec_equals_baseline(
        anyio_backend):
    q, calls = pure_counter()
    long = "x = [" + ", ".join(str(i) for i in range(8_000)) + "]\n"   # ~40 KB
    source = long + "r = q(len(x))\nprint(r)\n"
    spec = await spectool.Runtime([q], mode="spec", shadow="thread").run_cell(source)
    q2, _ = pure_counter()
    base = await baseline_turn([q2], {}, source)
    same(spec, base)
    assert spec.trace.of("statement_too_long") and launched(spec, "q") == []


# -- compiling a huge cell ------------------------------------------------------------

def spy_compile(monkeypatch) -> list:
    """Records every in-process compile ``spectool.execution._compile`` makes (through the
    guarded ``_parse.compile_code``)."""
    return spy(monkeypatch, compile_mod, "compile_code", lambda source, *args: len(source))


HUGE = "x = [" + ", ".join(str(i) for i in range(10_000)) + "]\ny = sum(x)\n"


@pytest.mark.anyio
async def test_a_huge_cell_is_compiled_in_a_child_process(anyio_backend, monkeypatch):
    calls = spy_compile(monkeypatch)
    assert len(HUGE) > compile_mod.OFFLOOP_COMPILE_CHARS
    code = await compile_cell(HUGE)
    ns: dict = {}
    exec(code, ns)
    assert ns["y"] == sum(range(10_000)) and calls == []
    await compile_cell("z = 1\n")                         # the control: in place
    assert calls == [len("z = 1\n")]


@pytest.mark.anyio
@pytest.mark.parametrize("bad", [HUGE + "y = (\n", HUGE + "  z = 1\n", HUGE + "\0\n",
                                 HUGE + "if x:\n\tpass\n        pass\n"])
async def test_a_huge_cell_that_does_not_compile_raises_what_compile_raises(
        anyio_backend, bad, monkeypatch):
    with pytest.raises(Exception) as in_place:
        compile(bad, "<cell>", "exec")
    calls = spy_compile(monkeypatch)
    with pytest.raises(Exception) as child:
        await compile_cell(bad)
    assert calls == []
    assert type(child.value) is type(in_place.value)
    assert str(child.value) == str(in_place.value)
    assert child.value.args == in_place.value.args


@pytest.mark.anyio
async def test_a_huge_cell_compiles_with_the_flags_of_a_small_one(anyio_backend):
    """Cells compile with ``from __future__ import annotations`` in effect (what the
    executor's own module always passed on); the child must too."""
    src = "def f(x: int) -> int:\n    return x\nann = dict(f.__annotations__)\n"
    pad = "#" + "x" * compile_mod.OFFLOOP_COMPILE_CHARS + "\n"
    small = await spectool.Runtime([], mode="baseline").run_cell(src)
    big = await spectool.Runtime([], mode="baseline").run_cell(pad + src)
    assert small.namespace["ann"] == big.namespace["ann"] == {"x": "int", "return": "int"}


@pytest.mark.anyio
async def test_a_child_that_cannot_answer_falls_back_to_compiling_in_place(
        anyio_backend, monkeypatch):
    async def no_answer(source, filename):
        return None

    monkeypatch.setattr(compile_mod, "_ask_child", no_answer)
    calls = spy_compile(monkeypatch)
    code = await compile_cell(HUGE)
    ns: dict = {}
    exec(code, ns)
    assert ns["y"] == sum(range(10_000)) and calls == [len(HUGE)]


@pytest.mark.anyio
async def test_baseline_runs_a_huge_cell_compiled_off_the_loop(anyio_backend,
                                                               monkeypatch):
    calls = spy_compile(monkeypatch)
    res = await spectool.Runtime([], mode="baseline").run_cell(HUGE + "print(y)\n")
    assert res.error is None and res.stdout == f"{sum(range(10_000))}\n" and calls == []


