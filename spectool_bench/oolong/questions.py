"""OOLONG-synth questions for one window: every family, official tie rules and subsample.

Sources: ``shared/reference/FACTS.md`` §4 (the question families of the official
``task_constructors``, whose file is not in the stored snapshot of
``abertsch72/oolong``), the official question wording quoted in public OOLONG runs
("In the above data, which of the labels is the most common? Give your final answer
in the form 'Label: answer' …"), and ``src/data_gen/oolong-synth/subsample.py``.

Families are generated in the official order — counting, then user, then timeline —
and inside a family one question per task in turn (round robin), so a window lists
e.g. most/second/least common label, then every label pair, then every per-label count.

Tie rules (official): a "which label / user / date is the most …" question whose top
is tied is dropped; a relative-frequency question whose two counts differ by at most
2% (of the larger) is dropped unless they are equal ("same frequency").

Subsample (``subsample.py``): the released set keeps the **first 25** generated
questions of each window (its per-type filters compute a list that is never used),
so for six-label trec_coarse the 25 are almost all counting questions, while two-label
datasets reach the user and timeline families.

Golds are stored as OOLONG stores them: ``repr([gold])``, dates as
``"[datetime.date(Y, M, D)]"``, months as ``"['March 2023']"`` (type MONTH_YEAR, so the
score never depends on today's date).
"""

from __future__ import annotations

import calendar
import datetime
import random
from collections import Counter, defaultdict
from itertools import combinations, zip_longest
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .generator import Question, Window

LABEL = "ANSWER_TYPE.LABEL"
USER = "ANSWER_TYPE.USER"
NUMERIC = "ANSWER_TYPE.NUMERIC"
COMPARISON = "ANSWER_TYPE.COMPARISON"
DATE = "ANSWER_TYPE.DATE"
MONTH_YEAR = "ANSWER_TYPE.MONTH_YEAR"
PAIRS = "ANSWER_TYPE.PAIRS"  # this project's own type for OOLONG-Pairs (scored by F1)

SUBSAMPLE = 25  # subsample.py: this_window[:25]
NEAR_TIE = 0.02  # relative-frequency questions within 2% are skipped unless equal

_NUM = " Give your final answer in the form 'Answer: number'."
_USR = " Give your final answer in the form 'User: [X]', where [X] is the user ID."
_DAT = " Give your final answer in the form 'Date: [X]', where [X] is the date."


def _lab_fmt(labels) -> str:
    return (" Give your final answer in the form 'Label: answer' where answer is one of the "
            "labels: " + ", ".join(labels) + ".")


def _cmp_fmt(a: str, b: str) -> str:
    return (f" Give your final answer in the form 'Answer: {a} is [X] {b}', where [X] is "
            f"'more common than', 'less common than', or 'same frequency as'.")


def unique_rank(counter: Counter, rank: int = 0, reverse: bool = True):
    """The key at position ``rank`` of the count ordering, or None when its count is
    shared with any other key (a tie at that rank) or the rank does not exist."""
    items = sorted(counter.items(), key=lambda kv: kv[1], reverse=reverse)
    if len(items) <= rank:
        return None
    value = items[rank][1]
    return None if sum(1 for _, c in items if c == value) != 1 else items[rank][0]


def relation(ca: int, cb: int) -> str | None:
    """'more common than' / 'less common than' / 'same frequency as'; None for a near tie
    (0 < |ca - cb| <= 2% of max)."""
    if ca == cb:
        return "same frequency as"
    if abs(ca - cb) <= NEAR_TIE * max(ca, cb):
        return None
    return "more common than" if ca > cb else "less common than"


def month_key(day: datetime.date) -> tuple[int, int]:
    return day.year, day.month


def month_name(key: tuple[int, int]) -> str:
    return f"{calendar.month_name[key[1]]} {key[0]}"


def fmt_day(day: datetime.date) -> str:
    return day.strftime("%b %d, %Y")


def make_questions(window: Window, rng: random.Random) -> list[Question]:
    """All questions of the window in official generation order (before subsampling)."""
    from .generator import Question

    inst = window.instances
    labels = list(window.labels)
    by_label = Counter({lab: 0 for lab in labels})
    by_label.update(i.label for i in inst)
    by_user = Counter(i.user for i in inst)
    out: list[Question] = []

    def q(group, task, task_type, text, gold, answer_type, **params):
        if isinstance(gold, datetime.date):
            answer = f"[{gold!r}]"
        else:
            answer = repr([gold])
        return (group, task, task_type, text, answer, answer_type, params)

    # ---- counting -----------------------------------------------------------------
    counting: list[list] = [[], [], [], [], []]
    top = unique_rank(by_label)
    if top is not None:
        counting[0].append(q("counting", "most_common_label", "TASK_TYPE.MOST_FREQ",
                             "In the above data, which of the labels is the most common?"
                             + _lab_fmt(labels), top, LABEL))
    if len(labels) >= 3:
        second = unique_rank(by_label, 1)
        if second is not None:
            counting[1].append(q("counting", "second_most_common_label",
                                 "TASK_TYPE.SECOND_MOST_FREQ",
                                 "In the above data, which of the labels is the second most "
                                 "common?" + _lab_fmt(labels), second, LABEL))
    low = unique_rank(by_label, reverse=False)
    if low is not None:
        counting[2].append(q("counting", "least_common_label", "TASK_TYPE.LEAST_FREQ",
                             "In the above data, which of the labels is the least common?"
                             + _lab_fmt(labels), low, LABEL))
    for a, b in combinations(labels, 2):
        rel = relation(by_label[a], by_label[b])
        if rel is not None:
            counting[3].append(q("counting", "compare_labels", "TASK_TYPE.RELATIVE_FREQ",
                                 f"In the above data, is label '{a}' more common, less common, or "
                                 f"the same frequency as label '{b}'?" + _cmp_fmt(a, b),
                                 rel, COMPARISON, a=a, b=b))
    for lab in labels:
        counting[4].append(q("counting", "label_count", "TASK_TYPE.NUMERIC_ONE_CLASS",
                             f"In the above data, how many data points should be classified as "
                             f"label '{lab}'?" + _NUM, by_label[lab], NUMERIC, label=lab))
    spec = [x for fam in counting for x in fam]  # counting: task after task

    # ---- user ---------------------------------------------------------------------
    user: list[list] = [[] for _ in range(6)]
    top_u = unique_rank(by_user)
    if top_u is not None:
        user[0].append(q("user", "most_represented_user", "TASK_TYPE.MOST_FREQ",
                         "In the above data, which user is represented most often?" + _USR,
                         top_u, USER))
    sec_u = unique_rank(by_user, 1)
    if sec_u is not None and top_u is not None:
        user[0].append(q("user", "second_most_represented_user", "TASK_TYPE.SECOND_MOST_FREQ",
                         "In the above data, which user is represented second most often?" + _USR,
                         sec_u, USER))
    frequent = [u for u, _ in by_user.most_common(max(2, len(by_user) // 10))]
    for lab in labels:
        per = Counter(i.user for i in inst if i.label == lab)
        best = unique_rank(per)
        if best is not None:
            user[1].append(q("user", "user_most_label", "TASK_TYPE.MOST_FREQ",
                             f"In the above data, which user has the most instances with the "
                             f"label '{lab}'?" + _USR, best, USER, label=lab))
        a, b = sorted(rng.sample(frequent, 2))
        ca = sum(1 for i in inst if i.label == lab and i.user == a)
        cb = sum(1 for i in inst if i.label == lab and i.user == b)
        if ca != cb:
            user[2].append(q("user", "user_a_or_b", "TASK_TYPE.RELATIVE_FREQ",
                             f"In the above data, which user has more instances with the label "
                             f"'{lab}': User {a} or User {b}?" + _USR, a if ca > cb else b, USER,
                             label=lab, users=[a, b]))
        subset = sorted(rng.sample(frequent, min(len(frequent), rng.randint(2, 5))))
        cnt = sum(1 for i in inst if i.label == lab and i.user in subset)
        user[3].append(q("user", "user_subset_count", "TASK_TYPE.NUMERIC_ONE_CLASS",
                         f"For the following question, only consider the subset of instances "
                         f"that are associated with user IDs {', '.join(map(str, subset))}. Among "
                         f"instances associated with these users, how many data points should "
                         f"be classified as label '{lab}'?" + _NUM, cnt, NUMERIC,
                         label=lab, users=subset))
    for a, b in combinations(labels, 2):
        subset = sorted(rng.sample(frequent, min(len(frequent), rng.randint(2, 5))))
        sub = Counter(i.label for i in inst if i.user in subset)
        rel = relation(sub[a], sub[b])
        if rel is not None:
            user[4].append(q("user", "user_subset_compare", "TASK_TYPE.RELATIVE_FREQ",
                             f"For the following question, only consider the subset of instances "
                             f"that are associated with user IDs {', '.join(map(str, subset))}. "
                             f"Among instances associated with these users, is label '{a}' more "
                             f"common, less common, or the same frequency as label '{b}'?"
                             + _cmp_fmt(a, b), rel, COMPARISON, a=a, b=b, users=subset))
    spec += _round_robin(user)

    # ---- timeline -----------------------------------------------------------------
    tl: list[list] = [[] for _ in range(10)]
    days = sorted({i.date for i in inst})
    per_month: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for i in inst:
        per_month[month_key(i.date)][i.label] += 1
    months = sorted(per_month)
    for lab in labels:
        cut = rng.choice(days)
        before = sum(1 for i in inst if i.label == lab and i.date < cut)
        after = sum(1 for i in inst if i.label == lab and i.date >= cut)
        rel = relation(before, after)
        if rel is not None:
            gold = {"more common than": "more common", "less common than": "less common",
                    "same frequency as": "the same frequency"}[rel]
            tl[0].append(q("timeline", "before_after", "TASK_TYPE.RELATIVE_FREQ",
                           f"In the above data, is label '{lab}' more common, less common, or the "
                           f"same frequency among instances dated before {fmt_day(cut)} as among "
                           f"instances dated on or after {fmt_day(cut)}? Give your final answer in "
                           f"the form 'Answer: [X]', where [X] is 'more common', 'less common', "
                           f"or 'the same frequency'.", gold, COMPARISON, label=lab,
                           cut=cut.isoformat()))
        mon = rng.randint(1, 12)
        tl[1].append(q("timeline", "month_count", "TASK_TYPE.NUMERIC_ONE_CLASS",
                       f"For the following question, only consider the subset of instances that "
                       f"occur in {calendar.month_name[mon]} of any year. Among these instances, "
                       f"how many data points should be classified as label '{lab}'?" + _NUM,
                       sum(1 for i in inst if i.label == lab and i.date.month == mon), NUMERIC,
                       label=lab, month=mon))
        d1, d2 = sorted(rng.sample(days, 2))
        tl[2].append(q("timeline", "range_count", "TASK_TYPE.NUMERIC_ONE_CLASS",
                       f"For the following question, only consider the subset of instances that "
                       f"occur between {fmt_day(d1)} and {fmt_day(d2)} (inclusive). Among these "
                       f"instances, how many data points should be classified as label "
                       f"'{lab}'?" + _NUM,
                       sum(1 for i in inst if i.label == lab and d1 <= i.date <= d2), NUMERIC,
                       label=lab, start=d1.isoformat(), end=d2.isoformat()))
        single = sum(1 for m in months if unique_rank(per_month[m]) == lab)
        tl[3].append(q("timeline", "months_single_most", "TASK_TYPE.MONTH_IS_MOST_FREQ",
                       f"In the above data, for how many months (each month of each year counted "
                       f"separately) is '{lab}' the single most frequent label, with more "
                       f"instances than every other label?" + _NUM, single, NUMERIC, label=lab))
    by_date = Counter(i.date for i in inst)
    top_d = unique_rank(by_date)
    if top_d is not None:
        tl[4].append(q("timeline", "most_frequent_date", "TASK_TYPE.MOST_FREQ",
                       "In the above data, which date appears most often?" + _DAT, top_d, DATE))
        sec_d = unique_rank(by_date, 1)
        if sec_d is not None:
            tl[4].append(q("timeline", "second_most_frequent_date", "TASK_TYPE.SECOND_MOST_FREQ",
                           "In the above data, which date appears second most often?" + _DAT,
                           sec_d, DATE))
    hist = Counter(by_date.values())
    for n in (1, 2, 3):
        tl[5].append(q("timeline", "dates_exactly_n", "TASK_TYPE.REPRESENTED_N_TIMES",
                       f"In the above data, how many distinct dates appear on exactly {n} "
                       f"line{'s' if n > 1 else ''}?" + _NUM, hist.get(n, 0), NUMERIC, n=n))
    pairs = [(x, y) for x in labels for y in labels if x != y]
    rng.shuffle(pairs)
    for x, y in pairs[:len(labels)]:
        firsts = [m for m in months if per_month[m][x] > per_month[m][y]]
        if firsts:
            tl[6].append(q("timeline", "first_month_beats", "TASK_TYPE.MONTH_FIRST_EXCEEDS",
                           f"In the above data, what is the first month (month and year) in which "
                           f"there are more instances with label '{x}' than with label '{y}'? Give "
                           f"your final answer in the form 'Answer: [X]', where [X] is the month "
                           f"and year, for example 'March 2023'.", month_name(firsts[0]),
                           MONTH_YEAR, x=x, y=y))
        tl[7].append(q("timeline", "months_beats_count", "TASK_TYPE.MONTH_COUNT_EXCEEDS",
                       f"In the above data, for how many months (each month of each year counted "
                       f"separately) are there more instances with label '{x}' than with label "
                       f"'{y}'?" + _NUM, sum(1 for m in months if per_month[m][x] > per_month[m][y]),
                       NUMERIC, x=x, y=y))
    spec += _round_robin(tl)

    prefix = f"{window.dataset}-{window.context_tokens}-{window.seed}"
    for k, (group, task, task_type, text, answer, answer_type, params) in enumerate(spec):
        out.append(Question(f"{prefix}-{k:03d}-{task}", group, task, text, answer, answer_type,
                            params, task_type))
    return out


def _round_robin(families: list[list]) -> list:
    """One question per family in turn: [f0[0], f1[0], …, f0[1], f1[1], …]."""
    return [x for row in zip_longest(*families) for x in row if x is not None]


def official_subsample(questions: list[Question]) -> list[Question]:
    """``subsample.py``: the first 25 questions of the window, in generation order."""
    return list(questions[:SUBSAMPLE])
