"""Whether drafting pays at this batch width, decided from the engine's measured token rate.

The gates (``token_spec.gamma.DraftGate``) and the DSpark schedule weigh drafting with a
cost model: pass costs measured once at start-up and a draft-to-target step ratio. On a
busy machine, or where the model misses a cost (the draft's step cost is measured for
one sequence, while a step's sequences share packed draft passes; the int4 GEMM's cost
jumps at row blocks), the model can open drafting where it does not pay, and a server
with speculation then serves fewer tokens per second than the same server without it. ``DraftSwitch`` closes that
gap with the outcome itself: per batch width (decoding sequences in the step) it keeps
the token rate (tokens emitted per second of step time) of the steps that let the
drafters draft ("on") and of the steps that did not ("off"), and lets a step draft only
when "on" has measured faster than "off" by more than ``margin`` (a tie goes to "off":
not drafting costs no draft work, so it is the safe side of the noise). A rate is a ratio
of exponentially decayed sums (tokens over seconds, each step's weight ``alpha``), not
an average of per-step rates: a drafting step emits anywhere from one token per sequence
to all of its drafts, so single-step rates scatter widely, and an average of them let the
noise swap the arms where a ratio of sums holds them apart.

The arm that is behind is tried again after ``explore_every`` steps of that width, and
each time it is still behind the wait doubles (up to ``max_explore_every``), so a
losing arm costs little while a change in load or in the prompts is still seen; when
the arms swap, the wait starts again from ``explore_every``. The wait is never shorter
than what keeps the measured price of exploring within ``explore_cost`` of the time: a
step of the arm behind takes ``ahead / behind - 1`` more time per token than one of the
arm ahead, so it waits at least that over ``explore_cost`` steps. That matters where a
drafting step costs a multiple of a plain one (a draft model catching up its cache on
every token since it last drafted): exploring it every eighth step would lose more than
drafting ever won. A width not measured yet
starts with the arm the nearest measured narrower width prefers (a wider step makes
drafting dearer, never cheaper), else with "on". A step whose time is not comparable
(it also prefills a prompt) is not recorded and takes the arm ahead (``prefers``): where
drafting does not pay, those steps do not draft either.

Exactness: drafting or not never changes what a lossless verifier emits (each emitted
token is distributed as the target's, greedy output is vanilla's), and the decision
uses step timings and counts only, never the drafts of the step it decides. So the
switch changes speed, not output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["DraftSwitch"]


@dataclass
class DraftSwitch:
    """Per-width on/off arms with measured token rates (see the module docstring).

    explore_every: steps of a width before the arm that is behind is tried again (>= 2);
    it doubles while that arm stays behind, up to max_explore_every.
    explore_cost: the share of time that exploring the arm behind may cost, > 0: the wait
    is at least (ahead / behind - 1) / explore_cost steps (still at most max_explore_every).
    alpha: weight of the newest step in the decayed sums, in (0, 1].
    margin: how much faster (relative) "on" must have measured than "off" to be ahead, >= 0.
    """

    explore_every: int = 8
    max_explore_every: int = 256
    explore_cost: float = 0.01
    alpha: float = 0.1
    margin: float = 0.01
    rates: dict[tuple[int, bool], float] = field(default_factory=dict)  # (width, on) -> tokens/s
    sums: dict[tuple[int, bool], tuple[float, float]] = field(default_factory=dict)  # -> decayed (tokens, s)
    wait: dict[int, int] = field(default_factory=dict)  # width -> steps between explorations now
    since: dict[int, int] = field(default_factory=dict)  # width -> steps since the last exploration
    leader: dict[int, bool] = field(default_factory=dict)  # width -> the arm ahead at the last exploration

    def __post_init__(self) -> None:
        for name in ("explore_every", "max_explore_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(f"{name} must be an int >= 2, got {value!r}")
        if self.max_explore_every < self.explore_every:
            raise ValueError("max_explore_every must be >= explore_every")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha!r}")
        if not self.explore_cost > 0.0:
            raise ValueError(f"explore_cost must be > 0, got {self.explore_cost!r}")
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {self.margin!r}")

    def _ahead(self, width: int) -> bool:
        """Whether "on" is ahead at a width where both arms are measured."""
        return self.rates[(width, True)] > (1.0 + self.margin) * self.rates[(width, False)]

    def _first(self, width: int) -> bool:
        """The arm a width measures first: the preference of the nearest measured narrower width."""
        narrower = [w for w in {w for w, _ in self.rates} if w < width and (w, True) in self.rates
                    and (w, False) in self.rates]
        if not narrower:
            return True
        return self._ahead(max(narrower))

    def prefers(self, width: int) -> bool:
        """The arm ahead at this width (the one ``choose`` would take between explorations),
        without exploring or counting a step: for steps whose time is not compared (a step
        that also prefills a prompt)."""
        if (width, True) not in self.rates or (width, False) not in self.rates:  # not compared yet
            return self._first(width)
        return self._ahead(width)

    def choose(self, width: int) -> bool:
        """Whether this step (``width`` decoding sequences) lets the drafters draft."""
        on, off = self.rates.get((width, True)), self.rates.get((width, False))
        if on is None and off is None:
            return self._first(width)
        if on is None or off is None:
            return on is None  # measure the arm not yet measured
        best = self._ahead(width)
        wait = self.wait.get(width)
        if wait is None:  # both arms just measured once
            wait = self.wait[width] = self._priced(width, self.explore_every)
        n = self.since.get(width, 0) + 1
        if n < wait:
            self.since[width] = n
            return best
        # explore the arm that is behind; back off if the same arm led last time too
        self.since[width] = 0
        self.wait[width] = self._priced(width, 2 * wait if self.leader.get(width) is best else self.explore_every)
        self.leader[width] = best
        return not best

    def _priced(self, width: int, steps: int) -> int:
        """``steps``, raised so that exploring the arm behind costs at most ``explore_cost``
        of the time, capped at ``max_explore_every``."""
        fast, slow = sorted((self.rates[(width, True)], self.rates[(width, False)]), reverse=True)
        if slow <= 0:  # the arm behind emitted nothing: explore it as rarely as allowed
            return self.max_explore_every
        return min(self.max_explore_every, max(steps, math.ceil((fast / slow - 1.0) / self.explore_cost)))

    def record(self, width: int, on: bool, tokens: int, seconds: float) -> None:
        """One step's outcome: ``tokens`` emitted in ``seconds`` of step time."""
        if seconds <= 0 or tokens < 0:
            return
        key = (width, on)
        kept = 1.0 - self.alpha
        t, s = self.sums.get(key, (0.0, 0.0))
        t, s = kept * t + tokens, kept * s + seconds
        self.sums[key] = (t, s)
        self.rates[key] = t / s
