"""``token_spec loadtest``: throughput and latency of ``token_spec serve`` under concurrent clients.

For each method (``none`` = no speculation, each ``--speculative`` method, and the
peers ``llamacpp`` / ``llamacpp+lookup``: llama-cpp-python's OpenAI server on the same
GGUF and thread count) a server is started as its own process (``python -m token_spec
serve ...`` or ``python -m llama_cpp.server ...`` on a free 127.0.0.1 port; waits until
it answers), so client and server do not share a GIL.
For each concurrency ``c`` in ``--clients`` (default 1,4,16), ``c`` clients each
send ``--requests`` streaming chat requests back to back (greedy, ``--max-tokens``,
prompts from ``token_spec.prompts`` code and agent domains, round robin). Methods run
interleaved per concurrency level (all servers stay up), in an order shuffled afresh
for each level and repeat (``token_spec.interleave.run_order``), so machine load hits
them alike and no server always runs right after the same one. Reported per (method,
c): throughput (completion tokens / wall s; per client too), its spread over the
repeats, requests/s, mean and p50/p90/p99 request latency, mean and p50/p99 time to
first token, mean acceptance length from ``/metrics`` deltas (where the server has
them). Writes ``loadtest.json`` and ``loadtest.png`` into ``--out``.

``--control`` adds ``none-control``: a second server identical to ``none``, run in the
same shuffled order and paired with ``none`` the same way. Its ratio to ``none`` is an A/A
test: whatever it shows beyond 1.00 is the run's noise, the floor under which a
speculative method's ratio cannot be told from no speculation.

Example: ``token_spec loadtest --out loadtest-out --clients 1,4,16 --requests 2 --max-tokens 32``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..interleave import run_order
from ..report import pyplot, table_formatter

__all__ = ["add_parser", "main", "run_loadtest", "format_table", "results_table", "plot", "parse_metrics", "server_command",
           "PEER_METHODS", "CONTROL"]


def add_parser(sub) -> None:
    from spectool.arg_types import comma_list, int_at_least, int_list, int_within
    from .server import GATE_CHOICES, MAX_GAMMA, SPECULATIVE_METHODS, TARGET_CHOICES

    p = sub.add_parser("loadtest", help="throughput/latency of token_spec serve at 1, 4, 16 clients",
                       description="Throughput and latency of token_spec serve (and of llama.cpp's server on the same "
                       "GGUF) under concurrent streaming clients.")
    p.add_argument("--out", required=True, help="folder for loadtest.json and loadtest.png")
    p.add_argument("--clients", type=int_list(1), default="1,4,16",
                   help="comma list of concurrency levels (default 1,4,16)")
    p.add_argument("--requests", type=int_at_least(1), default=2, help="requests per client and level (default 2)")
    p.add_argument("--max-tokens", type=int_at_least(1), default=32, help="new tokens per request (default 32)")
    p.add_argument("--repeats", type=int_at_least(1), default=1,
                   help="repeat the sweep (method order shuffled each time); the table shows medians (default 1)")
    p.add_argument("--methods", type=comma_list(SPECULATIVE_METHODS + PEER_METHODS), default="none,ngram",
                   help=f"comma list of --speculative methods {list(SPECULATIVE_METHODS)}, and the peers "
                   f"{list(PEER_METHODS)} (llama.cpp's OpenAI server from llama-cpp-python's server extra on the "
                   "same GGUF and thread count; +lookup = its prompt lookup decoding) (default none,ngram)")
    p.add_argument("--control", action="store_true",
                   help=f"also run {CONTROL!r}, a second server identical to none, as an A/A control: its ratio "
                   "to none is the run's noise floor (needs none in --methods)")
    p.add_argument("--target", "--dtype", dest="target", choices=TARGET_CHOICES, default="auto",
                   help="target configuration of the servers (as token_spec serve --target; default auto)")
    p.add_argument("--gamma", type=int_within(1, MAX_GAMMA), default=4,
                   help=f"draft length of the speculative servers, 1..{MAX_GAMMA} (default 4)")
    p.add_argument("--gate", choices=GATE_CHOICES, default="auto", help="draft gate of the servers (default auto)")
    p.add_argument("--max-rows", type=int_within(1, 16), default=16, help="rows per forward pass (default 16)")
    p.add_argument("--threads", type=int_at_least(1), default=1, help="torch intra-op threads per server (default 1)")
    p.add_argument("--json", action="store_true",
                   help="print the results (loadtest.json's data) as JSON on stdout instead of the table")
    p.set_defaults(func=main, parser=p)


PEER_METHODS = ("llamacpp", "llamacpp+lookup")
CONTROL = "none-control"  # the A/A control: a second no-speculation server


def _methods(args) -> list[str]:
    """The servers to run: ``--methods``, then the control if asked."""
    methods = list(dict.fromkeys(m for m in args.methods.split(",") if m))
    if getattr(args, "control", False):
        if "none" not in methods:
            raise ValueError("--control needs none in --methods (the control is paired with it)")
        methods.append(CONTROL)
    return methods


def server_command(method: str, args, port: int) -> list[str]:
    """The command that starts the server of ``method`` on 127.0.0.1:``port``: ``token_spec
    serve`` for our methods; for a peer, ``python -m llama_cpp.server`` on the target's own
    GGUF (the one ``token_spec.target`` loads) with ``args.threads`` threads, one request
    at a time without interrupting one another, the model id ``m``. The control is a
    ``none`` server."""
    if method == CONTROL:
        method = "none"
    if method in PEER_METHODS:
        from ..target import find_gguf

        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(find_gguf()), "--model_alias", "m",
               "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(args.threads),
               "--n_threads_batch", str(args.threads), "--n_ctx", "4096", "--interrupt_requests", "False",
               "--verbose", "False"]
        if method == "llamacpp+lookup":
            cmd += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(args.gamma)]
        return cmd
    return [sys.executable, "-m", "token_spec", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--speculative", method, "--gamma", str(args.gamma), "--served-model-name", "m",
            "--max-rows", str(args.max_rows), "--target", args.target, "--gate", args.gate,
            "--threads", str(args.threads)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {series (name{labels}): value}; counters read with or without ``_total``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        except ValueError:
            continue
    return out


def counter(metrics: dict[str, float], name: str) -> float:
    """Sum of a counter's series over labels (vLLM's ``name_total`` or bare ``name``)."""
    total = 0.0
    for key, value in metrics.items():
        base = key.split("{", 1)[0]
        if base in (name, name + "_total"):
            total += value
    return total


class _ServerProcess:
    def __init__(self, method: str, args) -> None:
        self.port = _free_port()
        self.method = method
        cmd = server_command(method, args, self.port)
        self.ready_path = "/v1/models" if method in PEER_METHODS else "/health"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 300.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.method} exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"server {self.method} not ready after {timeout} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


async def _one_request(client, url: str, messages, max_tokens: int) -> dict:
    """One streamed request. Tokens: the final ``usage`` chunk's count; a server that
    sends none (llama.cpp's streams no usage) is counted one token per content delta,
    which is what it streams."""
    t0 = time.perf_counter()
    ttft, tokens, deltas = None, None, 0
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    async with client.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                deltas += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"latency_s": time.perf_counter() - t0, "ttft_s": ttft,
            "tokens": deltas if tokens is None else tokens}


async def _level(url: str, clients: int, requests: int, max_tokens: int, prompts) -> dict:
    import anyio
    import httpx

    results: list[dict] = []
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(limits=limits) as client:
        async def worker(i: int) -> None:
            for j in range(requests):
                messages = prompts[(i * requests + j) % len(prompts)]
                results.append(await _one_request(client, url, messages, max_tokens))

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(worker, i)
        wall = time.perf_counter() - t0
    lat = sorted(r["latency_s"] for r in results)
    ttfts = sorted(r["ttft_s"] for r in results if r["ttft_s"] is not None)
    tokens = sum(r["tokens"] for r in results)
    return {"clients": clients, "requests": len(results), "tokens": tokens, "wall_s": wall,
            "tokens_per_s": tokens / wall, "tokens_per_s_per_client": tokens / wall / clients,
            "requests_per_s": len(results) / wall,
            "latency_mean_s": statistics.fmean(lat), "latency_p50_s": _quantile(lat, 0.5),
            "latency_p90_s": _quantile(lat, 0.9), "latency_p99_s": _quantile(lat, 0.99),
            "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
            "ttft_p50_s": _quantile(ttfts, 0.5) if ttfts else None,
            "ttft_p99_s": _quantile(ttfts, 0.99) if ttfts else None}


def _metrics(url: str) -> dict[str, float]:
    """The server's Prometheus counters ({} where it has no ``/metrics``, e.g. a peer)."""
    import httpx

    r = httpx.get(url + "/metrics", timeout=30)
    return parse_metrics(r.text) if r.status_code == 200 else {}


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_loadtest(args) -> dict:
    import anyio
    import httpx

    from ..prompts import prompts_for

    levels = [int(c) for c in args.clients.split(",") if c]
    methods = _methods(args)
    prompts = prompts_for("code") + prompts_for("agent")
    servers = {m: _ServerProcess(m, args) for m in methods}
    rows = []
    try:
        for s in servers.values():
            s.wait_ready()
        for s in servers.values():  # warm-up request per server
            anyio.run(_level, s.url, 1, 1, 8, prompts)
        for rep, (li, c) in ((r, x) for r in range(args.repeats) for x in enumerate(levels)):
            for m in run_order(methods, li, rep):
                s = servers[m]
                before = _metrics(s.url)
                row = anyio.run(_level, s.url, c, args.requests, args.max_tokens, prompts)
                after = _metrics(s.url)
                drafts = counter(after, "vllm:spec_decode_num_drafts") - counter(before, "vllm:spec_decode_num_drafts")
                acc = (counter(after, "vllm:spec_decode_num_accepted_tokens")
                       - counter(before, "vllm:spec_decode_num_accepted_tokens"))
                row.update(method=m, repeat=rep, mean_acceptance_length=(1 + acc / drafts) if drafts else None,
                           drafts=drafts)
                rows.append(row)
                print(f"  {m:>6} c={c:<3} {row['tokens_per_s']:7.2f} tok/s  latency {row['latency_mean_s']:6.2f} s",
                      file=sys.stderr)
    finally:
        for s in servers.values():
            s.stop()
    return {"config": {k: v for k, v in vars(args).items() if k not in ("func", "parser")}, "rows": _medians(rows), "runs": rows,
            "environment": {"cpus": os.cpu_count(),
                            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}}


def _medians(runs: list[dict]) -> list[dict]:
    """One row per (method, clients): the median of each figure over the repeats."""
    out = []
    keys = list(dict.fromkeys((r["method"], r["clients"]) for r in runs))
    for m, c in keys:
        rs = [r for r in runs if r["method"] == m and r["clients"] == c]
        row = {"method": m, "clients": c, "repeats": len(rs)}
        for k in ("tokens_per_s", "tokens_per_s_per_client", "requests_per_s", "latency_mean_s", "latency_p50_s",
                  "latency_p90_s", "latency_p99_s", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s",
                  "mean_acceptance_length"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            row[k] = statistics.median(vals) if vals else None
        tps = [r["tokens_per_s"] for r in rs]
        row["tokens_per_s_min"], row["tokens_per_s_max"] = min(tps), max(tps)  # the spread over the repeats
        row["drafts"] = sum(r["drafts"] for r in rs)
        ratios = _vs_none(runs, m, c)
        if ratios:  # this method's tok/s over the no-speculation server's, paired per repeat
            row["vs_none"] = statistics.median(ratios)
            row["vs_none_min"], row["vs_none_max"] = min(ratios), max(ratios)
        out.append(row)
    return sorted(out, key=lambda r: (r["clients"], r["method"]))


def _vs_none(runs: list[dict], method: str, clients: int) -> list[float]:
    """tok/s of ``method`` / tok/s of ``none`` at ``clients``, one ratio per repeat that ran
    both (the two ran back to back in that repeat, so load hits them alike)."""
    def by_repeat(m: str) -> dict[int, float]:
        return {r.get("repeat", 0): r["tokens_per_s"] for r in runs if r["method"] == m and r["clients"] == clients}

    base, mine = by_repeat("none"), by_repeat(method)
    return [mine[k] / base[k] for k in sorted(base.keys() & mine.keys()) if base[k] > 0]


def results_table(result: dict):
    """Medians over the repeats as a ``spectool.tables.Table``; ``min..max`` is the spread of
    tok/s, ``x none`` the paired tok/s ratio to the no-speculation server (median and spread
    over the repeats)."""
    from spectool.tables import Column, Table

    w = max([8] + [len(r["method"]) for r in result["rows"]])  # method column: the longest name

    def num(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    columns = [Column("method", w, "<"), Column(" clients", 8), Column(" tok/s", 9), Column(" min..max", 14),
               Column(" x none", 18), Column(" per client", 11), Column(" req/s", 8), Column(" lat p50", 9),
               Column(" lat p99", 9), Column(" ttft p50", 10), Column(" ttft p99", 10), Column(" tau", 6)]
    rows = []
    for r in result["rows"]:
        spread = (f"{r['tokens_per_s_min']:.1f}..{r['tokens_per_s_max']:.1f}" if "tokens_per_s_min" in r else "-")
        vs = (f"{r['vs_none']:.2f} ({r['vs_none_min']:.2f}..{r['vs_none_max']:.2f})" if "vs_none" in r else "-")
        rows.append([r["method"], f" {r['clients']}", f" {r['tokens_per_s']:.2f}", f" {spread}", f" {vs}",
                     f" {num(r.get('tokens_per_s_per_client'), '.2f')}", f" {r['requests_per_s']:.3f}",
                     f" {r['latency_p50_s']:.2f}", f" {num(r.get('latency_p99_s'), '.2f')}",
                     f" {num(r.get('ttft_p50_s'), '.2f')}", f" {num(r.get('ttft_p99_s'), '.2f')}",
                     f" {num(r.get('mean_acceptance_length'), '.2f')}"])
    return Table(columns, rows)


format_table = table_formatter(results_table)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for m in methods:
        rs = sorted((r for r in rows if r["method"] == m), key=lambda r: r["clients"])
        xs = [r["clients"] for r in rs]
        a1.plot(xs, [r["tokens_per_s"] for r in rs], marker="o", label=m)
        a2.plot(xs, [r["latency_mean_s"] for r in rs], marker="o", label=m)
    for ax, title in ((a1, "throughput (completion tok/s)"), (a2, "mean request latency (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("token_spec serve, SmolLM2-135M on CPU (shared machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    from spectool.cli import ensure_writable_dir

    try:  # every flag checked before anything is created
        _methods(args)
    except ValueError as exc:
        args.parser.error(str(exc))
    # the client is imported before --out exists, as the event loop is
    # (``spectool.cli.run_interruptible``): --out marks the run as begun
    import anyio  # noqa: F401
    import httpx  # noqa: F401

    try:
        out = ensure_writable_dir(args.out)
    except ValueError as exc:
        args.parser.error(f"argument --out: {exc}")
    result = run_loadtest(args)
    result["command"] = "token_spec " + " ".join(sys.argv[1:])
    (out / "loadtest.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "loadtest.png")
    from spectool.tables import emit_result

    emit_result(result, [results_table(result)],
                f"wrote {out / 'loadtest.json'} and {out / 'loadtest.png'}",
                getattr(args, "json", False))
    return 0
