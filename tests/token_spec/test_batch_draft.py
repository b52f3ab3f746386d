"""Drafting for all sequences of a step at once (``token_spec.draft_steps.propose_many``).

Pinned here:
* on a batch-invariant draft (a tiny Llama on the exact lean forward), the drafts of
  ``propose_many`` are the drafts each sequence's own ``propose`` gives, tokens and q rows,
  for every model drafter (draft model, gated, n-gram + draft, DSpark), greedy and
  sampled with each sequence's own generator, with sequences of different lengths
  joining and leaving (1..8 at once), asking for different k and stopping early; the
  model steps really are packed (far fewer draft passes); a batched propose that hands a
  sequence another's draft is caught by the same comparison;
* the shipped int8 draft on the lean forward (not padded) drafts the same tokens batched
  as alone on real text at these widths (measured, not guaranteed by construction);
* on the real target, the engine's greedy output with batched drafting is the output
  with per-sequence drafting and without speculation, round by round the same drafts
  (same proposed / accepted counts), at batch widths 1..8 with requests of different
  lengths joining and leaving; the swapped-draft control leaves the output alone (the
  verifier is lossless) but is caught by the rounds.
"""

from __future__ import annotations

import random

import pytest
import torch

from token_spec.draft_steps import DraftRequest, propose_many
from token_spec.drafters import GatedDrafter, HybridDrafter, ModelDrafter, NgramDrafter
from token_spec.dspark import DSparkDrafter, SurvivalSchedule, TopProbConfidence
from token_spec.fast_forward import FastLlama
from token_spec.gamma import DraftGate
from token_spec.packed import PackedLM
from token_spec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
HOT = SamplingParams(temperature=0.9, top_k=20)
CHEAP = tuple(1.0 + 0.02 * w for w in range(16))  # wide passes nearly free: gates and schedules open
CHEAP_DRAFT = 0.05  # a draft step at 1/20 of a target step: DSpark's schedule opens on any machine


def tiny_draft(vocab: int = 96) -> FastLlama:
    """A random 2-layer Llama on the exact lean forward (batch-invariant by construction),
    its final norm scaled so that its rows range from flat to peaked."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
    return FastLlama(model, torch.float32, exact=True, native=False)


def makers(lm, confidence: TopProbConfidence | None = None) -> dict:
    """A fresh drafter per sequence, for each model drafter the server offers."""
    # sharp by default: the tiny draft's rows (top probability 0.3..0.6) then stop at 0, 1 or 4
    conf = confidence or TopProbConfidence(greedy=(8.0, 1.0), sampled=(8.0, 1.0))
    return {
        "draft": lambda: ModelDrafter(lm, confidence=0.4, name="draft"),
        "gated draft": lambda: GatedDrafter(ModelDrafter(lm, confidence=0.4),
                                            DraftGate(costs=CHEAP, draft_cost=0.05, max_tokens=4)),
        "ngram+draft": lambda: HybridDrafter(NgramDrafter(), ModelDrafter(lm, confidence=0.4)),
        "dspark": lambda: DSparkDrafter(ModelDrafter(lm), conf,
                                        SurvivalSchedule(costs=CHEAP, draft_cost=0.05, max_tokens=4)),
    }


def _contexts(rng: random.Random, n: int, pool: list[int]) -> list[list[int]]:
    """n contexts of different lengths; some repeat themselves (the lookup then matches)."""
    out = []
    for i in range(n):
        body = [rng.choice(pool) for _ in range(rng.randint(2, 24))]
        out.append(body * 2 if i % 3 == 0 else body)
    return out


def fleet_rounds(make, pool: list[int], *, params: SamplingParams, batched=propose_many, n: int = 8,
                 seed: int = 0) -> list[tuple[int, int, object, object]]:
    """Drive two fleets of the same drafters through the same rounds: one drafts with
    ``batched`` (all active sequences at once), the other one sequence at a time with
    ``propose``. Sequence i joins at round i and leaves after 8..11 rounds (so 1..8 are
    active at once, of different lengths); each round asks each a k in 0..4 and then
    "verifies": the context grows by a random prefix of the draft and one token. Returns
    (round, sequence, batched draft, solo draft) for every draft asked for."""
    rng = random.Random(seed)
    contexts = _contexts(rng, n, pool)
    start = list(range(n))
    stop = [i + rng.randint(8, 11) for i in range(n)]
    fleets = [[make() for _ in range(n)] for _ in range(2)]
    gens = [[torch.Generator().manual_seed(100 + i) for i in range(n)] for _ in range(2)]
    out = []
    for r in range(max(stop)):
        active = [i for i in range(n) if start[i] <= r < stop[i]]
        for i in active:
            if r == start[i]:
                for fleet in fleets:
                    fleet[i].begin(contexts[i])
        ks = {i: rng.choice([0, 1, 2, 3, 4, 4]) for i in active}
        many = batched([DraftRequest(fleets[0][i], list(contexts[i]), ks[i], params, gens[0][i]) for i in active])
        solo = [fleets[1][i].propose(list(contexts[i]), ks[i], params, gens[1][i]) for i in active]
        for i, a, b in zip(active, many, solo):
            out.append((r, i, a, b))
            toks = b.tokens.tolist()
            contexts[i] = contexts[i] + toks[: rng.randint(0, len(toks))] + [rng.choice(pool)]
        for i in active:
            if r == stop[i] - 1:
                for fleet in fleets:
                    fleet[i].end(contexts[i])
    return out


def mismatches(rounds) -> list[tuple[int, int]]:
    """(round, sequence) where the batched draft is not the solo draft (tokens or q rows)."""
    bad = []
    for r, i, a, b in rounds:
        same = torch.equal(a.tokens, b.tokens) and (a.probs is None) == (b.probs is None)
        if same and a.probs is not None:
            same = torch.equal(a.probs, b.probs)
        if not same:
            bad.append((r, i))
    return bad


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return tiny_draft()


POOL = list(range(3, 90))


@pytest.mark.parametrize("method", ["draft", "gated draft", "ngram+draft", "dspark"])
@pytest.mark.parametrize("params", [GREEDY, HOT], ids=["greedy", "sampled"])
def test_batched_drafts_are_the_per_sequence_drafts_on_a_batch_invariant_draft(tiny, method, params):
    rounds = fleet_rounds(makers(tiny)[method], POOL, params=params)
    assert mismatches(rounds) == []
    lengths = [len(b.tokens) for _, _, _, b in rounds]
    assert len(set(lengths)) >= 3  # sequences drafted different lengths (k, stops, lookups)
    assert sum(lengths) >= len(rounds)  # and drafted at all
    if params is HOT:
        assert all(b.probs is not None and b.probs.shape[0] == b.tokens.numel() for _, _, _, b in rounds
                   if b.tokens.numel() and method != "ngram+draft")


def test_dspark_sequences_stop_at_their_own_lengths_and_drop_out_of_later_passes(tiny, monkeypatch):
    """DSpark's schedule ends rounds at different positions: the packed passes of a step
    shrink as sequences stop (each pass holds only the sequences still drafting)."""
    segments_per_pass = []
    real = PackedLM._pass

    def counting(self, segs):
        segments_per_pass.append(len(segs))
        return real(self, segs)

    make = makers(tiny)["dspark"]
    drafters = [make() for _ in range(6)]
    contexts = _contexts(random.Random(3), 6, POOL)
    for d, c in zip(drafters, contexts):
        d.begin(c)
        d.propose(c, 1, GREEDY, None)  # caches primed: the next round's catch-up is one token
    monkeypatch.setattr(PackedLM, "_pass", counting)
    drafts = propose_many([DraftRequest(d, c + [7], 4, GREEDY, None) for d, c in zip(drafters, contexts)])
    lengths = [d.tokens.numel() for d in drafts]
    assert len(set(lengths)) >= 2, lengths
    # after the catch-up pass, pass j (j = 1..3: the last token drawn is never fed) feeds
    # the sequences that drew token j; a lone feed runs alone, not packed
    want = [len(drafts)] + [sum(1 for n in lengths if n >= j) for j in range(1, 4)]
    assert segments_per_pass == [w for w in want if w >= 2]


def test_the_model_steps_run_as_packed_passes(tiny, monkeypatch):
    """Counted draft forwards: the batched fleet runs a handful of passes per round where
    the per-sequence fleet runs one per sequence and draft position."""
    calls = _counted_forwards(monkeypatch)
    inside = {"solo": 0, "packed": 0}

    def batched(requests):
        before = dict(calls)
        out = propose_many(requests)
        for key in calls:
            inside[key] += calls[key] - before[key]
        return out

    rounds = fleet_rounds(makers(tiny)["dspark"], POOL, params=GREEDY, batched=batched)
    per_sequence = calls["solo"] - inside["solo"]  # the other fleet's forwards (prefills included)
    assert mismatches(rounds) == []
    assert inside["packed"] > 0
    assert 2 * (inside["solo"] + inside["packed"]) < per_sequence, (inside, calls)


# a first draft row costs as much as a second target row: even a sure draft cannot pay
DEAR = tuple(1.0 + 1.0 * w for w in range(16))


def _counted_forwards(monkeypatch) -> dict:
    """Draft-model forwards from now on, one-sequence and packed (prefills included)."""
    calls = {"solo": 0, "packed": 0}
    real_forward, real_pass = FastLlama.forward, PackedLM._pass

    def forward(self, *args, **kwargs):
        calls["solo"] += 1
        return real_forward(self, *args, **kwargs)

    def packed(self, segs):
        calls["packed"] += 1
        return real_pass(self, segs)

    monkeypatch.setattr(FastLlama, "forward", forward)
    monkeypatch.setattr(PackedLM, "_pass", packed)
    return calls


@pytest.mark.parametrize("costs, runs", [(DEAR, False), (CHEAP, True)], ids=["cannot pay", "control: can pay"])
def test_dspark_rounds_whose_costs_cannot_pay_a_sure_first_draft_run_no_draft_forward(tiny, monkeypatch, costs, runs):
    """A step whose schedule cannot admit even a first draft sure to survive (a_1 = 1; a
    wide batch makes every verify row dear) pays no draft-model work: no prefill of the
    draft cache, no catch-up, no first row. The control (cheap rows) drafts, with the
    same counting. The draft cache stays correct: when rounds open again, the drafts
    are the ones drafters that drafted all along give."""
    conf = TopProbConfidence(greedy=(8.0, 1.0), sampled=(8.0, 1.0))
    schedules = [SurvivalSchedule(costs=costs, draft_cost=0.05, max_tokens=4) for _ in range(6)]
    drafters = [DSparkDrafter(ModelDrafter(tiny), conf, s) for s in schedules]
    contexts = _contexts(random.Random(5), 6, POOL)
    for d, c in zip(drafters, contexts):
        d.begin(c)
    assert all(s.opens() is runs for s in schedules)
    calls = _counted_forwards(monkeypatch)
    for step in range(3):
        drafts = propose_many([DraftRequest(d, c + [7] * step, 4, GREEDY, None) for d, c in zip(drafters, contexts)])
        assert all(d.tokens.numel() == 0 for d in drafts) or runs
    assert (calls["solo"] + calls["packed"] > 0) is runs, calls
    # rounds open again (the batch narrowed): the lagging caches catch up, the drafts are exact
    for s in schedules:
        s.costs = CHEAP
    late = propose_many([DraftRequest(d, c + [7] * 3, 4, GREEDY, None) for d, c in zip(drafters, contexts)])
    fresh = [DSparkDrafter(ModelDrafter(tiny), conf, SurvivalSchedule(costs=CHEAP, draft_cost=0.05, max_tokens=4))
             for _ in contexts]
    for d, c in zip(fresh, contexts):
        d.begin(c)
    want = [d.propose(c + [7] * 3, 4, GREEDY, None) for d, c in zip(fresh, contexts)]
    assert [d.tokens.tolist() for d in late] == [d.tokens.tolist() for d in want]
    assert sum(d.tokens.numel() for d in late) > 0


def swapped(requests):
    """Negative control: the batched drafts handed out one sequence off."""
    out = propose_many(requests)
    return out[1:] + out[:1]


def test_negative_control_a_batched_propose_that_swaps_drafts_is_caught(tiny):
    rounds = fleet_rounds(makers(tiny)["draft"], POOL, params=GREEDY, batched=swapped)
    assert mismatches(rounds)


def test_a_drafter_without_a_plan_falls_back_to_its_propose(tiny):
    ngram = [NgramDrafter() for _ in range(2)]
    model = ModelDrafter(tiny)
    ctx = [5, 6, 7, 5, 6]
    for d in [*ngram, model]:
        d.begin(ctx)
    got = propose_many([DraftRequest(ngram[0], ctx, 2, GREEDY), DraftRequest(model, ctx, 3, GREEDY)])
    assert got[0].tokens.tolist() == ngram[1].propose(ctx, 2, GREEDY, None).tokens.tolist() == [7, 5]
    alone = ModelDrafter(tiny)
    alone.begin(ctx)
    assert torch.equal(got[1].tokens, alone.propose(ctx, 3, GREEDY, None).tokens)


def test_two_requests_on_one_draft_session_are_refused(tiny):
    d = ModelDrafter(tiny)
    d.begin([1, 2, 3])
    with pytest.raises(ValueError, match="share one draft session"):
        propose_many([DraftRequest(d, [1, 2, 3], 2, GREEDY), DraftRequest(d, [1, 2, 3], 2, GREEDY)])


def test_feeds_wider_than_a_packed_pass_run_alone(tiny):
    """A catch-up of more tokens than one packed pass holds runs through the session's own
    ``extend`` (as alone); the others still share a pass."""
    long_ctx = list(range(3, 60))
    drafters = [ModelDrafter(tiny) for _ in range(3)]
    twins = [ModelDrafter(tiny) for _ in range(3)]
    ctxs = [long_ctx[:5], long_ctx[:6], long_ctx[:7]]
    for group in (drafters, twins):
        for d, c in zip(group, ctxs):
            d.begin(c)
            d.propose(c, 2, GREEDY, None)
    later = [long_ctx, long_ctx[:8], long_ctx[:9]]  # the first one catches up 50 tokens
    got = propose_many([DraftRequest(d, c, 3, GREEDY) for d, c in zip(drafters, later)])
    want = [d.propose(c, 3, GREEDY, None) for d, c in zip(twins, later)]
    assert [g.tokens.tolist() for g in got] == [w.tokens.tolist() for w in want]


class _Recording:
    """A draft session that records which call ran each feed."""

    def __init__(self, last: bool) -> None:
        self.calls: list[tuple[str, int]] = []
        if last:
            self.extend_last = lambda ids: self._run("extend_last", ids)[-1]

    def _run(self, how: str, ids) -> torch.Tensor:
        self.calls.append((how, len(ids)))
        return torch.arange(float(len(ids) * 4)).view(len(ids), 4)

    def extend(self, ids) -> torch.Tensor:
        return self._run("extend", ids)


def test_a_catch_up_wider_than_a_packed_pass_computes_only_its_last_logits_row():
    """Feeds wider than PAD_WIDTH (never packed) go to the session's ``extend_last``
    where it has one; narrower feeds, and sessions without it, run ``extend``. Either way
    the plan gets the row after the last id."""
    from token_spec.draft_steps import Feed, _extend
    from token_spec.exact_kernels import PAD_WIDTH

    session = _Recording(last=True)
    wide, narrow = list(range(PAD_WIDTH + 1)), list(range(PAD_WIDTH))
    assert torch.equal(_extend(Feed(session, wide)), torch.arange(4.0) + 4 * PAD_WIDTH)
    assert torch.equal(_extend(Feed(session, narrow)), torch.arange(4.0) + 4 * (PAD_WIDTH - 1))
    assert session.calls == [("extend_last", PAD_WIDTH + 1), ("extend", PAD_WIDTH)]
    plain = _Recording(last=False)  # negative control: a session without extend_last still works
    assert torch.equal(_extend(Feed(plain, wide)), torch.arange(4.0) + 4 * PAD_WIDTH)
    assert plain.calls == [("extend", PAD_WIDTH + 1)]


# ------------------------------------------------------------------ the real draft and target


@pytest.fixture(scope="module")
def shipped_draft(fast_target):
    from token_spec.draft_model import fast_draft, load_draft

    return fast_draft(load_draft(fast_target.model), fast_target.dtype)


def _ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# greedy replies (bf16) of 48+ tokens, but for the last two (about 14 and 16 tokens)
PROMPTS = [
    _ask("What is binary search?"),
    _ask("Explain what a hash map is in two sentences."),
    _ask("Fix the bug:\n\ndef mean(xs):\n    return sum(xs) / len(xs) + 1\n"),
    _ask("Explain recursion with a short Python example."),
    _ask("Write a Python function that reverses a string, with a docstring."),
    _ask("Write a haiku about autumn rain."),
    _ask("Rewrite as a list comprehension:\n\nresult = []\nfor x in range(20):\n    if x % 3 == 0:\n"
         "        result.append(x * x)\n"),
    _ask("Describe how a bicycle works."),
    _ask("Add type hints to this function:\n\ndef merge(a, b):\n    out = dict(a)\n    out.update(b)\n"
         "    return out\n"),
    _ask("Name three prime numbers."),
]


@pytest.mark.model
@pytest.mark.parametrize("method", ["draft", "ngram+draft", "dspark"])
def test_the_shipped_int8_draft_drafts_the_same_tokens_batched_as_alone(fast_target, shipped_draft, method):
    """The draft's lean forward is not padded (``exact=False``), so its batch invariance is
    measured, not built in: on real text, at 1..8 sequences per pass, its greedy drafts
    batched are its drafts alone."""
    pool = sorted({t for p in PROMPTS for t in fast_target.encode(p)})
    make = makers(shipped_draft, TopProbConfidence.load("draft"))[method]
    rounds = fleet_rounds(make, pool, params=GREEDY, seed=1)
    assert mismatches(rounds) == []
    assert sum(len(b.tokens) for _, _, _, b in rounds) >= len(rounds) // 2


def _staggered(engine, prompts, lengths) -> tuple[dict[str, list[int]], set[int]]:
    """Request i is submitted before step i, with max_tokens lengths[i] (at most 8 run at
    once, the others wait for a free slot); returns each request's greedy output and the
    batch widths (decoding requests) of the steps."""
    from token_spec.serve.engine import Request

    outs: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    widths: set[int] = set()
    step = 0
    while step < len(prompts) or engine.has_work():
        if step < len(prompts):
            engine.submit(Request(id=f"r{step}", prompt_ids=prompts[step],
                                  params=SamplingParams(temperature=0, max_tokens=lengths[step])))
        step += 1
        updates = engine.step()
        widths.add(len(updates))  # one update per decoding request
        for rid, upd in updates:
            outs[rid].extend(upd.token_ids)
    return outs, widths


@pytest.fixture(scope="module")
def engines(fast_target):
    """``engines(method, **kwargs)``: the server's engine for ``method`` (gated, the gates
    and schedules nearly always open). The drafter factory is made once per method: it
    measures the draft's step cost, a timing, and the engines compared must weigh
    drafting alike. DSpark's schedule gets ``CHEAP_DRAFT`` instead of that timing: how
    much a draft step costs against the target's depends on the machine and the GEMM
    kernels, and the schedule would draft rarely where it is dear."""
    from token_spec import dspark
    from token_spec.serve.engine import BatchEngine
    from token_spec.serve.server import make_drafter_factory

    factories: dict[str, object] = {}

    def make(method: str, **kwargs) -> BatchEngine:
        if method not in factories:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(dspark, "measure_step_cost", lambda *args, **kw: CHEAP_DRAFT)
                factories[method] = make_drafter_factory(method, fast_target, gate_costs=CHEAP, max_tokens=4)
        return BatchEngine(PackedLM(fast_target.fast), fast_target.tokenizer, fast_target.eos_ids,
                           drafter_factory=factories[method], gamma=4, max_rows=16, max_seqs=8, pass_costs=CHEAP,
                           **kwargs)

    return make


# request i joins at step i; a step emits at most 5 tokens (gamma 4), so with these
# max_tokens the first 8 are all there at step 7; they leave at different steps, and
# the last two take the slots that free up
LENGTHS = [40, 36, 32, 28, 24, 20, 16, 12, 14, 18]


@pytest.fixture(scope="module")
def vanilla_staggered(fast_target, engines):
    prompts = [fast_target.encode(p) for p in PROMPTS]
    outs, _ = _staggered(engines("none"), prompts, LENGTHS)
    return prompts, outs


@pytest.mark.model
@pytest.mark.parametrize("method", ["draft", "ngram+draft", "dspark"])
def test_batched_drafting_gives_the_per_sequence_output_and_rounds(engines, vanilla_staggered, method):
    prompts, vanilla = vanilla_staggered
    runs = {}
    for batch in (True, False):
        rounds: list[tuple[int, int]] = []
        engine = engines(method, batch_drafts=batch, on_round=lambda p, a, r=rounds: r.append((p, a)))
        runs[batch] = _staggered(engine, prompts, LENGTHS) + (rounds,)
    (batched, widths, rounds_b), (solo, _, rounds_s) = runs[True], runs[False]
    assert widths >= set(range(1, 9))
    assert batched == solo == vanilla
    assert all(len(v) >= 8 for v in vanilla.values())
    assert rounds_b == rounds_s and sum(p for p, _ in rounds_b) >= 20


@pytest.mark.model
def test_negative_control_swapped_drafts_keep_the_output_but_not_the_rounds(engines, vanilla_staggered, monkeypatch):
    prompts, vanilla = vanilla_staggered
    solo_rounds: list[tuple[int, int]] = []
    engine = engines("draft", batch_drafts=False, on_round=lambda p, a: solo_rounds.append((p, a)))
    solo, _ = _staggered(engine, prompts, LENGTHS)
    from token_spec.serve import engine as engine_module

    monkeypatch.setattr(engine_module, "propose_many", swapped)
    rounds: list[tuple[int, int]] = []
    engine = engines("draft", on_round=lambda p, a: rounds.append((p, a)))
    outs, _ = _staggered(engine, prompts, LENGTHS)
    assert outs == solo == vanilla  # the verifier is lossless whatever it is handed
    assert rounds != solo_rounds
