"""``token_spec audit A B``: do two OpenAI-compatible endpoints give the same greedy output?

A LosslessBench-style audit on the shipped prompt set ``token_spec/data/audit_prompts.jsonl``
(five domains: coding, agent workflow, creative writing, guardrail, frontend design;
at least 10 prompts each). Every prompt goes to both endpoints as a chat completion
with ``temperature 0``, ``seed 0``, ``max_tokens`` and, where the endpoint supports it,
``logprobs`` with ``top_logprobs 2`` (an endpoint that refuses logprobs is asked again
without). Requests run one at a time, A then B.

Per prompt: greedy identity, the first divergence position (in tokens when both
returned logprobs, else in characters) and, where both returned logprobs, the top-2
margin ``logprob(1st) - logprob(2nd)`` of each endpoint at the divergence. A tiny
margin means a near-tie that numerics (kernels, batch shapes) can flip; a large one
means the method changed the output. Per domain: identity rate, mean divergence
position (over diverging prompts), tok/s of each endpoint (completion tokens / request
seconds). When an endpoint exposes vLLM's ``vllm:spec_decode_*`` counters at
``/metrics``, the mean acceptance length ``1 + accepted / drafts`` of its requests comes
from the counters' deltas over each domain.

Writes ``audit.json`` and ``audit.png`` into ``--out`` and prints the per-domain table
(rich on a terminal, plain text elsewhere; ``--json``: the same data as JSON); a
progress bar runs on stderr when it is a terminal.

Example: ``token_spec audit http://127.0.0.1:8001/v1 http://127.0.0.1:8002/v1 --out audit-out --max-tokens 32``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from .report import pyplot

__all__ = ["add_parser", "main", "run_audit", "EndpointError", "load_prompts", "compare", "Reply", "DOMAINS", "first_divergence"]

DOMAINS = ("coding", "agent_workflow", "creative_writing", "guardrail", "frontend_design")


def add_parser(sub) -> None:
    from spectool.arg_types import comma_list, existing_file, float_within, http_url, int_at_least

    p = sub.add_parser("audit", help="greedy-identity audit of two OpenAI-compatible endpoints",
                       description="Do two OpenAI-compatible endpoints give the same greedy output? Sends the same "
                       "prompts to both and reports identity per domain and the first divergence.")
    p.add_argument("base_url_a", type=http_url, help="endpoint A, e.g. http://127.0.0.1:8001/v1")
    p.add_argument("base_url_b", type=http_url, help="endpoint B")
    p.add_argument("--out", default="audit-out", help="folder for audit.json and audit.png (default audit-out)")
    p.add_argument("--max-tokens", type=int_at_least(1), default=32, help="new tokens per prompt (default 32)")
    p.add_argument("--domains", type=comma_list(DOMAINS), default=",".join(DOMAINS),
                   help=f"comma list of {list(DOMAINS)}")
    p.add_argument("--prompts", type=int_at_least(0), default=0, help="first N prompts per domain (0 = all)")
    p.add_argument("--model-a", default=None, help="model id for A (default: the first of A's /v1/models)")
    p.add_argument("--model-b", default=None, help="model id for B")
    p.add_argument("--label-a", default="A", help="name of endpoint A in the report")
    p.add_argument("--label-b", default="B", help="name of endpoint B in the report")
    p.add_argument("--api-key", default="none", help="API key sent to both endpoints (default: none)")
    p.add_argument("--timeout", type=float_within(0.0, low_open=True), default=600.0, help="seconds per request")
    p.add_argument("--prompt-file", type=existing_file, default=None,
                   help="a JSONL prompt set instead of the shipped one")
    p.add_argument("--json", action="store_true",
                   help="print the results (audit.json's data) as JSON on stdout instead of the table")
    p.set_defaults(func=main, parser=p)


class EndpointError(RuntimeError):
    """An endpoint could not be reached or answered wrongly; the message names its URL."""


def load_prompts(path: str | None = None) -> list[dict]:
    """The prompt set: ``{"id", "domain", "messages"}`` per line."""
    if path is None:
        text = resources.files("token_spec.data").joinpath("audit_prompts.jsonl").read_text()
    else:
        text = Path(path).read_text()
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not {"id", "domain", "messages"} <= set(item):
            raise ValueError(f"prompt line {n} needs id, domain and messages")
        items.append(item)
    return items


@dataclass
class Reply:
    """One endpoint's answer: text, tokens (None without logprobs), top-2 rows, timing."""

    text: str
    tokens: list[str] | None
    top: list[list[float]] | None  # per token: the top logprobs, best first
    completion_tokens: int
    seconds: float
    finish_reason: str | None = None
    lossless: bool | None = None


def first_divergence(a: list, b: list) -> int | None:
    """Index of the first differing element; len(shorter) if one is a proper prefix; None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin(reply: Reply, pos: int) -> float | None:
    if reply.top is None or pos >= len(reply.top) or len(reply.top[pos]) < 2:
        return None
    return reply.top[pos][0] - reply.top[pos][1]


def compare(a: Reply, b: Reply) -> dict:
    """Identity, first divergence (tokens if both have them, else characters), margins there."""
    if a.tokens is not None and b.tokens is not None:
        unit, pos = "token", first_divergence(a.tokens, b.tokens)
    else:
        unit, pos = "char", first_divergence(list(a.text), list(b.text))
    identical = pos is None and a.text == b.text
    out = {"identical": identical, "divergence": pos, "unit": unit, "margin_a": None, "margin_b": None}
    if pos is not None and unit == "token":
        out["margin_a"], out["margin_b"] = _margin(a, pos), _margin(b, pos)
    return out


class Endpoint:
    """A chat-completions endpoint reached with httpx (sync)."""

    def __init__(self, base_url: str, model: str | None, api_key: str, timeout: float) -> None:
        import httpx

        self.base = base_url.rstrip("/")
        self.root = self.base[: -len("/v1")] if self.base.endswith("/v1") else self.base
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {api_key}"})
        self.logprobs = True
        try:
            self.model = model or self._first_model()
        except EndpointError:
            self.client.close()
            raise

    def _first_model(self) -> str:
        r = self._send("GET", self.base + "/models")
        if r.status_code != 200:
            raise EndpointError(f"{self.base}/models: HTTP {r.status_code}; pass --model-a/--model-b")
        try:
            data = r.json().get("data") or []
        except (ValueError, AttributeError):
            raise EndpointError(f"{self.base}/models did not answer with an OpenAI model list") from None
        if not data:
            raise EndpointError(f"{self.base}/models lists no model; pass --model-a/--model-b")
        return data[0]["id"]

    def _send(self, method: str, url: str, **kwargs):
        """One request; a transport failure becomes an ``EndpointError`` naming the URL."""
        import httpx

        try:
            return self.client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EndpointError(f"cannot reach {url}: {reason}") from None

    def metrics(self) -> dict[str, float] | None:
        from .serve.loadtest import parse_metrics

        try:
            r = self.client.get(self.root + "/metrics")
        except Exception:  # noqa: BLE001 - an endpoint without /metrics is normal
            return None
        return parse_metrics(r.text) if r.status_code == 200 else None

    def ask(self, messages: list[dict], max_tokens: int) -> Reply:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                "seed": 0, "stream": False}
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=2)
        t0 = time.perf_counter()
        r = self._send("POST", self.base + "/chat/completions", json=body)
        if r.status_code in (400, 422) and self.logprobs:
            self.logprobs = False  # this endpoint refuses logprobs: compare text only
            return self.ask(messages, max_tokens)
        seconds = time.perf_counter() - t0
        if r.status_code != 200:
            first = r.text.strip().splitlines()[0][:200] if r.text.strip() else ""
            raise EndpointError(f"{self.base}/chat/completions: HTTP {r.status_code}: {first}")
        data = r.json()
        choice = data["choices"][0]
        content = (choice.get("logprobs") or {}).get("content")
        tokens = top = None
        if content:
            tokens = [c["token"] for c in content]
            top = [[t["logprob"] for t in c.get("top_logprobs") or []] for c in content]
        usage = data.get("usage") or {}
        text = choice["message"].get("content") or ""
        return Reply(text=text, tokens=tokens, top=top,
                     completion_tokens=int(usage.get("completion_tokens") or len(tokens or []) or len(text.split())),
                     seconds=seconds, finish_reason=choice.get("finish_reason"), lossless=data.get("lossless"))

    def close(self) -> None:
        self.client.close()


def _tau(before: dict | None, after: dict | None) -> float | None:
    from .serve.loadtest import counter

    if before is None or after is None:
        return None
    drafts = counter(after, "vllm:spec_decode_num_drafts") - counter(before, "vllm:spec_decode_num_drafts")
    acc = counter(after, "vllm:spec_decode_num_accepted_tokens") - counter(before, "vllm:spec_decode_num_accepted_tokens")
    return 1.0 + acc / drafts if drafts > 0 else None


def run_audit(args) -> dict:
    from rich.console import Console
    from rich.progress import Progress

    domains = [d for d in args.domains.split(",") if d]
    prompts = load_prompts(args.prompt_file)
    unknown = sorted(set(domains) - {p["domain"] for p in prompts})
    if unknown:
        raise SystemExit(f"token_spec audit: unknown domain(s) {unknown}; the prompt set has "
                         f"{sorted({p['domain'] for p in prompts})}")
    chosen = []
    for d in domains:
        ps = [p for p in prompts if p["domain"] == d]
        chosen.extend(ps[: args.prompts or None])
    a = Endpoint(args.base_url_a, args.model_a, args.api_key, args.timeout)
    try:
        b = Endpoint(args.base_url_b, args.model_b, args.api_key, args.timeout)
    except EndpointError:
        a.close()
        raise
    rows, domain_rows = [], []
    try:
        stderr = Console(stderr=True)
        with Progress(transient=False, console=stderr, disable=not stderr.is_terminal) as progress:
            task = progress.add_task("audit", total=len(chosen))
            for d in domains:
                ma0, mb0 = a.metrics(), b.metrics()
                drows = []
                for p in (p for p in chosen if p["domain"] == d):
                    ra = a.ask(p["messages"], args.max_tokens)
                    rb = b.ask(p["messages"], args.max_tokens)
                    row = {"id": p["id"], "domain": d, **compare(ra, rb),
                           "a": asdict(ra), "b": asdict(rb)}
                    drows.append(row)
                    progress.update(task, advance=1, description=f"audit {d}")
                ma1, mb1 = a.metrics(), b.metrics()
                rows.extend(drows)
                div = [r["divergence"] for r in drows if not r["identical"] and r["divergence"] is not None]
                domain_rows.append({
                    "domain": d, "prompts": len(drows),
                    "identical": sum(r["identical"] for r in drows),
                    "identity_rate": sum(r["identical"] for r in drows) / len(drows) if drows else None,
                    "mean_divergence": statistics.fmean(div) if div else None,
                    "tok_s_a": _rate(drows, "a"), "tok_s_b": _rate(drows, "b"),
                    "tau_a": _tau(ma0, ma1), "tau_b": _tau(mb0, mb1),
                })
    finally:
        a.close()
        b.close()
    margins = [min(m for m in (r["margin_a"], r["margin_b"]) if m is not None) for r in rows
               if r["margin_a"] is not None or r["margin_b"] is not None]
    return {
        "a": {"url": args.base_url_a, "model": a.model, "label": args.label_a, "logprobs": a.logprobs},
        "b": {"url": args.base_url_b, "model": b.model, "label": args.label_b, "logprobs": b.logprobs},
        "config": {"max_tokens": args.max_tokens, "domains": domains, "prompts_per_domain": args.prompts or "all"},
        "domains": domain_rows, "prompts": rows,
        "overall": {"prompts": len(rows), "identical": sum(r["identical"] for r in rows),
                    "identity_rate": sum(r["identical"] for r in rows) / len(rows) if rows else None,
                    "median_margin_at_divergence": statistics.median(margins) if margins else None},
    }


def _rate(rows: list[dict], side: str) -> float | None:
    toks = sum(r[side]["completion_tokens"] for r in rows)
    secs = sum(r[side]["seconds"] for r in rows)
    return toks / secs if secs > 0 else None


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_table(result: dict):
    """The per-domain table as a ``spectool.tables.Table`` (the "all" row under a rule)."""
    from spectool.tables import Column, Table

    la, lb = result["a"]["label"], result["b"]["label"]
    columns = [Column("domain", 17, "<")] + [
        Column(" " + col, len(col) + 1) for col in ("identical", "rate", "mean div. pos", f"tok/s {la}",
                                                   f"tok/s {lb}", f"tau {la}", f"tau {lb}")]
    rows = [[r["domain"], f" {r['identical']}/{r['prompts']}", " " + _f(r["identity_rate"], ".0%"),
             " " + _f(r["mean_divergence"], ".1f"), " " + _f(r["tok_s_a"], ".1f"), " " + _f(r["tok_s_b"], ".1f"),
             " " + _f(r["tau_a"], ".2f"), " " + _f(r["tau_b"], ".2f")] for r in result["domains"]]
    o = result["overall"]
    total = ["all", f" {o['identical']}/{o['prompts']}", " " + _f(o["identity_rate"], ".0%"), "", "", "", "", ""]
    return Table(columns, rows, title=f"audit: {la} vs {lb} (greedy, max_tokens {result['config']['max_tokens']})",
                 totals=[total])


def format_markdown(result: dict) -> str:
    """The domain table as GitHub markdown (for the docs)."""
    la, lb = result["a"]["label"], result["b"]["label"]
    lines = [f"| domain | identical | mean divergence pos | tok/s {la} | tok/s {lb} | τ {la} | τ {lb} |",
             "|---|---|---|---|---|---|---|"]
    for r in result["domains"]:
        lines.append(f"| {r['domain']} | {r['identical']}/{r['prompts']} | {_f(r['mean_divergence'], '.1f')} | "
                     f"{_f(r['tok_s_a'], '.1f')} | {_f(r['tok_s_b'], '.1f')} | {_f(r['tau_a'], '.2f')} | "
                     f"{_f(r['tau_b'], '.2f')} |")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    doms = result["domains"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    a1.bar([d["domain"] for d in doms], [100 * (d["identity_rate"] or 0) for d in doms], color="tab:blue")
    a1.set_ylim(0, 105)
    a1.set_ylabel("greedy identity (%)")
    a1.tick_params(axis="x", rotation=25)
    div = [(r["divergence"], min(m for m in (r["margin_a"], r["margin_b"]) if m is not None))
           for r in result["prompts"] if r["margin_a"] is not None or r["margin_b"] is not None]
    if div:
        a2.scatter([d for d, _ in div], [m for _, m in div])
    a2.set_xlabel("first divergence position (tokens)")
    a2.set_ylabel("top-2 logprob margin there")
    a2.set_title("small margin: numerics; large: method")
    fig.suptitle(f"audit: {result['a']['label']} vs {result['b']['label']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    from spectool.cli import ensure_writable_dir
    from spectool.tables import emit_result

    parser = getattr(args, "parser", None)

    def fail(message: str) -> None:
        if parser is not None:
            parser.error(message)  # one line, exit status 2
        raise SystemExit(f"token_spec audit: error: {message}")

    try:
        out = ensure_writable_dir(args.out)
    except ValueError as exc:
        fail(f"argument --out: {exc}")
    try:
        result = run_audit(args)
    except EndpointError as exc:
        fail(str(exc))
    result["command"] = "token_spec " + " ".join(sys.argv[1:])
    (out / "audit.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "audit.png")
    emit_result(result, [render_table(result)],
                f"wrote {out / 'audit.json'} and {out / 'audit.png'}",
                getattr(args, "json", False), blank_line=False)
    return 0
