"""Runtime: turns, modes, cells, namespace persistence, stats and trace."""

import json

import anyio
import pytest

import spectool
from rt_helpers import GatedStream, Recorder, chunks, fenced, hanging_tool


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "lazy", "spec"])
async def test_turn_runs_cells_and_namespace_persists(anyio_backend, mode):
    rec = Recorder()
    rt = spectool.Runtime([rec.pure(), rec.never()], mode=mode, namespace={"base": 3})
    res = await rt.run(chunks(fenced("a = q(base)\nnote('hi')\nprint('a =', a)\n")))
    assert res.error is None and res.stdout == "a = 30\n"
    assert res.namespace == {"base": 3, "a": 30}
    assert ("note", "hi") in rec.log and rec.log.count(("q", 3)) == 1
    res = await rt.run_cell("b = a + 1\nprint(b)")
    assert res.namespace["b"] == 31 and res.stdout == "31\n" and rt.namespace["b"] == 31
    assert res.stats.t_turn >= res.stats.t_exec >= 0
    trace = json.loads(res.trace.to_json())
    kinds = [e["kind"] for e in trace]
    assert kinds[0] == "chunk" and kinds[-1] == "turn_end" and "cell_start" in kinds


@pytest.mark.anyio
async def test_cells_run_in_order_and_an_error_stops_the_turn(anyio_backend):
    rt = spectool.Runtime([], mode="baseline")
    msg = (fenced("x = 1\nprint('one')\n") + "prose\n```python\nx += 1\n1/0\nprint('no')\n```\n"
           + fenced("x = 100\n"))
    res = await rt.run(chunks(msg, 5))
    assert isinstance(res.error, ZeroDivisionError)
    assert res.stdout == "one\n" and res.namespace == {"x": 2}
    assert [c.ran for c in res.cells] == [True, True, False]
    assert res.cells[1].error is res.error


@pytest.mark.anyio
async def test_message_without_cells_and_bytes_deltas(anyio_backend):
    rt = spectool.Runtime([], mode="spec")
    res = await rt.run(chunks("no code here", 3))
    assert res.error is None and res.stdout == "" and res.cells == []
    data = fenced("s = 'héllo wörld'\nprint(s)\n").encode()
    res = await rt.run([data[i:i + 1] for i in range(len(data))])   # sync iterable of bytes
    assert res.stdout == "héllo wörld\n"


@pytest.mark.anyio
async def test_spec_launches_during_the_stream_and_hits(anyio_backend):
    rec = Recorder()
    note = rec.never()
    rt = spectool.Runtime([rec.pure(), note], mode="spec")
    stream = GatedStream("```repl\na = q(1)\nb = q(2)\n", rec.event("q(2)"), "note('x')\n```\n")
    with anyio.fail_after(20):
        res = await rt.run(stream)
    assert res.error is None and res.namespace == {"a": 10, "b": 20}
    # the speculative calls ran while the stream was still open, the never-tool after it
    assert rec.log[:2] in ([("q", 1), ("q", 2)], [("q", 2), ("q", 1)])
    assert rec.log[2:] == [("note", "x")]
    s = res.stats
    assert (s.dispatched, s.hits, s.misses, s.calls) == (2, 2, 0, 1)
    assert s.t_stream > 0 and res.trace.of("launch")[0].t < s.t_stream


def _tail_peeking_available() -> bool:
    from spectool.shadow import ShadowInterpreter, ToolInfo

    class Host:
        def launch(self, *a, **k):
            return None

    interp = ShadowInterpreter({}, {"q": ToolInfo("q", "pure")}, Host())
    return bool(interp.peek_tail("r = q(5)"))


@pytest.mark.anyio
async def test_spec_tail_bet_launches_before_the_line_ends(anyio_backend):
    if not _tail_peeking_available():
        pytest.skip("the shadow's peek_tail returns no bets yet")
    rec = Recorder()
    rt = spectool.Runtime([rec.pure()], mode="spec")
    stream = GatedStream("```repl\nr = q(5)", rec.event("q(5)"), "\nprint(r)\n```\n")
    with anyio.fail_after(20):
        res = await rt.run(stream)
    assert res.stdout == "50\n" and rec.log == [("q", 5)]
    assert res.stats.hits == 1 and res.trace.of("bet")


@pytest.mark.anyio
async def test_spec_tail_bet_invalidated_by_a_later_token_is_withdrawn(anyio_backend):
    if not _tail_peeking_available():
        pytest.skip("the shadow's peek_tail returns no bets yet")
    q, started, cancelled = hanging_tool("q")
    rt = spectool.Runtime([q], mode="spec")
    stream = GatedStream("```repl\nv = q(1)", started, " if False else 3\nprint(v)\n```\n")
    with anyio.fail_after(20):
        res = await rt.run(stream)
    assert res.error is None and res.stdout == "3\n"
    assert cancelled == [1] and res.stats.withdrawn == 1 and res.stats.evicted == 1
    assert res.stats.hits == res.stats.misses == 0


@pytest.mark.anyio
async def test_lazy_real_run_does_not_wait_for_the_shadow(anyio_backend):
    gate = anyio.Event()
    log = []

    @spectool.tool(speculate="pure")
    async def slow(x: int) -> int:
        log.append(("slow", x))
        await gate.wait()
        return x

    @spectool.tool
    async def mark() -> None:   # async: an anyio Event is set on the loop, never a thread
        log.append("mark")
        gate.set()      # only the real run can open the gate the shadow is waiting on

    rt = spectool.Runtime([slow, mark], mode="lazy")
    with anyio.fail_after(20):
        res = await rt.run(chunks(fenced("mark()\na = slow(1)\nb = a + slow(a)\n")))
    assert res.error is None and res.namespace == {"a": 1, "b": 2}
    assert log.count("mark") == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_cell_that_does_not_parse_cancels_speculations(anyio_backend, mode):
    hang, started, cancelled = hanging_tool()
    rec = Recorder()
    rt = spectool.Runtime([hang, rec.never()], mode=mode)
    with anyio.fail_after(20):
        res = await rt.run(chunks(fenced("a = hang(1)\nnote('x')\nb = (\n"), 4))
    assert isinstance(res.error, SyntaxError) and not res.cells[0].ran
    assert res.namespace == {} and rec.log == []
    assert cancelled == ([1] if started.is_set() else [])
    assert res.stats.evicted == res.stats.dispatched


@pytest.mark.anyio
async def test_idempotent_tool_gets_the_same_key_speculatively_and_for_real(anyio_backend):
    keys = []

    @spectool.tool(speculate="idempotent", on_unclaimed=lambda key, args, kwargs: None)
    async def post(body: str, *, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return idempotency_key

    rt = spectool.Runtime([post], mode="spec")
    res = await rt.run(chunks(fenced("k1 = post('a')\nk2 = post('a')\n")))
    assert res.error is None and res.namespace["k1"] != res.namespace["k2"]
    assert sorted(keys) == sorted({res.namespace["k1"], res.namespace["k2"]})
    res2 = await rt.run(chunks(fenced("k3 = post('a')\n")))
    assert res2.namespace["k3"] not in (res.namespace["k1"], res.namespace["k2"])  # new turn


@pytest.mark.anyio
async def test_runtime_rejects_bad_configuration(anyio_backend):
    with pytest.raises(ValueError):
        spectool.Runtime([], mode="eager")
    with pytest.raises(ValueError):
        spectool.Runtime([], executor="docker")
    q = Recorder().pure()
    with pytest.raises(ValueError):
        spectool.Runtime([q, q])
    rt = spectool.Runtime([])
    await rt.aclose()
    with pytest.raises(spectool.RuntimeClosedError):
        await rt.run_cell("x = 1")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_batched_tool_claims_element_speculations(anyio_backend, mode):
    element_runs, batch_calls = [], []

    @spectool.tool(speculate="pure")
    async def llm_query(prompt: str) -> str:
        element_runs.append(prompt)
        await anyio.lowlevel.checkpoint()
        return prompt.upper()

    @spectool.tool(speculate="pure", batched_of="llm_query")
    async def llm_query_batched(prompts: list[str]) -> list[str]:
        batch_calls.append(list(prompts))
        return [p.upper() for p in prompts]

    @spectool.tool
    def note(msg: str) -> str:
        return msg + "!"

    rt = spectool.Runtime([llm_query, llm_query_batched, note], mode=mode)
    stream = chunks(fenced("prompts = [f'p{i}' for i in range(3)]\n"
                           "x = note('n')\n"
                           "out = llm_query_batched(prompts + [x])\n"
                           "one = llm_query('p1')\n"), 4)
    with anyio.fail_after(20):
        res = await rt.run(stream)
    assert res.error is None
    assert res.namespace["out"] == ["P0", "P1", "P2", "N!"] and res.namespace["one"] == "P1"
    if mode == "baseline":
        assert batch_calls == [["p0", "p1", "p2", "n!"]] and element_runs == ["p1"]
        assert res.stats.misses == 5 and res.stats.hits == 0     # counted per element
    else:   # the shadow may or may not have reached each element before the real run
        assert sum(len(b) for b in batch_calls) + len(element_runs) - 1 >= 4
        # "n!" is known only once the real note() returned: it misses unless the shadow
        # (woken by that observation) launched it before the real batched call claimed
        assert all(b[-1] == "n!" for b in batch_calls) and len(batch_calls) <= 1
        assert res.stats.hits + res.stats.misses == 5


@pytest.mark.anyio
async def test_trace_and_stats_describe_the_turn(anyio_backend):
    from spectool.shadow import Limits

    rec = Recorder()
    seen = []
    rt = spectool.Runtime([rec.pure(), rec.never()], mode="spec", limits=Limits(),
                          on_event=lambda e: seen.append(e.kind))
    stream = GatedStream("```repl\na = q(1)\n", rec.event("q(1)"), "note('x')\nb = a + 1\n```\n")
    with anyio.fail_after(20):
        res = await rt.run(stream)
    events = json.loads(res.trace.to_json())
    kinds = [e["kind"] for e in events]
    assert kinds == seen                                   # the listener saw every event live
    for kind in ("chunk", "statement", "launch", "cell_closed", "stream_end", "cell_start",
                 "claim_hit", "call", "cell_end", "turn_end"):
        assert kind in kinds, kind
    times = [e["t"] for e in events]
    assert times == sorted(times)
    assert kinds.index("launch") < kinds.index("stream_end") < kinds.index("claim_hit")
    s = res.stats
    assert (s.dispatched, s.hits, s.misses, s.calls, s.evicted, s.wasted) == (1, 1, 0, 1, 0, 0)
    assert s.saved_s > 0 and s.t_turn >= s.t_stream and s.t_exec > 0
    assert events[-1]["hits"] == 1 and s.to_dict()["hits"] == 1
    with pytest.raises(ValueError):
        spectool.Runtime([], limits=Limits(), shadow_limits=Limits())


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_deterministic_results_are_not_shared_mutably(anyio_backend, mode):
    runs = []

    @spectool.tool(speculate="pure", deterministic=True)
    async def rows(n: int) -> list:
        runs.append(n)
        return list(range(n))

    rt = spectool.Runtime([rows], mode=mode)
    res = await rt.run(chunks(fenced("a = rows(3)\na.append(99)\nb = rows(3)\nc = rows(3)\n"
                                     "c.clear()\nd = rows(3)\n"), 5))
    assert res.error is None
    assert res.namespace == {"a": [0, 1, 2, 99], "b": [0, 1, 2], "c": [], "d": [0, 1, 2]}
    assert runs == ([3, 3, 3, 3] if mode == "baseline" else [3])   # baseline never shares
