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

from .model import Question

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


def _scope(p: dict) -> str:
    """Code for ``rows``: the records a scoped counting question looks at."""
    if "subset_users" in p:
        return f"rows = [r for r in records if r[1] in {set(p['subset_users'])!r}]\n"
    if "month" in p:
        return f"rows = [r for r in records if ymd(r[0])[1] == {p['month']}]\n"
    if "start" in p:
        s = tuple(int(x) for x in p["start"].split("-"))
        e = tuple(int(x) for x in p["end"].split("-"))
        return (f"rows = sorted((r for r in records if {s!r} <= ymd(r[0]) <= {e!r}), "
                f"key=lambda r: ymd(r[0]))\n")
    return "rows = records\n"


def solution_code(q: Question, labels: tuple[str, ...]) -> str:
    """Code that sets ``result`` (the answer text) for question ``q``."""
    p, t = q.params, q.task
    lab = repr(p.get("label"))
    scoped = bool({"subset_users", "month", "start"} & set(p))
    # label order = the question's label order: header order, or first seen in the subset
    counts = ("counts = tally(l for _, _, l in rows)\n" if scoped else
              f"counts = {{x: 0 for x in {list(labels)!r}}}\nfor _, _, l in rows:\n"
              "    counts[l] = counts.get(l, 0) + 1\n")
    body: str
    if t == "most_common_label":
        body = _scope(p) + counts + "result = 'Label: ' + ranked(counts, 0)\n"
    elif t == "least_common_label":
        body = _scope(p) + counts + "result = 'Label: ' + ranked(counts, 0, low=True)\n"
    elif t == "compare_labels":
        body = _scope(p) + counts + (
            f"result = 'Answer: ' + {p['a']!r} + ' is ' + rel(counts.get({p['a']!r}, 0), "
            f"counts.get({p['b']!r}, 0)) + ' ' + {p['b']!r}\n")
    elif t == "label_count":
        body = _scope(p) + counts + f"result = 'Answer: ' + str(counts.get({lab}, 0))\n"
    elif t in ("most_represented_user", "second_most_represented_user"):
        k = 0 if t == "most_represented_user" else 1
        body = _LINES + f"result = 'User: ' + str(ranked(tally(u for _, u in rows), {k}))\n"
    elif t == "user_most_label":
        body = f"result = 'User: ' + str(ranked(tally(u for _, u, l in records if l == {lab}), 0))\n"
    elif t == "user_a_or_b":
        a, b = p["users"]
        body = (f"c = tally(u for _, u, l in records if l == {lab} and u in ({a}, {b}))\n"
                f"result = 'User: ' + str({a} if c.get({a}, 0) > c.get({b}, 0) else {b})\n")
    elif t == "before_after":
        cut = tuple(int(x) for x in p["cut"].split("-"))
        body = (f"cut = {cut!r}\n"
                "before = [l for d, _, l in records if ymd(d) < cut]\n"
                "after = [l for d, _, l in records if ymd(d) > cut]\n"
                f"diff = before.count({lab}) / len(before) - after.count({lab}) / len(after)\n"
                "result = 'Answer: ' + ('more common' if diff > 0 else ('less common' if diff < 0 "
                "else 'the same frequency'))\n")
    elif t in ("months_single_most", "months_beats_count", "first_month_beats"):
        body = ("per = {}\n"
                "for d, _, l in records:\n"
                "    c = per.setdefault(ymd(d)[:2], {})\n"
                "    c[l] = c.get(l, 0) + 1\n"
                "share = {m: {k: v / sum(c.values()) for k, v in c.items()} for m, c in per.items()}\n")
        if t == "months_single_most":
            body += (f"def single(s):\n"
                     f"    mine = s.get({lab}, 0.0)\n"
                     f"    return all(v < mine for k, v in s.items() if k != {lab})\n"
                     f"result = 'Answer: ' + str(sum(1 for m in share if single(share[m])))\n")
        else:
            body += (f"hits = sorted(m for m in share if share[m].get({p['x']!r}, 0.0) > "
                     f"share[m].get({p['y']!r}, 0.0))\n")
            body += ("result = 'Answer: ' + str(len(hits))\n" if t == "months_beats_count" else
                     "result = 'Answer: ' + (FULL[hits[0][1] - 1] + ' ' + str(hits[0][0]) "
                     "if hits else 'none')\n")
    elif t in ("most_frequent_date", "second_most_frequent_date"):
        k = 0 if t == "most_frequent_date" else 1
        body = _LINES + (f"y, m, d = ymd(ranked(tally(d for d, _ in rows), {k}))\n"
                         "result = 'Date: %02d/%02d/%04d' % (m, d, y)\n")
    elif t == "dates_exactly_n":
        body = _LINES + ("c = tally(d for d, _ in rows)\n"
                         "top = sorted(c, key=lambda x: c[x], reverse=True)[:50]\n"
                         f"result = 'Answer: ' + str(sum(1 for d in top if c[d] == {p['n']}))\n")
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
