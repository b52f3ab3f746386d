"""OOLONG-Pairs: the 20 tasks of the RLM paper (arXiv 2512.24601, appendix E.1).

Each task asks for every pair of user ids (lower id first, no duplicates) over **all**
users of a trec_coarse window whose labelled instances satisfy a condition:

* tasks 1-10 (symmetric): both users have >= 1 instance labelled A or B; tasks 4, 5,
  7, 9, 10 add "all instances that are <A or B> for both users must be after/before
  <date>" (vacuously true for a user without such instances);
* tasks 11-20 (asymmetric): one user satisfies role P and the other role Q, each a
  conjunction of "at least n" / "exactly n" label counts; a pair qualifies when either
  orientation does.

Golds are quadratic in the number of users (thousands of pairs at 32K). They are
stored as the answer template the question prints: one ``(a, b)`` per line, sorted
(``"[]"`` when empty), answer type ``ANSWER_TYPE.PAIRS``, scored by ``pairs_f1``.
"""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from dataclasses import dataclass

from .model import Question, Window
from .questions import PAIRS


DAC = "description and abstract concept"
ENT, HUM, NUM, LOC, ABB = "entity", "human being", "numeric value", "location", "abbreviation"
TREC_LABELS = (DAC, ENT, HUM, NUM, LOC, ABB)

_HEAD = ("In the above data, list all pairs of user IDs (no duplicate pairs, list lower ID "
         "first) ")
_TAIL = (" Each of the questions can be labelled as one of the labels (the data does not "
         "provide the labels, you need to figure out the label from the semantics of the "
         "question): description and abstract concept, entity, human being, numeric value, "
         "location, abbreviation. In your answer, list all pairs in the format (user_id_1, "
         "user_id_2), separated by newlines.")
# RLM paper appendix B.2 (the prompt as run): sorting, example and empty-answer template
TEMPLATE = (" Your answer must be sorted by first user ID. For example, if the answer is the "
            "Instance ID pairs (22740, 35839) and (35839, 52032), you should return '(22740, "
            "35839), (35839, 52032)'. If there is no answer, return an empty list [].")


@dataclass(frozen=True)
class Role:
    """A conjunction of count constraints: ``at_least`` {label: n}, ``exactly`` {label: n}."""
    at_least: tuple[tuple[str, int], ...] = ()
    exactly: tuple[tuple[str, int], ...] = ()

    def holds(self, counts: Counter) -> bool:
        return (all(counts[lab] >= n for lab, n in self.at_least)
                and all(counts[lab] == n for lab, n in self.exactly))


@dataclass(frozen=True)
class PairTask:
    number: int
    condition: str  # the question's condition clause, verbatim from the paper
    any_of: tuple[str, ...] = ()  # symmetric: >= 1 instance with one of these labels
    date_label: str | None = None  # symmetric + date: all instances of this label …
    after: datetime.date | None = None  # … strictly after this date
    before: datetime.date | None = None  # … strictly before this date
    role_p: Role | None = None  # asymmetric roles
    role_q: Role | None = None

    @property
    def text(self) -> str:
        return _HEAD + self.condition + "." + _TAIL + TEMPLATE


def _article(label: str) -> str:
    return "an" if label[0] in "aeiou" else "a"


def _sym(n, a, b, date_label=None, after=None, before=None):
    cond = f"where both users have at least one instance with {_article(a)} {a} or {b}"
    if date_label is not None:
        art = _article(date_label)
        when = (f"after {after.strftime('%B %-d, %Y')}" if after
                else f"before {before.strftime('%B %-d, %Y')}")
        cond += f", and all instances that are {art} {date_label} for both users must be {when}"
    return PairTask(n, cond, (a, b), date_label, after, before)


def _asym(n, cond, p, q):
    return PairTask(n, "such that one user has " + cond, role_p=p, role_q=q)


def _r(at_least=(), exactly=()):
    return Role(tuple(at_least), tuple(exactly))


D = datetime.date
TASKS: tuple[PairTask, ...] = (
    _sym(1, NUM, LOC),
    _sym(2, ENT, HUM),
    _sym(3, DAC, ABB),
    _sym(4, HUM, LOC, date_label=HUM, after=D(2023, 1, 6)),
    _sym(5, ENT, NUM, date_label=ENT, before=D(2023, 3, 15)),
    _sym(6, LOC, ABB),
    _sym(7, DAC, NUM, date_label=NUM, after=D(2023, 2, 1)),
    _sym(8, HUM, DAC),
    _sym(9, ENT, LOC, date_label=LOC, after=D(2023, 4, 10)),
    _sym(10, NUM, ABB, date_label=ABB, before=D(2023, 5, 20)),
    _asym(11, "at least one instance with entity and one with abbreviation, and the other user "
          "has exactly one instance with entity",
          _r([(ENT, 1), (ABB, 1)]), _r(exactly=[(ENT, 1)])),
    _asym(12, "at least two instances with numeric value, and the other user has at least one "
          "instance with location and at least one instance with human being",
          _r([(NUM, 2)]), _r([(LOC, 1), (HUM, 1)])),
    _asym(13, "exactly one instance with description and abstract concept, and the other user "
          "has at least one instance with abbreviation and at least one instance with entity",
          _r(exactly=[(DAC, 1)]), _r([(ABB, 1), (ENT, 1)])),
    _asym(14, "at least one instance with human being and at least one instance with numeric "
          "value, and the other user has exactly two instances with location",
          _r([(HUM, 1), (NUM, 1)]), _r(exactly=[(LOC, 2)])),
    _asym(15, "at least one instance with entity, at least one instance with location, and at "
          "least one instance with abbreviation, and the other user has exactly one instance "
          "with numeric value",
          _r([(ENT, 1), (LOC, 1), (ABB, 1)]), _r(exactly=[(NUM, 1)])),
    _asym(16, "at least one instance with description and abstract concept and at least one "
          "instance with human being, and the other user has at least two instances with "
          "entity and exactly one instance with abbreviation",
          _r([(DAC, 1), (HUM, 1)]), _r([(ENT, 2)], [(ABB, 1)])),
    _asym(17, "exactly one instance with numeric value, and the other user has at least one "
          "instance with location and at least one instance with description and abstract "
          "concept",
          _r(exactly=[(NUM, 1)]), _r([(LOC, 1), (DAC, 1)])),
    _asym(18, "at least one instance with abbreviation and exactly one instance with human "
          "being, and the other user has at least one instance with entity and at least one "
          "instance with numeric value",
          _r([(ABB, 1)], [(HUM, 1)]), _r([(ENT, 1), (NUM, 1)])),
    _asym(19, "at least two instances with location and at least one instance with entity, and "
          "the other user has exactly one instance with description and abstract concept and "
          "exactly one instance with abbreviation",
          _r([(LOC, 2), (ENT, 1)]), _r(exactly=[(DAC, 1), (ABB, 1)])),
    _asym(20, "at least one instance with numeric value and at least one instance with human "
          "being, and the other user has at least one instance with location, at least one "
          "instance with entity, and exactly one instance with abbreviation",
          _r([(NUM, 1), (HUM, 1)]), _r([(LOC, 1), (ENT, 1)], [(ABB, 1)])),
)


def _symmetric_ok(task: PairTask, counts: Counter, dates: dict[str, list]) -> bool:
    if not any(counts[lab] >= 1 for lab in task.any_of):
        return False
    if task.date_label is None:
        return True
    ds = dates.get(task.date_label, [])
    if task.after is not None:
        return all(d > task.after for d in ds)
    return all(d < task.before for d in ds)


def gold_pairs(task: PairTask, records) -> list[tuple[int, int]]:
    """All qualifying pairs ``(a, b)``, ``a < b``, sorted; ``records`` = (date, user, label)."""
    counts: dict[int, Counter] = defaultdict(Counter)
    dates: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for day, user, label in records:
        counts[user][label] += 1
        dates[user][label].append(day)
    users = sorted(counts)
    if task.role_p is None:
        ok = [u for u in users if _symmetric_ok(task, counts[u], dates[u])]
        return [(a, b) for k, a in enumerate(ok) for b in ok[k + 1:]]
    p = {u for u in users if task.role_p.holds(counts[u])}
    q = {u for u in users if task.role_q.holds(counts[u])}
    return sorted({(min(a, b), max(a, b)) for a in p for b in q if a != b})


def render_pairs(pairs) -> str:
    """The printed answer template: ``(a, b)`` lines, or ``[]`` when there are none."""
    return "\n".join(f"({a}, {b})" for a, b in pairs) if pairs else "[]"


def pairs_questions(window: Window) -> list[Question]:
    """The 20 tasks over every user of a trec_coarse window, with quadratic golds."""
    if set(window.labels) != set(TREC_LABELS):
        raise ValueError(f"OOLONG-Pairs is defined over trec_coarse windows (RLM paper E.1), "
                         f"not {window.dataset!r}")
    records = [(i.date, i.user, i.label) for i in window.instances]
    out = []
    for task in TASKS:
        gold = gold_pairs(task, records)
        out.append(Question(f"{window.dataset}-{window.context_tokens}-{window.seed}-pairs"
                            f"{task.number:02d}", "pairs", f"pairs_task_{task.number}", task.text,
                            render_pairs(gold), PAIRS, {"task": task.number},
                            f"PAIRS_TASK_{task.number}"))
    return out
