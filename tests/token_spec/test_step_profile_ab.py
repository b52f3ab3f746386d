"""``python -m token_spec.step_profile --ab``: the old/new A/B of the layer loop.

A real run on a tiny budget writes a results file with every sample, the checks that
passed and how it was measured; the checks refuse a loop that breaks row invariance, a
pair of loops that disagree beyond the tolerance, and logits that change between samples
(negative controls on small stand-ins); ``--render`` prints the table recomputed from a
file's samples and refuses a file with a missing field, a failed check or a stored
figure its samples do not give.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from token_spec import step_profile
from token_spec.step_profile import AB_CELLS, check_loops, main, render_ab


@pytest.mark.model
def test_ab_run_writes_samples_checks_and_how_it_was_measured(tmp_path, capsys):
    out = tmp_path / "ab.json"
    argv = ["--ab", "--configs", "bf16-q4", "--samples", "2", "--prefill-samples", "1",
            "--context", "32", "--prefill", "20", "--out", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["command"] == "python -m token_spec.step_profile " + " ".join(argv)
    assert report["threads"] == 1 and len(report["load_average"]) == 2 and report["machine"]
    assert (report["context"], report["prefill_tokens"]) == (32, 20)
    cfg = report["configs"]["bf16-q4"]
    checks = cfg["checks"]
    assert checks["row_invariant_bitwise"] is True and checks["repeatable_bitwise"] is True
    assert 0 < checks["max_abs_diff"] <= checks["tolerance"] * checks["max_abs_logit"]
    for c in AB_CELLS:
        cell = cfg["cells"][c]
        n = 1 if c == "prefill" else 2
        assert len(cell["old_ms"]) == len(cell["new_ms"]) == n
        assert cell["new_min_ms"] == min(cell["new_ms"]) > 0
    printed = capsys.readouterr().out
    assert render_ab(report) in printed and f"wrote {out}" in printed


KERNEL_ABS = {  # --ab-of: (its configuration, its sides, what its old side says, a configuration it refuses)
    "q4-kernel": ("bf16-q4", step_profile.KERNELS, "TOKEN_SPEC_Q4_KERNEL=aten", "bf16"),
    "bf16-kernel": ("bf16", step_profile.BF16_KERNELS, "TOKEN_SPEC_BF16_KERNEL=blas", "bf16-q4"),
}


@pytest.mark.model
@pytest.mark.parametrize("of", list(KERNEL_ABS))
def test_the_kernel_ab_holds_the_two_gemms_and_says_so(tmp_path, of):
    from token_spec.exact_kernels import native_bf16_mm
    from token_spec.q4_weights import native_q4_mm

    if (native_q4_mm if of == "q4-kernel" else native_bf16_mm)() is None:
        pytest.skip("the compiled GEMMs need AVX512-BF16")
    config, sides, old_side, refused = KERNEL_ABS[of]
    out = tmp_path / "kernels.json"
    assert main(["--ab", "--ab-of", of, "--samples", "1", "--prefill-samples", "1", "--context", "32",
                 "--prefill", "20", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ab_of"] == of and report["loops"] == sides
    assert list(report["configs"]) == [config]
    checks = report["configs"][config]["checks"]
    # two kernels, one model: close, not bitwise (the control that both sides really ran)
    assert 0 < checks["max_abs_diff"] <= checks["tolerance"] * checks["max_abs_logit"]
    assert old_side in render_ab(report)
    with pytest.raises(SystemExit, match="unknown configuration"):
        main(["--ab", "--ab-of", of, "--configs", refused])


# -- the checks, on small stand-in logits -------------------------------------------------
def _logits(shift: float = 0.0) -> dict:
    rows = torch.linspace(-3, 3, 16 * 5).reshape(16, 5) + shift
    return {"step": rows[:1].clone(), "pass8": rows[:8].clone(), "pass16": rows.clone(), "prefill": rows[5:6].clone()}


def test_checks_pass_for_row_invariant_loops_within_the_tolerance():
    checks = check_loops({"old": _logits(), "new": _logits(0.01)}, "bfloat16")
    assert checks["row_invariant_bitwise"] is True
    assert checks["max_abs_diff"] == pytest.approx(0.01, abs=1e-6) and checks["greedy_agreement"] == 1.0


def test_checks_refuse_a_loop_whose_step_and_pass_differ_by_one_ulp():
    new = _logits()
    new["pass8"][0, 2] = torch.nextafter(new["pass8"][0, 2], torch.tensor(9.0))
    with pytest.raises(ValueError, match="new side is not row-invariant"):
        check_loops({"old": _logits(), "new": new}, "bfloat16")


def test_checks_refuse_loops_that_disagree_beyond_the_tolerance():
    with pytest.raises(ValueError, match="differ by"):
        check_loops({"old": _logits(), "new": _logits(0.5)}, "bfloat16")


class _StandIn:
    """A forward whose row depends on its position and token only (row-invariant); with
    ``drift``, every pass after the untimed first one of each cell shifts its logits."""

    def __init__(self, drift: bool) -> None:
        self.drift, self.calls = drift, 0

    def session(self):
        return _Session()

    def start(self, ids):
        s = _Session()
        s.length = len(ids)
        return s

    def forward(self, session, ids, logits_rows=None):
        pos = torch.arange(session.length, session.length + len(ids)).float()
        logits = torch.stack([pos, ids.float(), pos * ids], dim=-1)
        session.length += len(ids)
        self.calls += 1
        if self.drift and self.calls > len(AB_CELLS):
            logits = logits + 1e-3 * self.calls
        return logits if logits_rows is None else logits[-logits_rows:]


class _Session:
    length = 0

    def truncate(self, length):
        self.length = length


def _stand_in_run(monkeypatch, drift: bool) -> dict:
    monkeypatch.setattr(step_profile, "_load", lambda name: type("T", (), {"fast": None}))
    monkeypatch.setattr(step_profile, "loop_twin", lambda lm, native: _StandIn(drift and native))
    return step_profile.run_ab(["bf16"], samples=3, prefill_samples=2, context=8, prefill=4, threads=1,
                               command="python -m token_spec.step_profile --ab")


def test_a_stand_in_run_alternates_the_loops_and_keeps_every_sample(monkeypatch):
    report = _stand_in_run(monkeypatch, drift=False)
    cells = report["configs"]["bf16"]["cells"]
    assert [len(cells[c]["old_ms"]) for c in AB_CELLS] == [3, 3, 3, 2]
    assert report["configs"]["bf16"]["checks"]["repeatable_bitwise"] is True
    assert "| bf16 | new / old |" in render_ab(report)


def test_logits_that_change_between_samples_stop_the_run(monkeypatch):
    with pytest.raises(ValueError, match="new loop's logits changed between samples"):
        _stand_in_run(monkeypatch, drift=True)


def test_ab_refuses_an_unpadded_configuration():
    with pytest.raises(SystemExit, match="unknown configuration"):
        main(["--ab", "--configs", "bf16-unpadded"])


# -- the renderer ----------------------------------------------------------------------------
def _cell(old: list[float], new: list[float]) -> dict:
    cell = {"old_ms": old, "new_ms": new}
    for loop, s in (("old", old), ("new", new)):
        cell.update({f"{loop}_min_ms": min(s), f"{loop}_median_ms": sorted(s)[len(s) // 2]})
    return cell


FIXTURE = {
    "command": "python -m token_spec.step_profile --ab --samples 3 --out fused_ab.json",
    "date": "2026-12-02", "machine": "Test CPU, 2 cores", "threads": 1, "samples": 3, "prefill_samples": 1,
    "context": 512, "prefill_tokens": 300, "loops": dict(step_profile.LOOPS), "load_average": [0.5, 0.75],
    "configs": {"bf16-q4": {
        "checks": {"row_invariant_bitwise": True, "repeatable_bitwise": True, "max_abs_diff": 0.5,
                   "max_abs_logit": 30.0, "tolerance": 0.06, "greedy_agreement": 1.0},
        "cells": {"step": _cell([20.0, 22.0, 30.0], [10.0, 12.5, 11.0]),
                  "pass8": _cell([40.0, 41.0, 44.0], [30.0, 31.0, 33.0]),
                  "pass16": _cell([60.0, 62.0, 64.0], [45.0, 47.0, 49.0]),
                  "prefill": _cell([900.0], [810.0])}}},
}


def _render(tmp_path, capsys, report: dict) -> tuple[int, str, str]:
    path = tmp_path / "fused_ab.json"
    path.write_text(json.dumps(report))
    rc = main(["--render", str(path)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_render_prints_min_median_and_ratio_of_each_cell(tmp_path, capsys):
    rc, out, _ = _render(tmp_path, capsys, FIXTURE)
    assert rc == 0
    assert "| 1-token step | 8-token pass | 16-token pass | 300-token prefill |" in out
    assert "| bf16-q4 | old | 20.0 (22.0) | 40.0 (41.0) | 60.0 (62.0) | 900.0 (900.0) |" in out
    assert "| bf16-q4 | new | 10.0 (11.0) | 30.0 (31.0) | 45.0 (47.0) | 810.0 (810.0) |" in out
    assert "| bf16-q4 | new / old | 0.50 (0.50) | 0.75 (0.76) | 0.75 (0.76) | 0.90 (0.90) |" in out
    assert "load average 0.5 at the start and 0.8 at the end" in out and FIXTURE["command"] in out


def test_render_refuses_a_stored_minimum_its_samples_do_not_give(tmp_path, capsys):
    report = copy.deepcopy(FIXTURE)
    report["configs"]["bf16-q4"]["cells"]["pass8"]["new_min_ms"] = 29.0
    rc, out, err = _render(tmp_path, capsys, report)
    assert rc == 2 and out == ""
    assert "bf16-q4 pass8: new_min_ms is 29.0 but its samples give 30.0" in err and len(err.splitlines()) == 1


def test_render_refuses_a_file_without_its_load_average(tmp_path, capsys):
    report = copy.deepcopy(FIXTURE)
    del report["load_average"]
    rc, out, err = _render(tmp_path, capsys, report)
    assert rc == 2 and out == "" and "fields ['load_average'] missing" in err and len(err.splitlines()) == 1


def test_render_refuses_a_file_whose_checks_failed(tmp_path, capsys):
    report = copy.deepcopy(FIXTURE)
    report["configs"]["bf16-q4"]["checks"]["row_invariant_bitwise"] = False
    rc, out, err = _render(tmp_path, capsys, report)
    assert rc == 2 and out == "" and "bf16-q4: the loops' checks did not pass" in err


def test_render_refuses_a_cell_without_samples(tmp_path, capsys):
    report = copy.deepcopy(FIXTURE)
    del report["configs"]["bf16-q4"]["cells"]["pass16"]["old_ms"]
    rc, out, err = _render(tmp_path, capsys, report)
    assert rc == 2 and out == "" and "field 'old_ms' missing or malformed" in err
