"""Every bad flag of ``token_spec serve`` / ``loadtest`` / ``audit`` costs one line that
names it, and exit status 2, before any model loads or any server starts.

The model loader and the server builder are replaced by functions that fail the test,
so a check that let a bad value through would show up as that failure, not as a hang.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytest.importorskip("starlette")

from cli_helpers import flag_cases, one_line_error  # noqa: E402
from token_spec.cli import main  # noqa: E402


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded or a server built despite a bad flag")

    monkeypatch.setattr("token_spec.serve.server.build", refuse)
    monkeypatch.setattr("token_spec.target.load_target", refuse)


def _one_line_error(capsys, argv: list[str]) -> str:
    return one_line_error(main, argv, capsys, out="")


@pytest.mark.parametrize("argv, named", flag_cases({
    "--port": ("99999", "-1", "http"),
    "--gamma": ("0", "16"),
    "--threads": ("-2", "0"),
    "--max-rows": ("0", "17"),
    "--max-seqs": ("0",),
    "--default-max-tokens": ("0",),
    "--relaxed-threshold": ("0", "1.5"),
    "--target": ("fp16",),
    "--gate": ("maybe",),
}) + [pytest.param(["--speculative", "none", "--acceptance", "relaxed"], "--acceptance",
                   id="--acceptance relaxed without speculation")])
def test_bad_serve_flag_is_one_line_naming_it(capsys, argv, named):
    line = _one_line_error(capsys, ["serve", *argv])
    assert line.startswith("token_spec serve: error:") and named in line


def test_a_port_in_use_is_reported_before_the_model_loads(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        line = _one_line_error(capsys, ["serve", "--port", str(port)])
    assert "--port" in line and str(port) in line


def test_a_host_that_cannot_be_bound_is_reported(capsys):
    line = _one_line_error(capsys, ["serve", "--host", "no-such-host.invalid", "--port", "0"])
    assert "--host" in line and "no-such-host.invalid" in line


@pytest.mark.parametrize("argv, named", flag_cases({
    "--clients": ("0", "1,x"),
    "--requests": ("0",),
    "--max-tokens": ("0",),
    "--repeats": ("0",),
    "--methods": ("none,foo",),
    "--gamma": ("0",),
    "--threads": ("-2",),
    "--target": ("fp16",),
}))
def test_bad_loadtest_flag_is_one_line_naming_it(capsys, tmp_path, argv, named):
    line = _one_line_error(capsys, ["loadtest", "--out", str(tmp_path), *argv])
    assert line.startswith("token_spec loadtest: error:") and named in line


def test_loadtest_out_that_is_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    line = _one_line_error(capsys, ["loadtest", "--out", str(tmp_path / "f")])
    assert "--out" in line


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there


@pytest.mark.parametrize("url", ["not-a-url", "ftp://127.0.0.1/v1", "http://", "http://127.0.0.1:99999/v1",
                                 "http://127.0.0.1:port/v1"])
def test_audit_malformed_url_is_one_line_naming_it(capsys, tmp_path, url):
    line = _one_line_error(capsys, ["audit", url, "http://127.0.0.1:8000/v1", "--out", str(tmp_path)])
    assert url in line


@pytest.mark.parametrize("side", ["a", "b"])
def test_audit_unreachable_url_is_one_line_naming_it(capsys, tmp_path, side):
    from token_spec.serve.server import running
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    with running(Starlette(routes=[Route("/v1/models", models)])) as live:
        urls = [dead, live + "/v1"] if side == "a" else [live + "/v1", dead]
        line = _one_line_error(capsys, ["audit", *urls, "--out", str(tmp_path)])
    assert dead in line and "cannot reach" in line


@pytest.mark.parametrize("argv, named", flag_cases({
    "--max-tokens": ("0",),
    "--prompts": ("-1",),
    "--timeout": ("0",),
    "--domains": ("cooking",),
}))
def test_bad_audit_flag_is_one_line_naming_it(capsys, tmp_path, argv, named):
    line = _one_line_error(capsys, ["audit", "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1",
                                    "--out", str(tmp_path), *argv])
    assert named in line


def test_the_real_command_prints_one_line_for_an_unreachable_url(tmp_path):
    """The installed entry point, end to end: no traceback reaches the user."""
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    proc = subprocess.run([sys.executable, "-m", "token_spec", "audit", dead, dead, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1 and dead in proc.stderr


def test_the_real_command_prints_one_line_for_a_bad_port():
    proc = subprocess.run([sys.executable, "-m", "token_spec", "serve", "--port", "99999"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--port" in proc.stderr


def test_the_gamma_limit_is_the_exact_verify_width():
    from token_spec.fast_forward import PAD_WIDTH
    from token_spec.serve.cli import MAX_GAMMA

    assert MAX_GAMMA == PAD_WIDTH - 1
