"""``token_spec bench``: vanilla vs speculative (each drafter) vs HF assisted generation.

Same target, same prompts, one process. For every domain, prompt and method the
request is repeated ``--repeats`` times and the median wall time is kept; a domain's
tokens/s is its total emitted tokens over the sum of those medians. Methods:

* ``vanilla``            our ``VanillaDecoder`` (the baseline of every speed-up);
* ``spec:<drafter>``     our ``SpeculativeDecoder`` with ``ngram`` / ``suffix`` / ``draft``;
* ``hf:greedy``          ``model.generate`` without assistance (HF's own overhead);
* ``hf:prompt_lookup``   ``model.generate(..., prompt_lookup_num_tokens=gamma)``;
* ``hf:assisted``        ``model.generate(..., assistant_model=<draft .hf_model>)`` with
  HF's own defaults (up to 20 draft tokens, confidence threshold 0.4).

Reported per domain and method: end-to-end tok/s (prefill included) and its
speed-up vs vanilla; decode tok/s (prefill excluded, ours only, over all repeats)
and its speed-up; τ (mean acceptance length incl. bonus), α̂ and the acceptance
rate (ours only: HF exposes no counters); greedy identity (outputs equal to
vanilla's, token for token; temperature 0). Methods run interleaved per prompt and
repeat. The suffix drafter remembers earlier prompts of the run, but every repeat
of a prompt starts from the memory it had before that prompt (it never sees the
answer it is being timed on). Writes ``bench.json`` and ``bench.png`` into ``--out``.

Example: ``token_spec bench --out bench-out --max-tokens 64 --repeats 3``
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["main", "build_parser", "run_bench"]

OUR_DRAFTERS = ("ngram", "suffix", "draft")
HF_METHODS = ("hf:greedy", "hf:prompt_lookup", "hf:assisted")


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


def _float_within(low: float, high: float | None = None):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (low <= value and (high is None or value <= high)):
            bound = f"within {low:g}..{high:g}" if high is not None else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    parse.__name__ = "float"
    return parse


def _comma_list(allowed) -> object:
    """A comma list of names from ``allowed`` (each once)."""
    def parse(text: str) -> str:
        names = [n for n in text.split(",") if n]
        bad = [n for n in names if n not in allowed]
        if not names or bad:
            raise argparse.ArgumentTypeError(f"unknown {bad or 'empty list'}; choose from {sorted(allowed)}")
        return ",".join(dict.fromkeys(names))

    parse.__name__ = "list"
    return parse


def _drafter_list(text: str) -> str:
    """``ngram,suffix,draft:2``: known drafters, an optional ``:G`` with G >= 1."""
    specs = [d for d in text.split(",") if d]
    if not specs:
        raise argparse.ArgumentTypeError(f"empty drafter list; choose from {list(OUR_DRAFTERS)}")
    for spec in specs:
        name, colon, g = spec.partition(":")
        if name not in OUR_DRAFTERS:
            raise argparse.ArgumentTypeError(f"unknown drafter {name!r}; choose from {list(OUR_DRAFTERS)}")
        if colon and not (g.isdigit() and int(g) >= 1):
            raise argparse.ArgumentTypeError(f"{spec!r}: the gamma after ':' must be an integer >= 1")
    return ",".join(dict.fromkeys(specs))


def build_parser() -> argparse.ArgumentParser:
    from spectool.cli import OneLineErrorParser, version

    from .prompts import DOMAINS

    parser = OneLineErrorParser(prog="token_spec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    b = sub.add_parser("bench", help="benchmark vanilla vs speculative vs HF assisted generation")
    b.add_argument("--out", required=True, help="folder for bench.json and bench.png (checked writable first)")
    b.add_argument("--max-tokens", type=_int_at_least(1), default=64, help="new tokens per request (default 64)")
    b.add_argument("--repeats", type=_int_at_least(1), default=3,
                   help="repeats per prompt and method (>= 1); the median is kept")
    b.add_argument("--domains", type=_comma_list(DOMAINS), default=",".join(DOMAINS),
                   help=f"comma list of {sorted(DOMAINS)}")
    b.add_argument("--prompts", type=_int_at_least(0), default=0,
                   help="use only the first N prompts per domain (0 = all)")
    b.add_argument("--drafters", type=_drafter_list, default=",".join(OUR_DRAFTERS),
                   help=f"comma list of {list(OUR_DRAFTERS)}; name:G sets that drafter's gamma (G >= 1, e.g. draft:2)")
    b.add_argument("--gamma", type=_int_at_least(1), default=4, help="draft length per round (>= 1; default 4)")
    b.add_argument("--draft-confidence", type=_float_within(0.0, 1.0), default=0.4,
                   help="draft model: stop drafting where its top probability < this (HF's default 0.4; 0 = off)")
    b.add_argument("--adaptive", action="store_true", help="adaptive gamma (HF heuristic) instead of fixed")
    b.add_argument("--temperature", type=_float_within(0.0), default=0.0, help="0 = greedy (default)")
    b.add_argument("--seed", type=int, default=0, help="sampling seed when --temperature > 0 (default 0)")
    b.add_argument("--no-hf", action="store_true", help="skip the Hugging Face generate() methods")
    b.add_argument("--threads", type=_int_at_least(0), default=0, help="torch intra-op threads (0 = torch default)")
    from .serve.cli import add_subcommands  # serve, loadtest, audit (their own module)

    add_subcommands(sub)
    return parser


@dataclass
class Cell:
    """One (domain, method): per-prompt median times and tokens, plus our counters."""

    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    metrics: object = None

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / sum(self.seconds) if sum(self.seconds) > 0 else 0.0


def _strip_eos(ids: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i]
    return ids


def _hf_generate(target, ids: list[int], kind: str, args, assistant) -> list[int]:
    import torch

    inputs = torch.tensor([ids], dtype=torch.long)
    kwargs = dict(
        attention_mask=torch.ones_like(inputs), max_new_tokens=args.max_tokens,
        eos_token_id=target.eos_id, pad_token_id=target.eos_id,
    )
    if args.temperature == 0:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=args.temperature, top_p=None, top_k=None)
    if kind == "hf:prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = args.gamma
    elif kind == "hf:assisted":
        kwargs["assistant_model"] = assistant
    with torch.inference_mode():
        out = target.model.generate(inputs, **kwargs)
    return _strip_eos(out[0, len(ids) :].tolist(), set(target.eos_ids))


def _make_drafter(name: str, target, args):
    from .drafters import ModelDrafter, NgramDrafter, SuffixDrafter

    if name == "ngram":
        return NgramDrafter()
    if name == "suffix":
        return SuffixDrafter()
    if name == "draft":
        from .draft_model import load_draft

        return ModelDrafter(load_draft(target.model), confidence=args.draft_confidence, name="draft")
    raise ValueError(f"unknown drafter {name!r}; choose from {list(OUR_DRAFTERS)}")


def run_bench(args) -> dict:
    import torch
    from tqdm import tqdm

    from .engine import SpeculativeDecoder, VanillaDecoder
    from .gamma import AdaptiveGamma, FixedGamma
    from .prompts import prompts_for
    from .sampling import SamplingParams
    from .target import load_target

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    domains = [d for d in args.domains.split(",") if d]
    drafters = [d for d in args.drafters.split(",") if d]
    target = load_target()
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=None if args.temperature == 0 else args.seed)

    def policy(gamma: int | None = None):
        gamma = args.gamma if gamma is None else gamma
        return AdaptiveGamma(initial=gamma, max_gamma=max(16, gamma)) if args.adaptive else FixedGamma(gamma)

    decoders = {"vanilla": VanillaDecoder(target)}
    draft_hf = None
    for spec in drafters:
        name, _, g = spec.partition(":")  # "draft:2" = the draft model with gamma 2
        drafter = _make_drafter(name, target, args)
        decoders[f"spec:{spec}"] = SpeculativeDecoder(target, drafter, gamma_policy=policy(int(g) if g else None))
        if name == "draft":
            draft_hf = drafter.lm.hf_model
    methods = list(decoders)
    if not args.no_hf:
        methods += [m for m in HF_METHODS if m != "hf:assisted" or draft_hf is not None]

    prompts = {d: prompts_for(d)[: args.prompts or None] for d in domains}
    total = sum(len(p) for p in prompts.values()) * len(methods) * args.repeats
    # Warm-up (kernels, allocator) so the first timed request is not penalised.
    warm = target.encode(prompts[domains[0]][0])
    VanillaDecoder(target).generate(warm, SamplingParams(temperature=0, max_tokens=4))
    if not args.no_hf:
        _hf_generate(target, warm, "hf:greedy", argparse.Namespace(**{**vars(args), "max_tokens": 4}), None)

    cells: dict[tuple[str, str], Cell] = {}
    runs = []
    bar = tqdm(total=total, desc="bench", unit="req", file=sys.stderr)
    # Methods are interleaved per prompt and repeat (in a rotating order), so that a
    # change of machine load hits every method alike.
    for domain in domains:
        for pi, messages in enumerate(prompts[domain]):
            ids = target.encode(messages)
            times: dict[str, list[float]] = {m: [] for m in methods}
            outs: dict[str, list[int]] = {}
            # A cross-request drafter must not learn this prompt's own output from an earlier
            # repeat: every repeat starts from the memory it had before the prompt.
            snapshots = {m: copy.deepcopy(d.drafter) for m, d in decoders.items() if m.startswith("spec:suffix")}
            for rep in range(args.repeats):
                shift = (pi + rep) % len(methods)
                for method in methods[shift:] + methods[:shift]:
                    dec = decoders.get(method)
                    if method in snapshots:
                        dec.drafter = copy.deepcopy(snapshots[method])
                    t0 = time.perf_counter()
                    if dec is not None:
                        g = dec.generate(ids, params)
                        out = g.token_ids
                    else:
                        out = _hf_generate(target, ids, method, args, draft_hf)
                    times[method].append(time.perf_counter() - t0)
                    cell = cells.setdefault((domain, method), Cell())
                    if dec is not None:
                        if cell.metrics is None:
                            from .metrics import SpecMetrics

                            cell.metrics = SpecMetrics(lossless=dec.lossless)
                        cell.metrics.add(g.metrics)
                    outs[method] = out
                    bar.update(1)
                    bar.set_postfix_str(f"{domain} #{pi} {method}")
            for method in methods:
                cell = cells[(domain, method)]
                cell.tokens.append(len(outs[method]))
                cell.seconds.append(statistics.median(times[method]))
                runs.append({"domain": domain, "method": method, "prompt": pi, "tokens": len(outs[method]),
                             "seconds": times[method], "output_ids": outs[method]})
    bar.close()

    # greedy identity vs vanilla, per prompt
    if args.temperature == 0:
        ref = {(r["domain"], r["prompt"]): r["output_ids"] for r in runs if r["method"] == "vanilla"}
        for r in runs:
            r["identical"] = r["output_ids"] == ref[(r["domain"], r["prompt"])]
            cells[(r["domain"], r["method"])].identical.append(r["identical"])

    rows = []
    for domain, method in ((d, m) for d in domains for m in methods):
        cell = cells[(domain, method)]
        base = cells[(domain, "vanilla")].tokens_per_s
        m = cell.metrics
        rows.append({
            "domain": domain, "method": method, "tokens": sum(cell.tokens), "seconds": sum(cell.seconds),
            "tokens_per_s": cell.tokens_per_s, "speedup": cell.tokens_per_s / base if base else None,
            "decode_tokens_per_s": _decode_rate(m),
            "decode_speedup": (_decode_rate(m) / _decode_rate(cells[(domain, "vanilla")].metrics))
            if m is not None and _decode_rate(m) else None,
            "tau": m.mean_acceptance_length if m is not None and m.num_drafts else None,
            "alpha_hat": m.alpha_hat if m is not None else None,
            "acceptance_rate": m.acceptance_rate if m is not None else None,
            "tokens_per_pass": m.tokens_per_pass if m is not None else None,
            "drafting_s": m.drafting_s if m is not None else None,
            "verification_s": m.verification_s if m is not None else None,
            "identical": all(cell.identical) if cell.identical else None,
            "identical_prompts": f"{sum(cell.identical)}/{len(cell.identical)}" if cell.identical else None,
            "counters": m.to_dict() if m is not None else None,
        })
    return {
        "command": "token_spec " + " ".join(sys.argv[1:]) if sys.argv and "token_spec" in sys.argv[0] else None,
        "config": {k: v for k, v in vars(args).items() if k != "func"},
        "environment": {
            "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(), "target": target.name,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "rows": rows,
        "runs": runs,
    }


def _decode_rate(m) -> float | None:
    """Emitted tokens per second of decoding, prefill excluded (ours only: all repeats)."""
    if m is None or m.total_s - m.prefill_s <= 0:
        return None
    return m.num_emitted_tokens / (m.total_s - m.prefill_s)


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(result: dict) -> str:
    head = (f"{'domain':<7} {'method':<17} {'tok/s':>7} {'speedup':>8} {'dec.tok/s':>9} {'dec.spd':>8} "
            f"{'tau':>5} {'alpha':>6} {'acc.rate':>8} {'identical':>9}")
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(
            f"{r['domain']:<7} {r['method']:<17} {_fmt(r['tokens_per_s'], '7.2f')} {_fmt(r['speedup'], '7.2f')}x "
            f"{_fmt(r['decode_tokens_per_s'], '9.2f')} {_fmt(r['decode_speedup'], '7.2f')}x "
            f"{_fmt(r['tau'], '5.2f')} {_fmt(r['alpha_hat'], '6.2f')} {_fmt(r['acceptance_rate'], '8.2f')} "
            f"{r['identical_prompts'] or '-':>9}"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    domains = list(dict.fromkeys(r["domain"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(domains) * len(methods) / 3), 4.5))
    for j, method in enumerate(methods):
        xs, ys = [], []
        for i, d in enumerate(domains):
            r = next((r for r in rows if r["domain"] == d and r["method"] == method), None)
            if r is not None:
                xs.append(i + j * width)
                ys.append(r["tokens_per_s"])
        ax.bar(xs, ys, width, label=method)
    ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(domains))], domains)
    ax.set_ylabel("tokens / s (median over repeats)")
    env = result["environment"]
    ax.set_title(f"{env['target']} on CPU ({env['threads']} threads): vanilla vs speculative vs HF")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from spectool.cli import ensure_writable_dir

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "bench":
        return args.func(args)
    try:  # before the model loads: a bad --out costs one line, not a lost run
        out = ensure_writable_dir(args.out)
    except ValueError as exc:
        parser.error(str(exc))
    result = run_bench(args)
    if argv is not None:
        result["command"] = "token_spec " + " ".join(argv)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    plot(result, out / "bench.png")
    print(format_table(result))
    print(f"\nwrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
