"""Observations: the shadow waits for the real result of a tool it may not start
(a ``never`` tool) and speculates on what depends on it."""

import anyio
import pytest

import spectool
from spectool.speculation.observations import Observations
from spectool.shadow import Unknown
from spectool.trace import Trace
from rt_helpers import chunks, fenced

GUIDE_LOOP = ("guide = labelling_guide()\n"
              "out = []\n"
              "for i in range(3):\n"
              "    out.append(classify(guide + str(i)))\n"
              "print(out)\n")


def guide_tools(*, all_started: bool):
    """``labelling_guide`` (never) and ``classify`` (pure). With ``all_started``, each
    classify call waits until three are in flight at once: only a fan-out ahead of the
    real loop (which makes one call at a time) lets the cell finish."""
    log = {"guide": 0, "started": 0, "spec_launch_after_guide": 0}
    three = anyio.Event()

    @spectool.tool
    async def labelling_guide() -> str:
        log["guide"] += 1
        return "G"

    @spectool.tool(speculate="pure")
    async def classify(text: str) -> str:
        log["started"] += 1
        if log["started"] >= 3:
            three.set()
        if all_started:
            await three.wait()
        return text.lower()

    return [labelling_guide, classify], log


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_calls_depending_on_a_never_tool_fan_out_once_it_returns(anyio_backend, mode):
    tools, log = guide_tools(all_started=True)
    rt = spectool.Runtime(tools, mode=mode)
    with anyio.fail_after(20):       # without observations the loop waits here forever
        res = await rt.run(chunks(fenced(GUIDE_LOOP), 9))
    assert res.error is None and res.stdout == "['g0', 'g1', 'g2']\n"
    assert log["guide"] == 1                        # the never tool ran once, for real
    # the real loop may reach the first call before the shadow: at most that one misses
    assert res.stats.hits + res.stats.misses == 3 and res.stats.hits >= 2
    assert res.stats.wasted == res.stats.evicted == 0
    assert res.trace.of("observe")


@pytest.mark.anyio
async def test_negative_control_without_observations_the_loop_cannot_fan_out(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(spectool.speculation.store.Store, "observe", lambda self, *a: None)
    tools, _ = guide_tools(all_started=True)
    rt = spectool.Runtime(tools, mode="spec")
    with anyio.move_on_after(2) as scope:   # detects a hang; orders nothing
        await rt.run(chunks(fenced(GUIDE_LOOP), 9))
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_baseline_gives_the_same_result(anyio_backend):
    tools, log = guide_tools(all_started=False)
    res = await spectool.Runtime(tools, mode="baseline").run(chunks(fenced(GUIDE_LOOP), 9))
    assert res.stdout == "['g0', 'g1', 'g2']\n" and log["guide"] == 1
    assert not res.trace.of("observe")


@pytest.mark.anyio
async def test_the_shadow_sees_a_snapshot_not_the_object_the_cell_mutates(anyio_backend):
    seen = []

    @spectool.tool
    async def fetch() -> list:
        return ["a"]

    @spectool.tool(speculate="pure")
    async def q(text: str) -> str:
        seen.append(text)
        return text

    rt = spectool.Runtime([fetch, q], mode="spec")
    code = "items = fetch()\nitems.append('x')\nr = q(str(items))\n"
    res = await rt.run(chunks(fenced(code), 5))
    assert res.error is None and res.namespace["r"] == "['a', 'x']"
    # the shadow applied the cell's append to its own copy of the result, so it asked
    # for the same call (joined or claimed), never for "['a', 'x', 'x']"
    assert seen == ["['a', 'x']"]
    assert res.stats.wasted == res.stats.evicted == 0


@pytest.mark.anyio
async def test_a_failing_never_tool_stops_the_shadow_like_the_real_cell(anyio_backend):
    @spectool.tool
    async def broken() -> str:
        raise ValueError("no guide today")

    @spectool.tool(speculate="pure")
    async def q(text: str) -> str:
        return text

    rt = spectool.Runtime([broken, q], mode="spec")
    res = await rt.run(chunks(fenced("g = broken()\nr = q(g + '!')\n"), 5))
    assert isinstance(res.error, ValueError)
    assert res.stats.dispatched == 0 and "r" not in res.namespace


@pytest.mark.anyio
async def test_a_result_that_is_not_plain_data_stays_unknown(anyio_backend):
    class Doc:
        def __str__(self):
            return "doc"

    @spectool.tool
    async def load() -> object:
        return Doc()

    @spectool.tool(speculate="pure")
    async def q(text: str) -> str:
        return text

    rt = spectool.Runtime([load, q], mode="spec")
    res = await rt.run(chunks(fenced("d = load()\nr = q(str(d))\n"), 5))
    assert res.error is None and res.namespace["r"] == "doc"
    assert res.stats.dispatched == 0 and res.stats.misses == 1
    assert not res.trace.of("launch") and not res.trace.of("join")


@pytest.mark.anyio
async def test_identical_never_calls_are_observed_in_order(anyio_backend):
    counter = iter(range(100))
    ran = []

    @spectool.tool
    async def ticket() -> int:
        return next(counter)

    @spectool.tool(speculate="pure")
    async def q(n: int) -> int:
        ran.append(n)
        return n * 10

    rt = spectool.Runtime([ticket, q], mode="spec")
    code = "a = ticket()\nb = ticket()\nx = q(a)\ny = q(b)\n"
    res = await rt.run(chunks(fenced(code), 5))
    assert res.namespace == {"a": 0, "b": 1, "x": 0, "y": 10}
    # the shadow's first ticket() met the real first call, its second the second one:
    # had both met the first, the shadow would have run q(0) a second time
    assert sorted(ran) == [0, 1]
    assert res.stats.wasted == res.stats.evicted == 0


# -- the store side, directly -------------------------------------------------------------

async def _observed(value, *, key="k"):
    obs = Observations(Trace())
    handle = obs.observe("tool", key)

    async def run():
        return value

    got = await obs.run_real("tool", key, run)
    assert got is value                  # the real run gets the very object
    assert handle.done.is_set()
    return handle.value


@pytest.mark.anyio
async def test_the_shadow_gets_a_copy_of_plain_results(anyio_backend):
    value = {"rows": ["a", "b"], "n": 2}
    seen = await _observed(value)
    assert seen == value and seen is not value and seen["rows"] is not value["rows"]


@pytest.mark.anyio
async def test_results_too_large_or_not_plain_reach_the_shadow_as_unknown(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(spectool.speculation.observations, "MAX_SNAPSHOT_ITEMS", 10)
    assert isinstance(await _observed([str(i) for i in range(50)]), Unknown)
    assert await _observed([str(i) for i in range(5)]) == ["0", "1", "2", "3", "4"]
    assert isinstance(await _observed(object()), Unknown)


@pytest.mark.anyio
async def test_an_unfinished_observation_reads_as_unknown_after_the_turn(anyio_backend):
    obs = Observations(Trace())
    handle = obs.observe("tool", "k")
    obs.close()
    assert handle.done.is_set() and isinstance(handle.value, Unknown)
    assert obs.observe("tool", "k") is None
