"""The DFlash-style block drafter and its DFlash 2-style selector (token_spec.dflash):
training runs the same computation inference runs, one block pass drafts the same
tokens at every gamma, the context cache follows the verified context through
rollbacks, the selector finds the best path, and the joint law of whole sampled
sequences is the target's (with wrong-q negative controls). The target is the tiny random
Llama of test_eagle3.py (3 tokens), so the law of every 4-token continuation is exact;
the real-model greedy identity is in test_greedy_identity_fast.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from stats_helpers import FAIL_LOG10, fmt
from test_eagle3 import (PROMPT, TAPS, TinyTarget, _Counting, _joint, argmax_path, assert_joint_law_holds,
                         fresh_features, sample_with_rollbacks, with_wrong_rows)

from token_spec.dflash import DFlashDrafter, DFlashHead, PathSelector
from token_spec.rounds import speculative_ids
from token_spec.sampling import SamplingParams


def tiny_head(target: TinyTarget, *, convs: bool = False, vocab_ids=(0, 2), block: int = 4,
              seed: int = 1) -> DFlashHead:
    torch.manual_seed(seed)
    head = DFlashHead(target.model.config, target.model.get_input_embeddings().weight.detach().float(),
                      torch.tensor(vocab_ids), layers=2, block=block, convs=convs, tap_layers=TAPS)
    with torch.no_grad():
        head.head_rows.mul_(3.0)  # confident: drafts are accepted in some rounds, rejected in others
        head.mask.normal_()
        for layer in head.layers:
            if layer.taps is not None:
                layer.taps.normal_(0.0, 0.5)  # non-trivial convolutions
    return head.eval().requires_grad_(False)


def tiny_selector(target: TinyTarget, seed: int = 2) -> PathSelector:
    torch.manual_seed(seed)
    sel = PathSelector(target.model.get_input_embeddings().weight.detach().float(), rank=8, k=2)
    with torch.no_grad():
        sel.prev.weight.normal_(0.0, 1.0)
        sel.cand.weight.normal_(0.0, 1.0)
    return sel.eval().requires_grad_(False)


@pytest.mark.parametrize("convs", [False, True], ids=["dflash", "dflash2-convs"])
def test_training_blocks_compute_what_inference_drafts(convs):
    """train_forward's block at anchor a (many blocks in one pass) = the inference block
    drafted after the first a + 1 tokens, from a cache filled in two pieces."""
    target = TinyTarget()
    head = tiny_head(target, convs=convs, vocab_ids=(0, 1, 2))
    g = torch.Generator().manual_seed(5)
    t_len = 14
    feats = torch.randn(1, t_len, 3 * 32, generator=g)
    ids = torch.randint(0, 3, (1, t_len), generator=g)
    anchors = torch.tensor([1, 4, 6, 9])
    with torch.no_grad():
        train_rows = head.sub_logits(head.train_forward(feats, ids, anchors))[0]  # [G, S, sub]
        for gi, a in enumerate(anchors.tolist()):
            cache: dict = {}
            head.extend_context(cache, feats[0, : a // 2], 0)
            head.extend_context(cache, feats[0, a // 2 : a], a // 2)
            rows = head.draft_rows(cache, int(ids[0, a]), a + 1, head.block)
            torch.testing.assert_close(rows, train_rows[gi], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("convs", [False, True], ids=["dflash", "dflash2-convs"])
def test_a_shorter_block_drafts_the_prefix_of_a_longer_one(convs):
    target = TinyTarget()
    head = tiny_head(target, convs=convs, vocab_ids=(0, 1, 2), block=6)
    feats = torch.randn(7, 3 * 32, generator=torch.Generator().manual_seed(3))
    cache: dict = {}
    head.extend_context(cache, feats, 0)
    with torch.no_grad():
        long = head.draft_rows(cache, 1, 8, 6)
        for s in (1, 3, 5):
            torch.testing.assert_close(head.draft_rows(cache, 1, 8, s), long[:s], rtol=1e-5, atol=1e-5)


class _Checked(DFlashDrafter):
    """Asserts at every round that the block equals one computed from scratch (fresh target
    pass, fresh head cache): the rolled-back context cache is right."""

    checks = 0

    def block_logits(self, context, slots):
        got = super().block_logits(context, slots)
        ctx = [int(t) for t in context]
        feats = fresh_features(self, ctx)
        cache: dict = {}
        self.head.extend_context(cache, feats, 0)
        want = self.head.to_full(self.head.draft_rows(cache, ctx[-1], len(ctx), slots).float())
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        _Checked.checks += 1
        return got


def test_drafter_context_cache_follows_the_verified_context_through_rollbacks():
    target = TinyTarget()
    sample_with_rollbacks(target, _Checked(target, tiny_head(target)))
    assert _Checked.checks > 20


def test_selector_walks_the_best_scoring_path():
    """best_path = the brute-force argmax of sum_j logit_j(c_j) + s(c_{j-1}, c_j) over every
    path through the slots' top-k lists, and it is not just the per-slot argmax."""
    target = TinyTarget()
    sel = tiny_selector(target)
    g = torch.Generator().manual_seed(0)
    differs = 0
    for trial in range(30):
        logits = torch.randn(4, 3, generator=g)
        last = trial % 3
        top = logits.topk(sel.k, -1).indices
        best, best_score = None, -float("inf")
        for path in itertools.product(*[top[j].tolist() for j in range(4)]):
            score, prev = 0.0, last
            for j, c in enumerate(path):
                score += float(logits[j, c]) + float(sel.compat(torch.tensor(prev), torch.tensor([c]))[0])
                prev = c
            if score > best_score:
                best, best_score = list(path), score
        with torch.no_grad():
            got = sel.best_path(logits, last)
        assert got == best
        differs += got != logits.argmax(-1).tolist()
    assert differs > 0  # the compatibility term changes some paths


def _dflash(target, head):
    return DFlashDrafter(target, head)


def _dflash2(target, head):
    return DFlashDrafter(target, head, tiny_selector(target), name="dflash2")


_WrongRows = with_wrong_rows(DFlashDrafter)


class _UnshiftedRows(DFlashDrafter):
    """Broken on purpose (a plausible bug): the selector shifts the rows it samples from, but
    the verifier gets the block's plain rows, without the compatibility term."""

    def propose(self, context, k, params, generator):
        draft = super().propose(context, k, params, generator)
        if draft.probs is not None:
            from token_spec.sampling import warp

            rows = self.block_logits(context, draft.tokens.numel())
            draft.probs = warp(rows, params.temperature, params.top_k, params.top_p)
        return draft


JOINT_CASES = [pytest.param(SamplingParams(), id="T1"),
               pytest.param(SamplingParams(temperature=1.3, top_p=0.85), id="T1.3-topp")]
DRAFTERS = {"dflash": (_dflash, False), "dflash2": (_dflash2, True)}


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("params", JOINT_CASES)
@pytest.mark.parametrize("name", list(DRAFTERS))
def test_block_drafter_joint_law_of_whole_sequences_is_the_targets(name, params):
    make, convs = DRAFTERS[name]
    assert_joint_law_holds(name, params, *_joint(make, params, head=lambda t: tiny_head(t, convs=convs)))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_negative_control_dflash_with_wrong_q_rows_is_caught():
    log10_p, _ = _joint(_WrongRows, SamplingParams(), n=800, head=tiny_head)
    print(f"\ndflash with wrong q rows: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_negative_control_dflash2_handing_unshifted_rows_is_caught():
    # the shift is a small change to q: 1500 sequences keep the rejection far below FAIL_LOG10
    log10_p, _ = _joint(lambda t, h: _UnshiftedRows(t, h, tiny_selector(t)), SamplingParams(), n=1500,
                        head=lambda t: tiny_head(t, convs=True))
    print(f"\ndflash2 handing the verifier rows without the selector's shift: joint G-test {fmt(log10_p)}")
    assert log10_p < FAIL_LOG10


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_greedy_block_drafter_is_the_targets_argmax_path(name):
    target = TinyTarget()
    params = SamplingParams(temperature=0)
    ref = argmax_path(target)
    make, convs = DRAFTERS[name]
    drafter = make(target, tiny_head(target, convs=convs))
    policy = _Counting(4)
    out = [t for r in speculative_ids(target, drafter, PROMPT, params, policy=policy, generator=None,
                                      max_new_tokens=20) for t in r]
    assert out == ref
    assert policy.accepted > 0


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_saved_weights_load_back_as_the_same_variant(name, tmp_path):
    """save_dflash / load_dflash keep the variant (convolutions or not, selector or not) and
    every weight (to fp16)."""
    from token_spec.dflash import load_dflash, save_dflash

    target = TinyTarget()
    convs = DRAFTERS[name][1]
    head = tiny_head(target, convs=convs)
    selector = tiny_selector(target) if convs else None
    path = save_dflash(head, tmp_path / f"{name}.safetensors", selector)
    got, got_sel = load_dflash(target, name, path)
    assert got.convs == convs and (got_sel is None) == (selector is None)
    want = {k: v.half().float() for k, v in head.state_dict().items() if k != "vocab_ids"}
    for k, v in got.state_dict().items():
        if k != "vocab_ids":
            torch.testing.assert_close(v, want[k], rtol=0, atol=0)
    if selector is not None:
        assert got_sel.k == selector.k
        torch.testing.assert_close(got_sel.prev.weight, selector.prev.weight.half().float(), rtol=0, atol=0)
