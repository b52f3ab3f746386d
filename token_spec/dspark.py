"""DSpark-style verification: verify only the draft positions that are worth a wider pass.

Follows DSpark (DeepSeek, 2026), as the source article describes it: a confidence head
estimates how likely each draft prefix is to survive verification, and a scheduler sets
the verification length of every round from those estimates and the engine's
throughput profile, admitting draft positions one at a time while the expected
throughput grows and stopping at the first decline (the paper's fix for the selection
bias of its joint schedule, its Appendix A counter-example). DSpark's parallel draft
backbone and sequential head are not part of this module: any step drafter (one that
yields the draft's logits row for position k from the verified context and
d_1..d_{k-1}) is the backbone here, as shipped the distilled draft model.

Pieces:

* ``TopProbConfidence`` (the confidence head): a_k = sigmoid(w * logit(m_k) + b), where
  m_k is the draft's own top probability at position k (softmax of its raw logits) and
  (w, b) is a Platt scaling fitted on text the target wrote (``scripts/calibrate_dspark.py``
  writes ``token_spec/data/dspark-confidence.json``): one pair against greedy agreement
  (draft argmax == target argmax) for temperature 0, one against sum(min(p, q)) at T = 1
  for sampling. Without a calibration file a_k = m_k.
* ``SurvivalSchedule`` (the scheduler): with a_1..a_k the estimates of the admitted
  positions (each conditional on the previous ones surviving), a round that verifies k
  drafts emits E_k = 1 + sum_{j<=k} prod_{i<=j} a_i tokens (accepted prefix + the
  recovered / bonus token) and costs ``costs[k]`` (the measured relative time of a pass
  over k + 1 tokens, ``token_spec.gamma.measure_pass_costs``) + k * ``draft_cost`` (draft
  steps, in target steps). Position k is admitted iff E_k / cost_k > E_{k-1} / cost_{k-1};
  the first decline ends the round's draft.
* ``DSparkDrafter``: a ``Drafter`` that runs the step drafter, asks the schedule before
  drawing each token, and stops there. A round whose costs cannot pay for even a sure
  first draft (``SurvivalSchedule.opens``: a wide batch makes every verify row dear)
  runs no draft step at all; the draft cache catches up in one feed when a later round
  opens. Its round is also a plan of draft-model feeds (``token_spec.draft_steps``), so
  a server packs the draft steps of all its sequences: a sequence whose schedule stops
  drops out of the later passes.

Exactness: a_k is computed from the draft's row k, a function of the verified context
and d_1..d_{k-1} only, and the decision to verify position k is taken before d_k is
drawn. The verified length is thus a stopping time of the draft process; conditional on
it, each verified token is still distributed as its q row, so min(1, p/q) acceptance
with the residual keeps the target's law (greedy: vanilla's tokens). The joint schedule
(draft the whole block, then pick the length with the best expected throughput, so
admitting k looks at a_{k+1}, which was computed from d_k) is not exact; it lives only
in the tests, as a negative control (``tests/token_spec/test_dspark.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .draft_steps import Plan, now, run_plan
from .drafters import Draft, draw
from .sampling import SamplingParams

__all__ = ["TopProbConfidence", "SurvivalSchedule", "Admission", "DSparkDrafter", "default_confidence_path",
           "measure_step_cost"]

DATA_DIR = Path(__file__).resolve().parent / "data"


def default_confidence_path() -> Path:
    return DATA_DIR / "dspark-confidence.json"


def _logit(m: float) -> float:
    m = min(max(m, 1e-6), 1.0 - 1e-6)
    return math.log(m / (1.0 - m))


@dataclass
class TopProbConfidence:
    """a = sigmoid(w * logit(top probability of the draft row) + b); separate (w, b) for
    greedy decoding and for sampling. Identity (a = m) by default."""

    greedy: tuple[float, float] = (1.0, 0.0)
    sampled: tuple[float, float] = (1.0, 0.0)
    source: str = "identity"

    @classmethod
    def load(cls, drafter: str = "draft", path: str | Path | None = None) -> TopProbConfidence:
        """The calibration fitted for ``drafter`` ("draft": the distilled draft model,
        "eagle3": the EAGLE-3 head) in ``token_spec/data/dspark-confidence.json``, else identity."""
        p = Path(path) if path is not None else default_confidence_path()
        if not p.is_file():
            return cls()
        data = json.loads(p.read_text()).get(drafter)
        if data is None:
            return cls()
        return cls(greedy=tuple(data["greedy"]["platt"]), sampled=tuple(data["sampled"]["platt"]),
                   source=f"{p}:{drafter}")

    @staticmethod
    def top_prob(logits: torch.Tensor) -> float:
        """The draft's top probability at T = 1 (−inf logits = tokens outside its vocabulary)."""
        return float(torch.softmax(logits.float(), -1).max())

    def from_top_prob(self, m: float, greedy: bool) -> float:
        w, b = self.greedy if greedy else self.sampled
        return 1.0 / (1.0 + math.exp(-(w * _logit(m) + b)))

    def __call__(self, logits: torch.Tensor, greedy: bool) -> float:
        return self.from_top_prob(self.top_prob(logits), greedy)


class Admission:
    """One round of a ``SurvivalSchedule``: ``admit(a_k)`` for k = 1, 2, ... in order."""

    def __init__(self, schedule: SurvivalSchedule) -> None:
        self.schedule = schedule
        self.k = 0
        self.survive = 1.0  # prod a_1..a_k
        self.expected = 1.0  # E_k
        self.rate = schedule.rate(1.0, 0)
        self.open = True

    def admit(self, a: float) -> bool:
        """Verify the next position, whose survival estimate (given the earlier ones survive)
        is ``a``? False also closes the round: the first decline ends it."""
        if not self.open or self.k >= self.schedule.max_tokens:
            self.open = False
            return False
        a = min(max(float(a), 0.0), 1.0)
        survive = self.survive * a
        expected = self.expected + survive
        rate = self.schedule.rate(expected, self.k + 1)
        if not rate > self.rate + 1e-12:
            self.open = False
            return False
        self.k, self.survive, self.expected, self.rate = self.k + 1, survive, expected, rate
        return True


@dataclass
class SurvivalSchedule:
    """Verification length from survival estimates and measured pass costs (see the module
    docstring). costs[k] = relative time of a target pass over k + 1 tokens."""

    costs: tuple[float, ...]
    draft_cost: float = 0.0
    max_tokens: int = 8

    def __post_init__(self) -> None:
        if not self.costs or any(not c > 0 for c in self.costs):
            raise ValueError("costs must be a non-empty sequence of positive numbers (costs[k] = pass over k+1 tokens)")
        if not self.draft_cost >= 0:
            raise ValueError(f"draft_cost must be >= 0, got {self.draft_cost}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, got {self.max_tokens!r}")
        self.costs = tuple(float(c) for c in self.costs)

    def cost(self, k: int) -> float:
        return self.costs[min(k, len(self.costs) - 1)] + k * self.draft_cost

    def rate(self, expected: float, k: int) -> float:
        return expected / self.cost(k)

    def start(self) -> Admission:
        return Admission(self)

    def opens(self) -> bool:
        """Whether a round can verify any draft at all: a first position sure to survive
        (a_1 = 1) would be admitted. From the costs alone, so a round that cannot open is
        known before any draft step runs."""
        return self.start().admit(1.0)

    def length(self, survival: Sequence[float]) -> int:
        """The admitted length for estimates a_1, a_2, ... (what a round would verify)."""
        adm = self.start()
        n = 0
        for a in survival:
            if not adm.admit(a):
                break
            n += 1
        return n


@dataclass
class DSparkDrafter:
    """A step drafter (``first_logits(context)`` / ``next_logits(token)``, e.g.
    ``token_spec.drafters.ModelDrafter``) whose draft length each round is set position by
    position by ``schedule`` from ``confidence`` (non-anticipating: see the module docstring).

    ``lengths[n]`` counts rounds that verified n drafts (diagnostics)."""

    drafter: object
    confidence: TopProbConfidence
    schedule: SurvivalSchedule
    name: str = "dspark"
    lengths: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr in ("first_logits", "next_logits", "begin", "end"):
            if not callable(getattr(self.drafter, attr, None)):
                raise TypeError(f"DSparkDrafter needs a step drafter with {attr}(), got {self.drafter!r}")
        vocab = getattr(self.drafter, "vocab_size", None)
        if vocab is not None:
            self.vocab_size = int(vocab)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.drafter.begin(prompt_ids)

    def end(self, output_ids: Sequence[int]) -> None:
        self.drafter.end(output_ids)

    def propose(self, context: Sequence[int], k: int, params: SamplingParams,
                generator: torch.Generator | None) -> Draft:
        return run_plan(self.plan(context, k, params, generator))

    def _first(self, ctx: list[int]) -> Plan:
        step = getattr(self.drafter, "first_step", None)
        return step(ctx) if step is not None else now(self.drafter.first_logits(ctx))

    def _next(self, token: int) -> Plan:
        step = getattr(self.drafter, "next_step", None)
        return step(token) if step is not None else now(self.drafter.next_logits(token))

    def plan(self, context: Sequence[int], k: int, params: SamplingParams,
             generator: torch.Generator | None) -> Plan:
        """``propose`` as a plan of draft-model feeds (``token_spec.draft_steps``), where the
        step drafter offers its steps as plans (``first_step`` / ``next_step``); a round
        the schedule ends early feeds no further position."""
        ctx = [int(t) for t in context]
        if k <= 0 or not ctx:
            return Draft(tokens=torch.empty(0, dtype=torch.long))
        if not self.schedule.opens():  # no draft step runs; the draft cache catches up when a round opens
            self.lengths[0] = self.lengths.get(0, 0) + 1
            return Draft(tokens=torch.empty(0, dtype=torch.long))
        greedy = params.temperature == 0
        logits = yield from self._first(ctx)
        admission = self.schedule.start()
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(min(k, self.schedule.max_tokens)):
            # decided from row i alone (a function of ctx and d_1..d_{i-1}), before d_i is drawn
            if not admission.admit(self.confidence(logits, greedy)):
                break
            tok, q = draw(logits, params, generator)
            if q is not None:
                rows.append(q)
            tokens.append(tok)
            if i < min(k, self.schedule.max_tokens) - 1:
                logits = yield from self._next(tok)
        self.lengths[len(tokens)] = self.lengths.get(len(tokens), 0) + 1
        probs = torch.stack(rows) if rows else None
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long), probs=probs)


def measure_step_cost(stepper, target, repeats: int = 7, context: int = 256) -> float:
    """Time of one ``next_logits`` step of ``stepper`` over one one-token target step
    (``token_spec.gamma.draft_over_target``): the schedule's draft_cost."""
    from .gamma import draft_over_target

    def begin(ctx):
        stepper.begin(ctx)
        stepper.first_logits(ctx)

    return draft_over_target(begin, lambda: stepper.next_logits(200), lambda: stepper.end([]), target, repeats,
                             context)
