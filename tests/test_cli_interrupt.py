"""Ctrl-C in every command line: one line on stderr, exit status 130, no empty ``--out``.

Each CLI runs as a real subprocess on a command that works long enough; SIGINT is sent
once the work has visibly begun (the ``--out`` folder exists, or the command has
connected to the test's endpoint). A negative control shows the same assertions catch
a command that lets the ``KeyboardInterrupt`` escape as a traceback.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spectool import cli as spectool_cli

START_DEADLINE_S = 120   # bounded wait for the command to begin its work


def start(argv: list[str], cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_until(condition, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while not condition() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not condition():
        proc.kill()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the command never began its work (rc {proc.returncode}): {out}\n{err}")


def interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


def assert_interrupted_cleanly(rc: int, err: str, label: str, out: Path) -> None:
    assert rc == 130, err
    assert err.splitlines() == [f"{label}: interrupted"], err
    assert not out.exists() or any(out.iterdir()), "an empty --out folder was left behind"


def test_spectool_bench_oolong_ctrl_c(tmp_path):
    out = tmp_path / "oolong"
    proc = start(["-m", "spectool", "bench", "oolong", "--out", str(out), "--no-progress", "--no-plots",
                  "--time-scale", "1"])
    wait_until(out.exists, proc)
    rc, err = interrupt(proc)
    assert_interrupted_cleanly(rc, err, "spectool bench", out)
    assert not out.exists()


def silent_endpoint() -> socket.socket:
    """A listening socket that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def test_token_spec_audit_ctrl_c_while_waiting_for_an_endpoint(tmp_path):
    out = tmp_path / "audit"
    with silent_endpoint() as server:
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        proc = start(["-m", "token_spec", "audit", url, url, "--out", str(out)])
        server.settimeout(START_DEADLINE_S)
        try:
            conn, _ = server.accept()       # the audit has asked its first question
        except TimeoutError:
            proc.kill()
            pytest.fail(f"the audit never connected: {proc.communicate(timeout=30)}")
        with conn:
            rc, err = interrupt(proc)
    assert_interrupted_cleanly(rc, err, "token_spec audit", out)
    assert not out.exists()


def test_token_spec_loadtest_ctrl_c_while_its_server_starts(tmp_path):
    pytest.importorskip("uvicorn")
    out = tmp_path / "loadtest"
    proc = start(["-m", "token_spec", "loadtest", "--out", str(out), "--methods", "none", "--clients", "1"])
    wait_until(out.exists, proc)      # --out is made just before the servers start
    rc, err = interrupt(proc)
    assert_interrupted_cleanly(rc, err, "token_spec loadtest", out)
    assert not out.exists()


def test_an_out_folder_that_existed_before_is_kept(tmp_path):
    out = tmp_path / "audit"
    out.mkdir()
    with silent_endpoint() as server:
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        proc = start(["-m", "token_spec", "audit", url, url, "--out", str(out)])
        server.settimeout(START_DEADLINE_S)
        conn, _ = server.accept()
        with conn:
            rc, err = interrupt(proc)
    assert rc == 130 and err.splitlines() == ["token_spec audit: interrupted"], err
    assert out.is_dir()   # not this run's folder: kept, even empty


SLEEPER = """
import sys, time
from pathlib import Path
Path(sys.argv[1]).mkdir()
while True:
    time.sleep(0.05)
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_inside_an_anyio_task_group_is_one_line(backend, tmp_path):
    pytest.importorskip(backend)
    script = tmp_path / "async_cli.py"
    script.write_text(
        "import sys, anyio\nfrom pathlib import Path\nfrom spectool.cli import run_interruptible\n"
        "async def work():\n"
        "    async with anyio.create_task_group() as tg:\n"
        "        tg.start_soon(anyio.sleep, 3600)\n"
        "        Path(sys.argv[1]).mkdir()\n"
        "        await anyio.sleep(3600)\n"
        f"sys.exit(run_interruptible('async', None, lambda: anyio.run(work, backend={backend!r}) or 0))\n")
    out = tmp_path / "started"
    proc = start([str(script), str(out)])
    wait_until(out.exists, proc)
    rc, err = interrupt(proc)
    assert rc == 130, err
    assert err.splitlines() == ["async: interrupted"], err


def unhandled_interrupt_mark() -> ctypes.c_int:
    """CPython's process-wide mark that makes the process end by SIGINT at exit (exported
    by CPython 3.11; later versions keep it in the runtime state, out of reach here)."""
    try:
        return ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
    except (ValueError, AttributeError):
        pytest.skip("this Python does not export _Py_UnhandledKeyboardInterrupt")


def test_a_ctrl_c_that_lands_inside_exec_of_source_still_exits_130(capsys):
    # Ctrl-C during an import often lands inside dataclasses' exec of generated source.
    mark = unhandled_interrupt_mark()

    def run() -> int:
        exec("raise KeyboardInterrupt")
        return 0

    try:
        assert spectool_cli.run_interruptible("x", None, run) == 130
        assert mark.value == 0
    finally:
        mark.value = 0
    assert capsys.readouterr().err == "x: interrupted\n"


def test_negative_control_a_caught_interrupt_inside_exec_of_source_leaves_the_mark():
    mark = unhandled_interrupt_mark()
    try:
        try:
            exec("raise KeyboardInterrupt")
        except KeyboardInterrupt:
            pass
        assert mark.value == 1     # the process would end by SIGINT, not with its status
    finally:
        mark.value = 0


def test_negative_control_an_escaping_keyboard_interrupt_fails_the_checks(tmp_path):
    script = tmp_path / "bare_cli.py"
    script.write_text(SLEEPER)
    out = tmp_path / "out"
    proc = start([str(script), str(out)])
    wait_until(out.exists, proc)
    rc, err = interrupt(proc)
    assert "Traceback" in err and "KeyboardInterrupt" in err
    with pytest.raises(AssertionError):
        assert_interrupted_cleanly(rc, err, "bare", out)


def test_negative_control_an_empty_out_folder_left_behind_fails_the_checks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(AssertionError):
        assert_interrupted_cleanly(130, "x: interrupted\n", "x", out)


COMMANDS = {  # command line -> where its work starts (patched to raise Ctrl-C)
    ("spectool", "replay"): "spectool.replay.main",
    ("spectool", "bench", "oolong"): "spectool_bench.runner.main_bench",
    ("token_spec", "bench"): "token_spec.bench.main_bench",
    ("token_spec", "race"): "token_spec.race.main_race",
    ("token_spec", "serve"): "token_spec.serve.cli._config",
    ("token_spec", "audit"): "token_spec.audit.run_audit",
    ("token_spec", "loadtest"): "token_spec.serve.loadtest.run_loadtest",
}


def _argv(command: tuple[str, ...], tmp_path: Path) -> list[str]:
    out = str(tmp_path / "out")
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"text": "```repl\nx = 1\n```\n"}) + "\n")
    rest = {
        ("spectool", "replay"): [str(log), "--out", out],
        ("spectool", "bench", "oolong"): ["--out", out],
        ("token_spec", "bench"): ["--out", out],
        ("token_spec", "race"): ["hi", "--out", out],
        ("token_spec", "serve"): ["--port", "0"],
        ("token_spec", "audit"): ["http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--out", out],
        ("token_spec", "loadtest"): ["--out", out],
    }[command]
    return [*command[1:], *rest]


@pytest.mark.parametrize("command", list(COMMANDS), ids=" ".join)
def test_every_command_turns_ctrl_c_into_one_line_and_status_130(command, monkeypatch, capsys, tmp_path):
    if command[0] == "token_spec":
        main = pytest.importorskip("token_spec.cli").main
    else:
        main = spectool_cli.main
    module, _, name = COMMANDS[command].rpartition(".")
    target = pytest.importorskip(module)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, name, interrupted)
    assert main(_argv(command, tmp_path)) == 130
    label = " ".join(command[:2])
    assert capsys.readouterr().err.splitlines() == [f"{label}: interrupted"]
    assert not (tmp_path / "out").exists()
