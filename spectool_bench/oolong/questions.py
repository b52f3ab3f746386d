"""OOLONG-synth questions for one window, constructed as the official code constructs them.

Source: the official ``task_constructors.py`` (``CountingTasks``, ``UserTasks``,
``TemporalTasks``; read in a public vendored copy of ``abertsch72/oolong``
``src/data_gen/oolong-synth/``, whose stored snapshot here lacks the file), its
``constants.py`` (six ``TASK_TYPE`` values, six ``ANSWER_TYPE`` values),
``generate_dataset.py`` (order: counting, user, timeline) and ``subsample.py`` (the
first 25 questions of each window; windows with fewer are dropped: ``official_subsample``). Question wording is the official text, carried
over as data; the code is this project's own.

* **Counting block** over an ordered ``{label: count}`` (``counting_block``): most
  common label only when unique *and* more than 2% (of the block's lines) ahead of
  every other label; least common always (gold lists every tied label; the scorer
  reads the first); each label pair whose shares differ by more than 2% or are equal;
  each label's count. Scoped copies replace "In the above data," with a
  subset clause and use the labels present in the subset.
* **User**: most / second-most represented user (dropped on ties); one user drawn from
  the 50 most frequent (the official ``min(1, …)`` makes the "subset" one user) and a
  counting block over that user's lines (the official subset questions "among these
  users, which user is represented most often" and "… has the most instances with the
  label X" need two or more subset users, so with one user they never exist and are not
  generated here); per label (first-seen order): the user with
  the most instances of it (dropped on ties) and "User A or User B?" between ranks
  drawn from the label's top 10 (asked only when A leads by more than one).
* **Timeline**: most / second-most frequent date (dropped on ties); "how many dates are
  represented exactly n times" with n the 4th-ranked date's count, counted among the
  50 most frequent dates, as the official code does; before/after-date share
  comparisons (> 2% apart, or equal); a counting block over one month of any year and
  one over a date range; per ordered label pair "first month X beats Y"
  (``MONTH_YEAR``; the official loop inspects only the first month, so the question
  exists only when X already beats Y there — kept as published) and "for how many
  months X beats Y"; per label "for how many months X is the single most frequent".

Months compare label *shares* within the month, as the official code does. Golds are
stored as the string of the official answer list; dates as
``"[datetime.date(Y, M, D)]"``; months as ``"['March 2023']"`` (type MONTH_YEAR, so the
score never depends on today's date).
"""

from __future__ import annotations

import calendar
import datetime
import random
from collections import Counter, defaultdict
from itertools import combinations

from .model import Question, Window


LABEL = "ANSWER_TYPE.LABEL"
USER = "ANSWER_TYPE.USER"
NUMERIC = "ANSWER_TYPE.NUMERIC"
COMPARISON = "ANSWER_TYPE.COMPARISON"
DATE = "ANSWER_TYPE.DATE"
MONTH_YEAR = "ANSWER_TYPE.MONTH_YEAR"
PAIRS = "ANSWER_TYPE.PAIRS"  # this project's own type for OOLONG-Pairs (scored by F1)

MOST, LEAST, RELATIVE = "TASK_TYPE.MOST_FREQ", "TASK_TYPE.LEAST_FREQ", "TASK_TYPE.RELATIVE_FREQ"
NUMERIC_ONE, SECOND, N_TIMES = ("TASK_TYPE.NUMERIC_ONE_CLASS", "TASK_TYPE.SECOND_MOST_FREQ",
                                "TASK_TYPE.REPRESENTED_N_TIMES")

SUBSAMPLE = 25  # subsample.py: this_window[:25]
GAP = 0.02  # share difference a comparison needs (unless exactly equal)
TOP_USERS, TOP_LABEL_USERS, TOP_DATES = 50, 10, 50

ABOVE = "In the above data,"
_USR = " Give your final answer in the form 'User: [X]', where [X] is the user ID."


def fmt_day(day: datetime.date) -> str:
    return day.strftime("%b %d, %Y")


def month_label(key: tuple[int, int]) -> str:
    """(year, month) -> 'March 2023'."""
    return f"{calendar.month_name[key[1]]} {key[0]}"


def ranked(items) -> list[tuple[object, int]]:
    """``(key, count)`` by count, descending; ties keep first-seen order (stable sort of a
    Counter built in line order, as the official ``sorted(Counter(...).items())``)."""
    return sorted(Counter(items).items(), key=lambda kv: kv[1], reverse=True)


def closest_gap(counts: dict, key) -> float:
    """Smallest share difference between ``key`` and any other label (1 when alone)."""
    total = sum(counts.values())
    gaps = [abs(counts[key] - c) / total for k, c in counts.items() if k != key]
    return min(gaps, default=1.0)


def counting_block(counts: dict, scope: dict, prefix: str = ABOVE) -> list[tuple]:
    """The official ``CountingTasks`` over ordered ``counts``, with ``prefix`` in place of
    "In the above data," for subsets. Returns question specs."""
    out: list[tuple] = []
    if not counts:
        return out
    names = ", ".join(counts)
    total = sum(counts.values())
    lab_fmt = (f" Give your final answer in the form 'Label: answer' where answer is one of the "
               f"labels: {names}.")
    top = max(counts.values())
    tops = [k for k, c in counts.items() if c == top]
    if len(tops) == 1 and closest_gap(counts, tops[0]) > GAP:
        out.append(("most_common_label", MOST, f"{prefix} which of the labels is the most common?"
                    + lab_fmt, tops, LABEL, dict(scope)))
    low = min(counts.values())
    out.append(("least_common_label", LEAST, f"{prefix} which of the labels is the least common?"
                + lab_fmt, [k for k, c in counts.items() if c == low], LABEL, dict(scope)))
    for a, b in combinations(counts, 2):
        diff = (counts[a] - counts[b]) / total
        if abs(diff) > GAP or diff == 0:
            rel = ("more common than" if counts[a] > counts[b] else
                   "less common than" if counts[a] < counts[b] else "same frequency as")
            out.append(("compare_labels", RELATIVE,
                        f"{prefix} is label '{a}' more common, less common, or the same frequency "
                        f"as label '{b}'? Give your final answer in the form 'Answer: {a} is [X] "
                        f"{b}', where [X] is 'more common than', 'less common than', or 'same "
                        f"frequency as'.", [rel], COMPARISON, {**scope, "a": a, "b": b}))
    for lab in counts:
        out.append(("label_count", NUMERIC_ONE,
                    f"{prefix} how many data points should be classified as label '{lab}'? Give "
                    f"your final answer in the form 'Answer: number'.", [counts[lab]], NUMERIC,
                    {**scope, "label": lab}))
    return out


def _ordered_counts(labels_in_order) -> dict:
    return dict(Counter(labels_in_order))  # insertion order = first seen


def user_block(inst, rng: random.Random) -> list[tuple]:
    out: list[tuple] = []
    top = ranked(i.user for i in inst)[:TOP_USERS]
    if len(top) > 1 and top[0][1] > top[1][1]:
        out.append(("most_represented_user", MOST, f"{ABOVE} which user is represented most often?"
                    + _USR, [top[0][0]], USER, {}))
        if len(top) == 2 or top[1][1] > top[2][1]:
            out.append(("second_most_represented_user", SECOND,
                        f"{ABOVE} which user is represented the second most often?" + _USR,
                        [top[1][0]], USER, {}))
    k = min(1, min(rng.randint(0, 10) + 10, int(len(top) * 0.8)))  # official: one user
    chosen = [u for u, _ in rng.sample(top, k)]
    if not chosen:
        return out
    ids = ", ".join(map(str, chosen))
    sub = _ordered_counts(i.label for i in inst if i.user in chosen)
    out += counting_block(sub, {"subset_users": chosen},
                          f"For the following question, only consider the subset of instances that "
                          f"are associated with user IDs {ids}. Among instances associated with "
                          f"these users,")
    for lab in dict.fromkeys(i.label for i in inst):
        top_l = ranked(i.user for i in inst if i.label == lab)[:TOP_LABEL_USERS]
        if len(top_l) > 1 and top_l[0][1] > top_l[1][1]:
            out.append(("user_most_label", MOST, f"{ABOVE} which user has the most instances with "
                        f"the label {lab}?" + _USR, [top_l[0][0]], USER, {"label": lab}))
        end = min(9, len(top_l) - 1)
        middle = 5 if end == 9 else end // 2
        for _ in range(10):  # official patience
            r1, r2 = rng.randint(0, middle), rng.randint(middle, end)
            if top_l[r1][1] > top_l[r2][1] + 1:
                a, b = top_l[r1][0], top_l[r2][0]
                out.append(("user_a_or_b", RELATIVE, f"{ABOVE} which user has more instances with "
                            f"the label {lab}: User {a} or User {b}?" + _USR, [a], USER,
                            {"label": lab, "users": [a, b]}))
                break
    return out


def timeline_block(inst, rng: random.Random) -> list[tuple]:
    out: list[tuple] = []
    dates = ranked(i.date for i in inst)[:TOP_DATES]
    date_q = ("which date is represented {} often? Give your final answer in the form 'Date: [X]', "
              "where [X] is the date in the format MM/DD/YYYY.")
    if len(dates) == 1:
        return [("most_frequent_date", MOST, f"{ABOVE} " + date_q.format("most"), [dates[0][0]],
                 DATE, {})]
    count = [c for _, c in dates] + [0, 0, 0]  # guards where the official code would crash
    if count[0] > count[1]:
        out.append(("most_frequent_date", MOST, f"{ABOVE} " + date_q.format("most"),
                    [dates[0][0]], DATE, {}))
        if count[1] > count[2]:
            out.append(("second_most_frequent_date", SECOND,
                        f"{ABOVE} " + date_q.format("the second most"), [dates[1][0]], DATE, {}))
    if len(dates) >= 4:
        n = count[3]
        out.append(("dates_exactly_n", N_TIMES,
                    f"{ABOVE} how many dates are represented exactly {n} times? Give your final "
                    f"answer in the form 'Answer: [X]', where [X] is the number of dates "
                    f"represented exactly {n} times.", [sum(1 for _, c in dates if c == n)],
                    NUMERIC, {"n": n}))
    by_date = sorted(inst, key=lambda i: i.date)
    days = [i.date for i in by_date]
    size = len(by_date)
    out += _before_after(by_date, days, rng)
    month_names = list(calendar.month_name)[1:]
    mon, sub = 1, {}
    for _ in range(21):  # first draw + official patience 20
        mon = rng.randint(1, 12)
        sub = _ordered_counts(i.label for i in inst if i.date.month == mon)
        if sub:
            break
    name = month_names[mon - 1]
    out += counting_block(sub, {"month": mon},
                          f"For the following question, only consider the subset of instances that "
                          f"occur in {name} of any year. Among instances occuring in {name},")
    start = rng.randint(int(size * 0.1), int(size * 0.5))
    while start > 0 and days[start - 1] == days[start]:
        start -= 1
    offset = 10
    if size < 11:
        offset = size // 2
        if start + offset + 2 >= size:
            offset = -1
    if offset > 2:
        end = min(rng.randint(start + offset, max(start + offset + 2, int(size * 0.9))), size - 1)
        while end < size - 1 and days[end + 1] == days[end]:
            end += 1
        sub = _ordered_counts(i.label for i in by_date[start:end + 1])
        out += counting_block(sub, {"start": days[start].isoformat(), "end": days[end].isoformat()},
                              f"For the following question, only consider the subset of instances "
                              f"that occur between {fmt_day(days[start])} and {fmt_day(days[end])}, "
                              f"inclusive. Among instances occuring in this date range,")
    out += _monthly(by_date)
    return out


def _before_after(by_date, days, rng: random.Random) -> list[tuple]:
    """Official before/after comparison: label shares strictly before vs strictly after a
    date drawn from the 15%..75% quantiles, retried (patience 10) until one differs > 2%."""
    out: list[tuple] = []
    size = len(by_date)
    for _ in range(10):
        point = rng.randint(int(size * 0.15), int(size * 0.75))
        if point == size - 1:
            point -= 2
        point = max(point, 0)
        cut = days[point]
        lo, hi = point, point + 1
        while lo > 0 and days[lo - 1] == cut:
            lo -= 1
        while hi < size and days[hi] == cut:
            hi += 1
        before = [i.label for i in by_date[:lo]]
        after = [i.label for i in by_date[hi:]]
        if not before or not after:  # the official code divides by zero here
            continue
        keys = list(dict.fromkeys(before))
        rng.shuffle(keys)
        made = False
        for key in keys:
            diff = before.count(key) / len(before) - after.count(key) / len(after)
            if abs(diff) > GAP or diff == 0:
                gold = "more common" if diff > 0 else "less common" if diff < 0 else "the same frequency"
                out.append(("before_after", RELATIVE,
                            f"{ABOVE} was label '{key}' more common, less common, or the same "
                            f"frequency before {cut}, as compared to after {cut}? Give your final "
                            f"answer in the form 'Answer: {key} is [X] before {cut}', where [X] is "
                            f"'more common', 'less common', or 'the same frequency'.", [gold],
                            COMPARISON, {"label": key, "cut": cut.isoformat()}))
                made = made or diff != 0
        if made:
            break
    return out


def _monthly(by_date) -> list[tuple]:
    """Per-month label shares (chronological) and the three month questions."""
    per: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for i in by_date:
        per[(i.date.year, i.date.month)][i.label] += 1
    share = {m: {k: v / sum(c.values()) for k, v in c.items()} for m, c in per.items()}
    labels = list(dict.fromkeys(i.label for i in by_date))
    months = list(share)
    out: list[tuple] = []
    for x in labels:
        for y in labels:
            if x != y and share[months[0]].get(x, 0.0) > share[months[0]].get(y, 0.0):
                out.append(("first_month_beats", RELATIVE,
                            f"In which month did the label '{x} first occur more often than the "
                            f"label '{y}'? Give your final answer in the form 'Answer: [month] "
                            f"[year]', where [month] is the name of the month and [year] is the "
                            f"four-digit year where '{x}' first occured more often than '{y}.'",
                            [month_label(months[0])], MONTH_YEAR, {"x": x, "y": y}))
    for x in labels:
        for y in labels:
            if x != y:
                n = sum(1 for m in months if share[m].get(x, 0.0) > share[m].get(y, 0.0))
                out.append(("months_beats_count", RELATIVE,
                            f"For how many months does the label '{x}' occur more frequently than "
                            f"the label '{y}'? Disregard months where there is a tie.  Give your "
                            f"final answer in the form 'Answer: [X]', where [X] is the number of "
                            f"months where '{x}' occurs more often than '{y}.'", [n], NUMERIC,
                            {"x": x, "y": y}))
    for x in labels:
        n = sum(1 for m in months
                if all(v < share[m].get(x, 0.0) for k, v in share[m].items() if k != x))
        out.append(("months_single_most", MOST,
                    f"For how many months is the label '{x}' the single most frequently occuring "
                    f"label? Disregard months where there is a tie for the most common label.  "
                    f"Give your final answer in the form 'Answer: [X]', where [X] is the number of "
                    f"months where '{x}' is the most common label.", [n], NUMERIC, {"label": x}))
    return out


def store(gold: list) -> str:
    """The stored answer string: ``str(list)`` (dates as ``datetime.date(...)`` reprs)."""
    return "[" + ", ".join(repr(g) for g in gold) + "]"


def make_questions(window: Window, rng: random.Random) -> list[Question]:
    """All questions of the window in official generation order (before subsampling)."""
    inst = window.instances
    counts = {lab: 0 for lab in window.labels}
    counts.update(Counter(i.label for i in inst))
    groups = (("counting", counting_block(counts, {})), ("user", user_block(inst, rng)),
              ("timeline", timeline_block(inst, rng)))
    prefix = f"{window.dataset}-{window.context_tokens}-{window.seed}"
    out = []
    for group, specs in groups:
        for task, task_type, text, gold, answer_type, params in specs:
            out.append(Question(f"{prefix}-{len(out):03d}-{task}", group, task, text, store(gold),
                                answer_type, params, task_type))
    return out


BINARY_DATASETS = frozenset({"metaphors", "negation", "formality", "spam", "imdb", "app_reviews"})
SHORT_POOL = 50  # subsample.py: questions kept per (dataset, length)


def official_subsample(questions: list[Question], dataset: str = "trec_coarse",
                       context_tokens: int = 8192) -> list[Question]:
    """``subsample.py``'s rule for one window, in generation order.

    * Multi-label datasets (yahoo, multinli, agnews, trec_coarse): a window with fewer
      than 25 questions is skipped (``if len(this_window) < 25: continue``), else its
      first 25 are kept. A skipped window returns ``[]`` (``Window.dropped``).
    * Two-label datasets: at 1K (and imdb below 5,000 tokens) short windows are taken
      whole until the length holds 50 questions (``remaining_to_add``), so a window keeps
      its first 50; at every other length the script asserts ``>= 25`` (a shorter window
      never reached the release), so a short window is dropped here as well.

    The type filters the script computes (``cut_to_ten``, ``filter_type``) feed a list
    that is never used for the release, so they are not applied.
    ``Window.all_questions`` keeps every question regardless of this rule.
    """
    if dataset in BINARY_DATASETS and (context_tokens <= 1024
                                       or (dataset == "imdb" and context_tokens < 5000)):
        return list(questions[:SHORT_POOL])
    if len(questions) < SUBSAMPLE:
        return []
    return list(questions[:SUBSAMPLE])
