"""The serving engine: continuous batching of speculative requests, one step at a time.

``BatchEngine.step()`` runs one packed forward pass for every active request:

1. admit waiting requests (up to ``max_seqs`` active), drop cancelled ones (their KV
   is freed at once);
2. decide the draft budget: ``draft_budget`` (below) from counts only, BEFORE any
   draft is drawn (non-anticipating: the decision cannot depend on the drafts); at
   high load it is 0 and nobody drafts;
3. every decoding request drafts up to that many tokens with its own drafter, all of
   them together (``token_spec.draft_steps.propose_many``: the draft models' steps run
   as packed passes across sequences, each with its own draft cache); where
   the drafter is gated (``--gate``), its ``DraftGate`` first gets this step's
   per-sequence pass costs at the batch width (``batch_costs``) and decides, from the
   request's earlier rounds only, whether and how much to draft; with a ``DraftSwitch``
   (``token_spec.serve.switch``) the step drafts at all only while drafting steps of
   this batch width have measured at least the token rate of steps that did not (a
   step that prefills a prompt is not measured and takes the arm ahead);
4. ``PackedLM.forward`` over all segments (``token_spec.packed``: new prompts are
   prefilled, each in its own pass, and every decoding request's pending token and
   draft go in one packed pass of the lean forward);
5. per request: warp its logits rows with its sampling parameters, verify (exact
   rejection sampling, ``token_spec.sampler.verify``; or the explicit lossy relaxed
   rule), roll its KV back to the accepted prefix, detokenise, apply EOS / stop
   strings / ``max_tokens``, and emit an ``Update``.

The engine is synchronous and single-threaded by contract: ``step`` runs in one
worker thread at a time (``token_spec.serve.scheduler`` drives it); ``submit`` and
``cancel`` may be called from any thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..detokenize import IncrementalText
from ..draft_steps import DraftRequest, propose_many
from ..relaxed import RelaxedVerifier
from ..sampler import verify
from ..sampling import SamplingParams, warp
from ..fast_forward import FastSession
from ..packed import PackedLM, Segment
from .switch import DraftSwitch

__all__ = ["BatchEngine", "Request", "Update", "TokenLogprob", "draft_budget", "batch_costs", "gates_of",
           "relaxed_greedy", "ContextTooLong"]


class ContextTooLong(ValueError):
    """prompt + max_tokens exceed the model's context."""


def draft_budget(n_decode: int, prefill_rows: int, max_rows: int, gamma: int) -> int:
    """Draft tokens each decoding sequence may add this step.

    A pass costs about the same up to ``max_rows`` rows (bf16 on CPU), so the rows not
    needed by prompts and by one pending token per sequence are "free":
    ``free = max_rows - n_decode - prefill_rows``; each sequence gets an equal share,
    at most ``gamma``: ``k = min(gamma, max(0, free) // n_decode)``. Counts only, so the
    decision is fixed before drafts are drawn.
    """
    if n_decode <= 0:
        return 0
    free = max_rows - n_decode - prefill_rows
    return max(0, min(gamma, max(0, free) // n_decode))


def batch_costs(pass_costs: Sequence[float], width: int, max_k: int) -> tuple[float, ...]:
    """Per-sequence cost of a step in which each of ``width`` sequences verifies k draft
    tokens, k = 0..max_k: ``pass_costs[width * (k + 1) - 1] / width`` (pass_costs[w-1] =
    the relative time of a pass over w rows; rows past its end cost as its last entry
    scaled by the rows). These are the costs a request's ``DraftGate`` weighs at this
    width: alone a draft row is nearly free in bf16, in a full batch it is not. Counts
    only, fixed before any draft of the step is drawn (non-anticipating)."""
    if width < 1 or max_k < 0 or not pass_costs:
        raise ValueError(f"need width >= 1, max_k >= 0 and pass costs, got {width}, {max_k}, {len(pass_costs)}")
    last = len(pass_costs)

    def cost(rows: int) -> float:
        return pass_costs[rows - 1] if rows <= last else pass_costs[-1] * rows / last

    return tuple(cost(width * (k + 1)) / width for k in range(max_k + 1))


def gates_of(drafter: Any) -> list:
    """What inside a drafter weighs drafting against pass costs: the ``DraftGate``s
    (``GatedDrafter.gate``, through hybrids) and a ``DSparkDrafter``'s schedule; each has
    ``costs`` and ``max_tokens``, which the engine sets every step."""
    if drafter is None:
        return []
    found = []
    for attr in ("gate", "schedule"):
        gate = getattr(drafter, attr, None)
        if gate is not None and hasattr(gate, "costs") and hasattr(gate, "max_tokens"):
            found.append(gate)
    for attr in ("drafter", "lookup", "model"):
        inner = getattr(drafter, attr, None)
        if inner is not None and callable(getattr(inner, "propose", None)):
            found.extend(gates_of(inner))
    return found


def relaxed_greedy(logits: torch.Tensor, draft: torch.Tensor, threshold: float) -> torch.Tensor:
    """LOSSY greedy acceptance: keep draft token d_i while it is the argmax of row i OR
    its untempered target probability softmax(logits_i)[d_i] >= threshold (SGLang's
    ``accept-threshold-single`` applied to greedy requests); then the argmax of the first
    rejected row (or of the bonus row). logits [k+1, V], draft [k] -> tokens [n+1]."""
    k = int(draft.numel())
    best = logits.argmax(dim=-1)  # [k+1]
    n = 0
    if k:
        p = torch.softmax(logits[:k].float(), dim=-1).gather(-1, draft.view(-1, 1)).view(-1)  # [k]
        ok = (draft == best[:k]) | (p >= threshold)
        n = int(ok.long().cumprod(0).sum())
    return torch.cat([draft[:n], best[n : n + 1]])


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class Request:
    """One generation. ``logprobs``: None (off) or how many top alternatives (0..20)."""

    id: str
    prompt_ids: list[int]
    params: SamplingParams
    logprobs: int | None = None


@dataclass
class Update:
    """What one step produced for one request. ``finish_reason`` set on the last one:
    "stop" (EOS or a stop string), "length" (max_tokens) or "error"."""

    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


class _Seq:
    """Engine-internal state of one admitted request."""

    def __init__(self, req: Request, kv: FastSession, drafter: Any, tokenizer, eos: set[int]) -> None:
        self.req = req
        self.kv = kv
        self.drafter = drafter
        self.generator = req.params.make_generator()
        self.text = IncrementalText(tokenizer, req.params.stop)
        self.eos = eos
        self.output: list[int] = []  # emitted ids (EOS excluded)
        self.pending = req.prompt_ids[-1]
        self.prefilled = False
        self.t_admit = time.perf_counter()
        self.gates = gates_of(drafter)
        if drafter is not None:
            drafter.begin(req.prompt_ids)

    @property
    def remaining(self) -> int:
        return self.req.params.max_tokens - len(self.output)


class BatchEngine:
    """Continuous-batching speculative engine over a ``PackedLM``.

    drafter_factory: None (no speculation) or a callable returning a fresh drafter per
    request (``token_spec.drafters`` protocol). gamma: most draft tokens per sequence
    and step. max_rows: rows per pass that the scheduler fills with drafts.
    acceptance: "strict" (lossless) or "relaxed" (lossy, ``relaxed_threshold``).
    pass_costs: the target's relative pass costs (``costs[w-1]`` = a pass over w rows);
    given, the ``DraftGate``s of each request's drafter (``gates_of``) get the step's
    per-sequence costs at its batch width (``batch_costs``) before anything is drafted.
    switch: a ``DraftSwitch`` (None: off) that lets a step draft only where drafting has
    measured faster at that batch width; clock: the step timer it reads (tests pass a
    fake one). batch_drafts: draft for all sequences of a step together
    (``token_spec.draft_steps.propose_many``, the draft models' steps packed across
    sequences; the default) or one sequence at a time (False: the reference the tests
    compare with). on_round(proposed, accepted) and on_finish(seq_metrics) are metric hooks.
    """

    def __init__(self, lm: PackedLM, tokenizer, eos_ids: Sequence[int], *,
                 drafter_factory: Callable[[], Any] | None = None, gamma: int = 4, max_rows: int = 16,
                 max_seqs: int = 32, acceptance: str = "strict", relaxed_threshold: float = 0.1,
                 on_round: Callable[[int, int], None] | None = None,
                 on_finish: Callable[[Any], None] | None = None,
                 pass_costs: Sequence[float] | None = None, switch: DraftSwitch | None = None,
                 clock: Callable[[], float] = time.perf_counter, batch_drafts: bool = True) -> None:
        if acceptance not in ("strict", "relaxed"):
            raise ValueError(f"acceptance must be 'strict' or 'relaxed', got {acceptance!r}")
        if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
            raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
        if max_rows < 1 or max_seqs < 1:
            raise ValueError("max_rows and max_seqs must be >= 1")
        if not 0.0 < relaxed_threshold <= 1.0:
            raise ValueError(f"relaxed_threshold must be in (0, 1], got {relaxed_threshold!r}")
        self.lm = lm
        self.tokenizer = tokenizer
        self.eos = set(int(e) for e in eos_ids)
        self.drafter_factory = drafter_factory
        self.gamma = gamma if drafter_factory is not None else 0
        self.max_rows = max_rows
        self.max_seqs = max_seqs
        self.acceptance = acceptance
        self.lossless = acceptance == "strict"
        self.relaxed_threshold = relaxed_threshold
        self._relaxed = RelaxedVerifier(threshold_single=relaxed_threshold)
        self.on_round = on_round
        self.on_finish = on_finish
        self.pass_costs = tuple(pass_costs) if pass_costs is not None else None
        self.switch = switch if drafter_factory is not None else None
        self.clock = clock
        self.batch_drafts = batch_drafts
        self._inbox: deque[Request] = deque()
        self._cancelled: set[str] = set()
        self._mutex = threading.Lock()  # guards _inbox and _cancelled
        self._step_lock = threading.Lock()  # held while a step runs
        self.active: dict[str, _Seq] = {}
        self.waiting: deque[Request] = deque()
        self.steps = 0
        self.last_budget = 0

    # -- any thread --------------------------------------------------------------
    def validate(self, req: Request) -> None:
        """Raise ContextTooLong / ValueError naming the problem if ``req`` cannot run."""
        if not req.prompt_ids:
            raise ValueError("the prompt is empty")
        need = len(req.prompt_ids) + req.params.max_tokens
        if need > self.lm.max_positions:
            raise ContextTooLong(
                f"this model's maximum context length is {self.lm.max_positions} tokens; the request needs "
                f"{need} ({len(req.prompt_ids)} in the prompt + {req.params.max_tokens} max_tokens)")
        if req.logprobs is not None and not 0 <= req.logprobs <= 20:
            raise ValueError(f"logprobs must be in 0..20, got {req.logprobs}")

    def submit(self, req: Request) -> None:
        """Queue a request (validated first)."""
        self.validate(req)
        with self._mutex:
            self._inbox.append(req)

    def cancel(self, req_id: str) -> None:
        """Forget a request; its KV is freed now if no step is running, else right after it."""
        with self._mutex:
            self._cancelled.add(req_id)
        if self._step_lock.acquire(blocking=False):
            try:
                self._drop_cancelled()
            finally:
                self._step_lock.release()

    def has_work(self) -> bool:
        with self._mutex:
            return bool(self._inbox or self.active or self.waiting)

    @property
    def kv_bytes(self) -> int:
        return sum(s.kv.nbytes for s in list(self.active.values()))

    # -- the step thread -----------------------------------------------------------
    def _drop_cancelled(self) -> None:
        with self._mutex:
            gone, self._cancelled = self._cancelled, set()
            if gone:
                self._inbox = deque(r for r in self._inbox if r.id not in gone)
        if not gone:
            return
        self.waiting = deque(r for r in self.waiting if r.id not in gone)
        for rid in gone:
            seq = self.active.pop(rid, None)
            if seq is not None:
                seq.kv.free()
                if seq.drafter is not None:
                    seq.drafter.end(seq.output)

    def _admit(self) -> None:
        with self._mutex:
            self.waiting.extend(self._inbox)
            self._inbox.clear()
        while self.waiting and len(self.active) < self.max_seqs:
            req = self.waiting.popleft()
            drafter = self.drafter_factory() if self.drafter_factory is not None else None
            self.active[req.id] = _Seq(req, self.lm.new_kv(), drafter, self.tokenizer, self.eos)

    def step(self) -> list[tuple[str, Update]]:
        """One packed pass for every active request; returns their updates."""
        with self._step_lock:
            self._drop_cancelled()
            self._admit()
            if not self.active:
                return []
            out = self._step()
            self._drop_cancelled()
            return out

    def _step(self) -> list[tuple[str, Update]]:
        self.steps += 1
        seqs = list(self.active.values())
        new = [s for s in seqs if not s.prefilled]
        decoding = seqs  # a new request is prefilled in its own pass, then decodes in this step's packed pass
        t0 = self.clock()
        k_budget = draft_budget(len(decoding), 0, self.max_rows, self.gamma)
        # the switch compares whole steps: only steps that prefill nothing, where drafting was
        # possible; a step that prefills takes the arm ahead without being recorded
        switched = self.switch is not None and k_budget > 0 and not new
        drafting = True
        if switched:
            drafting = self.switch.choose(len(decoding))
        elif self.switch is not None and k_budget > 0:
            drafting = self.switch.prefers(len(decoding))
        if not drafting:
            k_budget = 0
        self.last_budget = k_budget
        if k_budget and self.pass_costs is not None:  # the gates weigh drafting at this step's batch width
            costs = batch_costs(self.pass_costs, len(decoding), k_budget)
            for s in decoding:
                for gate in s.gates:
                    gate.costs, gate.max_tokens = costs, k_budget

        segments: list[Segment] = []
        plan: list[tuple[_Seq, torch.Tensor, torch.Tensor | None, int]] = []  # seq, draft, q, kv length before
        prefilling: dict[str, int] = {}  # request id -> prompt tokens its prefill segment adds
        for s in new:
            s.prefilled = True
            if len(s.req.prompt_ids) > 1:
                segments.append(Segment(s.kv, s.req.prompt_ids[:-1], prefill=True))
                prefilling[s.req.id] = len(s.req.prompt_ids) - 1
        drafts = self._draft(decoding, k_budget)
        for s in decoding:
            draft, q = torch.empty(0, dtype=torch.long), None
            d, k = drafts.get(s.req.id, (None, 0))
            if d is not None:
                draft = d.tokens.to(torch.long).reshape(-1)[:k]
                q = None if d.probs is None else d.probs[: draft.numel()]
            plan.append((s, draft, q, s.kv.length + prefilling.get(s.req.id, 0)))
            segments.append(Segment(s.kv, [s.pending] + draft.tolist()))
        try:
            logits_all = self.lm.forward(segments)
        except Exception as exc:  # a model error ends the affected requests, never the server
            return [self._fail(s, f"model error: {exc}") for s in seqs]
        decode_logits = logits_all[len(segments) - len(plan):]

        updates: list[tuple[str, Update]] = []
        for (s, draft, q, before), logits in zip(plan, decode_logits):
            updates.append((s.req.id, self._advance(s, draft, q, before, logits)))
        if switched:
            self.switch.record(len(decoding), drafting, sum(len(u.token_ids) for _, u in updates), self.clock() - t0)
        return updates

    def _draft(self, decoding: list[_Seq], k_budget: int) -> dict[str, tuple[Any, int]]:
        """Each drafting sequence's draft and length cap: request id -> (Draft, k). All
        of them at once (``propose_many``: the draft models' steps packed across
        sequences), or one sequence at a time with ``batch_drafts=False``."""
        asks = []
        for s in decoding:
            k = max(0, min(k_budget, s.remaining - 1))  # drafting past max_tokens is wasted
            if k and s.drafter is not None:
                asks.append((s, k, DraftRequest(s.drafter, s.req.prompt_ids + s.output, k, s.req.params, s.generator)))
        if self.batch_drafts:
            drafts = propose_many([r for _, _, r in asks])
        else:
            drafts = [r.drafter.propose(r.context, r.k, r.params, r.generator) for _, _, r in asks]
        return {s.req.id: (d, k) for (s, k, _), d in zip(asks, drafts)}

    def _verify(self, s: _Seq, draft: torch.Tensor, q, logits: torch.Tensor) -> torch.Tensor:
        p = s.req.params
        if self.acceptance == "relaxed":
            if p.greedy:
                return relaxed_greedy(logits, draft, self.relaxed_threshold)
            probs = warp(logits, p.temperature, p.top_k, p.top_p)
            return self._relaxed(probs, draft, q, generator=s.generator)
        probs = warp(logits, p.temperature, p.top_k, p.top_p)  # [k+1, V]
        return verify(probs, draft, q, generator=s.generator)

    def _advance(self, s: _Seq, draft: torch.Tensor, q, before: int, logits: torch.Tensor) -> Update:
        emitted = self._verify(s, draft, q, logits)  # [n+1]
        proposed, accepted = int(draft.numel()), int(emitted.numel()) - 1
        if proposed and self.on_round is not None:
            self.on_round(proposed, accepted)
        s.kv.truncate(before + 1 + accepted)  # exact rollback of rejected drafts
        s.pending = int(emitted[-1])
        tokens = [int(t) for t in emitted][: s.remaining]
        finish = None
        for i, t in enumerate(tokens):
            if t in s.eos:
                tokens, finish = tokens[:i], "stop"
                break
        lps = None
        if s.req.logprobs is not None and tokens:
            lps = _logprobs(logits[: len(tokens)], tokens, s.req.logprobs)
        s.output.extend(tokens)
        delta, stopped = s.text.push(tokens)
        if stopped:
            finish = "stop"
        elif finish is None and s.remaining <= 0:
            finish = "length"
        if finish is not None and not stopped:
            delta += s.text.finish()
        upd = Update(text=delta, token_ids=tokens, logprobs=lps, finish_reason=finish,
                     prompt_tokens=len(s.req.prompt_ids), completion_tokens=len(s.output))
        if finish is not None:
            self._retire(s)
        return upd

    def _fail(self, s: _Seq, message: str) -> tuple[str, Update]:
        self._retire(s)
        return s.req.id, Update(text="", token_ids=[], logprobs=None, finish_reason="error", error=message,
                                prompt_tokens=len(s.req.prompt_ids), completion_tokens=len(s.output))

    def _retire(self, s: _Seq) -> None:
        self.active.pop(s.req.id, None)
        s.kv.free()
        if s.drafter is not None:
            s.drafter.end(s.output)
        if self.on_finish is not None:
            self.on_finish(s)


def _logprobs(logits: torch.Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """Raw model log-probabilities (log_softmax of the untempered logits, as vLLM's
    default) of each emitted token, with the ``top`` most likely alternatives."""
    lp = torch.log_softmax(logits.float(), dim=-1)  # [n, V]
    chosen = lp.gather(-1, torch.tensor(tokens).view(-1, 1)).view(-1).tolist()
    out = []
    if top > 0:
        vals, idx = lp.topk(top, dim=-1)
        tops = [list(zip(i.tolist(), v.tolist())) for v, i in zip(vals, idx)]
    else:
        tops = [[] for _ in tokens]
    for t, c, tp in zip(tokens, chosen, tops):
        out.append(TokenLogprob(token_id=t, logprob=c, top=tp))
    return out
