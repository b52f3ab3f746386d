"""Tail peeking: bets on calls in the still-streaming part of a cell."""

from spectool.shadow import Outcome
from spectool.shadow.tail import complete_calls, split_tail
from shadow_driver import shadow

SETUP = [
    "chunks = ['a', 'b', 'c']",
    "p = 'x'",
    "def ask(c):\n    return llm_query('Q' + c)\n",
    "results = []",
]


def bets_for(tail, setup=SETUP, **kw):
    interp, host = shadow(setup, **kw)
    bets = interp.peek_tail(tail)
    return [(b.tool, b.args, b.kwargs, b.occurrence) for b in bets], interp, host


def test_call_whose_paren_has_streamed_is_a_bet():
    bets, _, host = bets_for("r = llm_query(p, model='m')")
    assert bets == [("llm_query", ("x",), {"model": "m"}, 0)]
    assert host.launches == []  # peeking never launches by itself


def test_unfinished_call_is_not_a_bet():
    assert bets_for("r = llm_query(p")[0] == []
    assert bets_for("r = llm_query(p + ")[0] == []


def test_calls_that_may_become_conditional_are_not_bets():
    for tail in ["r = llm_query(p) if flag else None", "r = flag and llm_query(p)",
                 "r = [llm_query(c) for c in chunks]", "f = lambda: llm_query(p)",
                 "if llm_query(p)"]:
        assert bets_for(tail)[0] == [], tail


def test_unknown_arguments_are_not_bets():
    assert bets_for("r = llm_query(search('q'))")[0] == []
    assert bets_for("r = llm_query(undefined_name)")[0] == []


def test_non_speculatable_tools_are_not_bets():
    assert bets_for("search(p)")[0] == []


def test_for_loop_over_known_list_is_unrolled_through_helpers():
    bets, interp, _ = bets_for("for c in chunks:\n    results.append(ask(c))\n")
    assert bets == [("llm_query", ("Qa",), {}, 0), ("llm_query", ("Qb",), {}, 0),
                    ("llm_query", ("Qc",), {}, 0)]
    assert interp.value_of("results") == []  # the shadow state was not touched


def test_reassignment_further_down_changes_later_iterations():
    first, interp, _ = bets_for("for c in chunks:\n    r = llm_query(p + c)\n")
    assert [b[1] for b in first] == [("xa",), ("xb",), ("xc",)]
    later = interp.peek_tail("for c in chunks:\n    r = llm_query(p + c)\n    p = 'other'\n")
    assert [b.args for b in later] == [("xa",), ("otherb",), ("otherc",)]
    assert interp.value_of("p") == "x"


def test_unknown_break_stops_the_bets():
    bets, _, _ = bets_for("for c in chunks:\n    r = llm_query(c)\n    if search(r):\n        break\n")
    assert bets == [("llm_query", ("a",), {}, 0)]


def test_known_condition_is_followed_and_while_is_not_unrolled():
    assert [b[1] for b in bets_for("if len(chunks) > 2:\n    llm_query('big')\nelse:\n    llm_query('small')\n")[0]] == [("big",)]
    assert bets_for("while True:\n    llm_query('w')\n")[0] == []


def test_unrolling_is_bounded():
    bets, _, _ = bets_for("for i in range(1000):\n    llm_query(str(i))\n")
    assert len(bets) == 64 and bets[-1][1] == ("63",)


def test_occurrences_count_identical_calls():
    interp, host = shadow(["a = llm_query('same')"])
    bets = interp.peek_tail("b = [llm_query('same'), llm_query('same'), llm_query('other')]")
    assert [(b.args, b.occurrence) for b in bets] == [(("same",), 1), (("same",), 2), (("other",), 0)]
    assert bets[0].key and bets[0].key == bets[1].key != bets[2].key


def test_bet_matches_the_statement_launch():
    interp, host = shadow(SETUP)
    bets = interp.peek_tail("for c in chunks:\n    results.append(ask(c))")
    from shadow_driver import drive

    drive(interp, "for c in chunks:\n    results.append(ask(c))\n", host)
    assert [(b.tool, b.args, b.kwargs) for b in bets] == [(l[0], l[1], l[2]) for l in host.launches]


def test_peek_does_not_disturb_a_suspended_statement():
    interp, host = shadow(["xs = ['u', 'v']"])
    gen = interp.run_statement("y = llm_query('a') + llm_query(xs[0])")
    request = next(gen)
    assert [b.args for b in interp.peek_tail("z = llm_query(xs[1])")] == [("v",)]
    try:
        gen.send(Outcome(value="A"))
        gen.send(Outcome(value="B"))
    except StopIteration:
        pass
    assert interp.value_of("y") == "AB"


def test_split_tail_and_call_spans():
    assert split_tail("for c in x:\n    f(c)\n    g(") == ("for c in x:\n    f(c)\n", "    g(")
    assert split_tail("x = f(\n  1,\n") == ("", "x = f(\n  1,\n")
    text = "a = f(g(1), ')') + h.k(2) + (3) + q("
    assert [text[s:e] for s, e in complete_calls(text)] == ["f(g(1), ')')", "h.k(2)"]


def test_peeking_leaves_every_part_of_the_shadow_state_alone():
    interp, host = shadow(SETUP + ["counts = {'a': 1}", "import collections\ndd = collections.defaultdict(list)"])
    before = {n: repr(interp.value_of(n)) for n in ("chunks", "p", "results", "counts", "dd")}
    interp.peek_tail("for c in chunks:\n    results.append(ask(c))\n    counts['a'] += 1\n"
                     "    counts.update(b=2)\n    dd[c].append(1)\n    del p\n    p = 'new'\n"
                     "    chunks.sort()\n    llm_query(p)\n")
    after = {n: repr(interp.value_of(n)) for n in ("chunks", "p", "results", "counts", "dd")}
    assert before == after
    assert host.launches == []


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@st.composite
def loop_program(draw):
    n = draw(st.integers(0, 5))
    body = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            body.append("r = llm_query(p + c)")
        elif kind == 1:
            body.append(f"p = p + '{draw(st.sampled_from('xyz'))}'")
        elif kind == 2:
            body.append(f"if len(p) > {draw(st.integers(0, 4))}:\n        llm_query('long ' + c)")
        elif kind == 3:
            body.append("results.append(ask(c))")
        elif kind == 4:
            body.append(f"if c == 'c{draw(st.integers(0, 4))}':\n        break")
        else:
            body.append("llm_query(search(c))")  # unknown argument: never a bet
    return f"for c in [f'c{{i}}' for i in range({n})]:\n" + "".join(f"    {b}\n" for b in body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop_program())
def test_bets_on_the_whole_open_statement_are_exactly_what_it_launches(program):
    interp, host = shadow(SETUP)
    bets = interp.peek_tail(program)
    from shadow_driver import drive

    drive(interp, program, host)
    launched = [(tool, args, kwargs) for tool, args, kwargs, _ in host.launches]
    assert [(b.tool, b.args, b.kwargs) for b in bets] == launched[:len(bets)]
    assert len(bets) == min(len(launched), 64), (program, bets, launched)
