"""Whether drafting pays at this batch width, decided from the engine's measured token rate.

The gates (``token_spec.gamma.DraftGate``) and the DSpark schedule weigh drafting with a
cost model: pass costs measured once at start-up and a draft-to-target step ratio. On a
busy machine, or where the model misses a cost (draft steps run one sequence at a time
while the target pass is shared, the int4 GEMM's cost jumps at row blocks), the model
can open drafting where it does not pay, and a server with speculation then serves
fewer tokens per second than the same server without it. ``DraftSwitch`` closes that
gap with the outcome itself: per batch width (decoding sequences in the step) it keeps
an exponentially weighted token rate (tokens emitted per second of step time) of the
steps that let the drafters draft ("on") and of the steps that did not ("off"), and
lets a step draft only when "on" has measured at least as fast as "off". The losing arm
is still tried every ``explore_every``-th step of that width, so a change in load or in
the prompts is seen again.

Exactness: drafting or not never changes what a lossless verifier emits (each emitted
token is distributed as the target's, greedy output is vanilla's), and the decision
uses step timings and counts only, never the drafts of the step it decides. So the
switch changes speed, not output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DraftSwitch"]


@dataclass
class DraftSwitch:
    """Per-width on/off arms with measured token rates (see the module docstring).

    explore_every: every n-th step of a width runs the arm that is behind (n >= 2).
    alpha: weight of the newest step in the running rate, in (0, 1].
    """

    explore_every: int = 8
    alpha: float = 0.25
    rates: dict[tuple[int, bool], float] = field(default_factory=dict)  # (width, on) -> tokens/s
    steps: dict[int, int] = field(default_factory=dict)  # width -> steps decided

    def __post_init__(self) -> None:
        if isinstance(self.explore_every, bool) or not isinstance(self.explore_every, int) or self.explore_every < 2:
            raise ValueError(f"explore_every must be an int >= 2, got {self.explore_every!r}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha!r}")

    def choose(self, width: int) -> bool:
        """Whether this step (``width`` decoding sequences) lets the drafters draft."""
        n = self.steps.get(width, 0) + 1
        self.steps[width] = n
        on, off = self.rates.get((width, True)), self.rates.get((width, False))
        if on is None:
            return True  # measure drafting first
        if off is None:
            return False
        best = on >= off
        return (not best) if n % self.explore_every == 0 else best

    def record(self, width: int, on: bool, tokens: int, seconds: float) -> None:
        """One step's outcome: ``tokens`` emitted in ``seconds`` of step time."""
        if seconds <= 0 or tokens < 0:
            return
        rate = tokens / seconds
        key = (width, on)
        old = self.rates.get(key)
        self.rates[key] = rate if old is None else (1.0 - self.alpha) * old + self.alpha * rate
