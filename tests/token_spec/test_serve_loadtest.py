"""The load test's pure parts: Prometheus parsing, counter sums, medians over repeats."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from token_spec.serve.loadtest import _medians, counter, format_table, parse_metrics  # noqa: E402

TEXT = """# HELP vllm:spec_decode_num_drafts_total drafts
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{model_name="m"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 2.0
vllm:spec_decode_num_drafts{model_name="other"} 1.0
"""


def test_counters_are_summed_over_labels_with_or_without_the_total_suffix():
    m = parse_metrics(TEXT)
    assert counter(m, "vllm:spec_decode_num_drafts") == 5.0
    assert counter(m, "vllm:spec_decode_num_accepted_tokens_per_pos") == 5.0
    assert counter(m, "vllm:missing") == 0.0


def test_medians_over_repeats_one_row_per_method_and_level():
    runs = [{"method": "none", "clients": 1, "tokens_per_s": v, "requests_per_s": 1.0, "latency_mean_s": 1.0,
             "latency_p50_s": 1.0, "latency_p90_s": 1.0, "ttft_mean_s": None, "mean_acceptance_length": None,
             "drafts": 0} for v in (10.0, 30.0, 20.0)]
    rows = _medians(runs)
    assert len(rows) == 1 and rows[0]["tokens_per_s"] == 20.0 and rows[0]["repeats"] == 3
    assert "none" in format_table({"rows": rows})


def _run(method: str, repeat: int, tps: float) -> dict:
    return {"method": method, "clients": 4, "repeat": repeat, "tokens_per_s": tps, "requests_per_s": 1.0,
            "latency_mean_s": 1.0, "latency_p50_s": 1.0, "latency_p90_s": 1.0, "ttft_mean_s": None,
            "mean_acceptance_length": None, "drafts": 0}


def test_speculation_is_compared_with_none_repeat_by_repeat():
    # none: 10, 40, 20; ngram: 11, 36, 24 -> paired ratios 1.1, 0.9, 1.2 (the medians' ratio
    # would be 24/20 = 1.2, hiding that one repeat was slower)
    runs = [_run("none", k, v) for k, v in enumerate((10.0, 40.0, 20.0))]
    runs += [_run("ngram", k, v) for k, v in enumerate((11.0, 36.0, 24.0))]
    row = next(r for r in _medians(runs) if r["method"] == "ngram")
    assert row["vs_none"] == pytest.approx(1.1)
    assert (row["vs_none_min"], row["vs_none_max"]) == (pytest.approx(0.9), pytest.approx(1.2))
    table = format_table({"rows": _medians(runs)})
    assert "1.10 (0.90..1.20)" in table


def test_no_ratio_without_a_none_server_in_the_same_repeat():
    runs = [_run("none", 0, 10.0), _run("ngram", 1, 12.0)]
    assert "vs_none" not in next(r for r in _medians(runs) if r["method"] == "ngram")


def _args(**kw):
    import argparse

    base = dict(gamma=4, max_rows=16, target="auto", gate="auto", threads=1)
    base.update(kw)
    return argparse.Namespace(**base)


def test_our_servers_and_the_peer_are_started_on_the_same_thread_count():
    from token_spec.serve.loadtest import server_command

    ours = server_command("ngram", _args(threads=2), 8123)
    assert ours[1:4] == ["-m", "token_spec", "serve"] and ours[ours.index("--threads") + 1] == "2"
    try:
        peer = server_command("llamacpp+lookup", _args(threads=2), 8124)
    except Exception as exc:  # noqa: BLE001 - the GGUF wheel is absent
        pytest.skip(f"target GGUF unavailable: {exc}")
    assert peer[1:3] == ["-m", "llama_cpp.server"] and peer[peer.index("--n_threads") + 1] == "2"
    assert peer[peer.index("--model") + 1].endswith(".gguf") and "prompt-lookup-decoding" in peer
    assert peer[peer.index("--interrupt_requests") + 1] == "False"  # concurrent clients wait, never cut each other


@pytest.mark.model
def test_loadtest_drives_llama_cpp_server_on_the_same_gguf(tmp_path):
    """The peer end to end (one client, one short request). Skips only where llama-cpp-python
    is not importable."""
    pytest.importorskip("llama_cpp")
    from token_spec.serve.loadtest import run_loadtest

    args = _args(clients="1", requests=1, max_tokens=4, repeats=1, methods="llamacpp", out=str(tmp_path))
    result = run_loadtest(args)
    (row,) = result["rows"]
    assert row["method"] == "llamacpp" and row["tokens_per_s"] > 0 and row["mean_acceptance_length"] is None


def test_the_control_is_a_second_none_server_paired_like_any_method():
    from token_spec.serve.loadtest import CONTROL, _methods, server_command

    assert _methods(_args(methods="none,ngram", control=True)) == ["none", "ngram", CONTROL]
    assert _methods(_args(methods="none,ngram", control=False)) == ["none", "ngram"]  # control: not asked
    cmd = server_command(CONTROL, _args(), 8125)
    assert cmd == server_command("none", _args(), 8125)  # the very server none runs
    runs = [_run("none", k, v) for k, v in enumerate((10.0, 20.0, 30.0))]
    runs += [_run(CONTROL, k, v) for k, v in enumerate((10.5, 19.0, 30.0))]
    row = next(r for r in _medians(runs) if r["method"] == CONTROL)
    assert row["vs_none"] == pytest.approx(1.0) and row["vs_none_min"] == pytest.approx(0.95)


def test_a_control_without_none_is_refused_before_any_server_starts(tmp_path, capsys):
    import argparse

    from token_spec.serve.loadtest import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["loadtest", "--out", str(tmp_path / "o"), "--methods", "ngram", "--control"])
    with pytest.raises(SystemExit) as exc:
        args.func(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--control needs none in --methods" in err
    assert not (tmp_path / "o").exists()  # refused before the output folder is made
