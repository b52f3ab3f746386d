"""The README's serving table is the rendered data file, and the renderer refuses a
file that lacks what the table compares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from token_spec.serve.summary import render_summary

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "results" / "serve_loadtest_1thread.json"


def _row(method: str, clients: int, tps: float, vs: float | None) -> dict:
    return {"method": method, "clients": clients, "tokens_per_s": tps,
            "tokens_per_s_per_client": tps / clients, "vs_none": vs,
            "vs_none_min": None if vs is None else vs - 0.1,
            "vs_none_max": None if vs is None else vs + 0.1}


def test_the_best_of_ours_is_compared_with_llamacpp_per_concurrency():
    data = {"command": "token_spec loadtest --x", "config": {"repeats": 3, "threads": 1},
            "rows": [_row("none", 4, 40.0, 1.0), _row("ngram", 4, 48.0, 1.2),
                     _row("llamacpp", 4, 20.0, 0.5)]}
    table = render_summary(data)
    assert "| 4 | 12.0 (ngram) | 5.0 | 48.0 | 20.0 | 1.20 (1.10–1.30) |" in table
    assert "`token_spec loadtest --x`" in table


def test_a_file_without_the_peer_is_refused_by_name():
    data = {"command": "c", "rows": [_row("none", 1, 10.0, 1.0)]}
    with pytest.raises(ValueError, match="'llamacpp' row at 1 clients"):
        render_summary(data)


def test_the_readme_table_is_the_rendered_data_file():
    table = render_summary(json.loads(DATA.read_text()))
    assert table in (ROOT / "README.md").read_text()


def test_negative_control_an_edited_figure_no_longer_matches():
    data = json.loads(DATA.read_text())
    peer = next(r for r in data["rows"] if r["method"] == "llamacpp")
    peer["tokens_per_s_per_client"] += 1.0
    assert render_summary(data) not in (ROOT / "README.md").read_text()


def test_the_control_is_the_last_column_and_never_ours_best():
    from token_spec.serve.loadtest import CONTROL

    data = {"command": "c", "config": {}, "rows": [_row("none", 1, 40.0, 1.0), _row(CONTROL, 1, 44.0, 1.1),
                                                    _row("ngram", 1, 42.0, 1.05), _row("llamacpp", 1, 30.0, 0.75)]}
    table = render_summary(data)
    head = table.splitlines()[0]
    assert head.rstrip(" |").endswith(f"{CONTROL} ÷ none (A/A: the noise)")
    assert "| 1 | 42.0 (ngram) |" in table  # the control's faster run is noise, not our best method
