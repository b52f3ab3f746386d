"""Every command's flags are checked by the shared validators (``spectool.arg_types``)
before torch is imported or a model loads: a bad value costs one line naming the flag
and exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

MISSING = "/nonexistent/spectool-test-path"
URL = "http://127.0.0.1:9/v1"

# each command line, with bad values for its flags (the error line must name the flag)
BAD_VALUES = {
    ("spectool", "replay", MISSING): [
        ("--rate", "0"), ("--latency", "-1"), ("--latency-per-ktok", "-2"),
        ("--time-scale", "nan"), ("--time-limit", "0"), ("--context", MISSING),
        ("--modes", "bogus"), ("--harness", "bogus"),
    ],
    ("spectool", "bench", "oolong"): [
        ("--concurrency", "0"), ("--repeats", "-1"), ("--seed", "-1"),
        ("--context-tokens", "100"), ("--accuracy", "1.5"), ("--data", MISSING),
        ("--time-scale", "0"), ("--max-turns", "0"), ("--gamma", "0"),
        ("--max-questions", "0"), ("--api-base", "localhost:8000"),
    ],
    ("token_spec", "bench", "--out", "{tmp}"): [
        ("--max-tokens", "0"), ("--repeats", "-3"), ("--prompts", "-1"), ("--gamma", "0"),
        ("--draft-confidence", "1.5"), ("--temperature", "-0.5"), ("--seed", "-1"),
        ("--threads", "x"), ("--targets", "bogus"),
    ],
    ("token_spec", "race", "hi", "--out", "{tmp}"): [
        ("--max-tokens", "0"), ("--threads", "-1"), ("--drafters", "bogus"),
    ],
    ("token_spec", "serve"): [
        ("--port", "70000"), ("--port", "-1"), ("--gamma", "0"), ("--max-seqs", "0"),
        ("--max-rows", "17"), ("--threads", "0"), ("--relaxed-threshold", "0"),
        ("--relaxed-threshold", "1.5"), ("--default-max-tokens", "0"),
    ],
    ("token_spec", "audit", URL, URL): [
        ("--max-tokens", "0"), ("--prompts", "-1"), ("--timeout", "0"),
        ("--prompt-file", MISSING), ("--domains", "bogus"),
    ],
    ("token_spec", "loadtest", "--out", "{tmp}"): [
        ("--clients", "0"), ("--requests", "0"), ("--max-tokens", "-1"), ("--repeats", "0"),
        ("--gamma", "0"), ("--threads", "0"), ("--methods", "bogus"),
    ],
}
# (command line, bad flag, bad value)
BAD = [(list(command), flag, value)
       for command, values in BAD_VALUES.items() for flag, value in values]

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
