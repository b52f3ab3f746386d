"""The shadow's view of the REPL variables is taken without running user code."""

from __future__ import annotations

import pytest

import spectool
from rt_helpers import chunks, fenced

pytestmark = pytest.mark.anyio


class Tracked:
    """A user object whose copy hooks have an effect the baseline never has."""

    copies = 0

    def __deepcopy__(self, memo):
        Tracked.copies += 1
        return Tracked()

    def __reduce_ex__(self, protocol):
        Tracked.copies += 1
        return (Tracked, ())


async def test_spec_turn_never_calls_user_copy_hooks(anyio_backend):
    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        return x + 1

    Tracked.copies = 0
    runtime = spectool.Runtime(tools=[q], mode="spec", namespace={"obj": Tracked()})
    result = await runtime.run(chunks(fenced("a = q(1)\nb = obj\nprint(a)\n")))
    assert result.error is None
    assert result.stdout == "2\n"
    assert Tracked.copies == 0
    assert isinstance(result.namespace["b"], Tracked)
