"""The in-process shadow (``shadow="thread"``) stays a tested option: the runtime-level
lookahead, peek-ahead and observation tests, which now run on the default process
shadow, run here again with ``SPECTOOL_SHADOW=thread`` (their own modules unchanged)."""

from __future__ import annotations

import inspect

import pytest

import test_lookahead
import test_observations
import test_peek_ahead


def _runtime_tests() -> list:
    """(test, kwargs) for every async runtime-level test of those modules; a
    ``parametrize`` over one other argument is expanded."""
    found = []
    for module in (test_lookahead, test_observations, test_peek_ahead):
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and inspect.iscoroutinefunction(fn)
                    and "Runtime(" in inspect.getsource(fn)):
                continue
            params = [p for p in inspect.signature(fn).parameters if p != "anyio_backend"]
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"
                     and m.args[0] != "anyio_backend"]
            if not params and not marks:
                found.append(pytest.param(fn, {}, id=f"{module.__name__}.{name}"))
            elif len(params) == 1 and len(marks) == 1 and marks[0].args[0] == params[0]:
                for value in marks[0].args[1]:
                    found.append(pytest.param(fn, {params[0]: value},
                                              id=f"{module.__name__}.{name}[{value}]"))
    return found


TESTS = _runtime_tests()


def test_parity_suite_is_not_empty():
    assert len(TESTS) >= 5


@pytest.mark.anyio
@pytest.mark.parametrize("test,kwargs", TESTS)
async def test_with_the_thread_shadow(anyio_backend, test, kwargs, monkeypatch):
    import spectool.shadow_host.process_driver as process_driver

    def refuse(*args, **kw):
        raise AssertionError("the process shadow ran in a thread-shadow parity test")

    monkeypatch.setenv("SPECTOOL_SHADOW", "thread")
    monkeypatch.setattr(process_driver.ProcessShadowDriver, "__init__", refuse)
    await test(anyio_backend, **kwargs)
