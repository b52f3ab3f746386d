"""The benchmark's stdout tables stay machine-readable: every row lines up with its
heading and rule, splits on white space into its columns' values in heading order, and
prints a missing value as "-"; a section appears only for data the run has."""

from spectool_bench.report import render_table
from spectool_bench.runner import BenchConfig

CFG = BenchConfig(concurrency=(1,), decoding=("vanilla",), progress=False)

RUN_ROW = {"decoding": "vanilla", "concurrency": 1, "mode": "spec", "wall_s": 50.64,
           "speedup": 1.284, "speedup_vs_vanilla_baseline": None, "oracle_speedup": 1.58,
           "pct_of_oracle": 81.2, "score_official": 0.6, "score_lenient": 0.61,
           "sub_calls": 25, "server_requests": 26, "hits": 24, "misses": 1, "wasted": 2,
           "evicted": 3}
SHAPE_ROW = {"decoding": "vanilla", "shape": "loop_blocking", "baseline_s": 13.94,
             "lazy_s": 10.1, "spec_s": 7.7, "spec_speedup": 1.8182, "hits": 5,
             "spec_score": 1.0}                      # no oracle, no "wasted" recorded
GAP_ROW = {"decoding": "vanilla", "shape": "judge", "baseline_s": 30.0, "spec_s": 10.0,
           "oracle_speedup": 3.2, "hits": 12, "wasted": 1, "spec_score": 0.5, "gap_s": 0.62,
           "closable_s": 0.4, "unclosable_s": 0.1,
           "gap_dominant": [["lookahead limit", 0.4], ["other", 0.12]]}
MIX_ROW = {"decoding": "vanilla", "mix": "loop-heavy", "shapes": ["judge"], "baseline_s": 40.2,
           "lazy_s": 34.6, "spec_s": 28.64, "lazy_speedup": 1.162, "spec_speedup": 1.404,
           "oracle_speedup": None}
LOADED_ROWS = [{"mode": "spec", "admission": False, "wall_s": 8.4, "speed": 1.26, "sent": 12,
                "needed": 5, "hits": 5},
               {"mode": "baseline", "admission": True, "wall_s": 10.6, "speed": 1.0, "sent": 5,
                "needed": None, "hits": 0}]
CHECKS = {"scores_identical_across_modes": True, "targets": []}


def _table_after(lines: list[str], first_heading_word: str, start: int = 0):
    """(heading, rule, rows) of the first table at or after ``start`` whose heading
    starts with ``first_heading_word``."""
    i = next(i for i in range(start, len(lines)) if lines[i].startswith(first_heading_word)
             and lines[i + 1].startswith("---"))
    rows = []
    for line in lines[i + 2:]:
        if not line:
            break
        rows.append(line)
    return lines[i], lines[i + 1], rows


def _assert_lined_up(head: str, rule: str, rows: list[str]) -> None:
    assert rule == "-" * len(head)
    assert all(len(row) == len(head) for row in rows), (head, rows)


def test_every_table_row_splits_into_its_columns_values_in_heading_order():
    summary = {"rows": [RUN_ROW], "shapes": [SHAPE_ROW], "mixes": [MIX_ROW],
               "loaded": LOADED_ROWS, "checks": CHECKS}
    lines = render_table(CFG, summary).splitlines()

    head, rule, rows = _table_after(lines, "decoding     conc")
    _assert_lined_up(head, rule, rows)
    assert head.split() == ["decoding", "conc", "mode", "wall", "sim", "s", "speedup", "vs",
                            "van", "oracle", "%orcl", "score", "lenient", "calls", "sent",
                            "hits", "miss", "waste", "evict"]
    assert rows[0].split() == ["vanilla", "1", "spec", "50.6", "1.28", "-", "1.58", "81",
                               "0.600", "0.610", "25", "26", "24", "1", "2", "3"]

    head, rule, rows = _table_after(lines, "decoding    shape")
    _assert_lined_up(head, rule, rows)
    assert rows[0].split() == ["vanilla", "loop_blocking", "13.9", "10.1", "7.7", "1.82", "-",
                               "5", "0", "1.000", "-", "-", "-"]

    head, rule, rows = _table_after(lines, "decoding    mix")
    _assert_lined_up(head, rule, rows)
    assert rows[0].split() == ["vanilla", "loop-heavy", "40.2", "34.6", "28.6", "1.16", "1.40",
                               "-"]

    head, rule, rows = _table_after(lines, "mode")
    _assert_lined_up(head, rule, rows)
    assert head.split() == ["mode", "admission", "wall", "sim", "s", "speed", "sent", "needed",
                            "hits"]
    assert [r.split() for r in rows] == [["spec", "off", "8.4", "1.26", "12", "5", "5"],
                                         ["baseline", "on", "10.6", "1.00", "5", "-", "0"]]


def test_shape_table_shows_the_gap_to_the_oracle_split_and_names_its_dominant_causes():
    lines = render_table(CFG, {"rows": [], "shapes": [SHAPE_ROW, GAP_ROW]}).splitlines()
    head, rule, rows = _table_after(lines, "decoding    shape")
    _assert_lined_up(head, rule, rows)
    assert head.split()[-6:] == ["gap", "s", "closable", "s", "unclosable", "s"]
    assert rows[1].split() == ["vanilla", "judge", "30.0", "-", "10.0", "-", "3.20", "12", "1",
                               "0.500", "0.62", "0.40", "0.10"]
    assert "  vanilla judge: lookahead limit 0.40, other 0.12" in lines
    assert not any(line.startswith("  vanilla loop_blocking:") for line in lines)


def test_real_model_runs_label_times_in_seconds():
    cfg = BenchConfig(concurrency=(1,), root_model="r", sub_model="s", progress=False)
    text = render_table(cfg, {"rows": [RUN_ROW], "shapes": [SHAPE_ROW]})
    assert "[root=r sub=s]" in text and "sim s" not in text
    head, rule, rows = _table_after(text.splitlines(), "decoding     conc")
    _assert_lined_up(head, rule, rows)
    assert "wall s" in head


def test_only_the_sections_with_data_are_printed():
    text = render_table(CFG, {"rows": [RUN_ROW], "shapes": []})
    assert "per shape" not in text and "per mix" not in text and "loaded server" not in text
    assert "scores identical" not in text
    lines = text.splitlines()
    head, rule, rows = _table_after(lines, "decoding     conc")
    assert rows == [lines[-1]]
