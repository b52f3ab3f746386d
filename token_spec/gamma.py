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

Pure module: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["GammaPolicy", "FixedGamma", "AdaptiveGamma"]


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
