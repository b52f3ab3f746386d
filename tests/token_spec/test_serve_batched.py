"""The serving engine's lossless contract on the lean forward: a request's output does not
depend on the batch.

Pinned here, on the real SmolLM2 target in each configuration the server offers (bf16,
bf16-q4, fp32; the C++ layer loop and its Python twin):
* a packed pass gives a sequence bit-identical logits to the one-sequence forward the
  decoder and the bench use, one token per pass, whatever else is packed with it and
  at whatever verify width; the negative control (the forward without its padding,
  ``exact=False``) is caught by the same comparison;
* greedy output of a request run alone without speculation equals its output batched
  with others under speculation, at several draft lengths (negative control: the lossy
  relaxed acceptance diverges);
* the draft budget is a pure function of counts; cancelling frees the KV at once.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

pytest.importorskip("starlette")

from token_spec.packed import PackedLM, Segment  # noqa: E402
from token_spec.sampling import SamplingParams  # noqa: E402
from token_spec.drafters import Draft, GatedDrafter  # noqa: E402
from token_spec.gamma import DraftGate  # noqa: E402
from token_spec.serve.engine import BatchEngine, ContextTooLong, Request, batch_costs, draft_budget  # noqa: E402
from token_spec.serve.server import load_server_target, make_drafter_factory  # noqa: E402
from token_spec.serve.switch import DraftSwitch  # noqa: E402

pytestmark = pytest.mark.model

CODE_PROMPT = [{"role": "user", "content": "Add type hints to this function:\n\ndef merge(a, b):\n"
                "    out = dict(a)\n    out.update(b)\n    return out\n"}]
OTHER_PROMPTS = [
    [{"role": "user", "content": "Write a haiku about autumn rain."}],
    [{"role": "user", "content": "Rewrite as a list comprehension:\n\nresult = []\nfor x in range(20):\n"
                                 "    if x % 3 == 0:\n        result.append(x * x)\n"}],
    [{"role": "user", "content": "What is binary search?"}],
]


@pytest.fixture(scope="module")
def targets(fast_target):
    """The server's target configurations, loaded once (fp32 and bf16-q4 only where the
    default is bf16, i.e. the CPU has native bf16)."""
    torch.set_num_threads(1)
    out = {"default": fast_target}
    if fast_target.dtype == torch.bfloat16:
        out["fp32"] = load_server_target("fp32")
        out["bf16-q4"] = load_server_target("bf16-q4")
    return out


def _logits_alone_and_packed(target, fast, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of one sequence: one token per pass of ``target.fast`` (the decoder's
    forward), and packed with other sequences at random widths through ``PackedLM(fast)``."""
    prompt = target.encode(CODE_PROMPT)
    seq = [prompt[-1]] + target.encode(" def merge(a: dict, b: dict) -> dict:\n    out")
    solo = fast.session()
    solo.prefill(prompt[:-1])
    alone = torch.cat([solo.extend([t]) for t in seq])

    lm = PackedLM(fast)
    rng = random.Random(seed)
    others = [(lm.new_kv(), target.encode(p)) for p in OTHER_PROMPTS]
    kv = lm.new_kv()
    lm.forward([Segment(kv, prompt[:-1], prefill=True)] + [Segment(k, p, prefill=True) for k, p in others])
    packed, i = [], 0
    while i < len(seq):
        width = rng.randint(1, 5)  # a verify segment of 1..5 rows
        segs = [Segment(kv, seq[i : i + width])]
        segs += [Segment(k, [rng.randrange(1000)] * rng.randint(1, 4)) for k, _ in others[: rng.randint(0, 3)]]
        rng.shuffle(segs)
        out = lm.forward(segs)
        packed.append(out[[s.kv is kv for s in segs].index(True)])
        i += width
    return alone, torch.cat(packed)


def _python_loop(fast):
    """The same forward with its layer loops in Python (the C++ loops off): the one-token
    passes and the packed pass both run the ATen ops, whose rows differ slightly from the
    fused kernels' (so one loop serves both sides of the comparison)."""
    twin = copy.copy(fast)
    twin._run_layers = twin._run_layers_packed = None
    return twin


@pytest.mark.parametrize("config", ["default", "fp32", "bf16-q4"])
@pytest.mark.parametrize("loop", ["native", "python"])
def test_packed_pass_gives_bit_identical_logits_to_one_token_passes(targets, config, loop):
    if config not in targets:
        pytest.skip(f"{config} is tested where the CPU has native bf16")
    target = targets[config]
    fast = target.fast if loop == "native" else _python_loop(target.fast)
    if loop == "native" and fast._run_layers_packed is None:
        pytest.skip("the C++ layer loop did not build here")
    alone, packed = _logits_alone_and_packed(target, fast)
    assert alone.shape == packed.shape
    assert torch.equal(alone, packed), f"max |diff| = {(alone - packed).abs().max().item()}"


def test_negative_control_the_unpadded_forward_is_caught_by_the_bitwise_comparison(fast_target):
    from token_spec.fast_forward import FastLlama

    # on BLAS's GEMMs (the compiled bf16 GEMM is row-invariant from one row, unpadded too)
    loose = FastLlama(fast_target.model, fast_target.dtype, exact=False, dense_kernel="blas")
    alone, packed = _logits_alone_and_packed(fast_target, loose)
    assert not torch.equal(alone, packed)


def test_more_rows_than_one_pass_holds_go_in_further_passes(fast_target):
    lm = PackedLM(fast_target.fast)
    kvs = [lm.new_kv() for _ in range(20)]
    for kv in kvs:
        lm.forward([Segment(kv, [1, 2, 3], prefill=True)])
    solo = lm.new_kv()
    lm.forward([Segment(solo, [1, 2, 3], prefill=True)])
    want = lm.forward([Segment(solo, [4])])[0]
    out = lm.forward([Segment(kv, [4]) for kv in kvs])  # 20 rows: two passes
    assert all(torch.equal(o, want) for o in out)
    with pytest.raises(ValueError, match="at most 16"):
        lm.forward([Segment(solo, [5] * 17)])


def _engine(target, method: str, *, acceptance: str = "strict", gamma: int = 4, gate_costs=None, **kwargs):
    factory = kwargs.pop("drafter_factory", None) or make_drafter_factory(method, target, gate_costs=gate_costs,
                                                                          max_tokens=gamma)
    return BatchEngine(PackedLM(target.fast), target.tokenizer, target.eos_ids, drafter_factory=factory, gamma=gamma,
                       max_rows=16, acceptance=acceptance, relaxed_threshold=0.05, pass_costs=gate_costs, **kwargs)


def _run(engine: BatchEngine, prompts: list, max_tokens: int) -> dict[str, list[int]]:
    outs: dict[str, list[int]] = {}
    for i, ids in enumerate(prompts):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=max_tokens)))
        outs[f"r{i}"] = []
    while engine.has_work():
        for rid, upd in engine.step():
            outs[rid].extend(upd.token_ids)
    return outs


def _prompts(target) -> list[list[int]]:
    return [target.encode(CODE_PROMPT)] + [target.encode(p) for p in OTHER_PROMPTS]


def _alone(target, max_tokens: int = 24) -> dict[str, list[int]]:
    """Each prompt decoded alone, no speculation, greedy."""
    vanilla = _engine(target, "none")
    return {f"r{i}": _run(vanilla, [ids], max_tokens)["r0"] for i, ids in enumerate(_prompts(target))}


@pytest.fixture(scope="module")
def alone_outputs(fast_target):
    return _alone(fast_target)


def test_the_server_alone_decodes_exactly_as_the_one_sequence_forward(fast_target, alone_outputs):
    """Vanilla greedy on the decoder's forward (prompt prefilled but for its last token,
    then one token per pass) gives the engine's tokens: one forward for both."""
    for i, prompt in enumerate(_prompts(fast_target)):
        session = fast_target.fast.session()
        session.prefill(prompt[:-1])
        out, token = [], prompt[-1]
        while len(out) < 24:
            token = int(session.extend([token])[-1].argmax())
            if token in fast_target.eos_ids:
                break
            out.append(token)
        assert alone_outputs[f"r{i}"] == out


@pytest.mark.parametrize("method", ["ngram", "suffix", "draft", "ngram+draft", "dspark"])
def test_greedy_output_alone_equals_output_batched_with_speculation(fast_target, alone_outputs, method):
    spec = _engine(fast_target, method)
    batched = _run(spec, _prompts(fast_target), 24)
    assert spec.steps <= 24  # at most one packed pass per token, shared by the four requests
    assert batched == alone_outputs
    assert all(len(v) >= 8 for v in alone_outputs.values())


@pytest.mark.parametrize("gamma", [1, 2, 7, 15])
def test_greedy_output_does_not_depend_on_the_draft_length(fast_target, alone_outputs, gamma):
    assert _run(_engine(fast_target, "ngram", gamma=gamma), _prompts(fast_target), 24) == alone_outputs


@pytest.mark.parametrize("config", ["fp32", "bf16-q4"])
def test_every_target_configuration_keeps_the_contract(targets, config):
    if config not in targets:
        pytest.skip(f"{config} is tested where the CPU has native bf16")
    target = targets[config]
    alone = _alone(target, 16)
    assert _run(_engine(target, "ngram+draft", gamma=3), _prompts(target), 16) == alone


def test_negative_control_relaxed_acceptance_changes_greedy_output(fast_target, alone_outputs):
    relaxed = _run(_engine(fast_target, "ngram", acceptance="relaxed"), _prompts(fast_target), 24)
    assert any(relaxed[k] != alone_outputs[k] for k in alone_outputs)


CHEAP = tuple(1.0 + 0.02 * w for w in range(16))  # wide passes nearly free: gates open


@pytest.mark.parametrize("method", ["ngram", "suffix", "draft", "ngram+draft", "dspark"])
def test_gated_drafting_keeps_greedy_identity(fast_target, alone_outputs, method):
    rounds = []
    engine = _engine(fast_target, method, gate_costs=CHEAP, on_round=lambda p, a: rounds.append((p, a)))
    assert _run(engine, _prompts(fast_target), 24) == alone_outputs
    assert rounds  # the gates let drafts through


class NeverRight:
    """A drafter whose every token is wrong: a token the target never emits here."""

    name = "never"
    token = 49151  # the last id of the vocabulary

    def begin(self, prompt_ids) -> None:
        pass

    def propose(self, context, k, params, generator) -> Draft:
        return Draft(tokens=torch.full((k,), self.token, dtype=torch.long), probs=None)

    def end(self, output_ids) -> None:
        pass


@pytest.mark.parametrize("gated", [True, False])
def test_the_gate_shuts_for_a_drafter_that_never_matches(fast_target, alone_outputs, gated):
    """Gated, the wrong drafter is asked only for rare one-token probes; ungated (the
    control) it drafts on every step. The output is the same either way."""
    assert all(NeverRight.token not in out for out in alone_outputs.values())
    if gated:
        def factory():
            return GatedDrafter(NeverRight(), DraftGate(costs=CHEAP, draft_cost=0.5, max_tokens=4))
    else:
        factory = NeverRight
    proposed = []
    engine = _engine(fast_target, "none", gate_costs=CHEAP if gated else None, drafter_factory=factory,
                     on_round=lambda p, a: proposed.append((p, a)))
    assert _run(engine, _prompts(fast_target), 24) == alone_outputs
    assert all(a == 0 for _, a in proposed)
    steps_with_drafts = len(proposed)
    decode_steps = sum(len(v) for v in alone_outputs.values())
    if gated:
        assert steps_with_drafts <= decode_steps // 6
    else:
        assert steps_with_drafts >= decode_steps - 4


class SlowClock:
    """A fake step clock: 0.01 s per reading, plus 1 s for every draft proposed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.01
        return self.now


@pytest.mark.parametrize("switched", [True, False])
def test_the_switch_stops_drafting_where_drafting_measured_slower(fast_target, alone_outputs, switched):
    """Drafting steps "take" a second longer (fake clock) and gain nothing: with the switch
    only its exploration steps draft; without it (the control) every step does. Same output."""
    clock = SlowClock()

    class SlowNeverRight(NeverRight):
        def propose(self, context, k, params, generator) -> Draft:
            clock.now += 1.0
            return super().propose(context, k, params, generator)

    proposed = []
    engine = _engine(fast_target, "none", drafter_factory=SlowNeverRight, clock=clock,
                     switch=DraftSwitch(explore_every=8) if switched else None,
                     on_round=lambda p, a: proposed.append((p, a)))
    assert _run(engine, _prompts(fast_target), 24) == alone_outputs
    decode_steps = sum(len(v) for v in alone_outputs.values())
    if switched:
        assert len(proposed) <= decode_steps // 8 + 8
    else:
        assert len(proposed) >= decode_steps - 4


@pytest.mark.parametrize("ahead", [False, True], ids=["not drafting ahead", "control: drafting ahead"])
def test_a_step_that_prefills_drafts_only_where_the_switch_prefers_drafting(fast_target, ahead):
    """A step that admits new requests is not timed by the switch; it takes the arm ahead
    at its width instead of drafting regardless, so a server where drafting measured slower
    pays no draft work on its prefill steps either."""
    switch = DraftSwitch()
    switch.record(4, True, 100 if ahead else 1, 1.0)
    switch.record(4, False, 10, 1.0)
    proposed = []
    engine = _engine(fast_target, "none", drafter_factory=NeverRight, switch=switch,
                     on_round=lambda p, a: proposed.append((p, a)))
    for i, ids in enumerate(_prompts(fast_target)):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=8)))
    engine.step()  # prefills all four, then decodes them in one packed pass
    assert len(proposed) == (4 if ahead else 0)
    assert switch.rates == {(4, True): 100 if ahead else 1, (4, False): 10}  # the step was not recorded


def test_the_gates_get_the_costs_of_the_step_batch_width(fast_target):
    engine = _engine(fast_target, "ngram", gate_costs=CHEAP)
    for i, ids in enumerate(_prompts(fast_target)):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=8)))
    engine.step()
    assert engine.last_budget == 3  # 4 sequences, 16 rows
    want = batch_costs(CHEAP, 4, 3)
    gates = [g for s in engine.active.values() for g in s.gates]
    assert len(gates) == 4 and all(g.costs == want and g.max_tokens == 3 for g in gates)


def test_the_dspark_schedule_gets_the_costs_of_the_step_batch_width(fast_target):
    engine = _engine(fast_target, "dspark", gate_costs=CHEAP)
    for i, ids in enumerate(_prompts(fast_target)):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=8)))
    engine.step()
    want = batch_costs(CHEAP, 4, 3)
    schedules = [g for s in engine.active.values() for g in s.gates]
    assert len(schedules) == 4 and all(type(g).__name__ == "SurvivalSchedule" for g in schedules)
    assert all(g.costs == want and g.max_tokens == 3 for g in schedules)


def test_batch_costs_are_the_per_sequence_share_of_the_packed_pass():
    costs = tuple(float(w) for w in range(1, 17))
    assert batch_costs(costs, 1, 3) == (1.0, 2.0, 3.0, 4.0)
    assert batch_costs(costs, 4, 3) == (1.0, 2.0, 3.0, 4.0)  # linear: the share does not change
    step = (1.0,) * 8 + (2.0,) * 8  # passes of 9..16 rows cost twice as much
    assert batch_costs(step, 1, 1) == (1.0, 1.0)
    assert batch_costs(step, 8, 1) == (0.125, 0.25)
    # at the prior acceptance (1/2) drafting pays alone and not in a batch of 8
    assert DraftGate(costs=batch_costs(step, 1, 1), draft_cost=0.0, max_tokens=1).best() == 1
    assert DraftGate(costs=batch_costs(step, 8, 1), draft_cost=0.0, max_tokens=1).best() == 0


def test_draft_budget_spends_only_free_rows():
    assert draft_budget(1, 0, 16, 4) == 4  # alone: full gamma
    assert draft_budget(4, 0, 16, 4) == 3  # (16 - 4) // 4
    assert draft_budget(16, 0, 16, 4) == 0  # a full batch drafts nothing
    assert draft_budget(2, 40, 16, 4) == 0  # a prefill fills the pass
    assert draft_budget(0, 0, 16, 4) == 0


def test_cancel_frees_the_kv_cache_at_once(fast_target):
    target = fast_target
    engine = _engine(target, "ngram")
    for i, ids in enumerate([target.encode(CODE_PROMPT), target.encode(OTHER_PROMPTS[0])]):
        engine.submit(Request(id=f"r{i}", prompt_ids=ids, params=SamplingParams(temperature=0, max_tokens=50)))
    engine.step()
    engine.step()
    kv = engine.active["r0"].kv
    assert kv.length > 0 and kv.nbytes > 0
    engine.cancel("r0")  # no step running: dropped now
    assert "r0" not in engine.active and kv.nbytes == 0 and kv.length == 0
    assert "r1" in engine.active


def test_a_request_longer_than_the_context_is_refused_with_its_numbers(fast_target):
    engine = _engine(fast_target, "none")
    with pytest.raises(ContextTooLong, match="maximum context length is 8192"):
        engine.submit(Request(id="x", prompt_ids=[1] * 100, params=SamplingParams(max_tokens=8100)))
