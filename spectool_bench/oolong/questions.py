"""Questions with exact gold answers for one window (OOLONG task groups + Pairs).

Every gold is computed from the window's instances (their hidden labels included);
``tests/benchmarks/test_generator.py`` recomputes each one from the rendered context
and the side table. A question whose answer would be a tie is skipped.
"""

from __future__ import annotations

import datetime
import random
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .generator import Question, Window

LABEL = "ANSWER_TYPE.LABEL"
USER = "ANSWER_TYPE.USER"
NUMERIC = "ANSWER_TYPE.NUMERIC"
COMPARISON = "ANSWER_TYPE.COMPARISON"
DATE = "ANSWER_TYPE.DATE"
MONTH_YEAR = "ANSWER_TYPE.MONTH_YEAR"
PAIRS = "ANSWER_TYPE.PAIRS"  # this project's own type for the Pairs task

_FMT = {
    LABEL: "Give your final answer in the form 'Label: <label>'.",
    USER: "Give your final answer in the form 'User: <user id>'.",
    NUMERIC: "Give your final answer in the form 'Answer: <number>'.",
    COMPARISON: "Give your final answer in the form 'Answer: <label A> is <more common than / "
                "less common than / same frequency as> <label B>'.",
    DATE: "Give your final answer in the form 'Date: <YYYY-MM-DD>'.",
    PAIRS: "Give your final answer as a list of pairs '(a, b)' with a < b.",
}


def _unique_top(counter: Counter, reverse: bool = True, rank: int = 0):
    """The element at ``rank`` of the ordering by count, or None if tied with a neighbour."""
    items = sorted(counter.items(), key=lambda kv: kv[1], reverse=reverse)
    if len(items) <= rank:
        return None
    value = items[rank][1]
    if sum(1 for _, c in items if c == value) != 1:
        return None
    return items[rank][0]


def month_of(day: datetime.date) -> datetime.date:
    return day.replace(day=1)


def make_questions(window: Window, rng: random.Random) -> list[Question]:
    from .generator import Question

    inst = window.instances
    labels = list(window.labels)
    by_label = Counter(i.label for i in inst)
    by_user = Counter(i.user for i in inst)
    out: list[Question] = []

    def add(group: str, task: str, text: str, gold, answer_type: str, **params) -> None:
        if isinstance(gold, datetime.date):
            answer = f"[{gold!r}]"
        elif answer_type == PAIRS:
            answer = repr(sorted(gold))
        else:
            answer = repr([gold])
        qid = f"{window.dataset}-{window.context_tokens}-{window.seed}-{len(out):02d}-{task}"
        out.append(Question(qid, group, task, f"{text} {_FMT[answer_type]}", answer,
                            answer_type, params))

    # --- counting -----------------------------------------------------------------
    top = _unique_top(by_label)
    if top is not None:
        add("counting", "most_common_label",
            "Which of the labels is the most common among the instances?", top, LABEL)
    low = _unique_top(by_label, reverse=False)
    if low is not None:
        add("counting", "least_common_label",
            "Which of the labels is the least common among the instances?", low, LABEL)
    for lab in rng.sample(labels, min(2, len(labels))):
        add("counting", "label_count",
            f"How many instances should be labelled as '{lab}'?", by_label[lab], NUMERIC,
            label=lab)
    a, b = rng.sample(labels, 2)
    rel = ("more common than" if by_label[a] > by_label[b]
           else "less common than" if by_label[a] < by_label[b] else "same frequency as")
    add("counting", "compare_labels",
        f"Is the label '{a}' more common, less common, or the same frequency as the label '{b}'?",
        rel, COMPARISON, a=a, b=b)

    # --- user ---------------------------------------------------------------------
    for lab in rng.sample(labels, len(labels)):
        best = _unique_top(Counter(i.user for i in inst if i.label == lab))
        if best is not None:
            add("user", "user_most_label",
                f"Which user has the most instances that should be labelled as '{lab}'?",
                best, USER, label=lab)
            break
    best = _unique_top(by_user)
    if best is not None:
        add("user", "most_represented_user", "Which user has the most instances?", best, USER)
    second = _unique_top(by_user, rank=1)
    if second is not None and _unique_top(by_user) is not None:
        add("user", "second_most_represented_user",
            "Which user has the second most instances?", second, USER)
    subset = sorted(rng.sample(sorted(by_user), min(5, len(by_user))))
    for lab in rng.sample(labels, len(labels)):
        sub = Counter({u: 0 for u in subset})
        sub.update(i.user for i in inst if i.label == lab and i.user in subset)
        best = _unique_top(sub)
        if best is not None:
            add("user", "subset_user_most_label",
                f"Among the users {subset}, which user has the most instances that should be "
                f"labelled as '{lab}'?", best, USER, label=lab, users=subset)
            break

    # --- timeline -----------------------------------------------------------------
    lab = rng.choice(labels)
    day = rng.choice(inst).date
    month = month_of(day)
    add("timeline", "month_label_count",
        f"How many instances dated in {month.strftime('%B %Y')} should be labelled as '{lab}'?",
        sum(1 for i in inst if i.label == lab and month_of(i.date) == month), NUMERIC,
        label=lab, month=month.isoformat())
    lab = rng.choice(labels)
    cut = rng.choice(inst).date
    add("timeline", "before_date_count",
        f"How many instances dated before {cut.strftime('%b %d, %Y')} should be labelled as "
        f"'{lab}'?", sum(1 for i in inst if i.label == lab and i.date < cut), NUMERIC,
        label=lab, before=cut.isoformat())
    per_month: dict[datetime.date, Counter] = defaultdict(Counter)
    for i in inst:
        per_month[month_of(i.date)][i.label] += 1
    ordered = rng.sample([(p, q) for p in labels for q in labels if p != q],
                         len(labels) * (len(labels) - 1))
    # prefer a rarer label overtaking a commoner one (its first month is not trivial)
    ordered.sort(key=lambda xy: by_label[xy[0]] >= by_label[xy[1]])
    for x, y in ordered:
        firsts = [m for m in sorted(per_month) if per_month[m][x] > per_month[m][y]]
        if firsts:
            add("timeline", "first_month_beats",
                f"What is the first month in which instances labelled as '{x}' outnumber "
                f"instances labelled as '{y}'? Answer with the first day of that month.",
                firsts[0], DATE, x=x, y=y)
            break
    by_date = Counter(i.date for i in inst)
    top_day = _unique_top(by_date)
    if top_day is not None:
        add("timeline", "date_exactly_n",
            f"Which date appears on exactly {by_date[top_day]} lines?", top_day, DATE,
            n=by_date[top_day])

    # --- pairs (OOLONG-Pairs style) -------------------------------------------------
    cands = sorted(u for u, _ in by_user.most_common(8))
    for lab in rng.sample(labels, len(labels)):  # prefer a non-trivial pair set
        have = {i.user for i in inst if i.label == lab}
        pairs = [(u, v) for k, u in enumerate(cands) for v in cands[k + 1:]
                 if u in have and v in have]
        if 0 < len(pairs) < len(cands) * (len(cands) - 1) // 2:
            break
    add("pairs", "pairs_both_label",
        f"Among the users {cands}, list every pair of users (a, b) with a < b such that both "
        f"users have at least one instance that should be labelled as '{lab}'.",
        pairs, PAIRS, label=lab, users=cands)
    return out
