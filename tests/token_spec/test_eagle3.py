"""The EAGLE-3-style head (token_spec.eagle3) and its drafter: training-time test unrolls
exactly what inference runs, the drafter's cache follows the verified context, and the
joint law of whole sampled sequences is the target's (with a wrong-q negative control),
alone and under the DSpark schedule. The target here is a tiny random Llama on the fast
forward (3 tokens, 3 layers), so the exact law of every 4-token continuation is known;
the real-model greedy identity is in test_greedy_identity_fast.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from stats_helpers import FAIL_LOG10, PASS_LOG10, fmt, sequence_g_test_log10

from token_spec.dspark import DSparkDrafter, SurvivalSchedule, TopProbConfidence
from token_spec.eagle3 import Eagle3Drafter, Eagle3Head
from token_spec.fast_forward import FastLlama, FeatureTap
from token_spec.gamma import FixedGamma
from token_spec.rounds import speculative_ids
from token_spec.sampling import SamplingParams, warp

PROMPT = [0, 1, 2, 0, 1]
LENGTH = 4
TAPS = (0, 1, 2)


class TinyTarget:
    """A 3-token, 3-layer random Llama on the fast forward (fp32, Python loop)."""

    def __init__(self, seed: int = 0) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=3, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
                          max_position_embeddings=64)
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # spread-out, context-dependent next-token rows
            model.model.embed_tokens.weight.mul_(3.0)
            for name, p in model.model.layers.named_parameters():
                if "norm" not in name:
                    p.mul_(20.0)
        self.model = model
        self.fast = FastLlama(model, torch.float32, exact=False, native=False)
        self.vocab_size = 3

    def start(self, prompt_ids):
        return self.fast.start(prompt_ids)

    def law(self, params: SamplingParams) -> dict[tuple[int, ...], float]:
        """Exact probability of every LENGTH-token continuation of PROMPT under warp(params)."""
        saved, self.fast.tap = self.fast.tap, None
        out = {}
        for seq in itertools.product(range(3), repeat=LENGTH):
            s = self.fast.start(PROMPT[:-1])
            rows = warp(s.extend(torch.tensor(PROMPT[-1:] + list(seq[:-1]))), params.temperature, params.top_k,
                        params.top_p).double()
            prob = 1.0
            for i, tok in enumerate(seq):
                prob *= float(rows[i, tok] / rows[i].sum())
            out[seq] = prob
        self.fast.tap = saved
        return out


def tiny_head(target: TinyTarget, vocab_ids=(0, 2), seed: int = 1) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(target.model.config, target.model.get_input_embeddings().weight.detach().float(),
                      torch.tensor(vocab_ids), tap_layers=TAPS)
    with torch.no_grad():
        head.head_rows.mul_(3.0)  # a confident head: drafts are accepted in some rounds, rejected in others
    return head.eval().requires_grad_(False)


def test_training_time_test_unrolls_what_inference_runs():
    """Step j of ``unroll`` at row t = the inference chain rooted at t - j + 1: real rows
    up to the root in one pass, then j - 1 steps on the head's own hidden states."""
    target = TinyTarget()
    head = tiny_head(target, vocab_ids=(0, 1, 2))
    g = torch.Generator().manual_seed(5)
    t_len = 12
    feats = torch.randn(1, t_len, 3 * 32, generator=g)
    nxt = torch.randint(0, 3, (1, t_len), generator=g)
    with torch.no_grad():
        outs = head.unroll(feats, nxt, 3)
        for root in (2, 5, 8):
            cache: dict = {}
            real = head.step(cache, head.embed_tokens(nxt[0, : root + 1]), head.fuse(feats[0, : root + 1]), 0)
            torch.testing.assert_close(real, outs[0][0, : root + 1], rtol=1e-5, atol=1e-5)
            h = real[-1]
            for j in (2, 3):
                pos = root + j - 1
                h = head.step(cache, head.embed_tokens(nxt[0, pos : pos + 1]), h[None], pos)[-1]
                torch.testing.assert_close(h, outs[j - 1][0, pos], rtol=1e-5, atol=1e-5)


def test_tap_reads_features_and_leaves_logits_bitwise_unchanged():
    target = TinyTarget()
    ids = [0, 1, 2, 2, 1, 0, 0, 1]

    def run():
        s = target.start(ids[:3])
        a = s.extend(torch.tensor(ids[3:6]))
        s.truncate(4)
        return [a, s.extend(torch.tensor(ids[4:8]))]

    plain = run()
    target.fast.tap = FeatureTap(TAPS)
    tapped = run()
    assert all(torch.equal(x, y) for x, y in zip(plain, tapped, strict=True))
    assert target.fast.tap.valid == 8
    out = target.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    # hidden_states[i] = output of layer i - 1, except the last entry, which HF returns normed
    hs = [out.hidden_states[li + 1][0] for li in TAPS[:-1]]
    tap = target.fast.tap.features(8)
    torch.testing.assert_close(target.model.model.norm(tap[:, -32:]), out.hidden_states[-1][0], rtol=1e-4, atol=1e-4)
    want = torch.cat(hs, -1)
    tap = tap[:, :-32]
    torch.testing.assert_close(tap, want, rtol=1e-4, atol=1e-4)


def fresh_features(drafter, ctx: list[int]) -> torch.Tensor:
    """The target's tapped features of ctx[:-1] from a throwaway session (same weights),
    the drafter's tap restored afterwards to the session it was following."""
    tap = drafter.tap
    saved = (tap._session, tap.valid, tap._buf.clone())
    drafter.target.fast.start(ctx[:-1])
    feats = tap.features(len(ctx) - 1).clone()
    tap._session, tap.valid, tap._buf = saved
    return feats


class _Checked(Eagle3Drafter):
    """Asserts at every round that the drafter's first row equals a fresh computation from
    scratch (fresh target pass, fresh head cache): the rolled-back cache is right."""

    checks = 0

    def first_logits(self, context):
        got = super().first_logits(context)
        ctx = [int(t) for t in context]
        feats = fresh_features(self, ctx)
        head = self.head
        want = head.full_logits(head.step({}, head.embed_tokens(torch.tensor(ctx[1:])), head.fuse(feats), 0)[-1])
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        _Checked.checks += 1
        return got


def sample_with_rollbacks(target, drafter) -> None:
    """Five sampled 16-token requests at gamma 3: drafts are rejected and the context rolls back."""
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        out = [t for r in speculative_ids(target, drafter, PROMPT, SamplingParams(), policy=FixedGamma(3),
                                          generator=g, max_new_tokens=16) for t in r]
        assert len(out) == 16


def test_drafter_cache_follows_the_verified_context_through_rollbacks():
    target = TinyTarget()
    sample_with_rollbacks(target, _Checked(target, tiny_head(target)))
    assert _Checked.checks > 20


def with_wrong_rows(drafter_cls):
    """Broken on purpose: ``drafter_cls`` handing the verifier q rows that are not what the
    drafts were drawn from (rolled by one token)."""

    class WrongRows(drafter_cls):
        def propose(self, context, k, params, generator):
            draft = super().propose(context, k, params, generator)
            if draft.probs is not None:
                draft.probs = torch.roll(draft.probs, shifts=1, dims=-1)
            return draft

    return WrongRows


_WrongRows = with_wrong_rows(Eagle3Drafter)


class _Counting(FixedGamma):
    """FixedGamma that counts proposed / accepted drafts (the test must not be vacuous)."""

    def __post_init__(self):
        super().__post_init__()
        self.proposed = self.accepted = 0

    def update(self, proposed, accepted):
        super().update(proposed, accepted)
        self.proposed += proposed
        self.accepted += accepted


def _joint(make, params, n=1500, seed=11, k=3, head=None):
    """``n`` sampled LENGTH-token continuations of PROMPT by ``make(target, head)`` (head:
    ``head(target)``, default this file's tiny EAGLE-3 head): the G-test's log10 p against
    the target's exact law, and the drafter with ``counts`` = (proposed, accepted)."""
    target = TinyTarget()
    drafter = make(target, (head or tiny_head)(target))
    g = torch.Generator().manual_seed(seed)
    samples = []
    policy = _Counting(k)
    for _ in range(n):
        rounds = speculative_ids(target, drafter, PROMPT, params, policy=policy, generator=g,
                                 max_new_tokens=LENGTH)
        samples.append([t for r in rounds for t in r])
    drafter.counts = (policy.proposed, policy.accepted)
    return sequence_g_test_log10(samples, target.law(params)), drafter


def assert_joint_law_holds(label, params, log10_p, drafter) -> None:
    """The G-test passes and the run was not vacuous: many drafts, both kept and rejected."""
    proposed, accepted = drafter.counts
    print(f"\n{label}, {params.temperature=}: joint G-test {fmt(log10_p)}, drafts {accepted}/{proposed} accepted")
    assert log10_p > PASS_LOG10
    assert proposed > 1000 and 0.1 * proposed < accepted < 0.9 * proposed


JOINT_CASES = [pytest.param(SamplingParams(), id="T1"),
               pytest.param(SamplingParams(temperature=1.3, top_p=0.85), id="T1.3-topp")]


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~1 min on an idle core; the shared test machine can be 10x slower
@pytest.mark.parametrize("params", JOINT_CASES)
def test_eagle3_joint_law_of_whole_sequences_is_the_targets(params):
    assert_joint_law_holds("eagle3 head", params, *_joint(Eagle3Drafter, params))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_negative_control_eagle3_with_wrong_q_rows_is_caught():
    log10_p, _ = _joint(_WrongRows, SamplingParams(), n=800)
    print(f"\neagle3 head with wrong q rows: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


def _dspark(target, head):
    return DSparkDrafter(Eagle3Drafter(target, head), TopProbConfidence(),
                         SurvivalSchedule((1.0, 1.6, 1.7, 1.8), max_tokens=3))  # dear enough that rounds get cut


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_dspark_over_eagle3_joint_law_is_the_targets():
    log10_p, drafter = _joint(_dspark, SamplingParams())
    print(f"\ndspark over the eagle3 head: joint G-test {fmt(log10_p)}, verified lengths {drafter.lengths}, "
          f"drafts accepted/proposed {drafter.counts[1]}/{drafter.counts[0]}")
    assert log10_p > PASS_LOG10
    assert drafter.counts[1] > 100
    assert drafter.lengths.get(0, 0) > 100 and len([n for n in drafter.lengths if n > 0]) >= 2  # cut and varied


def argmax_path(target, n: int = 20) -> list[int]:
    """The target's own greedy continuation of PROMPT, one step at a time: ``n`` tokens."""
    s = target.start(PROMPT[:-1])
    pending, ref = PROMPT[-1], []
    for _ in range(n):
        pending = int(torch.argmax(s.extend(torch.tensor([pending]))[-1]))
        ref.append(pending)
    return ref


def test_greedy_eagle3_is_the_targets_argmax_path():
    target = TinyTarget()
    params = SamplingParams(temperature=0)
    ref = argmax_path(target)
    for make in (Eagle3Drafter, _dspark):
        drafter = make(target, tiny_head(target))
        out = [t for r in speculative_ids(target, drafter, PROMPT, params, policy=FixedGamma(3), generator=None,
                                          max_new_tokens=20) for t in r]
        assert out == ref
