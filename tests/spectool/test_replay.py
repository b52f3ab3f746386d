"""spectool replay: log formats, errors, and a replay whose modes agree."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from spectool import cli
from spectool.replay import ReplayError, ReplayTurn, _Latencies, parse_log, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rlm_agent_log.json"


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
    jsonl = "\n".join(json.dumps(m) for m in msgs)
    assert [t.text for t in parse_log(jsonl).turns] == [t.text for t in log.turns]


def test_own_jsonl_format_carries_context_latencies_and_rate():
    raw = "\n".join([json.dumps({"context": "abc"}),
                     json.dumps({"text": "```repl\nq = llm_query('a')\n```", "tokens_per_s": 80,
                                 "calls": [{"tool": "llm_query", "latency_s": 1.5}]})])
    log = parse_log(raw)
    assert log.format == "spectool" and log.context == "abc"
    assert log.turns[0].latencies == {"llm_query": [1.5]} and log.turns[0].tokens_per_s == 80


@pytest.mark.parametrize("raw, match", [
    ("", "empty"), ("{not json\n", "line 1: not JSON"),
    (json.dumps([{"role": "user", "content": "x"}]), "no assistant"),
    (json.dumps({"text": "x", "calls": [{"tool": "t"}]}), "latency_s"),
    (json.dumps({"text": "x", "calls": [{"tool": "t", "latency_s": -1}]}), ">= 0"),
    (json.dumps([1, 2]), "expected a JSON array"),
])
def test_bad_logs_get_one_clear_error(raw, match):
    with pytest.raises(ReplayError, match=match):
        parse_log(raw)


def test_latency_is_fixed_by_the_baseline_order_and_shared_by_modes():
    lat = _Latencies(ReplayTurn("", {"llm_query": [1.0, 2.0]}), default=9.0)
    assert lat.take("llm_query", "'a'") == 1.0 and lat.take("llm_query", "'b'") == 2.0
    assert lat.take("llm_query", "'c'") == 9.0
    lat.new_mode()                                  # another mode, another order
    assert lat.take("llm_query", "'b'") == 2.0 and lat.take("llm_query", "'a'") == 1.0
    assert lat.take("llm_query", "'z'") == 9.0      # a call the baseline never made
    sized = _Latencies(ReplayTurn(""), default=1.0, per_ktok=2.0)
    assert sized.take("llm_query", "x" * 4000) == pytest.approx(3.0)   # 1000 tokens


def test_negative_latency_model_is_refused():
    with pytest.raises(ReplayError, match="latency_per_ktok >= 0"):
        anyio.run(lambda: replay(parse_log('{"text": "x"}'), latency_per_ktok=-1))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_replay_of_the_example_log_is_identical_across_modes(anyio_backend):
    from spectool.replay import load_log
    report = await replay(load_log(EXAMPLE), tokens_per_s=200, latency_s=0.5,
                          time_scale=0.05)
    tot = report["total"]["modes"]
    assert all(m["identical"] for m in tot.values())
    assert tot["spec"]["hits"] > 0 and tot["baseline"]["hits"] == 0
    assert tot["spec"]["executions"] >= tot["baseline"]["executions"] > 0
    assert report["total"]["bound_s"] <= min(m["wall_s"] for m in tot.values()) * 1.05


def test_cli_replay_writes_table_json_and_png(tmp_path, capsys):
    assert cli.main(["replay", str(EXAMPLE), "--time-scale", "0.02", "--rate", "200",
                     "--latency", "0.5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "spectool replay" in out and "SIMULATED" in out
    for name in ("replay.json", "table.txt", "timeline.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_cli_replay_names_a_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["replay", str(tmp_path / "nope.json")])
    assert "no such log file" in capsys.readouterr().err
