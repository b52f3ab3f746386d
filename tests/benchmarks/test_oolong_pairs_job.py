"""OOLONG-Pairs in the main job (``spectool bench oolong --tasks pairs|both``): the
workload, identical outputs across modes, F1 = 1 with a perfect simulated sub-model,
and pair-format normalisation in the scorer the runner calls. Never timings."""

import pytest

from spectool.cli import main
from spectool_bench.oolong import generate_window, score
from spectool_bench.oolong.pairs import pairs_questions
from spectool_bench.programs import LABEL_SHAPES
from spectool_bench.runner import BenchConfig, main_bench, make_workload

SMALL = dict(context_tokens=(4096,), decoding=("vanilla",), concurrency=(1,),
             shapes=("loop_blocking", "batched", "judge", "pure_python"), time_scale=0.004,
             progress=False, plots=False, loaded_alpha=None, tasks="pairs")


def test_pairs_workload_one_task_per_label_shape_grouped_by_user():
    eps = make_workload(BenchConfig(**{**SMALL, "shapes": LABEL_SHAPES}), 0)
    assert [e.shape for e in eps] == list(LABEL_SHAPES)  # pure_python has no Pairs task
    assert all(e.kind == "pairs" and e.question.answer_type == "ANSWER_TYPE.PAIRS" for e in eps)
    assert len({e.question.task for e in eps}) == len(eps)  # distinct tasks of the 20
    for e in eps:
        cell = "\n".join(e.program.turns)
        assert "data.sort(key=lambda l: int(l.split(\" || \")[1][6:]))" in cell
        assert "pairs = " in cell  # the pairs are built in code
    both = make_workload(BenchConfig(**{**SMALL, "tasks": "both"}), 0)
    assert [e.kind for e in both] == ["synth"] * 4 + ["pairs"] * 3


@pytest.fixture(scope="module")
def perfect(tmp_path_factory):
    return main_bench(BenchConfig(out=tmp_path_factory.mktemp("pairs"), accuracy=1.0, **SMALL))


def test_pairs_outputs_identical_across_modes_and_f1_one_when_the_sub_model_is_perfect(perfect):
    by_mode = {r["mode"]: {e["episode"]: e for e in r["episodes"]} for r in perfect["runs"]}
    base = by_mode["baseline"]
    assert any(e["gold"] != "[]" for e in base.values())  # real pair sets, not empty golds
    for mode in ("lazy", "spec"):
        assert by_mode[mode].keys() == base.keys()
        for k, e in by_mode[mode].items():
            assert e["answer"] == base[k]["answer"] and e["scorer"] == "pairs_f1"
    for e in base.values():
        assert e["score_official"] == 1.0, (e["task"], e["answer"][:80])
    assert perfect["summary"]["checks"]["scores_identical_across_modes"] is True
    assert "pairs-loop_blocking" in perfect["table"] and "tasks=pairs" in perfect["table"]


def test_an_imperfect_sub_model_lowers_pair_f1(tmp_path):
    """Negative control for the test above: wrong labels do show up in the F1."""
    rep = main_bench(BenchConfig(out=tmp_path, accuracy=0.5, modes=("baseline",),
                                 **{**SMALL, "shapes": ("batched",)}))
    (ep,) = rep["runs"][0]["episodes"]
    assert ep["gold"] != "[]" and ep["score_official"] < 1.0


def test_bad_pair_format_is_normalised_by_the_runner_scorer():
    w = generate_window("trec_coarse", 8192, 2)
    q = next(q for q in pairs_questions(w) if q.answer.count("\n") >= 3)
    gold = [tuple(int(x) for x in line.strip("()").split(", ")) for line in q.answer.split("\n")]
    variants = [
        ", ".join(f"({b}, {a})" for a, b in reversed(gold)),  # higher id first, reversed
        str(gold),  # a Python list repr
        "Answer:\n" + "\n".join(f"[{a},{b}]" for a, b in gold + gold[:2]),  # duplicates
    ]
    for v in variants:
        assert score(v, q.answer, q.answer_type) == 1.0, v[:60]
        assert score(v, q.answer, q.answer_type, "lenient") == 1.0
    missing = "\n".join(f"({a}, {b})" for a, b in gold[1:])
    assert score(missing, q.answer, q.answer_type) < 1.0  # negative control


@pytest.mark.parametrize("args", [["--tasks", "pairs", "--dataset", "spam"],
                                  ["--tasks", "nope"]])
def test_cli_rejects_bad_task_choices(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "oolong", *args])
    assert exc.value.code == 2 and "error" in capsys.readouterr().err
