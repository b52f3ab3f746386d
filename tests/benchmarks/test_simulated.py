"""Simulated models: server batching curve and capacity, waste, seeded sub-model,
decoding schedules. Server timings run under trio's MockClock (virtual, deterministic
time), so exact durations are asserted without depending on the machine."""

import random

import anyio
import pytest
import trio.testing

from spectool_bench.oolong import generate_window
from spectool_bench.simulated import (DecodingModel, SimulatedRootModel, SimulatedServer,
                                  SimulatedSubModel, SubModelLatency, instance_texts,
                                  split_tokens)


@pytest.fixture
def anyio_backend():
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})


async def _serve_all(server, works, delays=None):
    done = {}

    async def one(i, w):
        if delays:
            await anyio.sleep(delays[i])
        req = await server.serve(w, episode="e")
        done[i] = req

    t0 = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for i, w in enumerate(works):
            tg.start_soon(one, i, w)
    return {i: (r.t_end - t0) for i, r in done.items()}


@pytest.mark.anyio
async def test_solo_request_takes_its_work():
    server = SimulatedServer(max_batch=4, alpha=0.5, time_scale=0.1)
    ends = await _serve_all(server, [2.0])
    assert ends[0] == pytest.approx(0.2)


@pytest.mark.anyio
async def test_batching_curve():
    server = SimulatedServer(max_batch=8, alpha=0.5, time_scale=1.0)
    ends = await _serve_all(server, [1.0] * 4)
    # four in flight: each progresses at 1 / (1 + 0.5 * 3)
    assert all(t == pytest.approx(2.5) for t in ends.values())
    assert server.slowdown(1) == 1.0 and server.slowdown(3) == 2.0
    assert server.peak_running == 4


@pytest.mark.anyio
async def test_capacity_queue_fifo():
    server = SimulatedServer(max_batch=2, alpha=0.0, time_scale=1.0)
    ends = await _serve_all(server, [1.0, 1.0, 1.0, 1.0])
    assert sorted(ends.values()) == pytest.approx([1.0, 1.0, 2.0, 2.0])
    assert server.peak_running == 2
    assert [r.status for r in server.requests] == ["done"] * 4


@pytest.mark.anyio
async def test_rate_changes_when_load_changes():
    server = SimulatedServer(max_batch=8, alpha=1.0, time_scale=1.0)
    # A alone for 0.5 (progress 0.5), then with B (rate 1/2): A needs 0.5 more -> 1.0 more
    ends = await _serve_all(server, [1.0, 1.0], delays=[0.0, 0.5])
    assert ends[0] == pytest.approx(1.5)
    # B: 0.5 progress by t=1.5, then alone: 0.5 more
    assert ends[1] == pytest.approx(2.0)


@pytest.mark.anyio
async def test_wasted_speculation_consumes_capacity():
    """An unclaimed (wasted) request slows the real one as much as any other."""
    alone = SimulatedServer(max_batch=8, alpha=1.0, time_scale=1.0)
    t_alone = (await _serve_all(alone, [1.0]))[0]
    shared = SimulatedServer(max_batch=8, alpha=1.0, time_scale=1.0)
    ends = await _serve_all(shared, [1.0, 1.0])  # request 1's result is never used
    assert t_alone == pytest.approx(1.0)
    assert ends[0] == pytest.approx(2.0)


@pytest.mark.anyio
async def test_cancel_frees_capacity():
    server = SimulatedServer(max_batch=8, alpha=1.0, time_scale=1.0)
    result = {}

    async def real():
        t0 = anyio.current_time()
        await server.serve(1.0)
        result["real"] = anyio.current_time() - t0

    async with anyio.create_task_group() as tg:
        tg.start_soon(real)
        with anyio.CancelScope() as scope:
            tg.start_soon(lambda: _cancel_after(server, scope, 0.5))
    # 0.5 s at half speed (0.25 done), then alone: 0.75 more
    assert result["real"] == pytest.approx(1.25)
    statuses = sorted(r.status for r in server.requests)
    assert statuses == ["cancelled", "done"]
    assert server.running == 0


async def _cancel_after(server, scope, delay):
    with anyio.move_on_after(delay):
        await server.serve(5.0)


@pytest.mark.anyio
async def test_cancel_while_queued():
    server = SimulatedServer(max_batch=1, alpha=0.0, time_scale=1.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, 1.0)
        await anyio.wait_all_tasks_blocked()  # the first request now holds the only slot
        with anyio.move_on_after(0.5):
            await server.serve(1.0)
    first, second = server.requests
    assert (first.status, second.status) == ("done", "cancelled")
    assert second.t_start is None  # never served
    assert first.t_end - first.t_start == pytest.approx(1.0)


def test_sub_model_seeded_and_accuracy():
    w = generate_window("trec_coarse", 4096, 0)
    lines = [line for line in w.context.split("\n") if "Instance:" in line]
    prompt = "Label these:\n" + "\n".join(lines[:60])
    mk = lambda acc, seed: SimulatedSubModel(None, w.label_of, w.labels, accuracy=acc, seed=seed)  # noqa: E731
    truth = [w.label_of[t] for t in instance_texts(prompt)]
    assert mk(1.0, 0).answer(prompt).split("\n") == truth
    wrong = mk(0.0, 0).answer(prompt).split("\n")
    assert all(a != b for a, b in zip(wrong, truth)) and len(wrong) == len(truth)
    a = mk(0.7, 3).answer(prompt)
    assert a == mk(0.7, 3).answer(prompt)  # same prompt and seed: same answer
    right = sum(x == y for x, y in zip(a.split("\n"), truth))
    assert 0.4 * len(truth) < right < len(truth)
    assert mk(0.7, 3).answer("no instance lines here") == "unknown"


def test_instance_texts_with_proposals():
    p = "Check:\nDate: Jan 01, 2022 || User: 11111 || Instance: Who wrote Hamlet? => entity\nother"
    assert instance_texts(p) == ["Who wrote Hamlet?"]


@pytest.mark.anyio
async def test_sub_model_latency_grows_with_length():
    lat = SubModelLatency()
    assert lat.work("x" * 4000, "y") > lat.work("x" * 40, "y")
    assert lat.work("x", "y" * 400) > lat.work("x", "y")
    w = generate_window("trec_coarse", 1024, 0)
    server = SimulatedServer(max_batch=2, alpha=0.1, time_scale=0.01)
    sub = SimulatedSubModel(server, w.label_of, w.labels, accuracy=1.0, episode="e1",
                            turn_of=lambda: 2)
    line = next(x for x in w.context.split("\n") if "Instance:" in x)
    out = await sub.complete("Label:\n" + line)
    assert out == w.label_of[instance_texts(line)[0]]
    (req,) = server.requests
    assert (req.episode, req.turn, req.status) == ("e1", 2, "done")
    assert req.work == pytest.approx(lat.work("Label:\n" + line, out))


def test_split_tokens_roundtrip():
    text = 'for i in range(0, len(data), 25):\n    out = llm_query(PROMPT + chunk)\n'
    toks = split_tokens(text)
    assert "".join(toks) == text
    assert all(1 <= len(t) <= 6 for t in toks)
    assert 2.0 <= len(text) / len(toks) <= 6.0


def test_decoding_schedules():
    van = DecodingModel("vanilla", tokens_per_s=100, ttft_s=0.0)
    assert van.schedule(3, random.Random(0)) == pytest.approx([0.01, 0.02, 0.03])
    spec = DecodingModel("speculative", tokens_per_s=100, ttft_s=0.0, gamma=4, acceptance=0.7)
    times = spec.schedule(2000, random.Random(0))
    rounds = len(set(times))
    tau = 2000 / rounds
    assert 2.2 < tau < 3.3 and spec.expected_tau() == pytest.approx((1 - 0.7 ** 5) / 0.3)
    assert times == sorted(times)
    assert times[-1] < van.schedule(2000, random.Random(0))[-1]  # faster than vanilla
    with pytest.raises(ValueError):
        DecodingModel("fast")


@pytest.mark.anyio
async def test_root_model_streams_on_schedule():
    turns = ["Let me look.\n```repl\nprint(len(context))\n```", "Done.\nFINAL(42)"]
    root = SimulatedRootModel(turns, DecodingModel("vanilla", tokens_per_s=50, ttft_s=0.2),
                              time_scale=1.0)
    t0 = anyio.current_time()
    text = "".join([d async for d in root.stream([{"role": "user", "content": "q"}])])
    assert text == turns[0]
    rec = root.records[0]
    assert anyio.current_time() - t0 == pytest.approx(rec.duration)
    assert rec.duration == pytest.approx(0.2 + len(split_tokens(turns[0])) / 50)
    assert rec.char_time(1) == pytest.approx(0.2 + 1 / 50)
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]
    assert "".join([d async for d in root.stream(msgs)]) == turns[1]
    assert root.turn == 1
