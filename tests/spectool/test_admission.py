"""Cost-aware admission (spectool.speculation.admission): the decision rule, the online models,
the execution counters, and that admission changes only speed, never results."""

from __future__ import annotations

import random

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spectool
from spectool.speculation.admission import (Admission, ClaimModel, ContentionModel, Decision,
                                bet_class, launch_pays)
from rt_helpers import chunks
from test_lossless import World, describe, plain_namespace, programs, splits

# -- the decision rule -------------------------------------------------------------------


def test_launch_pays_iff_claim_odds_beat_contention():
    assert launch_pays(0.5, 0.9)            # odds 1 > 0.9
    assert not launch_pays(0.5, 1.1)        # odds 1 < 1.1
    assert launch_pays(0.05, 0.0)           # no contention: any chance of a claim pays
    assert not launch_pays(0.05, 0.1)       # odds 0.053 < 0.1
    assert launch_pays(1.0, 100.0) and not launch_pays(0.0, 0.0)


def test_peek_bets_repeating_a_running_call_are_the_duplicate_class():
    assert bet_class("lookahead", duplicate=True) == "duplicate"
    assert bet_class("tail", duplicate=True) == "duplicate"
    assert bet_class("statement", duplicate=True) == "statement"
    assert bet_class("tail", duplicate=False) == "tail"


def test_claim_model_posterior_follows_outcomes():
    m = ClaimModel()
    p0 = m.p("q", "duplicate")
    for _ in range(40):
        m.record("q", "duplicate", claimed=True)
    assert m.p("q", "duplicate") > 0.6 > p0
    assert m.p("other", "duplicate") == p0          # per tool


def test_contention_model_recovers_alpha_and_keeps_prior_without_spread():
    rng = random.Random(1)
    c = ContentionModel(prior=0.1)
    for _ in range(300):
        n = rng.choice([1, 2, 3, 4, 6])
        c.add("q", n, 0.5 * (1 + 0.4 * (n - 1)) * rng.uniform(0.97, 1.03))
    assert c.alpha("q") == pytest.approx(0.4, abs=0.05)
    flat = ContentionModel(prior=0.1)
    for _ in range(50):
        flat.add("q", 1.0, 0.5)                     # always alone: contention unknown
    assert flat.alpha("q") == 0.1
    idle = ContentionModel(prior=0.1)
    for n in [1, 2, 4, 8] * 10:
        idle.add("q", n, 0.5)                       # latency flat under load
    assert idle.alpha("q") == pytest.approx(0.0, abs=1e-9)


def test_executions_in_flight_are_time_averaged():
    now = [0.0]
    adm = Admission(clock=lambda: now[0])
    a = adm.started("q")
    now[0] = 1.0
    b = adm.started("q")                           # a is alone for 1 s, then shares 1 s
    now[0] = 2.0
    adm.finished(a)
    now[0] = 3.0
    adm.finished(b)
    # a: 1 s alone + 1 s with b -> mean 1.5 in flight; b: 1 s with a + 1 s alone -> 1.5
    w, sx, sy, _, _ = adm.contention._sums["q"]
    assert adm.contention.samples["q"] == 2 and adm.in_flight("q") == 0
    assert sx / w == pytest.approx(0.5) and sy / w == pytest.approx(2.0)


def test_a_cancelled_execution_gives_no_latency_sample():
    adm = Admission()
    adm.finished(adm.started("q"), ok=False)
    assert adm.contention.samples["q"] == 0 and adm.in_flight("q") == 0


# -- in the runtime ------------------------------------------------------------------------

CHAIN = ("Improve it six times.\n```repl\n"
         'note = "start"\n'
         "for step in range(6):\n"
         "    out = q(note)\n"
         '    note = "improve: " + out[:12]\n'
         "print(note[:30])\n```\n")


def chain_tool(log: list[str]):
    @spectool.tool(speculate="pure")
    async def q(prompt: str) -> str:
        log.append(prompt)
        await anyio.sleep(0.005)          # a tool's latency, not an ordering device
        return "r" + str(abs(hash(prompt)) % 10**8)
    return q


async def run_chain(mode: str, admission,
                    shadow: str | None = None) -> tuple[list[str], spectool.TurnResult]:
    log: list[str] = []
    async with spectool.Runtime([chain_tool(log)], mode=mode, admission=admission,
                                shadow=shadow) as rt:
        with anyio.fail_after(30):
            res = await rt.run(chunks(CHAIN, 5))
    assert res.error is None
    return log, res


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_stale_loop_bets_are_not_executed_on_an_unknown_server(anyio_backend, mode):
    """A chain (each prompt built from the last result): the lookahead runs the rest of
    the waiting iteration, where ``note`` becomes unknown, so it bets on nothing stale;
    the tail's stale repeats while the body streams are declined by admission."""
    base_log, base = await run_chain("baseline", True)
    log, res = await run_chain(mode, True)
    assert base.stats.executions == len(base_log) == 6
    assert res.stats.executions == len(log) == 6            # nothing beyond what is needed
    assert res.stdout == base.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_negative_control_without_admission_the_stale_bets_run(anyio_backend, mode,
                                                                      monkeypatch):
    """The scenario does produce waste, and the counters see it, when admission is off
    and the lookahead bets on the next iteration without running the rest of this one."""
    from spectool.shadow import lookahead
    monkeypatch.setattr(lookahead, "_run_rest", lambda interp, frame: True)
    log, res = await run_chain(mode, False, shadow="thread")    # (patched in this process)
    assert res.stats.executions == len(log) > 6
    assert res.stats.executions_unclaimed + res.stats.executions_cancelled > 0
    assert res.stats.admission_declined == 0


@pytest.mark.anyio
async def test_claimed_bets_still_launch_and_hit(anyio_backend):
    """Independent calls (the common case) are admitted: admission costs no hits."""
    log: list[str] = []
    msg = "```repl\n" + "".join(f'a{i} = q("part {i}")\n' for i in range(4)) + "print(a0)\n```\n"
    async with spectool.Runtime([chain_tool(log)], mode="spec") as rt:
        res = await rt.run(chunks(msg, 5))
    # (how many hit depends on whether the shadow beats the real run to each call)
    assert res.stats.hits >= 1 and res.stats.executions == 4 == len(log)
    assert res.stats.admission_declined == 0 and res.stats.declined == 0


def test_admission_argument_is_checked():
    with pytest.raises(TypeError, match="admission must be"):
        spectool.Runtime([], admission="yes")


# -- admission changes only speed ----------------------------------------------------------


class CoinAdmission(Admission):
    """Declines launches at random: any admission policy must keep results identical."""

    def __init__(self, seed: int, p_launch: float) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.p_launch = p_launch

    def decide(self, tool: str, origin: str, duplicate: bool) -> Decision:
        d = super().decide(tool, origin, duplicate)
        return Decision(self.rng.random() < self.p_launch, d.klass, d.p, d.alpha)


@pytest.mark.anyio
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(message=programs(), sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
       seed=st.integers(0, 1000), p_launch=st.sampled_from([0.0, 0.3, 0.7]))
async def test_any_admission_decision_keeps_results_identical(anyio_backend, message, sizes,
                                                              seed, p_launch):
    async def run(mode, admission):
        world = World({})
        async with spectool.Runtime(world.tools, mode=mode, admission=admission) as rt:
            with anyio.fail_after(30):
                res = await rt.run(splits(message, sizes))
        return world, res

    bw, base = await run("baseline", True)
    for mode in ("lazy", "spec"):
        w, res = await run(mode, CoinAdmission(seed, p_launch))
        assert plain_namespace(res.namespace) == plain_namespace(base.namespace)
        assert res.stdout == base.stdout and describe(res.error) == describe(base.error)
        assert w.never_calls == bw.never_calls
        got, want = res.namespace.get("S", []), base.namespace.get("S", [])
        assert [t.split(":")[0] for t in got] == [t.split(":")[0] for t in want]
        assert len(set(got)) == len(got)
        if p_launch == 0.0:
            assert res.stats.executions == base.stats.executions


# -- names re-bound later in the loop body --------------------------------------------------

NOTE = ("```repl\nnote = ''\nfor line in ['a', 'b', 'c', 'd', 'e']:\n"
        "    out = q(note + 'classify ' + line)\n    note = out[:6]\nprint(note)\n```\n")


@pytest.mark.parametrize("admission", [True, False])
@pytest.mark.anyio
async def test_a_name_the_loop_rebinds_after_the_call_gives_no_stale_bet(anyio_backend,
                                                                       admission, monkeypatch):
    """``note`` is re-bound from the result after the call: the lookahead runs the rest
    of the waiting iteration first, so ``note`` is unknown there and the next
    iteration's call is not bet on at all (with admission on or off). Negative control:
    a lookahead that skips the rest of the iteration bets on the stale ``note`` and, with
    admission off, runs calls the cell never makes."""
    async def run(skip_rest):
        if skip_rest:
            from spectool.shadow import lookahead
            monkeypatch.setattr(lookahead, "_run_rest", lambda interp, frame: True)
        log: list[str] = []
        async with spectool.Runtime([chain_tool(log)], mode="lazy", admission=admission,
                                    shadow="thread") as rt:      # (patched in this process)
            with anyio.fail_after(30):
                res = await rt.run(chunks(NOTE, 5))
        return log, res
    log, res = await run(skip_rest=False)
    assert res.stats.executions == len(log) == 5
    log_stale, res_stale = await run(skip_rest=True)
    assert res_stale.stdout == res.stdout
    if not admission:
        assert res_stale.stats.executions == len(log_stale) > 5