"""Lookahead while blocked: before the shadow waits inside a loop it bets on the calls
of the later iterations (spectool.shadow.lookahead, Store.lookahead_bets).

Ordering uses anyio Events and gated tools; never sleeps.
"""

from contextlib import asynccontextmanager

import anyio
import pytest

import spectool
from spectool.speculation import Budget, Store
from spectool.trace import Trace, TurnStats
from shadow_driver import RecordingHost, shadow


class LookaheadHost(RecordingHost):
    """A recording host that also takes lookahead bets."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.lookaheads: list[tuple[int, list[tuple]]] = []  # (waits so far, bets)

    def lookahead(self, bets):
        self.lookaheads.append((len(self.waits), [(b.tool, b.args, b.occurrence) for b in bets]))


JUDGE = ("out = []\n"
         "for c in ['a', 'b', 'c']:\n"
         "    r = llm_query('Q' + c)\n"
         "    v = llm_query('check ' + r.strip())\n"
         "    out.append(v.strip())\n")

HELPER = ["def classify(c):\n    r = llm_query('Q' + c)\n    return r.strip()\n",
          "labels = []\n"
          "for i in range(3):\n"
          "    labels.append(classify('abc'[i]))\n"]


def test_judge_loop_bets_on_later_iterations_before_the_first_wait():
    interp, host = shadow([JUDGE], host=LookaheadHost())
    waits, bets = host.lookaheads[0]
    assert waits == 0  # before the shadow blocked on iteration 1's result
    assert bets == [("llm_query", ("Qb",), 0), ("llm_query", ("Qc",), 0)]
    # the lookahead changed nothing: same state and launches as without it
    plain, plain_host = shadow([JUDGE])
    assert interp.value_of("out") == plain.value_of("out") == [
        "<check <Qa>>", "<check <Qb>>", "<check <Qc>>"]
    assert interp.value_of("c") == plain.value_of("c") == "c"
    assert host.launches == plain_host.launches


def test_an_iteration_is_looked_ahead_again_only_after_a_wait_and_the_last_needs_none():
    _, host = shadow([JUDGE], host=LookaheadHost())
    # two waits per iteration (r, then v): the second look knows r; the store skips
    # the bets it already holds (test_store_lookahead_launches_only_uncovered_occurrences)
    assert [bets for _, bets in host.lookaheads] == [
        [("llm_query", ("Qb",), 0), ("llm_query", ("Qc",), 0)],
        [("llm_query", ("Qb",), 0), ("llm_query", ("Qc",), 0)],
        [("llm_query", ("Qc",), 0)],
        [("llm_query", ("Qc",), 0)]]


def test_a_loop_invariant_value_learned_at_a_wait_is_used_for_later_iterations():
    # the first wait (on g, bound before the loop) finds nothing to bet on; once g is
    # known, the wait on r in the same iteration looks again and bets on Qb, Qc
    src = ("g = llm_query('guide')\n"
           "for c in ['a', 'b', 'c']:\n"
           "    r = llm_query(g.strip() + c)\n"
           "    x = r.strip()\n")
    _, host = shadow([src], host=LookaheadHost())
    assert [bets for _, bets in host.lookaheads if bets][0] == [
        ("llm_query", ("<guide>b",), 0), ("llm_query", ("<guide>c",), 0)]


def test_helper_function_loop_is_looked_ahead():
    interp, host = shadow(HELPER, host=LookaheadHost())
    assert host.lookaheads[0] == (0, [("llm_query", ("Qb",), 0), ("llm_query", ("Qc",), 0)])
    assert interp.value_of("labels") == ["<Qa>", "<Qb>", "<Qc>"]


def test_occurrence_counts_calls_statement_mode_already_launched():
    src = ("for c in ['a', 'a', 'a']:\n"
           "    r = llm_query('Q' + c).strip()\n")
    _, host = shadow([src], host=LookaheadHost())
    assert host.lookaheads[0][1] == [("llm_query", ("Qa",), 1), ("llm_query", ("Qa",), 2)]


def test_lookahead_does_not_touch_shared_state():
    src = ("seen = {'n': 0}\n"
           "for c in ['a', 'b', 'c']:\n"
           "    seen['n'] += 1\n"
           "    r = llm_query('Q' + c + str(seen['n']))\n"
           "    seen[c] = r.strip()\n")
    interp, host = shadow([src], host=LookaheadHost())
    # later iterations mutate ``seen`` only in the peek's view: their calls are unknown
    assert all(bets == [] for _, bets in host.lookaheads)
    assert interp.value_of("seen") == {"n": 3, "a": "<Qa1>", "b": "<Qb2>", "c": "<Qc3>"}


def test_no_lookahead_without_a_host_method_and_outside_loops():
    interp, host = shadow(["r = llm_query('x').strip()"], host=LookaheadHost())
    assert host.lookaheads == [] and interp.value_of("r") == "<x>"


# ---------------------------------------------------------------- runtime, gated tools

def gated_llm():
    """``llm(prompt)``: the call for 'Qa' does not finish until the call for 'Qb' has
    started, so a run that launches iterations serially never finishes."""
    log: list[str] = []
    b_started = anyio.Event()

    @spectool.tool(speculate="pure", name="llm")
    async def llm(prompt: str) -> str:
        log.append(prompt)
        if prompt == "Qb":
            b_started.set()
        if prompt == "Qa":
            await b_started.wait()
        await anyio.lowlevel.checkpoint()
        return f"<{prompt}> "

    return llm, log


JUDGE_CELL = ("out = []\n"
              "for c in ['a', 'b', 'c']:\n"
              "    r = llm('Q' + c)\n"
              "    v = llm('check ' + r.strip())\n"
              "    out.append(v.strip())\n")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["spec", "lazy"])
async def test_judge_loop_launches_iteration_two_before_iteration_one_finishes(anyio_backend, mode):
    llm, log = gated_llm()
    rt = spectool.Runtime([llm], mode=mode)
    with anyio.fail_after(20):
        res = await rt.run_cell(JUDGE_CELL)
    assert res.error is None
    assert res.namespace["out"] == ["<check <Qa>>", "<check <Qb>>", "<check <Qc>>"]
    assert log.index("Qb") < log.index("check <Qa>")
    # adopted, never duplicated: each of the 6 real calls ran exactly once
    assert sorted(log) == sorted(["Qa", "Qb", "Qc", "check <Qa>", "check <Qb>", "check <Qc>"])
    s = res.stats
    assert s.hits + s.misses == 6 and s.wasted == 0 and s.evicted == 0
    assert s.dispatched <= 6  # a speculation the real run took over counts as a miss too


@pytest.mark.anyio
async def test_spec_helper_loop_in_the_open_tail_is_bet_on(anyio_backend):
    from rt_helpers import GatedStream

    log: list[str] = []
    started = {p: anyio.Event() for p in ("Qa", "Qb", "Qc")}

    @spectool.tool(speculate="pure", name="llm")
    async def llm(prompt: str) -> str:
        log.append(prompt)
        started[prompt].set()
        return prompt.lower()

    rt = spectool.Runtime([llm], mode="spec")
    stream = GatedStream(
        "```repl\ndef classify(c):\n    out = llm('Q' + c)\n    return out.strip()\n"
        "labels = []\nfor c in ['a', 'b', 'c']:\n    labels.append(classify(c))\n",
        started["Qc"],  # the message goes on only once the tail's bets are running
        "print(labels)\n```\n")
    with anyio.fail_after(20):
        res = await rt.run(stream)
    assert res.error is None and res.stdout == "['qa', 'qb', 'qc']\n"
    assert sorted(log) == ["Qa", "Qb", "Qc"]
    assert res.stats.hits == 3 and res.stats.wasted == 0


# ---------------------------------------------------------------- store

@asynccontextmanager
async def open_store(tools):
    async with anyio.create_task_group() as tg:
        store = Store({t.name: t for t in tools}, tg, budget=Budget(16, 4 << 20), trace=Trace(),
                      stats=TurnStats(), turn_id="t1")
        try:
            yield store
        finally:
            store.close()


def gated(speculate="pure"):
    runs: list[int] = []
    gate = anyio.Event()

    hooks = {"on_unclaimed": lambda key, args, kwargs: None} if speculate == "idempotent" else {}

    @spectool.tool(speculate=speculate, name="slow", **hooks)
    async def slow(x: int, idempotency_key: str = "") -> int:
        runs.append(x)
        await gate.wait()
        return x * 10

    return slow, gate, runs


@pytest.mark.anyio
async def test_store_lookahead_skips_occurrences_already_covered(anyio_backend):
    slow, gate, runs = gated()
    async with open_store([slow]) as store:
        first = store.launch("slow", (1,), {})               # statement mode: occurrence 0
        store.lookahead_bets([("slow", (1,), {}), ("slow", (2,), {})])
        assert store.stats.dispatched == 3                   # one bet per key
        store.lookahead_bets([("slow", (1,), {}), ("slow", (2,), {})])
        assert store.stats.dispatched == 3                   # floating bets cover them
        again = store.launch("slow", (1,), {})               # occurrence 1 adopts its bet
        assert again is not first and again.origin == "lookahead"
        assert store.stats.dispatched == 3
        store.withdraw_lookahead_bets()                      # slow(2) never adopted
        assert store.stats.withdrawn == 1
        await anyio.wait_all_tasks_blocked()
        gate.set()
        assert await store.call("slow", (1,), {}) == 10
        assert await store.call("slow", (1,), {}) == 10
        assert store.stats.hits == 2, store.trace.to_json()


@pytest.mark.anyio
async def test_store_lookahead_skips_what_the_real_run_already_reached(anyio_backend):
    slow, gate, runs = gated()
    gate.set()
    async with open_store([slow]) as store:
        assert await store.call("slow", (5,), {}) == 50      # the real run is ahead
        store.lookahead_bets([("slow", (5,), {})])           # the shadow's occurrence 0
        assert store.stats.dispatched == 0 and runs == [5]
        store.lookahead_bets([("slow", (5,), {}), ("slow", (5,), {})])
        assert store.stats.dispatched == 1                   # only occurrence 1 is new


@pytest.mark.anyio
async def test_store_lookahead_bets_only_on_pure_tools(anyio_backend):
    slow, gate, runs = gated(speculate="idempotent")
    async with open_store([slow]) as store:
        store.lookahead_bets([("slow", (1,), {})])
        assert store.stats.dispatched == 0


# ---------------------------------------------------------------- finished bets, iterators

class KnowingHost(LookaheadHost):
    """Also reports every bet as finished (value: the prompt's last character)."""

    def lookahead_outcome(self, tool, args, kwargs, occurrence):
        from spectool.shadow import Outcome
        return Outcome(value=f"lab{args[0][-1]} \n")


JUDGE_ZIP = ("data = ['a1', 'a2', 'b1', 'b2']\n"
             "labels = []\n"
             "for i in range(0, len(data), 2):\n"
             "    rows = data[i:i + 2]\n"
             "    first = llm_query('P:' + ' '.join(rows)).strip().split(' ')\n"
             "    checked = llm_query('C:' + '|'.join(r + '=' + x for r, x in zip(rows, first)))\n"
             "    labels += checked.strip().split('|')\n")


def test_a_finished_bet_lets_the_lookahead_bet_on_the_call_that_depends_on_it():
    interp, host = shadow([JUDGE_ZIP], host=KnowingHost())
    assert host.lookaheads[0][1] == [("llm_query", ("P:b1 b2",), 0),
                                     ("llm_query", ("C:b1=lab2",), 0)]
    plain, plain_host = shadow([JUDGE_ZIP])
    assert interp.value_of("labels") == plain.value_of("labels")
    assert host.launches == plain_host.launches


def test_peek_consumes_iterators_it_made_but_never_a_shared_one():
    interp, host = shadow(["rows = ['a', 'b']", "first = ['x', 'y']", "it = iter(rows)"])
    bets = interp.peek_tail("llm_query('-'.join(r + x for r, x in zip(rows, first)))\n")
    assert [b.args for b in bets] == [("ax-by",)]
    assert interp.peek_tail("llm_query('-'.join(zip(it, first)))\n") == []
    assert interp.peek_tail("for r in it:\n    llm_query(r)\n") == []
    assert interp.peek_tail("llm_query(str(list(enumerate(it))))\n") == []
    # the shared iterator was not advanced by any peek
    from shadow_driver import drive
    drive(interp, "rest = list(it)", host)
    assert interp.value_of("rest") == ["a", "b"]


@pytest.mark.anyio
async def test_driver_refreshes_the_lookahead_when_a_bet_finishes(anyio_backend):
    """Iteration 2's check call depends on iteration 2's first call: it can only be bet
    on once that has finished, while the shadow still waits on iteration 1."""
    log: list[str] = []
    events = {p: anyio.Event() for p in ("Qa", "Qb", "check <Qb>")}

    @spectool.tool(speculate="pure", name="llm")
    async def llm(prompt: str) -> str:
        log.append(prompt)
        if prompt in events:
            events[prompt].set()
        if prompt == "Qa":  # iteration 1 is held until iteration 2's check has started
            await events["check <Qb>"].wait()
        await anyio.lowlevel.checkpoint()
        return f"<{prompt}> "

    rt = spectool.Runtime([llm], mode="lazy")
    cell = ("out = []\n"
            "for c in ['a', 'b']:\n"
            "    r = llm('Q' + c)\n"
            "    v = llm('check ' + r.strip())\n"
            "    out.append(v.strip())\n")
    with anyio.fail_after(20):
        res = await rt.run_cell(cell)
    assert res.error is None and res.namespace["out"] == ["<check <Qa>>", "<check <Qb>>"]
    assert log.index("check <Qb>") < log.index("check <Qa>")
    assert sorted(log) == sorted(["Qa", "Qb", "check <Qa>", "check <Qb>"])
    assert res.stats.wasted == 0 and res.stats.evicted == 0


# -- accumulators: every iteration whose arguments are known is bet on --------------------

CLASSIFY = ("data = ['line %d' % k for k in range(12)]\n"
            "def classify(rows):\n"
            "    out = llm_query('label ' + ' | '.join(rows))\n"
            "    return [x.strip() for x in out.split(',')]\n")


@pytest.mark.parametrize("accumulate", [
    "labels += classify(data[i:i + 3])",
    "labels.append(classify(data[i:i + 3]))",
    "labels.extend(classify(data[i:i + 3]))",
    "by_start[i] = classify(data[i:i + 3])",
    "labels = labels + classify(data[i:i + 3])",
])
def test_an_accumulating_loop_bets_on_every_later_iteration_at_its_first_wait(accumulate):
    """The loop's accumulator becomes unknown in the peek after one iteration; the later
    iterations' calls do not depend on it, so all of them are bet on at once (a helper
    from an earlier cell, called with a slice of a list of strings)."""
    loop = f"labels = []\nby_start = {{}}\nfor i in range(0, len(data), 3):\n    {accumulate}\n"
    interp, host = shadow([CLASSIFY, loop], host=LookaheadHost())
    waits, bets = host.lookaheads[0]
    assert waits == 0
    assert [b[1][0] for b in bets] == [
        "label " + " | ".join(f"line {k}" for k in range(i, i + 3)) for i in (3, 6, 9)]
    real = [args[0] for _, args, _, _ in host.launches]       # what statement mode ran
    assert {b[1][0] for b in bets} <= set(real)


MUTATING_HELPER = ("data = [[k] for k in range(12)]\n"
                   "def note(rows, tag):\n"
                   "    rows[-1].append(tag)\n")
# in the peek, note()'s arguments are unknown (its tag is a pending result), so note
# never runs there and its change to the row it shares with ``data`` is unseen: only
# tainting ``data`` keeps the next statement from betting on the old rows
MUTATING_LOOP = ("labels = []\n"
                 "for i in range(0, 10, 3):\n"
                 "    note(data[i:i + 4], llm_query('tag %d' % i).strip())\n"
                 "    labels += [llm_query(str(data[i:i + 4]))]\n")


def test_a_helper_that_mutates_the_rows_it_is_passed_gets_no_stale_bet():
    """The slices share their rows with ``data``: a helper that changes a row changes
    what a later iteration's prompt holds. ``data`` then becomes unknown after an
    unknown iteration, and no bet is on a call the real run does not make."""
    interp, host = shadow([MUTATING_HELPER, MUTATING_LOOP], host=LookaheadHost())
    real = {args[0] for _, args, _, _ in host.launches}
    bets = {b[1][0] for _, bs in host.lookaheads for b in bs}
    assert bets <= real
    assert interp.value_of("data")[3] == [3, "<tag 0>"]


@pytest.mark.parametrize("immutable_check", ["real", "forced"])
def test_a_name_passed_only_as_a_slice_stays_known_only_if_no_item_can_change(
        immutable_check, monkeypatch):
    """``f(xs[a:b])`` hands f a new list of the same items: ``xs`` stays known when
    every item is immutable, and becomes unknown when an item could be changed.
    Negative control (``forced``): a check that calls every list immutable keeps the
    list of lists known, which the real check refuses."""
    from spectool.shadow import interpreter as interp_mod
    if immutable_check == "forced":
        monkeypatch.setattr(interp_mod, "_immutable_items", lambda value: True)
    interp, _ = shadow(["words = ['a', 'b', 'c']\nrows = [[1], [2], [3]]\n"])
    scope = interp._module
    for name in ("words", "rows"):
        interp._taint({name}, scope, rebound=frozenset(), sliced=frozenset({name}))
    assert interp.value_of("words") == ["a", "b", "c"]
    rows = scope.vars["rows"]
    if immutable_check == "real":
        assert isinstance(rows, spectool.shadow.Unknown)
    else:
        assert rows == [[1], [2], [3]]
    interp._taint({"words"}, scope, rebound=frozenset({"words"}), sliced=frozenset({"words"}))
    assert isinstance(scope.vars["words"], spectool.shadow.Unknown)   # rebound: unknown
