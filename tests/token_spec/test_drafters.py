"""Drafters: prompt lookup, cross-request suffix lookup, and a model drafter with KV rollback."""

from __future__ import annotations

import pytest
import torch

from token_spec.drafters import Draft, Drafter, ModelDrafter, NgramDrafter, NgramIndex, SuffixDrafter
from token_spec.sampling import SamplingParams, warp
from token_spec.toy import random_markov

GREEDY = SamplingParams(temperature=0)
HOT = SamplingParams(temperature=1.0)


def propose(d, ctx, k, params=GREEDY, gen=None) -> list[int]:
    out = d.propose(ctx, k, params, gen)
    assert isinstance(out, Draft) and out.tokens.dtype == torch.long and out.tokens.numel() <= k
    return out.tokens.tolist()


@pytest.mark.parametrize("cls", [NgramDrafter, SuffixDrafter])
def test_drafters_satisfy_the_protocol(cls):
    d = cls()
    assert isinstance(d, Drafter) and d.name


def test_ngram_proposes_the_continuation_of_the_most_recent_longest_match():
    d = NgramDrafter(n_max=3, n_min=1)
    d.begin([])
    #      0  1  2  3  4  5  6  7  8  9 10 11
    ctx = [5, 6, 7, 1, 2, 5, 6, 9, 4, 4, 5, 6]
    # last 2 tokens (5, 6) occur at 0 and 5; the most recent earlier one is at 5 -> continue with 9, 4, 4
    assert propose(d, ctx, 3) == [9, 4, 4]
    # a 3-gram match beats a more recent 2-gram match
    ctx2 = [1, 5, 6, 8, 8, 5, 6, 9, 9, 1, 5, 6]
    assert propose(d, ctx2, 2) == [8, 8]


def test_ngram_is_deterministic_and_returns_no_probs():
    ctx = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 1, 4]
    a, b = NgramDrafter(), NgramDrafter()
    a.begin(ctx), b.begin(ctx)
    da, db = a.propose(ctx, 4, HOT, None), b.propose(ctx, 4, HOT, None)
    assert da.probs is None and torch.equal(da.tokens, db.tokens)
    assert da.tokens.tolist() == [1, 5, 9, 2]  # (1, 4) at 1..2 continues 1, 5, 9, 2


def test_ngram_without_a_match_proposes_nothing_and_respects_k():
    d = NgramDrafter(n_min=2)
    d.begin([])
    assert propose(d, [1, 2, 3, 4], 4) == []
    assert propose(d, [1, 2, 3, 1, 2], 0) == []
    assert propose(d, [1, 2, 3, 1, 2], 1) == [3]


def test_ngram_index_is_incremental_and_restarts_on_a_new_sequence():
    idx = NgramIndex(1, 2)
    seq = [1, 2, 3]
    idx.update(seq)
    assert idx.lookup([7, 1], 5) == (1, [2, 3])
    seq2 = seq + [1, 2, 4]
    idx.update(seq2)
    assert idx.lookup([1, 2], 5) == (2, [4])  # most recent (1, 2) continues with 4; the suffix never matches itself
    idx.update([9, 9, 8])  # not an extension: rebuilt from scratch
    assert idx.lookup([1, 2], 5) == (0, [])
    assert idx.lookup([9], 5) == (1, [8])  # the most recent 9 (index 1) continues with 8


def test_ngram_rejects_bad_sizes():
    with pytest.raises(ValueError):
        NgramDrafter(n_max=1, n_min=2)
    with pytest.raises(ValueError):
        SuffixDrafter(n_min=0)


def test_suffix_drafter_learns_across_requests():
    d = SuffixDrafter(n_max=4, n_min=2)
    first = [10, 11, 12, 13, 14, 15, 16]
    d.begin([1, 2])
    assert propose(d, [1, 2, 10, 11], 4) == []  # nothing seen yet
    d.end(first)
    d.begin([3, 4])
    assert propose(d, [3, 4, 10, 11], 4) == [12, 13, 14, 15]  # learned from the earlier output
    # within-request matches still work, and a longer match wins
    assert propose(d, [7, 12, 13, 99, 5, 7, 12, 13], 2) == [99, 5]


def test_suffix_drafter_memory_is_bounded_and_drops_the_oldest_output():
    d = SuffixDrafter(n_max=3, n_min=2, max_corpus_tokens=8)
    d.end([1, 2, 3, 4, 5])
    d.end([6, 7, 8, 9])
    assert d.corpus_tokens == 4  # 5 + 4 > 8: the first output is gone
    d.begin([])
    assert propose(d, [0, 1, 2], 2) == []
    assert propose(d, [0, 6, 7], 2) == [8, 9]
    d.end(list(range(100, 120)))  # longer than the bound: only its tail is kept
    assert d.corpus_tokens == 8


def test_suffix_drafter_is_deterministic():
    outs = [[1, 2, 3, 4], [2, 3, 9, 9], [5, 2, 3, 7]]
    results = []
    for _ in range(2):
        d = SuffixDrafter(n_min=1)
        for o in outs:
            d.end(o)
        d.begin([])
        results.append(propose(d, [8, 2, 3], 3))
    assert results[0] == results[1] == [7]  # the most recent output wins among equal matches


class _CountingLM:
    """Wraps a CausalLM and counts the tokens each session forward processes."""

    def __init__(self, lm):
        self.lm, self.vocab_size, self.fed = lm, lm.vocab_size, 0

    def start(self, ids):
        outer = self
        inner = self.lm.start(ids)
        outer.fed += len(ids)

        class S:
            @property
            def length(self):
                return inner.length

            def extend(self, t):
                outer.fed += int(t.numel())
                return inner.extend(t)

            def truncate(self, n):
                inner.truncate(n)

        return S()


def _greedy_path(lm, ctx, k):
    s, out = lm.start(ctx[:-1]), []
    logits = s.extend(torch.tensor(ctx[-1:]))[-1]
    for _ in range(k):
        out.append(int(logits.argmax()))
        logits = s.extend(torch.tensor(out[-1:]))[-1]
    return out


def test_model_drafter_greedy_matches_the_model_and_rolls_back():
    lm = random_markov(vocab=7, period=3, seed=1, scale=3.0)
    counting = _CountingLM(lm)
    d = ModelDrafter(counting)
    ctx = [0, 3, 5, 1]
    d.begin(ctx)
    draft = d.propose(ctx, 4, GREEDY, None)
    assert draft.probs is None  # greedy: one-hot q
    assert draft.tokens.tolist() == _greedy_path(lm, ctx, 4)
    fed_first = counting.fed
    assert fed_first == len(ctx) + 3  # prompt, then k-1 drafted tokens (the last one is never fed)
    # verifier accepted the first draft token and corrected the second: the drafter
    # must roll back its cache to the verified context and only feed the new tokens
    corrected = (draft.tokens[1].item() + 1) % 7
    ctx2 = ctx + [draft.tokens[0].item(), corrected]
    draft2 = d.propose(ctx2, 3, GREEDY, None)
    assert draft2.tokens.tolist() == _greedy_path(lm, ctx2, 3)
    assert counting.fed - fed_first == 1 + 2  # only `corrected`, then k-1 drafted tokens


def test_model_drafter_sampling_returns_the_q_rows_it_sampled_from():
    lm = random_markov(vocab=6, period=2, seed=2)
    d = ModelDrafter(lm)
    ctx = [1, 2, 3]
    d.begin(ctx)
    params = SamplingParams(temperature=0.8, top_k=4)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = d.propose(ctx, 3, params, g1)
    d.begin(ctx)
    b = d.propose(ctx, 3, params, g2)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.probs, b.probs)  # seeded determinism
    assert a.probs.shape == (3, 6)
    torch.testing.assert_close(a.probs.sum(-1), torch.ones(3, dtype=a.probs.dtype))
    assert (a.probs > 0).sum(-1).le(4).all()  # top-k applied through the shared warp
    # row 0 is exactly warp() of the model's logits after the context
    s = lm.start(ctx[:-1])
    expected = warp(s.extend(torch.tensor(ctx[-1:]))[-1], 0.8, 4, 1.0)
    torch.testing.assert_close(a.probs[0], expected)
    assert all(a.probs[i, t] > 0 for i, t in enumerate(a.tokens.tolist()))


def test_model_drafter_confidence_cut_stops_where_the_draft_is_unsure():
    lm = random_markov(vocab=6, period=2, seed=3, scale=0.5)  # flat rows: top probability well below 0.9
    ctx = [1, 2, 3]
    sure = ModelDrafter(lm, confidence=0.0)
    sure.begin(ctx)
    assert len(sure.propose(ctx, 4, GREEDY, None).tokens) == 4
    unsure = ModelDrafter(lm, confidence=0.9)
    unsure.begin(ctx)
    draft = unsure.propose(ctx, 4, HOT, torch.Generator().manual_seed(0))
    assert draft.tokens.numel() == 1 and draft.probs.shape == (1, 6)  # position 0 is always drafted
    # after a cut the cache still tracks the context exactly: the next round continues correctly
    ctx2 = ctx + [draft.tokens[0].item(), 0]
    assert unsure.propose(ctx2, 3, GREEDY, None).tokens.tolist() == _greedy_path(lm, ctx2, 1)
    with pytest.raises(ValueError):
        ModelDrafter(lm, confidence=1.0)
