"""Offline, seeded OOLONG-synth-style windows and questions.

Recipe (after OOLONG-synth, see ``shared/reference/FACTS.md`` §4):

* A window targets ``context_tokens`` tokens (1K ... 128K). Tokens are *estimated*
  as ``len(text) / CHARS_PER_TOKEN`` with ``CHARS_PER_TOKEN = 4.0`` (a common
  English average for BPE tokenizers; no tokenizer is loaded).
* Number of instances ``N = floor((L * 0.95 - prompt_tokens - 250) / per_example_tokens)``
  where ``prompt_tokens`` is the estimated size of header + footer and
  ``per_example_tokens`` the estimated mean size of one rendered line of the dataset.
* The label mix is skewed: with a temperature ``T`` drawn uniformly in [2, 6] per
  window and ``z_i ~ U(0, 1)`` per label, ``p_i ∝ exp(T * z_i)``; counts are drawn
  multinomially (every label appears at least once when N allows).
* Users: a pool of distinct 5-digit ids, reused with Zipf weights ``1 / rank**1.1``.
* Dates: uniform over 2022-01-01 .. 2025-12-31, rendered ``%b %d, %Y``.
* Lines: ``Date: Jun 29, 2022 || User: 44436 || Instance: <text>`` between a header
  (N, the label set, "calculate the exact answer") and a "Recall: ..." footer.

Questions come from the three OOLONG task groups (counting, user, timeline) plus an
OOLONG-Pairs-style task, with gold answers stored the way OOLONG stores them: the
string of a one-element list (``"['abbreviation']"``, ``"[28]"``,
``"['more common than']"``, ``"[datetime.date(2023, 5, 1)]"``) and answer types
``ANSWER_TYPE.LABEL`` etc. Pairs golds are the string of a sorted list of tuples and
use the project's own answer type ``ANSWER_TYPE.PAIRS`` (scored by ``pairs_f1``).
Questions whose answer would be a tie are not asked. Everything is a pure function
of ``(dataset, context_tokens, seed)``.
"""

from __future__ import annotations

import datetime
import math
import random
from collections import Counter
from dataclasses import dataclass, field

from .pools import DATASETS, Dataset

CHARS_PER_TOKEN = 4.0
CONTEXT_SIZES = tuple(1024 * 2**k for k in range(8))  # 1K ... 128K
_FIRST_DAY = datetime.date(2022, 1, 1)
_LAST_DAY = datetime.date(2025, 12, 31)
_SEP = " || "


def estimate_tokens(text: str) -> int:
    """Estimated token count: ``ceil(len(text) / CHARS_PER_TOKEN)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Instance:
    date: datetime.date
    user: int
    text: str
    label: str

    def render(self) -> str:
        return f"Date: {self.date.strftime('%b %d, %Y')}{_SEP}User: {self.user}{_SEP}Instance: {self.text}"


@dataclass(frozen=True)
class Question:
    qid: str
    group: str  # "counting" | "user" | "timeline" | "pairs"
    task: str  # e.g. "most_common_label"
    text: str
    answer: str  # OOLONG-style: the string of a one-element list (pairs: list of tuples)
    answer_type: str  # "ANSWER_TYPE.LABEL" ...
    params: dict = field(default_factory=dict, compare=False)

    @property
    def needs_labels(self) -> bool:
        """Whether answering requires classifying instances (else plain Python suffices)."""
        return self.task not in {"most_represented_user", "second_most_represented_user",
                                 "date_exactly_n"}


@dataclass
class Window:
    dataset: str
    context_tokens: int
    seed: int
    temperature: float
    labels: tuple[str, ...]
    instances: list[Instance]
    context: str
    questions: list[Question]
    label_of: dict[str, str]  # side table: instance text -> hidden label

    @property
    def estimated_tokens(self) -> int:
        return estimate_tokens(self.context)


def _header(dataset: Dataset, n: int) -> str:
    labels = ", ".join(f"'{x}'" for x in dataset.labels)
    return (
        f"The following lines contain {n} {dataset.description}, one per line. Each line has a "
        f"date, a user id and an instance. Each instance can be labelled as one of the "
        f"following labels: [{labels}]. The labels are not given; you have to infer them "
        f"from the text. You will be asked a question about these lines; calculate the "
        f"exact answer."
    )


def _footer(dataset: Dataset) -> str:
    return (
        f"Recall: the preceding lines contain {dataset.description} with a date, a user id "
        f"and an instance each; infer each instance's label and answer the question exactly."
    )


def _per_example_tokens(dataset: Dataset) -> float:
    rng = random.Random(0)
    probe = [Instance(_FIRST_DAY, 10000, dataset.sample(lab, rng), lab).render()
             for lab in dataset.labels for _ in range(50)]
    return sum(len(p) + 1 for p in probe) / len(probe) / CHARS_PER_TOKEN


def instance_count(dataset: Dataset, context_tokens: int) -> int:
    prompt_tokens = estimate_tokens(_header(dataset, 10**6) + "\n" + _footer(dataset))
    n = math.floor((context_tokens * 0.95 - prompt_tokens - 250) / _per_example_tokens(dataset))
    return max(n, len(dataset.labels))


def _label_counts(dataset: Dataset, n: int, rng: random.Random) -> tuple[float, Counter]:
    temperature = rng.uniform(2.0, 6.0)
    z = [rng.random() for _ in dataset.labels]
    weights = [math.exp(temperature * v) for v in z]
    counts = Counter({lab: 1 for lab in dataset.labels})  # every label at least once
    for lab in rng.choices(dataset.labels, weights=weights, k=n - len(dataset.labels)):
        counts[lab] += 1
    return temperature, counts


def generate_window(dataset: str = "trec_coarse", context_tokens: int = 4096,
                    seed: int = 0) -> Window:
    """One window with its questions; deterministic in ``(dataset, context_tokens, seed)``."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(DATASETS)}")
    if context_tokens < 1024:
        raise ValueError(f"context_tokens must be >= 1024, got {context_tokens}")
    ds = DATASETS[dataset]
    rng = random.Random(f"oolong:{dataset}:{context_tokens}:{seed}")
    n = instance_count(ds, context_tokens)
    temperature, counts = _label_counts(ds, n, rng)
    labels = [lab for lab in ds.labels for _ in range(counts[lab])]
    rng.shuffle(labels)
    n_users = max(8, n // 4)
    users = rng.sample(range(10000, 100000), n_users)
    zipf = [1.0 / (r + 1) ** 1.1 for r in range(n_users)]
    span = (_LAST_DAY - _FIRST_DAY).days
    instances = []
    for lab in labels:
        text = ds.sample(lab, rng)
        user = rng.choices(users, weights=zipf)[0]
        day = _FIRST_DAY + datetime.timedelta(days=rng.randrange(span + 1))
        instances.append(Instance(day, user, text, lab))
    lines = [_header(ds, n), *(i.render() for i in instances), _footer(ds)]
    label_of = {i.text: i.label for i in instances}
    from .questions import make_questions

    window = Window(dataset, context_tokens, seed, temperature, ds.labels, instances,
                    "\n".join(lines), [], label_of)
    window.questions = make_questions(window, random.Random(f"q:{dataset}:{context_tokens}:{seed}"))
    return window


def parse_line(line: str) -> tuple[datetime.date, int, str] | None:
    """``(date, user, text)`` of one instance line, or None for header/footer lines."""
    parts = line.split(_SEP)
    if len(parts) != 3 or not parts[0].startswith("Date: "):
        return None
    day = datetime.datetime.strptime(parts[0][len("Date: "):], "%b %d, %Y").date()
    return day, int(parts[1][len("User: "):]), parts[2][len("Instance: "):]
