"""Drafters: cheap proposers of the next k tokens, all behind one small interface.

A drafter proposes ``d_1..d_k'`` (``k' <= k``) given every verified token so far, and
optionally the warped draft distributions ``q_i`` it sampled them from. Losslessness
never depends on the drafter: the verifier accepts ``d_i`` with probability
``min(1, p_i(d_i) / q_i(d_i))`` and resamples from ``max(0, p_i - q_i)``; a drafter only
changes how many tokens each target pass yields.

* ``NgramDrafter``  prompt lookup: find the most recent earlier occurrence of the
  last ``n`` tokens (``n = n_max .. n_min``, longest first) in the context and propose
  what followed it. Deterministic (``probs=None``: one-hot q). ``n_min = 2`` by
  default: on CPU a verification pass costs more per extra token than on a GPU
  (about +20% of a 1-token pass per draft token on SmolLM2-135M, 1 thread), and
  1-token matches are right too rarely to pay for it (measured with the bench
  prompts: ~1.09x with n_min = 1 vs ~1.23x with n_min = 2 in a replay of greedy outputs).
* ``SuffixDrafter`` the same lookup over the current context AND the outputs of
  earlier requests of this drafter (agent loops repeat themselves; vLLM's ``suffix``
  method). Memory is bounded by ``max_corpus_tokens``: the oldest outputs are dropped.
* ``ModelDrafter``  any ``CausalLM`` (e.g. the distilled draft model) as a sampling
  drafter: it keeps its own KV session, rolls it back exactly to the verified prefix
  each round, and returns the warped q rows it sampled from (``None`` when greedy,
  where q is one-hot at the argmax).
  Its round is a plan of draft-model feeds, so a server drafts for all its sequences
  in shared packed passes (``token_spec.draft_steps.propose_many``).
* ``HybridDrafter`` a lookup drafter first, a model drafter only where the lookup
  finds nothing. Lookups are free and right often when they match, but they match in
  a minority of rounds (about 1 round in 4 on the bench's code and agent prompts); in
  bf16 a verify pass over 2..4 tokens costs about one 1-token pass, so filling the
  other rounds with a few draft-model tokens (each ~8% of a target step here) pays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .draft_steps import Feed, Plan, plan_of, run_plan
from .models import CausalLM, LMSession
from .sampling import SamplingParams, sample, warp

__all__ = ["Draft", "Drafter", "draw", "NgramDrafter", "SuffixDrafter", "ModelDrafter", "HybridDrafter", "GatedDrafter",
           "NgramIndex"]


@dataclass
class Draft:
    """tokens [k'] long (k' may be 0); probs [k', V] warped q rows, or None = deterministic."""

    tokens: torch.Tensor
    probs: torch.Tensor | None = None


@runtime_checkable
class Drafter(Protocol):
    name: str

    def begin(self, prompt_ids: Sequence[int]) -> None: ...

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft: ...

    def end(self, output_ids: Sequence[int]) -> None: ...


def _empty() -> Draft:
    return Draft(tokens=torch.empty(0, dtype=torch.long), probs=None)


def _ids(seq: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(seq, torch.Tensor):
        return [int(t) for t in seq.reshape(-1).tolist()]
    return seq if isinstance(seq, list) else [int(t) for t in seq]


class NgramIndex:
    """Incremental map ``n-gram -> position just after its most recent occurrence``.

    Only n-grams that have a continuation are indexed: after ``update(seq)`` the
    n-gram ending at position ``i`` is indexed iff ``i <= len(seq) - 2``, so the
    suffix being looked up never matches itself. Appending to ``seq`` and calling
    ``update`` again indexes just the new positions (amortised O(n_max) per token).
    """

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.table: dict[tuple[int, ...], int] = {}
        self.seq: list[int] = []
        self._done = 0  # n-grams ending at positions < _done are indexed

    def update(self, seq: list[int]) -> None:
        if len(seq) < len(self.seq) or seq[: self._done] != self.seq[: self._done]:
            self.table.clear()  # not an extension of what we indexed: start over
            self._done = 0
        self.seq = seq
        table, n_min, n_max = self.table, self.n_min, self.n_max
        for end in range(self._done, len(seq) - 1):
            for n in range(n_min, min(n_max, end + 1) + 1):
                table[tuple(seq[end - n + 1 : end + 1])] = end + 1
        self._done = max(self._done, len(seq) - 1)

    def lookup(self, suffix: Sequence[int], k: int) -> tuple[int, list[int]]:
        """Longest n (n_max..n_min) whose last-n-token suffix occurred before: (n, next k tokens)."""
        for n in range(min(self.n_max, len(suffix)), self.n_min - 1, -1):
            pos = self.table.get(tuple(suffix[len(suffix) - n :]))
            if pos is not None:
                return n, self.seq[pos : pos + k]
        return 0, []


class NgramDrafter:
    """Prompt lookup decoding: propose the continuation of the most recent earlier
    occurrence of the context's last n tokens (longest n first). Deterministic."""

    def __init__(self, n_max: int = 4, n_min: int = 2, *, name: str = "ngram") -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
        self.name = name
        self.n_min, self.n_max = n_min, n_max
        self._index = NgramIndex(n_min, n_max)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._index = NgramIndex(self.n_min, self.n_max)

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft:
        ctx = list(_ids(context))
        if k <= 0 or not ctx:
            return _empty()
        self._index.update(ctx)
        return Draft(tokens=torch.tensor(self._continuation(ctx, k), dtype=torch.long), probs=None)

    def _continuation(self, ctx: list[int], k: int) -> list[int]:
        """Up to ``k`` proposed tokens after ``ctx`` (the context index already holds it)."""
        return self._index.lookup(ctx, k)[1]

    def end(self, output_ids: Sequence[int]) -> None:
        pass


class SuffixDrafter(NgramDrafter):
    """Cross-request lookup: the longest suffix match over the current context and the
    outputs of earlier requests (most recent first on equal length; the current
    context wins ties). Deterministic; ``max_corpus_tokens`` bounds the memory.

    The current context is looked up as ``NgramDrafter`` does; the earlier outputs in a
    second index that ``end`` extends."""

    def __init__(
        self, n_max: int = 8, n_min: int = 2, *, max_corpus_tokens: int = 65536, name: str = "suffix"
    ) -> None:
        super().__init__(n_max, n_min, name=name)
        if max_corpus_tokens < 1:
            raise ValueError("max_corpus_tokens must be >= 1")
        self.max_corpus_tokens = max_corpus_tokens
        self._outputs: list[list[int]] = []  # finished outputs, oldest first
        self._corpus = NgramIndex(n_min, n_max)

    @property
    def corpus_tokens(self) -> int:
        return len(self._corpus.seq)

    def _continuation(self, ctx: list[int], k: int) -> list[int]:
        n_ctx, cont_ctx = self._index.lookup(ctx, k)
        n_old, cont_old = self._corpus.lookup(ctx, k)
        return cont_old if n_old > n_ctx or (n_old == n_ctx and len(cont_old) > len(cont_ctx)) else cont_ctx

    def end(self, output_ids: Sequence[int]) -> None:
        out = list(_ids(output_ids))[-self.max_corpus_tokens :]
        if not out:
            return
        self._outputs.append(out)
        total = sum(len(o) for o in self._outputs)
        while total > self.max_corpus_tokens:
            total -= len(self._outputs.pop(0))
        # Outputs are joined into one sequence; a match may run across the seam into the
        # next output, which is harmless (drafts are only proposals).
        joined = [t for o in self._outputs for t in o]
        if joined[: len(self._corpus.seq)] != self._corpus.seq:
            self._corpus = NgramIndex(self.n_min, self.n_max)
        self._corpus.update(joined)


def draw(logits: torch.Tensor, params: SamplingParams,
         generator: torch.Generator | None) -> tuple[int, torch.Tensor | None]:
    """One draft token from a row of logits ``[V]``: greedy, the first maximal index
    (as ``warp``'s one-hot) and no row; else a sample from the warped row ``q``,
    returned with it (the verifier needs the draft's q)."""
    if params.temperature == 0:
        return int(torch.argmax(logits)), None
    q = warp(logits, params.temperature, params.top_k, params.top_p)  # [V]
    return int(sample(q, generator)), q


class ModelDrafter:
    """A small causal LM as a drafter, sampling from q = warp(draft logits, params).

    Cache discipline: the session holds a prefix of ``context`` (plus possibly stale
    drafted tokens). Each round it keeps the longest common prefix with the verified
    context (at most ``len(context) - 1`` tokens, so the last token is always fed and
    its logits are fresh), truncates the rest (exact rollback) and extends with the
    missing verified tokens, then drafts k tokens autoregressively. The last drafted
    token is not fed: k draft forwards per round, the first one over the new tokens.

    ``confidence`` (HF's ``assistant_confidence_threshold``): stop the draft before
    position i > 0 when the draft's own top probability there, max softmax(logits_i),
    is below it. The decision uses only the draft's row i, fixed before token i is
    drawn, so it is non-anticipating and verification stays exact.

    The round is written once, as a plan of draft-model feeds (``plan``, with the steps
    ``first_step`` / ``next_step``; ``token_spec.draft_steps``): ``propose`` runs it
    alone, ``propose_many`` packs the feeds of many sequences' plans into shared passes.
    """

    def __init__(self, lm: CausalLM, *, confidence: float = 0.0, name: str = "draft_model") -> None:
        if not 0.0 <= confidence < 1.0:
            raise ValueError(f"confidence must be in [0, 1), got {confidence!r}")
        self.lm = lm
        self.name = name
        self.confidence = confidence
        self.vocab_size = int(lm.vocab_size)
        self._session: LMSession | None = None
        self._cached: list[int] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._session = None
        self._cached = []

    def first_step(self, context: Sequence[int]) -> Plan:
        """Plan: bring the cache to context[:-1] and feed context's tail; returns the
        draft's logits [V] for the token after ``context``."""
        ctx = list(_ids(context))
        if self._session is None:
            self._session = self.lm.start(ctx[:-1])
            self._cached = ctx[:-1]
        limit = min(len(self._cached), len(ctx) - 1)
        common = 0
        cached = self._cached
        while common < limit and cached[common] == ctx[common]:
            common += 1
        self._session.truncate(common)
        logits = yield Feed(self._session, ctx[common:])
        self._cached = ctx  # ctx is now fully in the cache
        return logits

    def next_step(self, token: int) -> Plan:
        """Plan: feed one drafted token; returns the draft's logits [V] for the token after it."""
        logits = yield Feed(self._session, [int(token)])
        self._cached.append(int(token))
        return logits

    # step interface (``token_spec.dspark.DSparkDrafter`` drives the draft position by position)
    def first_logits(self, context: Sequence[int]) -> torch.Tensor:
        """The draft's logits [V] for the token after ``context`` (the cache synced to it)."""
        return run_plan(self.first_step(context))

    def next_logits(self, token: int) -> torch.Tensor:
        """Feed one drafted token; the draft's logits [V] for the token after it."""
        return run_plan(self.next_step(token))

    def plan(self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Plan:
        """``propose`` as a plan of draft-model feeds (``token_spec.draft_steps``)."""
        ctx = list(_ids(context))
        if k <= 0 or not ctx:
            return _empty()
        logits = yield from self.first_step(ctx)
        greedy = params.temperature == 0
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            if i > 0 and self.confidence > 0 and float(torch.softmax(logits, -1).max()) < self.confidence:
                break  # the draft is unsure here: stop before drawing token i
            tok, q = draw(logits, params, generator)
            if q is not None:
                rows.append(q)
            tokens.append(tok)
            if i < k - 1:
                logits = yield from self.next_step(tok)
        probs = None if greedy else torch.stack(rows)  # [k', V]
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=probs)

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft:
        return run_plan(self.plan(context, k, params, generator))

    def end(self, output_ids: Sequence[int]) -> None:
        self._session = None
        self._cached = []


class HybridDrafter:
    """``lookup`` (an n-gram or suffix drafter) first; where it proposes nothing, ``model``
    (a ``ModelDrafter``) drafts at most ``model_tokens`` tokens.

    Which drafter runs is decided from the verified context alone (does the lookup
    match?), before any token of the round is drawn, so q is a function of the context
    and the verifier's guarantee holds for the mix (greedy: identity with vanilla).
    The model's session lags behind during lookup rounds; ``ModelDrafter`` catches it
    up in one forward over the missing verified tokens when it is next asked.
    """

    def __init__(self, lookup: Drafter, model: Drafter, *, model_tokens: int = 4, name: str | None = None) -> None:
        if isinstance(model_tokens, bool) or not isinstance(model_tokens, int) or model_tokens < 1:
            raise ValueError(f"model_tokens must be an int >= 1, got {model_tokens!r}")
        lv, mv = getattr(lookup, "vocab_size", None), getattr(model, "vocab_size", None)
        if lv is not None and mv is not None and int(lv) != int(mv):
            raise ValueError(f"lookup and model drafters disagree on the vocabulary size ({lv} vs {mv})")
        self.lookup, self.model = lookup, model
        self.model_tokens = model_tokens
        self.name = name or f"{lookup.name}+{model.name}"
        if mv is not None:
            self.vocab_size = int(mv)
        self.rounds = {"lookup": 0, "model": 0}  # which drafter proposed, per round (diagnostics)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.lookup.begin(prompt_ids)
        self.model.begin(prompt_ids)

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft:
        return run_plan(self.plan(context, k, params, generator))

    def plan(self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Plan:
        """``propose`` as a plan: the lookup runs at once, the model's feeds are yielded."""
        if k <= 0:
            return _empty()
        draft = self.lookup.propose(context, k, params, generator)
        if draft.tokens.numel():
            self.rounds["lookup"] += 1
            return draft
        self.rounds["model"] += 1
        return (yield from plan_of(self.model, context, min(k, self.model_tokens), params, generator))

    def end(self, output_ids: Sequence[int]) -> None:
        self.lookup.end(output_ids)
        self.model.end(output_ids)


class GatedDrafter:
    """``drafter`` only in the rounds where ``gate`` (``token_spec.gamma.DraftGate``) says
    drafting pays; an empty draft (a plain target step) in the others.

    The gate learns the drafter's acceptance from the verified context alone: when asked
    for a round, the tokens proposed last time are compared with what the context now
    holds at their positions (a rejected draft token never equals the token emitted in
    its place: the residual max(0, p - q) is 0 there), and ``gate.update`` gets the
    count. The decision for a round uses only earlier rounds, so the verifier's
    guarantee holds (greedy: identity with vanilla). The gate's estimate carries over
    from request to request. Meant for a costly drafter (a draft model), alone or as a
    ``HybridDrafter``'s model: where the gate is shut, the hybrid proposes nothing.
    A round where the gate was open and the drafter proposed nothing (its confidence or
    its schedule stopped before the first token) counts as one rejected token: the
    drafter's forward was paid for nothing, so such rounds shut the gate as rejections do.
    With ``caps=False`` the gate only opens or shuts a round and the drafter sets its
    length (a DSpark drafter, whose schedule weighs each position's own confidence).
    """

    def __init__(self, drafter: Drafter, gate, *, name: str | None = None, caps: bool = True) -> None:
        for attr in ("tokens", "update"):
            if not callable(getattr(gate, attr, None)):
                raise TypeError(f"gate must have tokens() and update(proposed, accepted), got {gate!r}")
        self.drafter, self.gate, self.caps = drafter, gate, caps
        self.name = name or drafter.name
        if getattr(drafter, "vocab_size", None) is not None:
            self.vocab_size = int(drafter.vocab_size)
        self._pending: tuple[int, list[int]] | None = None  # (its position, tokens) of the last draft
        self.rounds = {"drafted": 0, "idle": 0, "skipped": 0}

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._pending = None
        self.drafter.begin(prompt_ids)

    def _settle(self, context: list[int]) -> None:
        if self._pending is None:
            return
        start, tokens = self._pending
        accepted = 0
        for proposed, verified in zip(tokens, context[start : start + len(tokens)]):
            if proposed != verified:
                break
            accepted += 1
        self.gate.update(len(tokens), accepted)
        self._pending = None

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft:
        return run_plan(self.plan(context, k, params, generator))

    def plan(self, context: Sequence[int], k: int, params: SamplingParams, generator: torch.Generator | None) -> Plan:
        """``propose`` as a plan: the gate decides at once, the drafter's feeds are yielded."""
        ctx = _ids(context)
        self._settle(ctx)
        if k <= 0:
            return _empty()
        n = self.gate.tokens()
        if n <= 0:
            self.rounds["skipped"] += 1
            return _empty()
        draft = yield from plan_of(self.drafter, ctx, min(k, n) if self.caps else k, params, generator)
        if draft.tokens.numel():
            self._pending = (len(ctx), draft.tokens.tolist())
            self.rounds["drafted"] += 1
        else:  # the drafter ran (a draft step, its confidence) and proposed nothing: a cost, no yield
            self.gate.update(1, 0)
            self.rounds["idle"] += 1
        return draft

    def end(self, output_ids: Sequence[int]) -> None:
        self._pending = None
        self.drafter.end(output_ids)

