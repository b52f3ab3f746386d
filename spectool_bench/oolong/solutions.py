"""Plain-Python answer programs for every OOLONG question family (and the Pairs tasks).

``solution_code(question, labels)`` returns the code a (simulated) RLM root model runs
after labelling: it computes ``result``, the final answer text in the format the
question asks for, from ``records`` = ``[(date string "Jun 29, 2022", user id, label)]``
or, for label-free questions, from ``data`` (the instance lines). The code is written
independently of ``questions.py`` (it re-derives each gold from the parsed lines), so
``tests/benchmarks/test_oolong_solutions.py`` scoring it 1.0 on every question also
cross-checks the generator's golds.
"""

from __future__ import annotations

from .generator import Question

_PRELUDE = (
    "MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec']\n"
    "FULL = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August',\n"
    "        'September', 'October', 'November', 'December']\n"
    "def ymd(d):\n"
    "    return (int(d[-4:]), MONTHS.index(d[:3]) + 1, int(d[4:6]))\n"
    "def iso(t):\n"
    "    return '%04d-%02d-%02d' % t\n"
    "def tally(items):\n"
    "    out = {}\n"
    "    for x in items:\n"
    "        out[x] = out.get(x, 0) + 1\n"
    "    return out\n"
    "def ranked(c, k, low=False):\n"
    "    order = sorted(c, key=lambda x: c[x], reverse=not low)\n"
    "    return order[k]\n"
    "def rel(a, b):\n"
    "    return 'more common than' if a > b else ('less common than' if a < b else 'same frequency as')\n"
)
_LINES = ("rows = []\n"
          "for line in data:\n"
          "    d, u, _ = line.split(' || ', 2)\n"
          "    rows.append((d[6:], int(u[6:])))\n")


def solution_code(q: Question, labels: tuple[str, ...]) -> str:
    """Code that sets ``result`` (the answer text) for question ``q``."""
    p, t = q.params, q.task
    lab = repr(p.get("label"))
    labs = repr(list(labels))
    counts = f"counts = {{x: 0 for x in {labs}}}\ncounts.update(tally(l for _, _, l in records))\n"
    body: str
    if t == "most_common_label":
        body = counts + "result = 'Label: ' + ranked(counts, 0)\n"
    elif t == "second_most_common_label":
        body = counts + "result = 'Label: ' + ranked(counts, 1)\n"
    elif t == "least_common_label":
        body = counts + "result = 'Label: ' + ranked(counts, 0, low=True)\n"
    elif t == "compare_labels":
        body = counts + (f"result = 'Answer: ' + {p['a']!r} + ' is ' + rel(counts[{p['a']!r}], "
                         f"counts[{p['b']!r}]) + ' ' + {p['b']!r}\n")
    elif t == "label_count":
        body = counts + f"result = 'Answer: ' + str(counts[{lab}])\n"
    elif t in ("most_represented_user", "second_most_represented_user"):
        k = 0 if t == "most_represented_user" else 1
        body = _LINES + f"result = 'User: ' + str(ranked(tally(u for _, u in rows), {k}))\n"
    elif t == "user_most_label":
        body = f"result = 'User: ' + str(ranked(tally(u for _, u, l in records if l == {lab}), 0))\n"
    elif t == "user_a_or_b":
        a, b = p["users"]
        body = (f"c = tally(u for _, u, l in records if l == {lab} and u in ({a}, {b}))\n"
                f"result = 'User: ' + str({a} if c.get({a}, 0) > c.get({b}, 0) else {b})\n")
    elif t == "user_subset_count":
        body = (f"n = sum(1 for _, u, l in records if l == {lab} and u in {set(p['users'])!r})\n"
                "result = 'Answer: ' + str(n)\n")
    elif t == "user_subset_compare":
        body = (f"c = tally(l for _, u, l in records if u in {set(p['users'])!r})\n"
                f"result = 'Answer: ' + {p['a']!r} + ' is ' + rel(c.get({p['a']!r}, 0), "
                f"c.get({p['b']!r}, 0)) + ' ' + {p['b']!r}\n")
    elif t == "before_after":
        cut = tuple(int(x) for x in p["cut"].split("-"))
        body = (f"cut = {cut!r}\n"
                f"b = sum(1 for d, _, l in records if l == {lab} and ymd(d) < cut)\n"
                f"a = sum(1 for d, _, l in records if l == {lab} and ymd(d) >= cut)\n"
                "result = 'Answer: ' + ('more common' if b > a else ('less common' if b < a "
                "else 'the same frequency'))\n")
    elif t == "month_count":
        body = (f"n = sum(1 for d, _, l in records if l == {lab} and ymd(d)[1] == {p['month']})\n"
                "result = 'Answer: ' + str(n)\n")
    elif t == "range_count":
        s = tuple(int(x) for x in p["start"].split("-"))
        e = tuple(int(x) for x in p["end"].split("-"))
        body = (f"n = sum(1 for d, _, l in records if l == {lab} and {s!r} <= ymd(d) <= {e!r})\n"
                "result = 'Answer: ' + str(n)\n")
    elif t in ("months_single_most", "months_beats_count", "first_month_beats"):
        body = ("per = {}\n"
                "for d, _, l in records:\n"
                "    c = per.setdefault(ymd(d)[:2], {})\n"
                "    c[l] = c.get(l, 0) + 1\n")
        if t == "months_single_most":
            body += (f"def single(c):\n"
                     f"    best = max(c.values())\n"
                     f"    return [x for x in c if c[x] == best] == [{lab}]\n"
                     f"result = 'Answer: ' + str(sum(1 for m in per if single(per[m])))\n")
        else:
            body += (f"hits = sorted(m for m in per if per[m].get({p['x']!r}, 0) > "
                     f"per[m].get({p['y']!r}, 0))\n")
            body += ("result = 'Answer: ' + str(len(hits))\n" if t == "months_beats_count" else
                     "result = 'Answer: ' + (FULL[hits[0][1] - 1] + ' ' + str(hits[0][0]) "
                     "if hits else 'none')\n")
    elif t in ("most_frequent_date", "second_most_frequent_date"):
        k = 0 if t == "most_frequent_date" else 1
        body = _LINES + f"result = 'Date: ' + iso(ymd(ranked(tally(d for d, _ in rows), {k})))\n"
    elif t == "dates_exactly_n":
        body = _LINES + ("c = tally(d for d, _ in rows)\n"
                         f"result = 'Answer: ' + str(sum(1 for d in c if c[d] == {p['n']}))\n")
    elif t.startswith("pairs_task_"):
        body = _pairs_code(p["task"])
    else:
        raise ValueError(f"no solution for task {t!r}")
    return _PRELUDE + body


def _pairs_code(number: int) -> str:
    from .pairs import TASKS

    task = TASKS[number - 1]
    head = ("per = {}\n"
            "for d, u, l in records:\n"
            "    per.setdefault(u, []).append((ymd(d), l))\n"
            "def n(u, lab):\n"
            "    return sum(1 for _, l in per[u] if l == lab)\n")
    if task.role_p is None:
        cond = " or ".join(f"n(u, {lab!r}) >= 1" for lab in task.any_of)
        if task.date_label is not None:
            cut = (task.after or task.before)
            op = ">" if task.after else "<"
            cond = (f"({cond}) and all(d {op} {(cut.year, cut.month, cut.day)!r} "
                    f"for d, l in per[u] if l == {task.date_label!r})")
        return head + (f"ok = sorted(u for u in per if {cond})\n"
                       "pairs = [(a, b) for i, a in enumerate(ok) for b in ok[i + 1:]]\n"
                       "result = '\\n'.join('(%d, %d)' % ab for ab in pairs) or '[]'\n")

    def role(r) -> str:
        parts = [f"n(u, {lab!r}) >= {k}" for lab, k in r.at_least]
        parts += [f"n(u, {lab!r}) == {k}" for lab, k in r.exactly]
        return " and ".join(parts)
    return head + (f"P = [u for u in per if {role(task.role_p)}]\n"
                   f"Q = [u for u in per if {role(task.role_q)}]\n"
                   "pairs = sorted(set((min(a, b), max(a, b)) for a in P for b in Q if a != b))\n"
                   "result = '\\n'.join('(%d, %d)' % ab for ab in pairs) or '[]'\n")
