"""Draft-length (γ) policies. Non-anticipating by construction.

Why that matters: rejection sampling is exact *for a fixed γ*. Speculative decoding
stays exact under a varying γ only if the decision "verify draft position i" uses
nothing that depends on the draft token x_i itself (or later ones). Otherwise the
policy can selectively hide draft tokens it expects to be rejected, so the tokens
that reach `verify` are no longer distributed as q, and the min(1, p/q) correction
no longer yields p (DSpark paper, Appendix A; a negative control in
tests/token_spec/test_negative_controls.py shows the bias).

The interface makes anticipation impossible rather than merely discouraged:

* `gamma()` is called once per round, *before* the drafter runs, and takes no
  arguments: the only information it can use is what `update()` fed it earlier.
* `update(proposed, accepted)` is called *after* the round has been verified and
  its tokens emitted; what it learns can only affect later rounds.

Formally: γ_t is measurable with respect to everything that happened in rounds
< t. Conditional on that history, round t is an ordinary speculative step with a
fixed γ_t and fresh randomness, which emits tokens distributed exactly as the
target given the emitted prefix; by the tower rule the whole sequence is.

Pure module: standard library only (``measure_pass_costs`` times a target; torch is
imported there, lazily).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["GammaPolicy", "FixedGamma", "AdaptiveGamma", "CostAwareGamma", "DraftGate", "measure_pass_costs",
           "measure_step_ratio", "measure_propose_cost", "draft_over_target", "OPEN_PRIOR"]


@runtime_checkable
class GammaPolicy(Protocol):
    def gamma(self) -> int:
        """Draft length for the next round, decided BEFORE the round is drafted."""
        ...

    def update(self, proposed: int, accepted: int) -> None:
        """After verification: `proposed` draft tokens were verified, `accepted` kept."""
        ...


def _check_update(proposed: int, accepted: int) -> None:
    if proposed < 0 or not (0 <= accepted <= proposed):
        raise ValueError(f"need 0 <= accepted <= proposed, got proposed={proposed}, accepted={accepted}")


@dataclass
class FixedGamma:
    """Always draft `k` tokens (k = 0 degenerates to vanilla decoding)."""

    k: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValueError(f"gamma must be an int >= 0, got {self.k!r}")

    def gamma(self) -> int:
        return self.k

    def update(self, proposed: int, accepted: int) -> None:
        _check_update(proposed, accepted)


@dataclass
class AdaptiveGamma:
    """Hugging Face's heuristic: +`increase` after a round whose drafts were all
    accepted, −`decrease` otherwise, clamped to [min_gamma, max_gamma].

    A round with no drafts (proposed == 0, e.g. the drafter had nothing to offer)
    carries no evidence and leaves γ unchanged.
    """

    initial: int = 4
    min_gamma: int = 1
    max_gamma: int = 16
    increase: int = 2
    decrease: int = 1

    def __post_init__(self) -> None:
        for name in ("initial", "min_gamma", "max_gamma", "increase", "decrease"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if not (self.min_gamma <= self.initial <= self.max_gamma):
            raise ValueError(
                f"need min_gamma <= initial <= max_gamma, got {self.min_gamma}, {self.initial}, {self.max_gamma}"
            )
        self._current = self.initial

    def gamma(self) -> int:
        return self._current

    def update(self, proposed: int, accepted: int) -> None:
        _check_update(proposed, accepted)
        if proposed == 0:
            return
        if accepted == proposed:
            self._current = min(self.max_gamma, self._current + self.increase)
        else:
            self._current = max(self.min_gamma, self._current - self.decrease)

    def reset(self) -> None:
        """Back to `initial` (e.g. for a new request, if γ should not carry over)."""
        self._current = self.initial


class _DecayedAcceptance:
    """What CostAwareGamma and DraftGate share: pass ``costs`` (costs[k] = the relative
    time of a pass over k + 1 tokens) and the censored-geometric acceptance estimate
    α = accepted / (accepted + rejections) over the rounds fed to ``update``, each older
    round's counts decayed by ``decay``, from a prior of ``prior_accepts`` :
    ``prior_rejects``. Subclasses are dataclasses that declare those four fields."""

    costs: tuple[float, ...]
    decay: float
    prior_accepts: float
    prior_rejects: float

    def _start(self) -> None:
        if not self.costs or any(c <= 0 for c in self.costs):
            raise ValueError("costs must be a non-empty sequence of positive numbers (costs[k] = pass over k+1 tokens)")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")
        self.costs = tuple(float(c) for c in self.costs)
        self._acc, self._rej = self.prior_accepts, self.prior_rejects

    @property
    def alpha(self) -> float:
        return self._acc / (self._acc + self._rej) if self._acc + self._rej > 0 else 0.0

    def _record(self, proposed: int, accepted: int) -> bool:
        """Count one verified round; False (nothing counted) for a round without drafts."""
        _check_update(proposed, accepted)
        if proposed == 0:
            return False
        self._acc = self.decay * self._acc + accepted
        self._rej = self.decay * self._rej + (1 if accepted < proposed else 0)
        return True

    def reset(self) -> None:
        self._acc, self._rej = self.prior_accepts, self.prior_rejects


def _tokens_per_cost(a: float, k: int, cost: float) -> float:
    # E_k = (1 - a^(k+1)) / (1 - a): the accepted prefix plus the bonus/recovered token
    return (1.0 - a ** (k + 1)) / (1.0 - a) / cost


@dataclass
class CostAwareGamma(_DecayedAcceptance):
    """γ that maximises expected tokens per unit of verify cost, from past acceptances only.

    Model: each draft token is accepted with probability α independently, so a round
    with k drafts emits E_k = (1 - α^(k+1)) / (1 - α) tokens (accepted prefix + the
    bonus/recovered token) and costs ``costs[k]`` (the relative time of a pass over
    k + 1 tokens; ``measure_pass_costs``). γ = argmax_k E_k / costs[k] over
    min_gamma..max_gamma, with α the censored-geometric estimate accepted / (accepted +
    rejections) over the rounds seen so far, each older round's counts decayed by
    ``decay`` (a prior of ``prior_accepts`` : ``prior_rejects`` before any evidence).

    Non-anticipating: γ for round t depends only on counts fed to ``update`` after rounds
    < t. Where verification is nearly free (bf16 on this CPU: a 16-token pass costs
    ~1.2 one-token passes), γ grows quickly; where it is not (fp32, int4), it stays short.
    """

    costs: tuple[float, ...] = tuple(1.0 + 0.25 * k for k in range(16))
    min_gamma: int = 1
    max_gamma: int = 15
    decay: float = 0.9
    prior_accepts: float = 2.0
    prior_rejects: float = 1.0

    def __post_init__(self) -> None:
        if not (0 <= self.min_gamma <= self.max_gamma):
            raise ValueError(f"need 0 <= min_gamma <= max_gamma, got {self.min_gamma}, {self.max_gamma}")
        self._start()

    def gamma(self) -> int:
        a = min(self.alpha, 0.999)
        top = min(self.max_gamma, len(self.costs) - 1)
        best, best_rate = self.min_gamma, -1.0
        for k in range(self.min_gamma, max(self.min_gamma, top) + 1):
            rate = _tokens_per_cost(a, k, self.costs[min(k, len(self.costs) - 1)])
            if rate > best_rate + 1e-12:
                best, best_rate = k, rate
        return best

    def update(self, proposed: int, accepted: int) -> None:
        self._record(proposed, accepted)


@dataclass
class DraftGate(_DecayedAcceptance):
    """Whether a round drafted by a costly drafter (a draft model) pays, and how long.

    Model (per round, in units of one one-token target pass): the drafter's tokens are
    accepted independently with probability α, so drafting k tokens yields
    E_k = (1 - α^(k+1)) / (1 - α) tokens for ``k * draft_cost`` (k drafter steps; with
    ``block``, ``draft_cost`` once: a block drafter's one pass for all k) +
    ``costs[k]`` (the verify pass over k + 1 tokens); not drafting yields 1 token for
    ``costs[0]``. ``tokens()`` = the k in 1..max_tokens with the best E_k / cost when that
    beats 1 / costs[0], else 0 (do not draft). α is the censored-geometric estimate
    accepted / (accepted + rejections) of the drafter's earlier rounds, older rounds
    decayed by ``decay``, from a prior of ``prior_accepts`` : ``prior_rejects``.

    While the gate is shut, one call in ``probe_every`` still drafts one token, so α keeps
    being measured; each probe that leaves the gate shut doubles that interval (up to
    ``max_probe_every``), and the gate opening resets it, so a drafter that never pays
    costs ever fewer probes. Non-anticipating like the γ policies:
    ``tokens()`` uses only what ``update`` was fed after earlier rounds, so the verifier's
    guarantee holds whatever it decides. Where drafting is cheap and verification nearly
    free (bf16 here: draft_cost ~0.08) it stays open at low α; where the target step is
    itself cheap (Q4_1: draft_cost ~0.2, wider passes dearer) it shuts on prose, where
    the draft model rarely agrees with the target.
    """

    costs: tuple[float, ...]
    draft_cost: float
    max_tokens: int = 4
    decay: float = 0.9
    prior_accepts: float = 1.0
    prior_rejects: float = 1.0
    probe_every: int = 8
    max_probe_every: int = 256
    block: bool = False

    def __post_init__(self) -> None:
        if not self.draft_cost >= 0:
            raise ValueError(f"draft_cost must be >= 0, got {self.draft_cost}")
        if self.max_tokens < 1 or not 1 <= self.probe_every <= self.max_probe_every:
            raise ValueError("need max_tokens >= 1 and 1 <= probe_every <= max_probe_every, got "
                             f"{self.max_tokens}, {self.probe_every}, {self.max_probe_every}")
        self._start()
        self._shut_calls = 0
        self._interval = self.probe_every
        self._probing = False

    def best(self) -> int:
        """The k that pays best at the current α (0 = drafting does not pay)."""
        a = min(self.alpha, 0.999)
        best, best_rate = 0, 1.0 / self.costs[0]
        for k in range(1, self.max_tokens + 1):
            drafting = self.draft_cost if self.block else k * self.draft_cost
            rate = _tokens_per_cost(a, k, self.costs[min(k, len(self.costs) - 1)] + drafting)
            if rate > best_rate + 1e-12:
                best, best_rate = k, rate
        return best

    def tokens(self) -> int:
        """Tokens to draft this round (0 = skip the drafter), decided before it runs."""
        k = self.best()
        if k:
            self._shut_calls, self._interval = 0, self.probe_every
            return k
        self._shut_calls += 1
        if self._shut_calls < self._interval:
            return 0
        self._shut_calls, self._probing = 0, True
        return 1

    def update(self, proposed: int, accepted: int) -> None:
        if not self._record(proposed, accepted):
            return
        if self._probing:
            self._probing = False
            if self.best() == 0:  # the probe did not reopen the gate: probe half as often
                self._interval = min(2 * self._interval, self.max_probe_every)


# A DraftGate prior that starts open (alpha 0.8): for a drafter that already weighs each
# round itself (DSpark's schedule), so the gate learns from real rounds and shuts only
# where their measured acceptance cannot pay, instead of starting shut on probes alone.
OPEN_PRIOR = {"prior_accepts": 4.0, "prior_rejects": 1.0}


def _timed_pass(session, width: int) -> float:
    """Seconds of one pass over ``width`` tokens; the session is rolled back after it."""
    import time

    import torch

    base = session.length
    t0 = time.perf_counter()
    session.extend(torch.arange(200, 200 + width))
    elapsed = time.perf_counter() - t0
    session.truncate(base)
    return elapsed


def measure_step_ratio(draft, target, repeats: int = 7, context: int = 256) -> float:
    """Time of one one-token step of ``draft`` over one of ``target`` (best of
    ``repeats`` each, interleaved, ``context`` cached tokens): DraftGate's draft_cost."""
    sessions = [lm.start(list(range(100, 100 + context))) for lm in (draft, target)]
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for i, session in enumerate(sessions):
            best[i] = min(best[i], _timed_pass(session, 1))
    return best[0] / best[1]


def draft_over_target(begin, draft_once, end, target, repeats: int = 7, context: int = 256) -> float:
    """Time of ``draft_once()`` over one one-token ``target`` step, best of ``repeats`` each,
    interleaved, ``context`` cached tokens. The target session is started first (its pass
    fills a feature tap, where a drafter reads one); ``begin(ctx)`` primes the drafter on
    that context and ``end()`` releases it."""
    import time

    ctx = list(range(100, 100 + context))
    session = target.start(ctx[:-1])
    begin(ctx)
    best_draft = best_target = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        draft_once()
        best_draft = min(best_draft, time.perf_counter() - t0)
        best_target = min(best_target, _timed_pass(session, 1))
    end()
    return best_draft / best_target


def measure_propose_cost(drafter, target, k: int, repeats: int = 7, context: int = 256) -> float:
    """Time of one ``drafter.propose`` of ``k`` tokens over one one-token ``target`` step
    (``draft_over_target``; the drafter's context already caught up, as in a round after
    the first): DraftGate's draft_cost for a drafter that reads the target's features,
    with ``block=True`` where one pass drafts the whole block."""
    from .sampling import SamplingParams

    params = SamplingParams(temperature=0.0)
    primed: list[int] = []

    def begin(ctx):
        primed[:] = ctx
        drafter.begin(ctx)
        drafter.propose(ctx, k, params, None)

    return draft_over_target(begin, lambda: drafter.propose(primed, k, params, None), lambda: drafter.end([]),
                             target, repeats, context)


def measure_pass_costs(target, max_width: int = 16, repeats: int = 5, context: int = 256) -> tuple[float, ...]:
    """Relative time of one target pass over w = 1..max_width tokens (costs[w-1] / costs[0]),
    measured on a throwaway session with ``context`` cached tokens (best of ``repeats``)."""
    session = target.start(list(range(100, 100 + context)))
    times = [float("inf")] * max_width
    for rep in range(repeats):  # widths interleaved, in a rotating order: load changes hit all alike
        order = list(range(1, max_width + 1))
        order = order[rep % max_width :] + order[: rep % max_width]
        for w in order:
            times[w - 1] = min(times[w - 1], _timed_pass(session, w))
    # A wider pass never costs less: where a narrower one measured slower, that was noise
    # (a suffix minimum keeps the cheaper, later measurement).
    for i in range(max_width - 2, -1, -1):
        times[i] = min(times[i], times[i + 1])
    return tuple(t / times[0] for t in times)
