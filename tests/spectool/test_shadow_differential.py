"""Differential test: on pure programs the shadow computes what Python computes.

Random programs over ints, strings, lists and dicts (assignments, arithmetic, slicing,
methods, comprehensions, f-strings, loops, conditionals, try/except, helper functions,
errors) are run by ``exec`` and, statement by statement through the segmenter, by the
shadow. Every name the real run defines must have the same value in the shadow, and
a real error must stop the shadow at the same statement.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow_driver import shadow
from spectool.stream.segmenter import Segmenter, StatementClosed
from spectool.shadow import is_opaque

names = st.sampled_from(["a", "b", "c"])
small = st.integers(min_value=-5, max_value=20)
word = st.sampled_from(["'x'", "'ab'", "'Hello'", "''", "'a,b,c'"])


@st.composite
def expr(draw, depth=0):
    n = draw(names)
    options = [
        lambda: str(draw(small)),
        lambda: draw(word),
        lambda: f"len(str({n}))",
        lambda: f"{draw(small)} * {draw(small)} - {draw(small)}",
        lambda: f"str({draw(small)}) + {draw(word)}",
        lambda: f"[i * {draw(small)} for i in range({draw(st.integers(0, 6))}) if i % 2 == 0]",
        lambda: f"{draw(word)}.upper().split(',')",
        lambda: f"f'{{{n}!r}}-{{{draw(small)}:>3}}'",
        lambda: f"sorted(set(str({n})))",
        lambda: f"{{'k': {draw(small)}, 'w': {draw(word)}}}",
        lambda: f"max([{draw(small)}, {draw(small)}], key=lambda v: -v)",
        lambda: f"{n}[{draw(small)}]",  # may raise (not subscriptable / index / key)
        lambda: f"{draw(small)} // ({draw(small)} % 3)",  # may divide by zero
        lambda: f"sum(range({draw(small)}))",
        lambda: f"'-'.join(str(x) for x in range(3))",
        lambda: f"({n} if isinstance({n}, int) else 0) + 1",
        lambda: f"dict(enumerate({draw(word)}))",
        lambda: f"{{ch: i for i, ch in enumerate({draw(word)})}}",
        lambda: f"list(zip({draw(word)}, range({draw(small)})))",
        lambda: f"'%s=%d' % ({draw(word)}, {draw(small)})",
        lambda: f"'{{}}:{{:03d}}'.format({draw(word)}, {draw(small)})",
        lambda: f"str({n})[::-1][{draw(small)}:]",
        lambda: f"any(x > {draw(small)} for x in [1, 5, 9]) and all([{draw(small)}])",
        lambda: f"round({draw(small)} / 7, 2)",
        lambda: f"{draw(word)}.replace('a', '-').strip('-').find('b')",
        lambda: f"'a' in {n} if isinstance({n}, (str, list, dict)) else None",
        lambda: f"min([], default={draw(small)})",
        lambda: f"int({draw(word)})",  # usually a ValueError
        lambda: f"[x for row in [[1, 2], [3]] for x in row if x != {draw(small)}]",
        lambda: f"(lambda q, *r, **kw: (q, r, sorted(kw)))({draw(small)}, 2, z=3, y=4)",
    ]
    return draw(st.sampled_from(options))()


@st.composite
def statement(draw):
    n = draw(names)
    kind = draw(st.integers(0, 7))
    if kind <= 2:
        return f"{n} = {draw(expr())}\n"
    if kind == 3:
        return (f"if isinstance({n}, int) and {n} > {draw(small)}:\n    {n} = {draw(expr())}\n"
                f"else:\n    {draw(names)} = {draw(expr())}\n")
    if kind == 4:
        return (f"acc = []\nfor i in range({draw(st.integers(0, 5))}):\n"
                f"    acc.append(i * {draw(small)})\n    if i > {draw(small)}:\n        break\n{n} = acc\n")
    if kind == 5:
        return f"try:\n    {n} = {draw(expr())}\nexcept (TypeError, IndexError, KeyError, ZeroDivisionError, ValueError) as e:\n    {n} = type(e).__name__\n"
    if kind == 6 and draw(st.booleans()):
        return (f"n = {draw(st.integers(0, 6))}\ntotal = 0\nwhile n > 0:\n    n -= 1\n"
                f"    if n == {draw(small)}:\n        continue\n    total += n\n{n} = total\n")
    if kind == 6:
        return (f"def h(v, k={draw(small)}):\n    out = {{}}\n    for ch in str(v):\n"
                f"        out[ch] = out.get(ch, 0) + k\n    return out\n{n} = h({draw(names)})\n")
    return f"{n} = {draw(names)}\n{draw(names)} = {draw(expr())}\n"


def split(source):
    seg = Segmenter()
    events = seg.feed("```repl\n" + source + "```\n") + seg.close()
    return [e.source for e in events if isinstance(e, StatementClosed)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(statement(), min_size=1, max_size=6))
def test_shadow_agrees_with_python(stmts):
    source = "a = 1\nb = 'text'\nc = [3, 1, 2]\n" + "".join(stmts)
    real: dict = {}
    real_error = None
    statements = split(source)
    assert "".join(statements).replace("\n", "") == source.replace("\n", "")
    done = 0
    for stmt in statements:
        try:
            exec(compile(stmt, "<real>", "exec"), real)
        except Exception as exc:  # noqa: BLE001 - mirrored below
            real_error = exc
            break
        done += 1
    interp, host = shadow(statements)
    for name, value in real.items():
        if name.startswith("__") or name in ("h", "e", "kw"):
            continue
        got = interp.value_of(name)
        assert not is_opaque(got), (name, source)
        assert type(got) is type(value) and got == value, (name, got, value, source)
    if real_error is None:
        assert not interp.stopped, (interp.records, source)
    else:
        assert interp.stopped
        assert interp.records[done].status == "error", (interp.records, source)
        assert type(real_error).__name__ in interp.records[done].detail
