"""DSpark-style verification (token_spec.dspark): the schedule, its non-anticipation, and
the joint law of whole sequences at temperature 1, with the paper's biased joint schedule
as the negative control.

The constructed pair (as in the DSpark paper's Appendix A counter-example, in spirit):
after token 0 the draft is sure of itself (top probability 0.9), after any other token it
is not (0.4). Verifying one token does not pay at the costs used, two or three may. The
joint schedule drafts the whole block and then picks the best length, so whether it
verifies d_1 depends on a_2, i.e. on whether d_1 = 0: it verifies 0s preferentially and
the rejection correction, which assumes d_1 ~ q, no longer yields p. The
non-anticipating schedule decides position k from a_k (row k, fixed before d_k is
drawn) and stops at the first decline, so its output keeps the target's law.
"""

from __future__ import annotations

import math

import pytest
import torch
from markov_harness import draft_model, target_model
from stats_helpers import FAIL_LOG10, PASS_LOG10, fmt, sequence_g_test_log10

from token_spec.drafters import Draft, ModelDrafter
from token_spec.dspark import DSparkDrafter, SurvivalSchedule, TopProbConfidence
from token_spec.gamma import FixedGamma
from token_spec.rounds import speculative_ids
from token_spec.sampling import SamplingParams, sample, warp
from token_spec.toy import MarkovLM

PROMPT = [1, 2, 1]
LENGTH = 4  # 3^4 = 81 whole sequences
N = 2000
COSTS = (1.0, 1.5, 1.6, 1.7)  # a step up to 2 tokens, then nearly flat (the shape bf16 passes have here)
K = 3


def _chain(rows, name: str) -> MarkovLM:
    return MarkovLM(torch.tensor(rows, dtype=torch.float64).log().float()[None], name=name)


def constructed_target() -> MarkovLM:
    return _chain([[0.2, 0.4, 0.4]] * 3, "target")


def constructed_draft() -> MarkovLM:
    return _chain([[0.9, 0.05, 0.05], [0.4, 0.3, 0.3], [0.4, 0.3, 0.3]], "draft")


class JointScheduleDrafter(DSparkDrafter):
    """BIASED (negative control): draft the whole block of k tokens, then verify the length
    with the best expected throughput. Admitting position j looks at a_{j+1}, which was
    computed from d_j: the decision to verify d_j depends on d_j itself."""

    def propose(self, context, k, params, generator):
        ctx = [int(t) for t in context]
        logits = self.drafter.first_logits(ctx)
        tokens, rows, conf = [], [], []
        for i in range(k):
            conf.append(self.confidence(logits, params.temperature == 0))
            q = warp(logits, params.temperature, params.top_k, params.top_p)
            tok = int(sample(q, generator))
            tokens.append(tok)
            rows.append(q)
            if i < k - 1:
                logits = self.drafter.next_logits(tok)
        best, best_rate, expected, survive = 0, self.schedule.rate(1.0, 0), 1.0, 1.0
        for j in range(1, k + 1):
            survive *= conf[j - 1]
            expected += survive
            rate = self.schedule.rate(expected, j)
            if rate > best_rate + 1e-12:
                best, best_rate = j, rate
        self.lengths[best] = self.lengths.get(best, 0) + 1
        return Draft(torch.tensor(tokens[:best], dtype=torch.long), torch.stack(rows[:best]) if best else None)


def run(drafter_cls, target, draft, params, *, costs=COSTS, k=K, n=N, seed=3, prompt=PROMPT):
    drafter = drafter_cls(ModelDrafter(draft), TopProbConfidence(), SurvivalSchedule(costs, 0.0, k))
    g = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(n):
        rounds = speculative_ids(target, drafter, prompt, params, policy=FixedGamma(k), generator=g,
                                 max_new_tokens=LENGTH)
        samples.append([t for r in rounds for t in r])
    assert all(len(s) == LENGTH for s in samples)
    law = target.sequence_probs(prompt, LENGTH, params)
    return sequence_g_test_log10(samples, law), drafter.lengths


# ------------------------------------------------------------------ the schedule itself


def test_schedule_admits_while_throughput_grows():
    s = SurvivalSchedule((1.0, 1.1, 1.2, 1.3, 1.4), max_tokens=4)
    assert s.length([0.9, 0.9, 0.9, 0.9]) == 4
    assert s.length([0.9, 0.05, 0.99, 0.99]) == 1  # the decline at 2 ends the round
    assert s.length([0.01, 0.99, 0.99]) == 0
    assert s.length([0.99] * 10) == 4  # max_tokens


def test_schedule_stops_at_first_decline_where_a_joint_search_would_go_on():
    # verifying 1 token does not pay (1.4 / 1.5 < 1), verifying 3 would (2.73 / 1.7 > 1)
    s = SurvivalSchedule(COSTS, max_tokens=3)
    assert s.length([0.4, 0.9, 0.9]) == 0
    e = [1.0, 1.4, 1.4 + 0.36, 1.4 + 0.36 + 0.324]
    assert max(range(4), key=lambda j: e[j] / COSTS[j]) == 3


def test_schedule_uses_pass_costs_and_draft_cost():
    flat = SurvivalSchedule((1.0,) * 9, max_tokens=8)
    assert flat.length([0.3] * 8) == 8  # verification is free: every token is worth a try
    dear = SurvivalSchedule(tuple(1.0 + 0.5 * k for k in range(9)), max_tokens=8)
    assert dear.length([0.3] * 8) == 0
    assert SurvivalSchedule((1.0,) * 9, draft_cost=0.5, max_tokens=8).length([0.3] * 8) == 0


def test_schedule_opens_only_where_a_sure_first_draft_would_pay():
    assert SurvivalSchedule((1.0, 1.5), max_tokens=4).opens()  # 2 tokens for 1.5: pays
    assert not SurvivalSchedule((1.0, 2.0), max_tokens=4).opens()  # 2 tokens for 2.0: does not
    assert not SurvivalSchedule((1.0, 1.5), draft_cost=0.5, max_tokens=4).opens()
    assert not SurvivalSchedule((1.0, 1.0), max_tokens=0).opens()


def test_drafter_whose_schedule_cannot_open_feeds_nothing():
    spy = _Spy()
    shut = DSparkDrafter(spy, TopProbConfidence(), SurvivalSchedule((1.0, 2.0, 2.5), max_tokens=2))
    assert shut.propose([1, 2], 2, SamplingParams(temperature=0), None).tokens.numel() == 0
    assert spy.log == [] and shut.lengths == {0: 1}
    spy = _Spy()  # control: a schedule that opens reads the first row
    open_ = DSparkDrafter(spy, TopProbConfidence(), SurvivalSchedule((1.0, 1.2, 1.3), max_tokens=2))
    assert open_.propose([1, 2], 2, SamplingParams(temperature=0), None).tokens.numel() == 2
    assert spy.log[0] == ("row", 1)


def test_schedule_rejects_bad_costs():
    with pytest.raises(ValueError):
        SurvivalSchedule(())
    with pytest.raises(ValueError):
        SurvivalSchedule((1.0, 0.0))
    with pytest.raises(ValueError):
        SurvivalSchedule((1.0,), draft_cost=-1)


def test_confidence_calibration_maps_top_probability():
    ident = TopProbConfidence()
    assert math.isclose(ident.from_top_prob(0.7, True), 0.7, rel_tol=1e-9)
    c = TopProbConfidence(greedy=(2.0, -1.0), sampled=(1.0, 0.5))
    m = 0.8
    z = math.log(m / (1 - m))
    assert math.isclose(c.from_top_prob(m, True), 1 / (1 + math.exp(-(2 * z - 1))), rel_tol=1e-9)
    assert math.isclose(c.from_top_prob(m, False), 1 / (1 + math.exp(-(z + 0.5))), rel_tol=1e-9)
    logits = torch.tensor([2.0, 0.0, float("-inf")])
    assert math.isclose(TopProbConfidence.top_prob(logits), float(torch.softmax(logits, -1).max()), rel_tol=1e-6)


class _Spy:
    """A step drafter that records the order of calls."""

    vocab_size = 3

    def __init__(self):
        self.log = []

    def begin(self, prompt_ids):
        pass

    def end(self, output_ids):
        pass

    def first_logits(self, context):
        self.log.append(("row", 1))
        return torch.tensor([3.0, 0.0, 0.0])

    def next_logits(self, token):
        self.log.append(("fed", int(token)))
        return torch.tensor([3.0, 0.0, 0.0])


def test_drafter_decides_each_position_before_drawing_it():
    spy = _Spy()
    seen = []

    class Conf(TopProbConfidence):
        def __call__(self, logits, greedy):
            seen.append(len(spy.log))  # how many rows / tokens existed when position k was judged
            return 0.9

    d = DSparkDrafter(spy, Conf(), SurvivalSchedule((1.0,) * 5, max_tokens=3))
    draft = d.propose([1, 2], 8, SamplingParams(temperature=0), None)
    assert draft.tokens.tolist() == [0, 0, 0]
    # position k is judged when exactly rows 1..k exist and tokens 1..k-1 were fed
    assert seen == [1, 2, 3]
    assert spy.log == [("row", 1), ("fed", 0), ("fed", 0)]  # no step wasted past max_tokens
    assert d.lengths == {3: 1}


# ------------------------------------------------------------------ joint law at T = 1


@pytest.mark.slow
def test_nonanticipating_schedule_keeps_the_target_law_on_the_counterexample():
    log10_p, lengths = run(DSparkDrafter, constructed_target(), constructed_draft(), SamplingParams())
    print(f"\nDSpark schedule (first decline): joint G-test {fmt(log10_p)}, verified lengths {lengths}")
    assert log10_p > PASS_LOG10
    assert sum(n for k, n in lengths.items() if k > 0) > 300  # not vacuous: hundreds of drafted rounds
    assert len([k for k in lengths if k > 0]) >= 2  # and more than one length


@pytest.mark.slow
def test_joint_schedule_is_caught_on_the_counterexample():
    log10_p, lengths = run(JointScheduleDrafter, constructed_target(), constructed_draft(), SamplingParams())
    print(f"\njoint DSpark schedule (looks at k+1 to admit k): joint G-test {fmt(log10_p)}, lengths {lengths}")
    assert log10_p < FAIL_LOG10


@pytest.mark.slow
@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.8, top_k=2),
                                    SamplingParams(temperature=1.3, top_p=0.85)],
                         ids=["T1", "T0.8-topk2", "T1.3-topp"])
def test_nonanticipating_schedule_keeps_the_law_on_random_chains(params):
    target, draft = target_model(), draft_model()
    costs = (1.0, 1.1, 1.2, 1.3, 1.4)
    log10_p, lengths = run(DSparkDrafter, target, draft, params, costs=costs, k=4, n=2500, seed=11, prompt=[2, 0, 1])
    print(f"\nDSpark schedule on random chains {params}: {fmt(log10_p)}, lengths {lengths}")
    assert log10_p > PASS_LOG10
    assert len([k for k in lengths if k > 0]) >= 2


def test_greedy_dspark_is_the_targets_argmax_path():
    target = constructed_target()
    drafter = DSparkDrafter(ModelDrafter(constructed_draft()), TopProbConfidence(), SurvivalSchedule(COSTS, 0.0, K))
    params = SamplingParams(temperature=0)
    out = [t for r in speculative_ids(target, drafter, PROMPT, params, policy=FixedGamma(K), generator=None,
                                      max_new_tokens=12) for t in r]
    assert out == [1] * 12  # argmax of the target row (0.2, 0.4, 0.4): the first maximal index
