"""Both CLIs: --version, help on every flag, bad flags and --out rejected in one line
before any work or model load; the core never imports the benchmarks."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import exit_of, one_line_error
from spectool import cli as spectool_cli

ROOT = Path(__file__).resolve().parents[1]


def token_cli():
    return pytest.importorskip("token_spec.cli")


@pytest.mark.parametrize("which", ["spectool", "token_spec"])
def test_version_flag(which, capsys):
    main = spectool_cli.main if which == "spectool" else token_cli().main
    code, out, _ = exit_of(main, ["--version"], capsys)
    assert code == 0
    assert out.strip() == f"{which} {spectool_cli.version()}"


def flags_without_help(parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [f"{name} {m}" for m in flags_without_help(sub)]
        elif action.option_strings and not action.help:
            missing.append("/".join(action.option_strings))
    return missing


def test_every_flag_has_help_text():
    assert flags_without_help(spectool_cli.build_parser()) == []
    assert flags_without_help(token_cli().build_parser()) == []


def test_negative_control_a_flag_without_help_is_found():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quiet-flag")
    assert flags_without_help(parser) == ["--quiet-flag"]


def test_spectool_bench_out_is_checked_before_any_work(monkeypatch, capsys, tmp_path):
    import spectool_bench.runner as runner

    monkeypatch.setattr(runner, "main_bench", lambda cfg: pytest.fail("the benchmark ran"))
    err = one_line_error(spectool_cli.main, ["bench", "oolong", "--out", "/etc/passwd"], capsys)
    assert "/etc/passwd" in err and "not a folder" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    err = one_line_error(spectool_cli.main, ["bench", "oolong", "--out", str(blocker / "sub")],
                         capsys)
    assert "not writable" in err


@pytest.mark.parametrize("argv, words", [
    (["--repeats", "0"], "--repeats: must be >= 1"),
    (["--gamma", "0"], "--gamma: must be >= 1"),
    (["--drafters", "draft:0"], "gamma after ':' must be an integer >= 1"),
    (["--drafters", "ngram,bogus"], "unknown drafter 'bogus'"),
    (["--domains", "nope"], "unknown ['nope']"),
    (["--max-tokens", "-3"], "--max-tokens: must be >= 1"),
    (["--temperature", "-1"], "--temperature: must be >= 0"),
    (["--draft-confidence", "2"], "--draft-confidence: must be within 0..1"),
])
def test_token_spec_bad_flags_fail_before_the_model_loads(argv, words, monkeypatch, capsys,
                                                           tmp_path):
    cli = token_cli()
    monkeypatch.setattr(cli, "run_bench", lambda args: pytest.fail("the benchmark ran"))
    err = one_line_error(cli.main, ["bench", "--out", str(tmp_path), *argv], capsys)
    assert words in err


def test_token_spec_out_is_checked_before_the_model_loads(monkeypatch, capsys):
    cli = token_cli()
    monkeypatch.setattr(cli, "run_bench", lambda args: pytest.fail("the benchmark ran"))
    err = one_line_error(cli.main, ["bench", "--out", "/etc/passwd"], capsys)
    assert "/etc/passwd" in err


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_never_imports_the_benchmarks():
    offenders = [str(p.relative_to(ROOT)) for folder in ("spectool", "token_spec", "agents")
                 for p in (ROOT / folder).rglob("*.py") if "spectool_bench" in imports_of(p)]
    assert offenders == []


def test_negative_control_a_benchmark_import_is_found(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from spectool_bench.runner import main_bench\n")
    assert "spectool_bench" in imports_of(module)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (sub)command of a parser, as the words that name it, with its parser."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def every_command() -> list[tuple[str, ...]]:
    found = [("spectool", *words) for words, _ in commands(spectool_cli.build_parser())]
    try:
        from token_spec.cli import build_parser
    except ImportError:   # the core install: no token tier
        return found
    return found + [("token_spec", *words) for words, _ in commands(build_parser())]


def test_every_command_is_found():
    found = every_command()
    for expected in [("spectool",), ("spectool", "replay"), ("spectool", "bench", "oolong")]:
        assert expected in found
    if "token_spec" in {c[0] for c in found}:
        for name in ("bench", "race", "serve", "audit", "loadtest"):
            assert ("token_spec", name) in found


@pytest.mark.parametrize("command", every_command(), ids=" ".join)
def test_help_of_every_command_never_imports_torch(command):
    cli = "spectool.cli" if command[0] == "spectool" else "token_spec.cli"
    argv = [*command[1:], "--help"]
    code = ("import sys, contextlib, io\n"
            f"from {cli} import main\n"
            "text = io.StringIO()\n"
            "with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):\n"
            f"    main({argv!r})\n"
            "assert text.getvalue().startswith('usage: ' + " + repr(" ".join(command)) + "), text.getvalue()")
    assert "torch" not in _modules_after(code)


@pytest.mark.parametrize("command", every_command(), ids=" ".join)
def test_every_command_describes_itself_for_users(command):
    if command[0] == "spectool":
        parser = spectool_cli.build_parser()
    else:
        parser = token_cli().build_parser()
    found = dict(commands(parser))[command[1:]]
    assert found.description and len(found.description) > 30, " ".join(command)


def test_negative_control_a_torch_import_is_seen_by_the_help_check():
    assert "torch" in _modules_after("import token_spec\ntoken_spec.SamplingParams")
