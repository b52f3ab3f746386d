"""Cost-aware admission: launch a speculation only when it is expected to pay.

The speculation store asks :meth:`Admission.decide` before it starts a new speculative
execution (a statement launch, a tail bet, a lookahead bet). The answer changes only
*when* a call runs, never *what* the cell computes: a declined bet is simply run by the
real call when the cell reaches it (a miss, exactly as the baseline), so results stay
identical in every mode (the property test ``tests/spectool/test_lossless.py`` checks
this with admission on).

The model (one decision, pure arithmetic)::

    launch  iff  p * S  >  (1 - p) * C
    S = L              saving if claimed: the real call does not wait the tool's latency
    C = alpha * L      cost if wasted: the critical-path call shares the server with one
                       more request for about L seconds and is stretched by alpha * L
    =>  launch  iff  p / (1 - p) > alpha           (L cancels)

* ``p``, the probability that the bet will be claimed, comes from its *class* (a Beta
  posterior, learned online from what the real runs claimed):

  - ``statement``: the shadow ran exactly the statement the real run will run (prior
    19:1);
  - ``tail`` / ``lookahead``: a peek at unfinished or later code (prior 4:1);
  - ``duplicate``: a peek bet whose call is *identical* to one the turn already runs
    or bets on. That is the signature of a stale binding: the peek read a name that the
    loop body (or a line still streaming) re-binds after the call, so the "next
    iteration" repeats the current call (prior 1:19). Legitimate repeats exist
    (sampling the same prompt several times); when the real run later misses on a key
    whose duplicate bet was declined, that counts as a claim the class missed, so the
    posterior rises again where repeats are real. (A lookahead runs the rest of the
    current iteration before the next one, so a name the body re-binds after the call
    holds the next iteration's value or is unknown there: ``spectool.shadow.lookahead``.)

* ``alpha``, the contention of the tool's server (relative latency growth per extra
  call in flight), is learned online per tool from the tool's own executions: each
  finished execution gives (mean calls of that tool in flight during it, duration);
  a decayed least-squares fit ``duration = a + b * (n - 1)`` gives ``alpha = b / a``.
  Until the executions have spread over different loads, ``alpha`` is the prior
  (0.1): a class with low claim odds is declined on an unknown server.

One :class:`TurnAdmission` puts a runtime's model to work for one turn's store: it
counts every declined launch in ``TurnStats.admission_declined``, traces it as
``decline`` with ``reason="admission"``, ``p`` and ``alpha``, and feeds the ledger's
claims back to the model.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterator

from ..trace import Trace, TurnStats
from .ledger import Ledger, Prepared

__all__ = ["Admission", "ClaimModel", "ContentionModel", "Decision", "TurnAdmission",
           "launch_pays", "CLASSES", "bet_class"]

# Beta priors (claimed, unclaimed) per class
PRIORS: dict[str, tuple[float, float]] = {
    "statement": (19.0, 1.0),
    "tail": (4.0, 1.0),
    "lookahead": (4.0, 1.0),
    "duplicate": (1.0, 19.0),
}
CLASSES = tuple(PRIORS)
ALPHA_PRIOR = 0.1
_MIN_SAMPLES = 3
_MIN_SPREAD = 0.05      # variance of (calls in flight - 1) before the fit is trusted
_DECAY = 0.97           # per sample: old executions weigh less (servers change)


def launch_pays(p: float, alpha: float) -> bool:
    """``p * S > (1 - p) * alpha * S`` with S > 0, i.e. claim odds above ``alpha``.

    ``p >= 1`` always pays; ``p <= 0`` never does; ``alpha <= 0`` (no contention) makes
    every bet with ``p > 0`` pay."""
    if p >= 1.0:
        return True
    if p <= 0.0:
        return False
    return p / (1.0 - p) > max(alpha, 0.0)


def bet_class(origin: str, duplicate: bool) -> str:
    """The claim class of a launch: its origin, or ``duplicate`` for a peek bet whose
    call the turn already runs or bets on (statement launches are neither: the shadow
    ran that very statement)."""
    if origin in ("tail", "lookahead") and duplicate:
        return "duplicate"
    return origin if origin in PRIORS else "tail"


class ClaimModel:
    """Claim probability per (tool, class): Beta(prior + claimed, prior + unclaimed)."""

    def __init__(self, priors: dict[str, tuple[float, float]] | None = None) -> None:
        self.priors = dict(PRIORS if priors is None else priors)
        self.claimed: dict[tuple[str, str], float] = defaultdict(float)
        self.unclaimed: dict[tuple[str, str], float] = defaultdict(float)

    def p(self, tool: str, klass: str) -> float:
        a, b = self.priors.get(klass, PRIORS["tail"])
        a += self.claimed[(tool, klass)]
        b += self.unclaimed[(tool, klass)]
        return a / (a + b)

    def record(self, tool: str, klass: str, claimed: bool) -> None:
        (self.claimed if claimed else self.unclaimed)[(tool, klass)] += 1.0


class ContentionModel:
    """Online per-tool fit of ``duration = a * (1 + alpha * (n - 1))``.

    Samples are (n, duration): n = mean executions of the tool in flight during the
    execution (1 = alone). Exponentially decayed sums of a least-squares line
    ``y = a + b x`` with ``x = n - 1``; ``alpha = b / a`` (>= 0) once the samples span
    enough load, else the prior."""

    def __init__(self, prior: float = ALPHA_PRIOR) -> None:
        self.prior = prior
        self._sums: dict[str, list[float]] = {}
        self.samples: dict[str, int] = defaultdict(int)

    def add(self, tool: str, n: float, duration: float) -> None:
        if not (duration > 0 and math.isfinite(duration) and n >= 1 and math.isfinite(n)):
            return
        s = self._sums.setdefault(tool, [0.0] * 5)   # w, sx, sy, sxx, sxy
        x, y = n - 1.0, duration
        for i in range(5):
            s[i] *= _DECAY
        s[0] += 1.0
        s[1] += x
        s[2] += y
        s[3] += x * x
        s[4] += x * y
        self.samples[tool] += 1

    def alpha(self, tool: str) -> float:
        s = self._sums.get(tool)
        if s is None or self.samples[tool] < _MIN_SAMPLES:
            return self.prior
        w, sx, sy, sxx, sxy = s
        mx, my = sx / w, sy / w
        var = sxx / w - mx * mx
        if var < _MIN_SPREAD:
            return self.prior
        b = (sxy / w - mx * my) / var
        a = my - b * mx
        if a <= 0:                                   # latency all contention: very high
            return 10.0 if b > 0 else 0.0
        return max(0.0, b / a)

    def latency(self, tool: str) -> float | None:
        """Mean observed duration (decayed), or None before any sample."""
        s = self._sums.get(tool)
        return None if s is None or s[0] <= 0 else s[2] / s[0]


@dataclass(frozen=True)
class Decision:
    launch: bool
    klass: str
    p: float
    alpha: float


class _Run:
    __slots__ = ("tool", "t0", "area0")

    def __init__(self, tool: str, t0: float, area0: float) -> None:
        self.tool, self.t0, self.area0 = tool, t0, area0


class Admission:
    """One per runtime (shared by its turns): decides launches, learns from outcomes.

    ``enabled=False`` launches everything (the behaviour before admission existed) but
    still learns, so a comparison can report what admission would have done."""

    def __init__(self, *, enabled: bool = True, alpha_prior: float = ALPHA_PRIOR,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.enabled = enabled
        self.claims = ClaimModel()
        self.contention = ContentionModel(alpha_prior)
        self._clock = clock
        # per tool: executions in flight, and the integral of that count over time
        self._in_flight: dict[str, int] = defaultdict(int)
        self._area: dict[str, float] = defaultdict(float)
        self._t_area: dict[str, float] = {}

    # -- decisions --------------------------------------------------------------------
    def decide(self, tool: str, origin: str, duplicate: bool) -> Decision:
        klass = bet_class(origin, duplicate)
        p = self.claims.p(tool, klass)
        alpha = self.contention.alpha(tool)
        return Decision(not self.enabled or launch_pays(p, alpha), klass, p, alpha)

    def settle(self, tool: str, klass: str, claimed: bool) -> None:
        """A launched (or declined) bet of ``klass`` was / would have been claimed."""
        self.claims.record(tool, klass, claimed)

    # -- executions (contention samples) --------------------------------------------------
    def _advance(self, tool: str, now: float) -> float:
        last = self._t_area.get(tool, now)
        self._area[tool] += self._in_flight[tool] * max(0.0, now - last)
        self._t_area[tool] = now
        return self._area[tool]

    def started(self, tool: str) -> _Run:
        now = self._clock()
        run = _Run(tool, now, self._advance(tool, now))
        self._in_flight[tool] += 1
        return run

    def finished(self, run: _Run, ok: bool = True) -> None:
        """An execution ended; ``ok=False`` (cancelled) gives no latency sample."""
        now = self._clock()
        area = self._advance(run.tool, now)
        self._in_flight[run.tool] -= 1
        duration = now - run.t0
        if ok and duration > 0:
            self.contention.add(run.tool, (area - run.area0) / duration, duration)

    def in_flight(self, tool: str) -> int:
        return self._in_flight[tool]


class TurnAdmission:
    """A runtime's :class:`Admission` at work for one turn's store (``None``: baseline,
    nothing is rated, every launch is ``unmanaged``): rates launches, records declines
    in the ledger, times executions and learns the claims at turn end."""

    def __init__(self, model: Admission | None, ledger: Ledger, *, trace: Trace,
                 stats: TurnStats) -> None:
        self.model = model
        self.ledger = ledger
        self.trace = trace
        self.stats = stats

    def admit(self, call: Prepared, origin: str, duplicate: bool) -> str | None:
        """The admission class of a launch it allows; None (traced with the arguments,
        counted) if the launch is not expected to pay."""
        if self.model is None:
            return "unmanaged"   # no admission: launch everything
        d = self.model.decide(call.tool.name, origin, duplicate)
        if d.launch:
            return d.klass
        self.ledger.record_decline(call.tool, call.key, d.klass)
        self.stats.admission_declined += 1
        self.stats.declined += 1
        self.trace.add("decline", tool=call.tool.name, reason="admission", origin=origin,
                       args=list(call.args), klass=d.klass, p=round(d.p, 3),
                       alpha=round(d.alpha, 3))
        return None

    @property
    def rates(self) -> bool:
        """Launches are rated: the model learns which ones were claimed."""
        return self.model is not None

    def missed(self, tool_name: str, key: str, occ: int) -> None:
        """A real call missed: a bet declined for this key at this (or an earlier)
        occurrence would have been claimed."""
        if self.model is None:
            return
        klass = self.ledger.pop_declined(tool_name, key, occ)
        if klass is not None:
            self.model.settle(tool_name, klass, claimed=True)

    def learn(self) -> None:
        """Turn end: tell the model which launched (and declined) bets were claimed."""
        if self.model is None:
            return
        for tool_name, klass, claimed in self.ledger.claim_outcomes():
            self.model.settle(tool_name, klass, claimed=claimed)

    @contextlib.contextmanager
    def executing(self, tool_name: str, count: int = 1) -> Iterator[None]:
        """Count ``count`` executions of a tool and time them for the contention model
        (a cancelled execution gives no latency sample)."""
        self.stats.executions += count
        model = self.model
        runs = [model.started(tool_name) for _ in range(count)] if model is not None else []
        ok = False
        try:
            yield
            ok = True
        except Exception:
            ok = True
            raise
        finally:
            for run in runs:
                model.finished(run, ok)  # type: ignore[union-attr]
