"""The decoding engine: text in, verified text out, sync or as an async stream.

``SpeculativeDecoder(target, drafter)`` drives ``token_spec.rounds.speculative_ids``
(draft -> one target pass over ``[pending, d_1..d_k]`` -> warp -> verify -> exact KV
rollback); ``VanillaDecoder(target)`` drives ``token_spec.rounds.vanilla_ids`` with the
same ``warp``. Both share everything above the token level:

* prompts: a raw string (tokenised as is) or a list of chat messages (the target's
  chat template with the assistant generation prompt);
* stopping: any of the target's EOS ids (not part of the text), ``params.max_tokens``,
  or a stop string (``IncrementalText``: UTF-8 safe, stop strings held back);
* ``stream()`` yields only verified text; every round runs in a worker thread
  (``anyio.to_thread.run_sync``) so the event loop stays free, on asyncio and trio;
* metrics: per request and cumulative (``token_spec.metrics``). Counting is done by
  thin wrappers around the drafter, the verifier and the target session, so the
  round loop stays pure.

One decoder serves one request at a time (its drafter holds per-request state);
concurrent ``stream()`` calls on one decoder queue on a lock. Use one decoder per
concurrent stream for parallelism.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.to_thread
import torch

from .detokenize import IncrementalText
from .gamma import FixedGamma, GammaPolicy
from .metrics import MetricsBook, SpecMetrics
from .rounds import speculative_ids, vanilla_ids
from .sampler import verify
from .sampling import SamplingParams

__all__ = ["SpeculativeDecoder", "VanillaDecoder", "Generation"]

Prompt = str | Sequence[dict] | Sequence[int]


@dataclass
class Generation:
    """One finished request. ``finish_reason``: "eos" | "length" | "stop"."""

    text: str
    token_ids: list[int]
    finish_reason: str
    metrics: SpecMetrics
    lossless: bool = True
    prompt_ids: list[int] = field(default_factory=list)


# -- metering wrappers (no effect on what is computed) ----------------------------

class _MeteredSession:
    def __init__(self, session: Any, m: SpecMetrics) -> None:
        self._s, self._m = session, m

    @property
    def length(self) -> int:
        return self._s.length

    def extend(self, ids: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        try:
            return self._s.extend(ids)
        finally:
            self._m.verification_s += time.perf_counter() - t0

    def truncate(self, length: int) -> None:
        self._s.truncate(length)


class _MeteredTarget:
    def __init__(self, target: Any, m: SpecMetrics) -> None:
        self._t, self._m = target, m
        self.vocab_size = target.vocab_size
        self.max_verify_tokens = getattr(target, "max_verify_tokens", None)

    def start(self, prompt_ids: Sequence[int]) -> _MeteredSession:
        t0 = time.perf_counter()
        session = self._t.start(prompt_ids)
        self._m.prefill_s += time.perf_counter() - t0
        return _MeteredSession(session, self._m)


class _MeteredDrafter:
    def __init__(self, drafter: Any, m: SpecMetrics) -> None:
        self._d, self._m = drafter, m
        self.name = drafter.name

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._d.begin(prompt_ids)

    def propose(self, context, k, params, generator):
        t0 = time.perf_counter()
        try:
            return self._d.propose(context, k, params, generator)
        finally:
            self._m.drafting_s += time.perf_counter() - t0

    def end(self, output_ids: Sequence[int]) -> None:
        self._d.end(output_ids)


def _metered_verifier(verifier: Callable[..., torch.Tensor], m: SpecMetrics) -> Callable[..., torch.Tensor]:
    def run(target_probs, draft_tokens, draft_probs=None, *, generator=None):
        t0 = time.perf_counter()
        out = verifier(target_probs, draft_tokens, draft_probs, generator=generator)
        m.verification_s += time.perf_counter() - t0
        m.record_round(int(draft_tokens.numel()), int(out.numel()) - 1)
        return out

    return run


# -- one request --------------------------------------------------------------------

class _Run:
    """A request in progress: ``step()`` runs one round and returns (text delta, done)."""

    def __init__(self, decoder: _Decoder, prompt: Prompt, params: SamplingParams) -> None:
        target = decoder.target
        self.decoder = decoder
        self.params = params
        self.prompt_ids = _encode(target, prompt)
        self.metrics = SpecMetrics(lossless=decoder.lossless, num_requests=1)
        self.text = IncrementalText(target.tokenizer, params.stop)
        self.eos = set(getattr(target, "eos_ids", ())) or {target.eos_id}
        self.ids: list[int] = []
        self.finish_reason: str | None = None
        self._t0 = time.perf_counter()
        self._rounds = decoder._rounds(self.prompt_ids, params, self.metrics)

    def step(self) -> tuple[str, bool]:
        if self.finish_reason is not None:
            return "", True
        with torch.inference_mode():
            tokens = next(self._rounds, None)
        if tokens is None:
            return self._finish("length")
        budget = self.params.max_tokens - len(self.ids)
        tokens = tokens[:budget]
        reason = None
        for i, t in enumerate(tokens):
            if t in self.eos:
                tokens, reason = tokens[:i], "eos"
                break
        self.ids.extend(tokens)
        self.metrics.num_emitted_tokens = len(self.ids)
        delta, stopped = self.text.push(tokens)
        if stopped:
            return delta + self._finish("stop")[0], True
        if reason is None and len(self.ids) >= self.params.max_tokens:
            reason = "length"
        if reason is not None:
            return delta + self._finish(reason)[0], True
        return delta, False

    def _finish(self, reason: str) -> tuple[str, bool]:
        self.finish_reason = reason
        tail = self.text.finish() if reason != "stop" else ""
        self.close()
        return tail, True

    def close(self) -> None:
        if self._rounds is not None:
            self._rounds.close()  # runs the drafter's end() hook
            self._rounds = None
            self.metrics.total_s = time.perf_counter() - self._t0
            self.decoder.metrics.record(self.metrics)

    def result(self) -> Generation:
        return Generation(
            text=self.text.text, token_ids=list(self.ids), finish_reason=self.finish_reason or "cancelled",
            metrics=self.metrics, lossless=self.metrics.lossless, prompt_ids=list(self.prompt_ids),
        )


def _encode(target: Any, prompt: Prompt) -> list[int]:
    if isinstance(prompt, str):
        return target.encode(prompt)
    items = list(prompt)
    if items and all(isinstance(x, int) for x in items):
        return [int(x) for x in items]
    if items and all(isinstance(x, dict) for x in items):
        return target.encode(items)
    raise ValueError("prompt must be a string, a list of chat messages (dicts) or a list of token ids")


class _Decoder:
    lossless = True

    def __init__(self, target: Any) -> None:
        self.target = target
        self.metrics = MetricsBook()
        self._lock = threading.Lock()

    def _rounds(self, prompt_ids: list[int], params: SamplingParams, m: SpecMetrics) -> Iterator[list[int]]:
        raise NotImplementedError

    def _params(self, params: SamplingParams | None, overrides: dict) -> SamplingParams:
        params = params if params is not None else SamplingParams()
        return replace(params, **overrides) if overrides else params

    def generate(self, prompt: Prompt, params: SamplingParams | None = None, *,
                 on_round: Callable[[list[int]], None] | None = None, **overrides: Any) -> Generation:
        """Run one request to the end (synchronously, in this thread).

        ``on_round``: called after every round with the ids that round emitted (after
        EOS and ``max_tokens`` trimming; possibly empty), e.g. to time each token."""
        params = self._params(params, overrides)
        with self._lock:
            run = _Run(self, prompt, params)
            try:
                done = False
                while not done:
                    before = len(run.ids)
                    _, done = run.step()
                    if on_round is not None:
                        on_round(run.ids[before:])
            finally:
                run.close()
            return run.result()

    async def stream(self, prompt: Prompt, params: SamplingParams | None = None, **overrides: Any) -> AsyncIterator[str]:
        """Yield verified text deltas; each round runs in a worker thread."""
        params = self._params(params, overrides)
        with anyio.CancelScope(shield=True):  # once acquired, the lock is always released below
            await anyio.to_thread.run_sync(self._lock.acquire)
        try:
            run = await anyio.to_thread.run_sync(_Run, self, prompt, params)
            try:
                done = False
                while not done:
                    delta, done = await anyio.to_thread.run_sync(run.step)
                    if delta:
                        yield delta
            finally:
                run.close()
        finally:
            self._lock.release()


class SpeculativeDecoder(_Decoder):
    """Lossless speculative decoding of ``target`` with ``drafter``.

    gamma_policy: a ``GammaPolicy`` (default ``FixedGamma(4)``), decided before each
    round is drafted (non-anticipating). acceptance: None for exact rejection sampling
    (``token_spec.sampler.verify``), or an explicit relaxed verifier such as
    ``token_spec.relaxed.RelaxedVerifier`` (lossy: every result says lossless=False).
    """

    def __init__(self, target: Any, drafter: Any, *, gamma_policy: GammaPolicy | None = None,
                 acceptance: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__(target)
        dv = getattr(drafter, "vocab_size", None)
        if dv is not None and int(dv) != int(target.vocab_size):
            raise ValueError(
                f"drafter {drafter.name!r} has vocabulary size {dv}, the target has {target.vocab_size}: "
                "a drafter must share the target's tokenizer"
            )
        self.drafter = drafter
        self.gamma_policy = gamma_policy if gamma_policy is not None else FixedGamma(4)
        self.verifier = acceptance if acceptance is not None else verify
        self.lossless = acceptance is None or bool(getattr(acceptance, "lossless", False))

    def _rounds(self, prompt_ids: list[int], params: SamplingParams, m: SpecMetrics) -> Iterator[list[int]]:
        return speculative_ids(
            _MeteredTarget(self.target, m), _MeteredDrafter(self.drafter, m), prompt_ids, params,
            policy=self.gamma_policy, generator=params.make_generator(),
            verifier=_metered_verifier(self.verifier, m), eos_id=self.target.eos_id,
            max_new_tokens=params.max_tokens,
        )


class VanillaDecoder(_Decoder):
    """Plain autoregressive decoding of ``target`` with the same warp and sampler."""

    def _rounds(self, prompt_ids: list[int], params: SamplingParams, m: SpecMetrics) -> Iterator[list[int]]:
        ids = vanilla_ids(
            _MeteredTarget(self.target, m), prompt_ids, params, generator=params.make_generator(),
            eos_id=self.target.eos_id, max_new_tokens=params.max_tokens,
        )
        for t in ids:
            m.num_rounds += 1
            yield [t]
