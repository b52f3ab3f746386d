"""Every question family's answer program re-derives the generator's gold (score 1.0)."""

import pytest

from spectool_bench.oolong import DATASETS, generate_window, score
from spectool_bench.oolong.pairs import pairs_questions
from spectool_bench.oolong.solutions import solution_code


def _run(window, q):
    data = [x for x in window.context.split("\n") if " || Instance: " in x]
    records = []
    for line in data:
        d, u, text = line.split(" || ", 2)
        records.append((d[6:], int(u[6:]), window.label_of[text[len("Instance: "):]]))
    env = {"data": data, "records": records}
    exec(solution_code(q, window.labels), env)  # noqa: S102 - our own generated code
    return env["result"]


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_all_questions_solved_on_every_dataset(name):
    for size, seed in ((8192, 0), (16384, 1)):
        w = generate_window(name, size, seed)
        for q in w.all_questions:
            out = _run(w, q)
            assert score(out, q.answer, q.answer_type) == 1.0, (q.task, out, q.answer)


def test_pairs_programs_reach_f1_one():
    w = generate_window("trec_coarse", 8192, 2)
    for q in pairs_questions(w):
        assert score(_run(w, q), q.answer, q.answer_type) == 1.0, q.task


def test_solutions_catch_a_wrong_gold():
    """Negative control: a tampered gold is detected by the same check."""
    w = generate_window("spam", 8192, 0)
    q = next(q for q in w.all_questions if q.task == "label_count")
    bad = q.__class__(q.qid, q.group, q.task, q.text, repr([int(q.answer[1:-1]) + 3]),
                      q.answer_type, q.params, q.task_type)
    assert score(_run(w, bad), bad.answer, bad.answer_type) < 1.0
