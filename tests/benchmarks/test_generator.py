"""OOLONG-style generator: determinism, format, gold answers recounted from the text."""

import ast
import datetime
import re
from collections import Counter, defaultdict

import pytest

from spectool_bench.oolong import (DATASETS, estimate_tokens, generate_window, parse_gold,
                               parse_line, score_official)

SIZES = (1024, 4096, 16384)


@pytest.fixture(scope="module", params=[("trec_coarse", 4096, 0), ("trec_coarse", 16384, 3),
                                        ("imdb", 8192, 1), ("trec_coarse", 1024, 7)])
def window(request):
    return generate_window(*request.param)


def test_deterministic():
    a = generate_window("trec_coarse", 4096, 5)
    b = generate_window("trec_coarse", 4096, 5)
    assert a.context == b.context
    assert [(q.text, q.answer) for q in a.questions] == [(q.text, q.answer) for q in b.questions]
    assert generate_window("trec_coarse", 4096, 6).context != a.context


@pytest.mark.parametrize("size", SIZES)
def test_size_tracks_target(size):
    w = generate_window("trec_coarse", size, 0)
    assert 0.6 * size <= estimate_tokens(w.context) <= size


def test_format(window):
    lines = window.context.split("\n")
    assert lines[0].startswith("The following lines contain")
    assert "calculate the exact answer" in lines[0]
    for lab in window.labels:
        assert repr(lab) in lines[0]
    assert lines[-1].startswith("Recall: the preceding lines")
    body = lines[1:-1]
    assert len(body) == len(window.instances)
    for line in body:
        assert re.fullmatch(r"Date: [A-Z][a-z]{2} \d{2}, 202[2-5] \|\| User: \d{5} \|\| Instance: .+", line)


def test_labels_not_in_text(window):
    words = {w.lower() for lab in window.labels for w in lab.split() if len(w) > 3}
    for inst in window.instances:
        low = inst.text.lower()
        for lab in window.labels:
            assert lab.lower() not in low
        assert not words & set(re.findall(r"[a-z]+", low)), inst.text


def test_side_table_consistent():
    for name in DATASETS:
        w = generate_window(name, 8192, 2)
        for inst in w.instances:
            assert w.label_of[inst.text] == inst.label


def test_skew_and_user_reuse(window):
    counts = Counter(i.label for i in window.instances)
    assert set(counts) == set(window.labels)
    assert 2.0 <= window.temperature <= 6.0
    users = Counter(i.user for i in window.instances)
    assert users.most_common(1)[0][1] > 1  # Zipf reuse


def test_every_group_present(window):
    groups = {q.group for q in window.questions}
    assert {"counting", "user", "timeline", "pairs"} <= groups


def _recount(window):
    """Recompute every gold from the rendered context and the side table only."""
    recs = []
    for line in window.context.split("\n"):
        parsed = parse_line(line)
        if parsed is not None:
            day, user, text = parsed
            recs.append((day, user, window.label_of[text]))
    by_label = Counter(r[2] for r in recs)
    by_user = Counter(r[1] for r in recs)
    out = {}
    for q in window.questions:
        p = q.params
        t = q.task
        if t == "most_common_label":
            v = by_label.most_common(1)[0][0]
        elif t == "least_common_label":
            v = min(by_label, key=by_label.get)
        elif t == "label_count":
            v = by_label[p["label"]]
        elif t == "compare_labels":
            a, b = by_label[p["a"]], by_label[p["b"]]
            v = "more common than" if a > b else "less common than" if a < b else "same frequency as"
        elif t == "user_most_label":
            v = Counter(u for _, u, lab in recs if lab == p["label"]).most_common(1)[0][0]
        elif t == "most_represented_user":
            v = by_user.most_common(1)[0][0]
        elif t == "second_most_represented_user":
            v = by_user.most_common(2)[1][0]
        elif t == "subset_user_most_label":
            c = Counter(u for _, u, lab in recs if lab == p["label"] and u in p["users"])
            v = c.most_common(1)[0][0]
        elif t == "month_label_count":
            m = datetime.date.fromisoformat(p["month"])
            v = sum(1 for d, _, lab in recs if lab == p["label"] and (d.year, d.month) == (m.year, m.month))
        elif t == "before_date_count":
            cut = datetime.date.fromisoformat(p["before"])
            v = sum(1 for d, _, lab in recs if lab == p["label"] and d < cut)
        elif t == "first_month_beats":
            pm = defaultdict(Counter)
            for d, _, lab in recs:
                pm[(d.year, d.month)][lab] += 1
            y, m = next(k for k in sorted(pm) if pm[k][p["x"]] > pm[k][p["y"]])
            v = datetime.date(y, m, 1)
        elif t == "date_exactly_n":
            v = next(d for d, c in Counter(r[0] for r in recs).items() if c == p["n"])
        elif t == "pairs_both_label":
            have = {u for _, u, lab in recs if lab == p["label"]}
            v = sorted((a, b) for a in p["users"] for b in p["users"] if a < b and a in have and b in have)
        out[q.qid] = v
    return out


def test_gold_answers_recounted(window):
    expected = _recount(window)
    for q in window.questions:
        if q.task == "pairs_both_label":
            assert ast.literal_eval(q.answer) == expected[q.qid]
        else:
            assert parse_gold(q.answer) == expected[q.qid], q.task


def test_stored_like_oolong(window):
    for q in window.questions:
        assert q.answer_type.startswith("ANSWER_TYPE.")
        if q.answer_type == "ANSWER_TYPE.DATE":
            assert re.fullmatch(r"\[datetime\.date\(\d{4}, \d{1,2}, \d{1,2}\)\]", q.answer)
        elif q.answer_type == "ANSWER_TYPE.LABEL":
            assert q.answer == repr([parse_gold(q.answer)])
        elif q.answer_type in ("ANSWER_TYPE.NUMERIC", "ANSWER_TYPE.USER"):
            assert re.fullmatch(r"\[\d+\]", q.answer)
        elif q.answer_type == "ANSWER_TYPE.COMPARISON":
            assert parse_gold(q.answer) in ("more common than", "less common than", "same frequency as")


def test_gold_scores_one_in_answer_format(window):
    for q in window.questions:
        if q.answer_type == "ANSWER_TYPE.PAIRS":
            continue
        g = parse_gold(q.answer)
        prefix = {"ANSWER_TYPE.LABEL": "Label", "ANSWER_TYPE.USER": "User",
                  "ANSWER_TYPE.DATE": "Date"}.get(q.answer_type, "Answer")
        assert score_official(f"{prefix}: {g}", q.answer, q.answer_type) == 1.0


def test_pairs_task(window):
    q = next(q for q in window.questions if q.group == "pairs")
    pairs = ast.literal_eval(q.answer)
    users = q.params["users"]
    assert all(a < b and a in users and b in users for a, b in pairs)
    assert str(users) in q.text


def test_bad_args():
    with pytest.raises(ValueError):
        generate_window("nope", 4096, 0)
    with pytest.raises(ValueError):
        generate_window("trec_coarse", 100, 0)
