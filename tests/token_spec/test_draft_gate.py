"""DraftGate and GatedDrafter: a costly drafter drafts only where it pays, decided from
earlier rounds only, and the output stays the target's."""

from __future__ import annotations

import pytest
import torch

from token_spec.drafters import Draft, GatedDrafter
from token_spec.gamma import DraftGate
from token_spec.sampling import SamplingParams

BF16_LIKE = (1.0, 1.0, 1.02, 1.04, 1.06)  # verification nearly free
Q4_LIKE = (1.0, 1.25, 1.45, 1.7, 1.95)  # wider passes cost more


def _feed(gate: DraftGate, rounds: int, proposed: int, accepted: int) -> None:
    for _ in range(rounds):
        gate.update(proposed, accepted)


def test_gate_stays_open_where_drafting_is_cheap_even_at_low_acceptance():
    gate = DraftGate(costs=BF16_LIKE, draft_cost=0.08)
    _feed(gate, 30, 2, 0)  # every round rejected at its first token...
    _feed(gate, 10, 2, 1)  # ...or its second: alpha ~ 0.2
    assert 0.1 < gate.alpha < 0.4
    assert gate.tokens() >= 1


def test_gate_shuts_where_the_target_step_is_cheap_and_acceptance_low():
    gate = DraftGate(costs=Q4_LIKE, draft_cost=0.2)
    _feed(gate, 40, 2, 0)
    assert gate.best() == 0
    calls = [gate.tokens() for _ in range(16)]
    assert calls == [0] * 7 + [1] + [0] * 7 + [1]  # shut, with a one-token probe every 8th call


@pytest.mark.parametrize("block", [True, False], ids=["one pass drafts the block", "control: a pass per token"])
def test_a_block_drafter_pays_its_pass_once_so_its_gate_drafts_longer(block):
    """A DFlash block costs one pass whatever its length; charged per token (the draft
    model's model), the same cost would keep the gate at one token."""
    gate = DraftGate(costs=BF16_LIKE, draft_cost=0.5, max_tokens=4, block=block)
    _feed(gate, 40, 4, 2)  # alpha ~ 2/3
    assert 0.6 < gate.alpha < 0.75
    assert gate.best() == (4 if block else 1)


def test_failed_probes_back_off_and_reopening_resets_the_interval():
    gate = DraftGate(costs=Q4_LIKE, draft_cost=0.2, probe_every=4, max_probe_every=16)
    _feed(gate, 40, 2, 0)
    gaps = []
    for _ in range(4):
        calls = 0
        while gate.tokens() == 0:
            calls += 1
        gaps.append(calls + 1)
        gate.update(1, 0)  # the probe is rejected: the gate stays shut
    assert gaps == [4, 8, 16, 16]
    _feed(gate, 20, 1, 1)  # accepted drafts reopen it...
    assert gate.tokens() >= 1
    _feed(gate, 40, 2, 0)  # ...and the next shut spell starts from the first interval
    assert [gate.tokens() for _ in range(4)] == [0, 0, 0, 1]


def test_gate_reopens_when_probes_are_accepted():
    gate = DraftGate(costs=Q4_LIKE, draft_cost=0.2)
    _feed(gate, 40, 1, 0)
    assert gate.best() == 0
    _feed(gate, 20, 1, 1)
    assert gate.best() >= 1


def test_gate_picks_more_tokens_as_acceptance_grows():
    low, high = DraftGate(costs=Q4_LIKE, draft_cost=0.1), DraftGate(costs=Q4_LIKE, draft_cost=0.1)
    _feed(low, 30, 4, 1)
    _feed(high, 30, 4, 4)
    assert high.best() > low.best() >= 0


@pytest.mark.parametrize("kwargs, message", [
    ({"costs": (), "draft_cost": 0.1}, "costs"),
    ({"costs": (1.0, 0.0), "draft_cost": 0.1}, "costs"),
    ({"costs": (1.0,), "draft_cost": -1.0}, "draft_cost"),
    ({"costs": (1.0,), "draft_cost": 0.1, "max_tokens": 0}, "max_tokens"),
    ({"costs": (1.0,), "draft_cost": 0.1, "probe_every": 64, "max_probe_every": 32}, "probe_every"),
    ({"costs": (1.0,), "draft_cost": 0.1, "decay": 0.0}, "decay"),
])
def test_bad_gate_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DraftGate(**kwargs)


class Scripted:
    """A drafter that proposes the given continuation of a known sequence."""

    name = "scripted"

    def __init__(self, truth: list[int], wrong_at: set[int] = frozenset()) -> None:
        self.truth, self.wrong_at = truth, wrong_at
        self.calls = 0

    def begin(self, prompt_ids):
        pass

    def propose(self, context, k, params, generator):
        self.calls += 1
        n = len(context)
        toks = [self.truth[n + i] + (1 if n + i in self.wrong_at else 0) for i in range(k) if n + i < len(self.truth)]
        return Draft(tokens=torch.tensor(toks, dtype=torch.long))

    def end(self, output_ids):
        pass


class Recorder:
    def __init__(self, answer: int) -> None:
        self.answer, self.updates = answer, []

    def tokens(self):
        return self.answer

    def update(self, proposed, accepted):
        self.updates.append((proposed, accepted))


def test_gated_drafter_settles_each_draft_against_the_verified_context():
    truth = list(range(100, 140))
    inner, gate = Scripted(truth, wrong_at={12}), Recorder(3)
    d = GatedDrafter(inner, gate)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    d.begin(truth[:5])
    assert d.propose(truth[:10], 4, params, None).tokens.tolist() == [110, 111, 113]  # 12 drafted wrong
    assert gate.updates == []  # nothing verified yet
    d.propose(truth[:13], 4, params, None)  # the round kept 110, 111 and emitted 112 instead of 113
    assert gate.updates == [(3, 2)]
    d.propose(truth[:17], 4, params, None)  # all three accepted (13..15) plus the bonus
    assert gate.updates == [(3, 2), (3, 3)]


def test_gated_drafter_skips_the_drafter_while_the_gate_is_shut():
    truth = list(range(100, 140))
    inner = Scripted(truth)
    d = GatedDrafter(inner, Recorder(0))
    params = SamplingParams(temperature=0.0, max_tokens=40)
    d.begin(truth[:5])
    assert d.propose(truth[:10], 4, params, None).tokens.numel() == 0
    assert inner.calls == 0 and d.rounds == {"drafted": 0, "idle": 0, "skipped": 1}
    with pytest.raises(TypeError, match="gate must have tokens"):
        GatedDrafter(inner, object())


class Declining(Scripted):
    """A drafter that runs (a forward, its confidence) and proposes nothing, as a DSpark
    schedule or a confidence stop does on text the draft cannot predict."""

    def propose(self, context, k, params, generator):
        self.calls += 1
        return Draft(tokens=torch.empty(0, dtype=torch.long))


def test_an_open_round_that_proposes_nothing_counts_as_a_rejection():
    truth = list(range(100, 140))
    gate = Recorder(3)
    d = GatedDrafter(Declining(truth), gate)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    d.begin(truth[:5])
    for n in (10, 11, 12):
        assert d.propose(truth[:n], 4, params, None).tokens.numel() == 0
    assert gate.updates == [(1, 0)] * 3
    assert d.rounds == {"drafted": 0, "idle": 3, "skipped": 0}


@pytest.mark.parametrize("declining, shuts", [(True, True), (False, False)],
                         ids=["idle rounds shut the gate", "control: rounds that draft and are accepted keep it open"])
def test_a_drafter_that_keeps_declining_is_shut_out(declining, shuts):
    """The real gate, from its open prior: rounds where the drafter ran for nothing shut
    it, so the drafter's forward stops being paid on every round."""
    from token_spec.gamma import OPEN_PRIOR

    truth = list(range(100, 400))
    inner = Declining(truth) if declining else Scripted(truth)
    d = GatedDrafter(inner, DraftGate(costs=Q4_LIKE, draft_cost=0.2, **OPEN_PRIOR), caps=False)
    params = SamplingParams(temperature=0.0, max_tokens=300)
    d.begin(truth[:5])
    n = 10
    for _ in range(40):
        n += d.propose(truth[:n], 4, params, None).tokens.numel() + 1
    assert (d.rounds["skipped"] > 20) is shuts
    assert (inner.calls < 20) is shuts


@pytest.mark.model
def test_gated_hybrid_output_equals_vanilla_greedy(fast_target):
    from token_spec.draft_model import fast_draft, load_draft
    from token_spec.drafters import HybridDrafter, ModelDrafter, NgramDrafter
    from token_spec.engine import SpeculativeDecoder, VanillaDecoder
    from token_spec.gamma import CostAwareGamma

    draft = fast_draft(load_draft(fast_target.model), fast_target.dtype)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    prompts = [[{"role": "user", "content": t}] for t in (
        "Write a haiku about rain.", "Write a Python function that doubles every number in a list.",
        "Describe a sunrise over the sea in two sentences.")]
    # a gate that shuts fast and probes often: both kinds of round occur
    gate = DraftGate(costs=Q4_LIKE, draft_cost=0.2, probe_every=3)
    hybrid = HybridDrafter(NgramDrafter(), GatedDrafter(ModelDrafter(draft, confidence=0.4, name="draft"), gate))
    spec = SpeculativeDecoder(fast_target, hybrid, gamma_policy=CostAwareGamma())
    vanilla = VanillaDecoder(fast_target)
    for msgs in prompts:
        ids = fast_target.encode(msgs)
        assert spec.generate(ids, params).token_ids == vanilla.generate(ids, params).token_ids
    gated = hybrid.model
    assert gated.rounds["drafted"] > 0 and gated.rounds["skipped"] > 0


@pytest.mark.parametrize("caps, drafted", [(False, 6), (True, 2)],
                         ids=["the drafter sets the length", "control: the gate caps it"])
def test_an_uncapping_gate_only_opens_the_round(caps, drafted):
    """A DSpark drafter's schedule weighs every position's own confidence: the gate in front
    of it decides whether the round drafts at all, not how long."""
    truth = list(range(100, 140))
    d = GatedDrafter(Scripted(truth), Recorder(2), caps=caps)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    d.begin(truth[:5])
    assert d.propose(truth[:10], 6, params, None).tokens.numel() == drafted
    shut = GatedDrafter(Scripted(truth), Recorder(0), caps=caps)
    shut.begin(truth[:5])
    assert shut.propose(truth[:10], 6, params, None).tokens.numel() == 0
