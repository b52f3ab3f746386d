"""The local token-tier server launcher and the 2x2 both-tiers table, against a stub
server script that follows the ``token_spec serve`` contract (no model needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest

from spectool_bench.local_server import LocalServerError, LocalTokenServer, free_port
from spectool_bench.two_tier import render_two_tier, spread_overlaps_one

STUB = [sys.executable, str(Path(__file__).with_name("stub_token_server.py"))]


@pytest.mark.anyio
async def test_launcher_waits_for_health_serves_and_terminates(anyio_backend):
    async with LocalTokenServer("suffix", gamma=3, model_name="m1", command=STUB,
                                health_timeout_s=30) as srv:
        proc = srv.process
        assert srv.api_base.startswith("http://127.0.0.1:") and srv.litellm_model == "openai/m1"
        async with httpx.AsyncClient() as client:
            r = await client.post(srv.api_base + "/chat/completions", json={
                "model": "m1", "messages": [{"role": "user", "content": "hello there"}]})
        assert r.json()["choices"][0]["message"]["content"] == "m1/suffix: hello there"
    assert proc.returncode is not None            # terminated at the end of the block
    assert srv.process is None


@pytest.mark.anyio
async def test_a_server_that_exits_gets_one_clear_error(anyio_backend):
    with pytest.raises(LocalServerError, match="exited with status 3"):
        async with LocalTokenServer("none", command=STUB + [], extra_args=["--fail"],
                                    health_timeout_s=30):
            pass


@pytest.mark.anyio
async def test_a_server_never_healthy_times_out_and_is_stopped(anyio_backend):
    srv = LocalTokenServer("none", command=STUB, extra_args=["--load-s", "60"],
                           health_timeout_s=1.0)
    with pytest.raises(LocalServerError, match="not healthy within 1 s"):
        async with srv:
            pass
    assert srv.process is None


def test_bad_launcher_arguments():
    with pytest.raises(ValueError, match="speculative"):
        LocalTokenServer("eagle")
    with pytest.raises(ValueError, match="gamma"):
        LocalTokenServer("ngram", gamma=0)
    assert 0 < free_port() < 65536


def test_spread_flag():
    assert spread_overlaps_one(0.9, 1.2) and not spread_overlaps_one(1.05, 1.3)


def test_two_by_two_table_end_to_end_on_the_stub():
    """The whole 2x2 run through litellm against two stub servers. It runs in its own
    interpreter: litellm keeps process-wide state (cached clients, lazily built pydantic
    schemas) that must not leak into the other tests."""
    import json
    import os
    import subprocess

    code = ("import json, sys\n"
            "from spectool_bench.two_tier import TwoTierConfig, main_two_tier\n"
            f"r = main_two_tier(TwoTierConfig(repeats=2, command={STUB!r}, context_tokens=1024, "
            "shapes=('batched',), health_timeout_s=30, root_time_scale=0.05))\n"
            "print(json.dumps(r))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = {(r["token_spec"], r["tool_spec"]): r for r in report["rows"]}
    assert set(rows) == {("off", False), ("off", True), ("on", False), ("on", True)}
    assert rows[("off", False)]["speedup_median"] == 1.0
    table = render_two_tier(report)
    assert table == report["table"]
    assert "SIMULATED" in table and "token spec" in table and "tool spec" in table
    assert all(r["wall_min_s"] <= r["wall_median_s"] <= r["wall_max_s"] for r in rows.values())


def test_both_servers_get_the_same_engine_flags():
    """The only difference between the 'off' and 'on' servers is --speculative: the
    target and thread count reach both command lines."""
    from spectool_bench import two_tier

    seen: list[list[str]] = []

    class Recording(LocalTokenServer):
        def argv(self) -> list[str]:
            a = super().argv()
            seen.append(a)
            return a

    engine = ["--target", "fp32", "--threads", "2"]
    for method in ("none", "dspark"):
        Recording(method, extra_args=engine, command=["x"]).argv()
    assert all(a[-4:] == engine for a in seen)
    assert [a[a.index("--speculative") + 1] for a in seen] == ["none", "dspark"]
    assert two_tier.TwoTierConfig().target == "bf16-q4"


def test_the_docs_table_of_a_two_tier_file_names_its_command_and_flags_overlaps():
    from spectool_bench.two_tier import render_markdown

    def row(token, tool, med, lo, hi):
        return {"token_spec": token, "tool_spec": tool, "wall_median_s": 10 / med,
                "wall_min_s": 10 / hi, "wall_max_s": 10 / lo, "speedup_median": med,
                "speedup_min": lo, "speedup_max": hi,
                "overlaps_1": (token, tool) != ("off", False) and lo <= 1 <= hi, "score": 0.5}

    report = {"command": "spectool bench oolong --sub-model local --out o", "date": "2026-01-01",
              "machine": "a CPU, 2 cores", "load_average": [0.5, 1.5],
              "root_model": "SIMULATED", "sub_model": "token_spec serve", "target": "bf16-q4",
              "threads": 1, "token_method": "ngram", "gamma": 4, "shapes": ["batched"],
              "context_tokens": 1024, "max_tokens": 24, "repeats": 3,
              "rows": [row("off", False, 1.0, 1.0, 1.0), row("on", False, 1.02, 0.97, 1.05),
                       row("on", True, 1.5, 1.4, 1.6)]}
    md = render_markdown(report)
    assert "| on | off | 9.80 [9.52, 10.31] | 1.02 [0.97, 1.05] (spread overlaps 1.0) | 0.500 |" in md
    assert "| on | on | 6.67 [6.25, 7.14] | 1.50 [1.40, 1.60] | 0.500 |" in md
    assert "`spectool bench oolong --sub-model local --out o`, 2026-01-01" in md
    assert "load average 0.5 at the start and 1.5 at the end" in md


def test_the_docs_two_tier_table_is_the_rendered_data_file():
    import json
    from pathlib import Path

    from spectool_bench.two_tier import render_markdown

    root = Path(__file__).resolve().parents[2]
    data = json.loads((root / "docs" / "results" / "two_tier.json").read_text())
    assert data["command"].startswith("spectool bench oolong --sub-model local")
    docs = (root / "docs" / "benchmarks.md").read_text()
    assert render_markdown(data) in docs
    data["rows"][1]["wall_median_s"] += 1.0       # negative control: an edited figure
    assert render_markdown(data) not in docs
