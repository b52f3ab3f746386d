"""spectool replay: log formats, latency bookkeeping, self-checks, harness presets,
safety, and a replay whose modes agree."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

import spectool.replay as replay_mod
from cli_helpers import exit_of
from spectool import cli
from spectool.replay import (LatencyBook, RecordedCall, ReplayCheckError, ReplayError,
                             load_log, parse_log, replay)
from spectool.replay_bound import turn_bound
from spectool.replay_checks import check_bound, check_call_counts, check_latencies, occurrences
from spectool.replay_tools import CallSpan, Recorder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rlm_agent_log.json"
FAST = dict(tokens_per_s=400, time_scale=0.02)


def own_log(*rows: dict) -> str:
    return "\n".join(json.dumps(r) for r in rows)


def batch_turn(latency, prompts=("a", "b", "c")) -> dict:
    return {"text": f"```repl\nr = llm_batch({list(prompts)!r})\n```\n",
            "calls": [{"tool": "llm_batch", "latency_s": latency}]}


def latencies_by_prompt(report: dict, mode: str, turn: int = 0) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for tool, key, latency in report["turns"][turn]["modes"][mode]["calls"]:
        out.setdefault(key, []).append(latency)
    return out


# -- formats --------------------------------------------------------------------------------


def test_openai_messages_give_one_turn_per_assistant_message_with_tool_call_code():
    msgs = [{"role": "user", "content": "the context"},
            {"role": "assistant", "content": [{"type": "text", "text": "```repl\nx = 1\n```"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "1", "type": "function",
                 "function": {"name": "python", "arguments": json.dumps({"code": "y = 2"})}}]},
            {"role": "tool", "tool_call_id": "1", "content": "ok"}]
    log = parse_log(json.dumps(msgs))
    assert log.format == "openai" and log.context == "the context" and log.tool_results == 1
    assert len(log.turns) == 2 and "```python\ny = 2\n```" in log.turns[1].text
    assert log.turns[0].calls is None                  # an OpenAI log records no latencies
    jsonl = "\n".join(json.dumps(m) for m in msgs)
    assert [t.text for t in parse_log(jsonl).turns] == [t.text for t in log.turns]


def test_own_jsonl_format_carries_context_calls_and_rate():
    raw = own_log({"context": "abc"},
                  {"text": "```repl\nq = llm_query('a')\n```", "tokens_per_s": 80,
                   "calls": [{"tool": "llm_query", "latency_s": 1.5},
                             {"tool": "llm_batch", "latency_s": [1, 2]}]},
                  {"text": "x = 1", "calls": []},
                  {"text": "y = 2"})
    log = parse_log(raw)
    assert log.format == "spectool" and log.context == "abc"
    assert log.turns[0].calls == (RecordedCall("llm_query", 1.5),
                                  RecordedCall("llm_batch", (1.0, 2.0)))
    assert log.turns[0].tokens_per_s == 80
    assert log.turns[1].calls == () and log.turns[2].calls is None   # none made / none recorded


@pytest.mark.parametrize("raw, match", [
    ("", "empty"), ("{not json\n", "line 1: not JSON"),
    (json.dumps([{"role": "user", "content": "x"}]), "no assistant"),
    (json.dumps({"text": "x", "calls": [{"tool": "t"}]}), "no 'latency_s'"),
    (json.dumps({"text": "x", "calls": [{"tool": "t", "latency_s": -1}]}), "latency_s must be"),
    (json.dumps([1, 2]), "expected a JSON array"),
    # malformed and hostile logs: one ReplayError naming the field, never a traceback
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (json.dumps([{"role": "assistant", "content": "x", "tool_calls": 5}]),
     "'tool_calls' must be a list"),
    (json.dumps({"text": "x", "calls": [{"tool": ["a"], "latency_s": 1}]}),
     "'tool' must be a non-empty string"),
    (json.dumps({"text": "x", "calls": [{"tool": {"a": 1}, "latency_s": 1}]}),
     "'tool' must be a non-empty string"),
    ('{"text": "x", "calls": [{"tool": "t", "latency_s": Infinity}]}', "Infinity"),
    ('{"text": "x", "calls": [{"tool": "t", "latency_s": NaN}]}', "NaN"),
    (json.dumps({"text": "x", "calls": [{"tool": "t", "latency_s": 1e300}]}), "latency_s must"),
    (json.dumps({"text": "x", "calls": [{"tool": "t", "latency_s": True}]}), "latency_s must"),
    (json.dumps({"text": "x", "tokens_per_s": 1e-300}), "tokens_per_s must"),
    (json.dumps({"text": "x", "calls": "many"}), "'calls' must be a list"),
    (json.dumps({"text": "x", "calls": [3]}), "each entry of 'calls'"),
    (json.dumps({"text": "x", "calls": [{"tool": "llm_query", "latency_s": [1]}]}),
     "for a batched call"),
    (json.dumps({"text": "x", "calls": [{"tool": "llm_batch", "latency_s": []}]}), "is empty"),
    (json.dumps([{"role": "assistant", "content": 7}]), "'content' must be"),
    (json.dumps({"messages": [{"role": "assistant", "content": "x"}], "context": 3}),
     "'context' must be a string"),
])
def test_bad_logs_get_one_clear_error(raw, match):
    with pytest.raises(ReplayError, match=match):
        parse_log(raw)


# -- the latency book -------------------------------------------------------------------------


def test_latency_book_fixes_latencies_on_the_baseline_and_every_mode_looks_them_up():
    model = lambda key: 9.0  # noqa: E731
    book = LatencyBook((RecordedCall("llm_query", 1.0), RecordedCall("llm_query", 2.0)), model)
    book.begin("baseline")
    assert book.call("llm_query", "'a'") == 1.0 and book.call("llm_query", "'b'") == 2.0
    assert book.call("llm_query", "'c'") == 9.0            # beyond the record: the model
    assert book.beyond_record == 1 and book.unused_records == 0
    for mode in ("lazy", "spec"):                          # every later mode, any order
        book.begin(mode)
        assert book.call("llm_query", "'b'") == 2.0 and book.call("llm_query", "'a'") == 1.0
        assert book.call("llm_query", "'c'") == 9.0
        assert book.call("llm_query", "'z'") == 9.0        # a call the baseline never made
        assert book.modelled[mode] == 1                     # only 'z' took the model
    sized = LatencyBook(None, lambda key: 1.0 + 2.0 * len(key) / 4000)
    sized.begin("baseline")
    assert sized.call("llm_query", "x" * 4000) == pytest.approx(3.0)   # 1000 tokens
    assert sized.beyond_record == 0                         # nothing recorded: no mismatch


def test_latency_book_refuses_a_mode_before_the_baseline():
    book = LatencyBook(None, lambda key: 1.0)
    with pytest.raises(RuntimeError, match="baseline must run first"):
        book.begin("spec")


def test_a_batched_record_is_one_entry_per_call_a_number_or_one_per_element():
    book = LatencyBook((RecordedCall("llm_batch", 4.0), RecordedCall("llm_batch", (1.0, 2.0))),
                       lambda key: 9.0)
    book.begin("baseline")
    assert book.batch("llm_batch", "llm_query", ["'a'", "'b'"]) == [4.0, 4.0]
    assert book.batch("llm_batch", "llm_query", ["'c'", "'d'", "'e'"]) == [1.0, 2.0, 9.0]
    assert book.beyond_record == 1
    book.begin("spec")     # spec claims 'a' as an llm_query, then the batch's misses
    assert book.call("llm_query", "'a'") == 4.0
    assert book.batch("llm_batch", "llm_query", ["'e'", "'b'"]) == [9.0, 4.0]


# -- whole replays: every mode at the recorded latencies ------------------------------------------


@pytest.mark.anyio
async def test_three_modes_all_get_the_recorded_per_element_batch_latencies(anyio_backend):
    """The minimal case: llm_batch(['a','b','c']) recorded at 1, 2 and 3 s, with a
    different model latency: every mode's calls take 1, 2 and 3 s."""
    report = await replay(parse_log(own_log(batch_turn([1, 2, 3]))), latency_s=5, **FAST)
    for mode in ("baseline", "lazy", "spec"):
        assert latencies_by_prompt(report, mode) == {"'a'": [1.0], "'b'": [2.0], "'c'": [3.0]}
        assert report["turns"][0]["modes"][mode]["modelled_calls"] == 0
    assert report["warnings"] == [] and report["latency_fallbacks"] == 0
    assert report["checks"] == "passed"


@pytest.mark.anyio
async def test_one_number_for_a_batched_call_applies_to_every_element(anyio_backend):
    report = await replay(parse_log(own_log(batch_turn(1.0))), latency_s=5, **FAST)
    for mode in ("baseline", "lazy", "spec"):
        assert latencies_by_prompt(report, mode) == {"'a'": [1.0], "'b'": [1.0], "'c'": [1.0]}
    assert report["warnings"] == []


@pytest.mark.anyio
async def test_a_record_that_does_not_match_the_calls_is_counted_and_warned(anyio_backend):
    rows = [{"text": "```repl\nr = llm_batch(['a','b','c'])\n```\n",
             "calls": [{"tool": "llm_batch", "latency_s": 1},       # one entry per element:
                       {"tool": "llm_batch", "latency_s": 2},       # not this schema
                       {"tool": "llm_batch", "latency_s": 3}]},
            {"text": "```repl\nq = llm_query('x')\nz = llm_query('y')\n```\n",
             "calls": [{"tool": "llm_query", "latency_s": 0.5}]}]
    report = await replay(parse_log(own_log(*rows)), latency_s=2, **FAST)
    assert report["recorded_calls_unused"] == 2 and report["latency_fallbacks"] == 1
    assert any("1 call(s) fell back" in w and "2 recorded call(s)" in w
               for w in report["warnings"])
    assert latencies_by_prompt(report, "spec", 1) == {"'x'": [0.5], "'y'": [2.0]}


# -- self-checks, each with the fault injected ----------------------------------------------------


def test_check_functions_pass_good_runs_and_name_the_call_of_a_bad_one():
    base = occurrences([("llm_query", "'a'", 1.0), ("llm_query", "'a'", 2.0)])
    good = [("llm_query", "'a'", 1.0, True, 1.0), ("llm_query", "'a'", 2.0, False, 0.1)]
    check_latencies(0, "spec", good, base, tolerance_s=0.01)       # cancelled: may be short
    with pytest.raises(ReplayCheckError, match=r"turn 3, spec: llm_query\('a'\) #2 was given 5"):
        check_latencies(3, "spec", [good[0], ("llm_query", "'a'", 5.0, True, 5.0)], base,
                        tolerance_s=0.01)
    with pytest.raises(ReplayCheckError, match="slept 0.500 s of its 1.000 s"):
        check_latencies(0, "lazy", [("llm_query", "'a'", 1.0, True, 0.5)], base,
                        tolerance_s=0.01)
    check_bound(0, "spec", 2.0, 2.0, tolerance_s=0.0)
    with pytest.raises(ReplayCheckError, match="below the turn's lower bound"):
        check_bound(1, "spec", 1.0, 2.0, tolerance_s=0.5)
    check_call_counts(0, "spec", 3, 3)
    with pytest.raises(ReplayCheckError, match="made 4 sub-call"):
        check_call_counts(0, "spec", 4, 3)


class _OldBook(LatencyBook):
    """The fault: occurrence counters carried over from the second mode to the third."""

    def begin(self, mode: str) -> None:
        seen = self._seen
        super().begin(mode)
        if mode == "spec":
            self._seen = seen


@pytest.mark.anyio
async def test_negative_control_counters_carried_across_modes_are_refused(anyio_backend,
                                                                           monkeypatch):
    monkeypatch.setattr(replay_mod, "LatencyBook", _OldBook)
    with pytest.raises(ReplayCheckError, match=r"turn 0, spec: llm_query\('[abc]'\) #1 was given "
                                               r"5 s, the baseline's same call [123] s"):
        await replay(parse_log(own_log(batch_turn([1, 2, 3]))), latency_s=5, **FAST)


@pytest.mark.anyio
async def test_negative_control_a_call_that_does_not_sleep_its_latency_is_refused(
        anyio_backend, monkeypatch):
    async def short(self, tool_name, key, latency):   # spec's calls skip their sleep
        span = CallSpan(tool_name, key, latency, time.perf_counter())
        self.spans.append(span)
        await anyio.sleep(0 if self.book.mode == "spec" else latency * self.time_scale)
        span.finished, span.end = True, time.perf_counter()

    monkeypatch.setattr(Recorder, "sleep", short)
    with pytest.raises(ReplayCheckError, match="spec: llm_query.* slept"):
        await replay(parse_log(own_log(batch_turn(1.0))), **FAST)


@pytest.mark.anyio
async def test_negative_control_a_wall_time_below_the_bound_is_refused(anyio_backend,
                                                                        monkeypatch):
    stream, runs = replay_mod._stream, []

    def fast_third(text, rate, time_scale):      # the third mode streams 100x too fast
        runs.extend(["# words" in text])     # (not the untimed warm-up turns)
        return stream(text, rate * (100 if sum(runs) == 3 and runs[-1] else 1), time_scale)

    monkeypatch.setattr(replay_mod, "_stream", fast_third)
    log = parse_log(own_log({"text": "```repl\nx = 1\n```\n" + "# words " * 200}))
    with pytest.raises(ReplayCheckError, match="turn 0, spec: wall time .* below"):
        await replay(log, tokens_per_s=400, time_scale=0.1)     # 0.1 s of streaming


@pytest.mark.anyio
async def test_negative_control_a_real_run_with_another_call_count_is_refused(anyio_backend,
                                                                               monkeypatch):
    class Miscounting(replay_mod.Runtime):
        async def run(self, stream, **kw):
            res = await super().run(stream, **kw)
            if self.mode == "lazy":
                res.stats.misses += 1
            return res

    monkeypatch.setattr(replay_mod, "Runtime", Miscounting)
    with pytest.raises(ReplayCheckError, match="turn 0, lazy: the real run made 4 sub-call"):
        await replay(parse_log(own_log(batch_turn(1.0))), **FAST)


def test_the_bound_counts_from_the_first_mention_of_a_tool_or_an_earlier_helper():
    text = "```repl\nr1 = ask('a')\n" + "x = 1\n" * 40 + "r2 = llm_query('b')\n```\n"
    late = turn_bound(text, 10.0, [("llm_query", 1.0)])
    end = text.index("llm_query") + len("llm_query")        # when its last letter streamed
    assert late == pytest.approx((end - 1) // 4 / 10 + 1.0)
    # `ask` was defined in an earlier turn: its call may reach llm_query at once
    early = turn_bound(text, 10.0, [("llm_query", 1.0)],
                       earlier=["```repl\ndef ask(p):\n    return llm_query(p)\n```"])
    stream = turn_bound(text, 10.0, [])                 # no calls: the stream alone
    assert stream == pytest.approx((-(-len(text) // 4) - 1) / 10)
    assert early == pytest.approx(max(stream, (text.index("ask") + 2) // 4 / 10 + 1.0))
    assert early < late


# -- harness presets -----------------------------------------------------------------------------


VERIFIERS_CELL = ("```python\nn = 0 if extra_data is None else len(extra_data)\n"
                  "outs = llm_batch([{'role': 'user', 'content': 'hi'},"
                  " [{'role': 'user', 'content': 'there'}], 'plain'])\n"
                  "answer['content'] = str(len(outs)) + ':' + str(n)\n"
                  "answer['ready'] = True\n```\n")


@pytest.mark.anyio
async def test_verifiers_harness_presets_extra_data_answer_and_takes_message_prompts(
        anyio_backend):
    report = await replay(parse_log(own_log({"text": VERIFIERS_CELL})), harness="verifiers",
                          latency_s=0.5, **FAST)
    for mode, row in report["turns"][0]["modes"].items():
        assert row["error"] is None and row["identical"], mode
        assert row["hits"] + row["misses"] == 3 == len(row["calls"]), mode


@pytest.mark.anyio
async def test_negative_control_the_rlm_harness_has_no_extra_data(anyio_backend):
    report = await replay(parse_log(own_log({"text": VERIFIERS_CELL})), harness="rlm",
                          latency_s=0.5, **FAST)
    assert "NameError" in report["turns"][0]["modes"]["baseline"]["error"]


def test_harness_namespaces():
    from spectool.harness_presets import harness_namespace
    assert harness_namespace("rlm", "ctx") == {"context": "ctx"}
    assert harness_namespace("verifiers", "") == {"extra_data": None,
                                                  "answer": {"ready": False, "content": ""}}
    assert set(harness_namespace("both", "c")) == {"context", "extra_data", "answer"}
    with pytest.raises(ValueError, match="unknown harness 'x'"):
        harness_namespace("x")


# -- safety: sandboxed by default, bounded in time -------------------------------------------------


def _writer_log(target: Path) -> str:
    return own_log({"text": f"```repl\ntry:\n    with open({str(target)!r}, 'w') as f:\n"
                            f"        f.write('x')\nexcept OSError:\n    pass\n```\n"})


@pytest.mark.anyio
async def test_cells_run_sandboxed_by_default_and_write_no_host_file(anyio_backend, tmp_path):
    target = tmp_path / "written-by-the-log"
    report = await replay(parse_log(_writer_log(target)), **FAST)
    assert report["executor"] == "subprocess" and report["sandbox"] in ("bwrap", "fallback")
    assert not target.exists()
    assert not any("as you" in w for w in report["warnings"])


@pytest.mark.anyio
async def test_negative_control_inprocess_is_an_opt_in_that_writes_and_warns(anyio_backend,
                                                                            tmp_path):
    target = tmp_path / "written-by-the-log"
    report = await replay(parse_log(_writer_log(target)), executor="inprocess", **FAST)
    assert target.exists()
    assert any("as you" in w for w in report["warnings"])


@pytest.mark.anyio
async def test_a_replay_past_its_time_limit_stops_with_one_error(anyio_backend):
    log = parse_log(own_log({"text": "```repl\nq = llm_query('a')\n```\n",
                             "calls": [{"tool": "llm_query", "latency_s": 3600}]}))
    with anyio.fail_after(60):
        with pytest.raises(ReplayError, match="ran past its time limit of 1 s"):
            await replay(log, time_scale=1.0, time_limit=1.0, tokens_per_s=1000)


def test_a_replay_that_cannot_fit_its_time_limit_is_refused_before_it_starts():
    log = parse_log(own_log({"text": "x" * 40_000, "tokens_per_s": 0.1}))
    with pytest.raises(ReplayError, match="past the time limit of 3600 s"):
        anyio.run(lambda: replay(log))


@pytest.mark.parametrize("kw, match", [
    (dict(latency_per_ktok=-1), "latency_per_ktok must be"),
    (dict(latency_s=float("inf")), "latency_s must be"),
    (dict(tokens_per_s=1e-300), "tokens_per_s must be"),
    (dict(time_scale=float("nan")), "time_scale must be"),
    (dict(harness="crew"), "unknown harness"),
    (dict(executor="docker"), "unknown executor"),
])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ReplayError, match=match):
        anyio.run(lambda: replay(parse_log('{"text": "x"}'), **kw))


# -- the shipped example and the CLI -----------------------------------------------------------


@pytest.mark.anyio
async def test_replay_of_the_example_log_is_identical_across_modes(anyio_backend):
    report = await replay(load_log(EXAMPLE), tokens_per_s=200, latency_s=0.5,
                          time_scale=0.05)
    tot = report["total"]["modes"]
    assert all(m["identical"] for m in tot.values())
    assert tot["spec"]["hits"] > 0 and tot["baseline"]["hits"] == 0
    assert tot["spec"]["executions"] >= tot["baseline"]["executions"] > 0
    assert report["total"]["bound_s"] <= min(m["wall_s"] for m in tot.values())


def test_cli_replay_writes_table_json_and_png(tmp_path, capsys):
    assert cli.main(["replay", str(EXAMPLE), "--time-scale", "0.02", "--rate", "200",
                     "--latency", "0.5", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "spectool replay" in out and "SIMULATED" in out and "self-checks passed" in out
    assert "streaming alone takes" not in captured.err      # a short replay is not announced
    for name in ("replay.json", "table.txt", "timeline.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_cli_replay_says_first_how_long_a_long_replay_takes_at_least(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(replay_mod, "ANNOUNCE_AFTER_S", 0.0)   # every replay counts as long here
    assert cli.main(["replay", str(EXAMPLE), "--time-scale", "0.02", "--rate", "200",
                     "--latency", "0.5", "--modes", "spec"]) == 0   # baseline runs too
    floor = replay_mod.stream_floor(replay_mod.load_log(str(EXAMPLE)), 200) * 0.02 * 2
    assert floor > 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("spectool replay: ") and "in 2 modes" in first
    assert f"streaming alone takes {floor:.1f} s at --time-scale 0.02" in first


def test_cli_replay_inprocess_warns_on_stderr(tmp_path, capsys):
    log = tmp_path / "one.jsonl"
    log.write_text(json.dumps({"text": "```repl\nx = 1\n```\n"}))
    assert cli.main(["replay", str(log), "--time-scale", "0.02", "--executor",
                     "inprocess"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: executor 'inprocess'" in err


@pytest.mark.parametrize("flag, value, complaint", [
    ("--latency", "inf", "must be a finite number"),
    ("--rate", "nan", "must be a finite number"),
    ("--latency-per-ktok", "-2", "must be a finite number >= 0"),
    ("--harness", "crew", "invalid choice"),
    ("--time-limit", "0", "must be > 0"),
])
def test_cli_replay_bad_flags_get_one_line(flag, value, complaint, capsys):
    code, _, err = exit_of(cli.main, ["replay", str(EXAMPLE), flag, value], capsys)
    assert code == 2 and err.count("\n") == 1 and f"argument {flag}: {complaint}" in err


def test_cli_replay_names_a_missing_file(tmp_path, capsys):
    _, _, err = exit_of(cli.main, ["replay", str(tmp_path / "nope.json")], capsys)
    assert "no such log file" in err


def test_cli_replay_a_malformed_log_is_one_line(tmp_path, capsys):
    log = tmp_path / "deep.json"
    log.write_text("[" * 100_000 + "]" * 100_000)
    _, _, err = exit_of(cli.main, ["replay", str(log)], capsys)
    assert err.count("\n") == 1 and "nested too deeply" in err


def test_ctrl_c_prints_one_line_exits_130_and_leaves_no_empty_out_folder(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    log = tmp_path / "slow.jsonl"
    log.write_text(json.dumps({"text": "```repl\nq = llm_query('a')\n```\n",
                               "calls": [{"tool": "llm_query", "latency_s": 600}]}) + "\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "spectool", "replay", str(log), "--out",
                             str(out), "--executor", "inprocess"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60          # the run has begun once --out exists
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip() == "spectool replay: interrupted"
    assert not out.exists()
