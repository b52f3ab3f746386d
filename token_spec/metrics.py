"""Speculative decoding metrics with vLLM's counter names and meanings.

Counters (per request, and summed into a cumulative book), as vLLM's
``vllm:spec_decode_*`` Prometheus counters define them:

* ``num_drafts``            rounds in which the drafter proposed at least one token;
* ``num_draft_tokens``      draft tokens proposed (and verified) in total;
* ``num_accepted_tokens``   draft tokens accepted in total (bonus/recovered not counted);
* ``num_accepted_tokens_per_pos[i]``  drafts whose first ``i+1`` tokens were ALL
  accepted (unconditional, so the list is non-increasing).

Derived:

* ``mean_acceptance_length`` (τ, incl. the bonus/recovered token) = 1 + accepted / drafts;
* ``acceptance_rate`` = accepted / draft_tokens (vLLM's "acceptance rate"; it is not α);
* ``alpha_hat`` = accepted / (accepted + rejections), where a rejection is a draft that
  stopped before its end. Under i.i.d. acceptance with probability α the accepted run
  of a draft of length k is a geometric variable truncated at k; this ratio is the
  maximum-likelihood estimate of α for that censored sample;
* ``tokens_per_pass`` = emitted tokens / target forward passes (rounds);
* ``tokens_per_s`` = emitted / total_s; ``per_token_latency_s`` = total_s / emitted;
* drafting, verification (target forward + warp + verify) and prefill seconds.

A result produced with relaxed acceptance carries ``lossless=False``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

__all__ = ["SpecMetrics", "MetricsBook"]


@dataclass
class SpecMetrics:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_full_accepts: int = 0  # drafts whose every token was accepted
    num_rounds: int = 0  # target verification passes (including rounds without a draft)
    num_emitted_tokens: int = 0
    num_requests: int = 0
    prefill_s: float = 0.0
    drafting_s: float = 0.0
    verification_s: float = 0.0
    total_s: float = 0.0
    lossless: bool = True

    def record_round(self, proposed: int, accepted: int) -> None:
        """One verification: ``proposed`` draft tokens, the first ``accepted`` kept."""
        if not 0 <= accepted <= proposed:
            raise ValueError(f"need 0 <= accepted <= proposed, got {accepted}, {proposed}")
        self.num_rounds += 1
        if proposed == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += proposed
        self.num_accepted_tokens += accepted
        self.num_full_accepts += accepted == proposed
        per_pos = self.num_accepted_tokens_per_pos
        if len(per_pos) < accepted:
            per_pos.extend([0] * (accepted - len(per_pos)))
        for i in range(accepted):
            per_pos[i] += 1

    # -- derived ---------------------------------------------------------------
    @property
    def mean_acceptance_length(self) -> float:
        """τ incl. bonus: 1 + accepted / drafts (1.0 when nothing was drafted)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def alpha_hat(self) -> float | None:
        rejections = self.num_drafts - self.num_full_accepts
        denom = self.num_accepted_tokens + rejections
        return self.num_accepted_tokens / denom if denom else None

    @property
    def tokens_per_pass(self) -> float | None:
        return self.num_emitted_tokens / self.num_rounds if self.num_rounds else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.num_emitted_tokens / self.total_s if self.total_s > 0 else None

    @property
    def per_token_latency_s(self) -> float | None:
        return self.total_s / self.num_emitted_tokens if self.num_emitted_tokens else None

    def add(self, other: SpecMetrics) -> None:
        """Accumulate another request's counters into this one."""
        for name in self._SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        per_pos = self.num_accepted_tokens_per_pos
        if len(per_pos) < len(other.num_accepted_tokens_per_pos):
            per_pos.extend([0] * (len(other.num_accepted_tokens_per_pos) - len(per_pos)))
        for i, c in enumerate(other.num_accepted_tokens_per_pos):
            per_pos[i] += c
        self.lossless = self.lossless and other.lossless

    _SUMMED = (
        "num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_full_accepts", "num_rounds",
        "num_emitted_tokens", "num_requests", "prefill_s", "drafting_s", "verification_s", "total_s",
    )

    def copy(self) -> SpecMetrics:
        out = SpecMetrics(lossless=self.lossless)
        out.add(self)
        return out

    def since(self, before: SpecMetrics) -> SpecMetrics:
        """The counts accumulated after the snapshot ``before`` (cumulative - before)."""
        out = self.copy()
        for name in self._SUMMED:
            setattr(out, name, getattr(self, name) - getattr(before, name))
        prev = before.num_accepted_tokens_per_pos
        out.num_accepted_tokens_per_pos = [
            c - (prev[i] if i < len(prev) else 0) for i, c in enumerate(self.num_accepted_tokens_per_pos)
        ]
        while out.num_accepted_tokens_per_pos and out.num_accepted_tokens_per_pos[-1] == 0:
            out.num_accepted_tokens_per_pos.pop()
        return out

    def __str__(self) -> str:
        """One readable line: tokens, τ, α̂, acceptance, speed, timings, lossless."""
        def num(x: float | None, spec: str) -> str:
            return "-" if x is None else format(x, spec)

        return (f"{self.num_emitted_tokens} tokens in {self.num_requests} request(s): "
                f"τ {self.mean_acceptance_length:.2f}, α̂ {num(self.alpha_hat, '.2f')}, "
                f"acceptance {num(self.acceptance_rate, '.2f')}, "
                f"{num(self.tokens_per_pass, '.2f')} tokens/pass, "
                f"{num(self.tokens_per_s, '.1f')} tok/s; prefill {self.prefill_s:.2f} s, "
                f"drafting {self.drafting_s:.2f} s, verification {self.verification_s:.2f} s, "
                f"total {self.total_s:.2f} s; {'lossless' if self.lossless else 'NOT lossless'}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_accepted_tokens_per_pos"] = list(self.num_accepted_tokens_per_pos)
        for name in ("mean_acceptance_length", "acceptance_rate", "alpha_hat", "tokens_per_pass",
                     "tokens_per_s", "per_token_latency_s"):
            d[name] = getattr(self, name)
        return d


@dataclass
class MetricsBook:
    """Per-request metrics (the most recent ``keep`` requests) and their running sum."""

    keep: int = 1000
    cumulative: SpecMetrics = field(default_factory=SpecMetrics)
    requests: deque = field(default_factory=deque)

    def record(self, request: SpecMetrics) -> None:
        self.cumulative.add(request)
        self.requests.append(request)
        while len(self.requests) > self.keep:
            self.requests.popleft()

    def __str__(self) -> str:
        """The cumulative counters as one readable line (see ``SpecMetrics.__str__``)."""
        return str(self.cumulative)

    @property
    def last(self) -> SpecMetrics | None:
        return self.requests[-1] if self.requests else None
