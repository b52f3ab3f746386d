"""Whether drafting pays at this batch width, decided from the engine's measured token rate.

The gates (``token_spec.gamma.DraftGate``) and the DSpark schedule weigh drafting with a
cost model: pass costs measured once at start-up and a draft-to-target step ratio. On a
busy machine, or where the model misses a cost (the draft's step cost is measured for
one sequence, while a step's sequences share packed draft passes; the int4 GEMM's cost
jumps at row blocks), the model can open drafting where it does not pay, and a server
with speculation then serves fewer tokens per second than the same server without it. ``DraftSwitch`` closes that
gap with the outcome itself: per batch width (decoding sequences in the step) it keeps
an exponentially weighted token rate (tokens emitted per second of step time) of the
steps that let the drafters draft ("on") and of the steps that did not ("off"), and
lets a step draft only when "on" has measured at least as fast as "off".

The arm that is behind is tried again after ``explore_every`` steps of that width, and
each time it is still behind the wait doubles (up to ``max_explore_every``), so a
losing arm costs little while a change in load or in the prompts is still seen; when
the arms swap, the wait starts again from ``explore_every``. A width not measured yet
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

from dataclasses import dataclass, field

__all__ = ["DraftSwitch"]


@dataclass
class DraftSwitch:
    """Per-width on/off arms with measured token rates (see the module docstring).

    explore_every: steps of a width before the arm that is behind is tried again (>= 2);
    it doubles while that arm stays behind, up to max_explore_every.
    alpha: weight of the newest step in the running rate, in (0, 1].
    """

    explore_every: int = 8
    max_explore_every: int = 64
    alpha: float = 0.25
    rates: dict[tuple[int, bool], float] = field(default_factory=dict)  # (width, on) -> tokens/s
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

    def _first(self, width: int) -> bool:
        """The arm a width measures first: the preference of the nearest measured narrower width."""
        narrower = [w for w in {w for w, _ in self.rates} if w < width and (w, True) in self.rates
                    and (w, False) in self.rates]
        if not narrower:
            return True
        w = max(narrower)
        return self.rates[(w, True)] >= self.rates[(w, False)]

    def prefers(self, width: int) -> bool:
        """The arm ahead at this width (the one ``choose`` would take between explorations),
        without exploring or counting a step: for steps whose time is not compared (a step
        that also prefills a prompt)."""
        on, off = self.rates.get((width, True)), self.rates.get((width, False))
        if on is None or off is None:  # not compared yet at this width
            return self._first(width)
        return on >= off

    def choose(self, width: int) -> bool:
        """Whether this step (``width`` decoding sequences) lets the drafters draft."""
        on, off = self.rates.get((width, True)), self.rates.get((width, False))
        if on is None and off is None:
            return self._first(width)
        if on is None or off is None:
            return on is None  # measure the arm not yet measured
        best = on >= off
        wait = self.wait.get(width, self.explore_every)
        n = self.since.get(width, 0) + 1
        if n < wait:
            self.since[width] = n
            return best
        # explore the arm that is behind; back off if the same arm led last time too
        self.since[width] = 0
        self.wait[width] = (min(2 * wait, self.max_explore_every) if self.leader.get(width) is best
                            else self.explore_every)
        self.leader[width] = best
        return not best

    def record(self, width: int, on: bool, tokens: int, seconds: float) -> None:
        """One step's outcome: ``tokens`` emitted in ``seconds`` of step time."""
        if seconds <= 0 or tokens < 0:
            return
        rate = tokens / seconds
        key = (width, on)
        old = self.rates.get(key)
        self.rates[key] = rate if old is None else (1.0 - self.alpha) * old + self.alpha * rate
