"""OOLONG-Pairs: the 20 RLM-paper tasks over all users, quadratic golds, F1 scoring."""

import datetime

import pytest

from spectool_bench.oolong import generate_window, pairs_f1, parse_pairs
from spectool_bench.oolong.pairs import TASKS, TEMPLATE, gold_pairs, pairs_questions

D = datetime.date


@pytest.fixture(scope="module")
def window():
    return generate_window("trec_coarse", 32768, 0)


def test_twenty_tasks_in_paper_wording(window):
    qs = pairs_questions(window)
    assert [q.params["task"] for q in qs] == list(range(1, 21))
    assert qs[0].text.startswith("In the above data, list all pairs of user IDs (no duplicate "
                                 "pairs, list lower ID first) where both users have at least one "
                                 "instance with a numeric value or location.")
    assert ("all instances that are a human being for both users must be after January 6, 2023"
            in qs[3].text)
    assert qs[10].text.split(" Each of")[0].endswith(
        "such that one user has at least one instance with entity and one with abbreviation, and "
        "the other user has exactly one instance with entity.")
    assert all(q.text.endswith(TEMPLATE) for q in qs)


def test_golds_are_over_all_users_and_quadratic(window):
    users = {i.user for i in window.instances}
    qs = pairs_questions(window)
    sizes = [len(parse_pairs(q.answer)) for q in qs]
    assert max(sizes) > 10 * len(users)  # quadratic, not top-8 (<= 28)
    mentioned = {u for q in qs for pair in parse_pairs(q.answer) for u in pair}
    assert len(mentioned) > 50 and mentioned <= users


def _brute(task, records):
    """Independent restatement: check every unordered pair directly."""
    users = sorted({u for _, u, _ in records})

    def cnt(u, lab):
        return sum(1 for _, v, x in records if v == u and x == lab)

    def sym_ok(u):
        if not any(cnt(u, lab) for lab in task.any_of):
            return False
        if task.date_label is None:
            return True
        ds = [d for d, v, x in records if v == u and x == task.date_label]
        return all((d > task.after) if task.after else (d < task.before) for d in ds)

    def role(r, u):
        return (all(cnt(u, lab) >= k for lab, k in r.at_least)
                and all(cnt(u, lab) == k for lab, k in r.exactly))

    out = []
    for i, a in enumerate(users):
        for b in users[i + 1:]:
            if task.role_p is None:
                ok = sym_ok(a) and sym_ok(b)
            else:
                p, q = task.role_p, task.role_q
                ok = (role(p, a) and role(q, b)) or (role(p, b) and role(q, a))
            if ok:
                out.append((a, b))
    return out


def test_golds_match_brute_force():
    w = generate_window("trec_coarse", 4096, 1)
    records = [(i.date, i.user, i.label) for i in w.instances]
    for task in TASKS:
        assert gold_pairs(task, records) == _brute(task, records), task.number


def test_date_cutoff_and_exactly_semantics():
    H, L, N, E, A = "human being", "location", "numeric value", "entity", "abbreviation"
    recs = [(D(2023, 2, 1), 1, H), (D(2022, 12, 1), 2, H), (D(2023, 3, 1), 3, L),
            (D(2023, 3, 1), 4, E), (D(2023, 3, 1), 4, A), (D(2023, 3, 1), 5, E),
            (D(2023, 3, 1), 5, E)]
    assert gold_pairs(TASKS[3], recs) == [(1, 3)]  # user 2's human-being line is too early
    # task 11: P = >=1 entity and >=1 abbreviation (user 4); Q = exactly one entity (user 4 only)
    assert gold_pairs(TASKS[10], recs) == []
    recs.append((D(2023, 3, 1), 6, E))
    assert gold_pairs(TASKS[10], recs) == [(4, 6)]
    assert N in TASKS[0].any_of


def test_f1_scores_the_printed_template(window):
    q = pairs_questions(window)[0]
    assert pairs_f1(q.answer, q.answer) == 1.0
    pairs = sorted(parse_pairs(q.answer))
    half = ", ".join(f"({b}, {a})" for a, b in pairs[: len(pairs) // 2])  # reversed order
    assert pairs_f1(half, q.answer) == pytest.approx(2 * 0.5 / 1.5, rel=0.01)


def test_pairs_need_trec_labels():
    with pytest.raises(ValueError, match="trec_coarse"):
        pairs_questions(generate_window("spam", 8192, 0))


def test_brute_force_check_catches_a_wrong_rule():
    """Negative control: reading task 11's "exactly one" as "at least one" changes the gold."""
    import dataclasses

    from spectool_bench.oolong.pairs import Role

    w = generate_window("trec_coarse", 8192, 1)
    records = [(i.date, i.user, i.label) for i in w.instances]
    task = TASKS[10]
    wrong = dataclasses.replace(task, role_q=Role(at_least=task.role_q.exactly))
    assert gold_pairs(wrong, records) != _brute(task, records)
