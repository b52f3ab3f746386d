"""Every command's flags are checked by the shared validators (``spectool.arg_types``)
before torch is imported or a model loads: a bad value costs one line naming the flag
and exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

MISSING = "/nonexistent/spectool-test-path"
URL = "http://127.0.0.1:9/v1"

# (command line, bad flag and value, the flag the error line must name)
BAD = [
    (["spectool", "replay", MISSING], "--rate", "0"),
    (["spectool", "replay", MISSING], "--latency", "-1"),
    (["spectool", "replay", MISSING], "--latency-per-ktok", "-2"),
    (["spectool", "replay", MISSING], "--time-scale", "nan"),
    (["spectool", "replay", MISSING], "--time-limit", "0"),
    (["spectool", "replay", MISSING], "--context", MISSING),
    (["spectool", "replay", MISSING], "--modes", "bogus"),
    (["spectool", "replay", MISSING], "--harness", "bogus"),
    (["spectool", "bench", "oolong"], "--concurrency", "0"),
    (["spectool", "bench", "oolong"], "--repeats", "-1"),
    (["spectool", "bench", "oolong"], "--seed", "-1"),
    (["spectool", "bench", "oolong"], "--context-tokens", "100"),
    (["spectool", "bench", "oolong"], "--accuracy", "1.5"),
    (["spectool", "bench", "oolong"], "--data", MISSING),
    (["spectool", "bench", "oolong"], "--time-scale", "0"),
    (["spectool", "bench", "oolong"], "--max-turns", "0"),
    (["spectool", "bench", "oolong"], "--gamma", "0"),
    (["spectool", "bench", "oolong"], "--max-questions", "0"),
    (["spectool", "bench", "oolong"], "--api-base", "localhost:8000"),
    (["token_spec", "bench", "--out", "{tmp}"], "--max-tokens", "0"),
    (["token_spec", "bench", "--out", "{tmp}"], "--repeats", "-3"),
    (["token_spec", "bench", "--out", "{tmp}"], "--prompts", "-1"),
    (["token_spec", "bench", "--out", "{tmp}"], "--gamma", "0"),
    (["token_spec", "bench", "--out", "{tmp}"], "--draft-confidence", "1.5"),
    (["token_spec", "bench", "--out", "{tmp}"], "--temperature", "-0.5"),
    (["token_spec", "bench", "--out", "{tmp}"], "--seed", "-1"),
    (["token_spec", "bench", "--out", "{tmp}"], "--threads", "x"),
    (["token_spec", "bench", "--out", "{tmp}"], "--targets", "bogus"),
    (["token_spec", "race", "hi", "--out", "{tmp}"], "--max-tokens", "0"),
    (["token_spec", "race", "hi", "--out", "{tmp}"], "--threads", "-1"),
    (["token_spec", "race", "hi", "--out", "{tmp}"], "--drafters", "bogus"),
    (["token_spec", "serve"], "--port", "70000"),
    (["token_spec", "serve"], "--port", "-1"),
    (["token_spec", "serve"], "--gamma", "0"),
    (["token_spec", "serve"], "--max-seqs", "0"),
    (["token_spec", "serve"], "--max-rows", "17"),
    (["token_spec", "serve"], "--threads", "0"),
    (["token_spec", "serve"], "--relaxed-threshold", "0"),
    (["token_spec", "serve"], "--relaxed-threshold", "1.5"),
    (["token_spec", "serve"], "--default-max-tokens", "0"),
    (["token_spec", "audit", URL, URL], "--max-tokens", "0"),
    (["token_spec", "audit", URL, URL], "--prompts", "-1"),
    (["token_spec", "audit", URL, URL], "--timeout", "0"),
    (["token_spec", "audit", URL, URL], "--prompt-file", MISSING),
    (["token_spec", "audit", URL, URL], "--domains", "bogus"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--clients", "0"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--requests", "0"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--max-tokens", "-1"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--repeats", "0"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--gamma", "0"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--threads", "0"),
    (["token_spec", "loadtest", "--out", "{tmp}"], "--methods", "bogus"),
]

RUN = """
import sys
from {cli} import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print(code, "torch" in sys.modules)
"""


def run_cli(argv: list[str]) -> tuple[int, bool, list[str]]:
    """Run a CLI in a fresh interpreter: exit status, whether torch was imported, stderr lines."""
    cli = "spectool.cli" if argv[0] == "spectool" else "token_spec.cli"
    proc = subprocess.run([sys.executable, "-c", RUN.format(cli=cli, argv=argv[1:])],
                          capture_output=True, text=True, timeout=120)
    code, torch_imported = proc.stdout.split()
    return int(code), torch_imported == "True", proc.stderr.splitlines()


@pytest.mark.parametrize("command, flag, value", BAD,
                         ids=[f"{' '.join(c[:2])} {f} {v}" for c, f, v in BAD])
def test_a_bad_flag_is_one_line_naming_it_before_torch_loads(command, flag, value, tmp_path):
    if command[0] == "token_spec":
        pytest.importorskip("token_spec")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command] + [flag, value]
    code, torch_imported, err = run_cli(argv)
    assert code == 2
    assert len(err) == 1 and f"argument {flag}" in err[0], err
    assert not torch_imported


def test_negative_control_a_command_that_imports_torch_is_caught(tmp_path):
    pytest.importorskip("torch")
    module = tmp_path / "torchy_cli.py"
    module.write_text("def main(argv):\n    import torch\n    raise SystemExit(2)\n")
    proc = subprocess.run([sys.executable, "-c", RUN.format(cli="torchy_cli", argv=[])],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    code, torch_imported = proc.stdout.split()
    assert code == "2" and torch_imported == "True"
