"""The four drafter generations of the source article, measured: a table from a bench file.

The article orders four generations by the bottleneck each removes: EAGLE-3 lengthens
acceptance, DFlash cuts drafting time, DSpark cuts verification time, DFlash 2 raises
acceptance again. On its own harness (Qwen3-8B on a GPU) it reports τ (tokens per
verification pass) of 1.3 for EAGLE-3, 2.2–2.5 for DFlash and 3.5 for DSpark, and
DFlash 2 at 5.97 against DFlash's 4.92 on Qwen3.5-4B.

:func:`render_generations` reads a ``token_spec bench`` results file that ran these
drafters and prints, per generation, our τ per domain next to the article's figure and
whether the article's ordering holds here: each generation's mean τ against the one
it follows. ``python -m token_spec.generations FILE`` prints it; the README's table is
that output for ``docs/results/generations_bench.json`` (a test checks it).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial
from typing import Any

from spectool.tables import render_file_main

from .report import load_average, markdown_table

__all__ = ["GENERATIONS", "Generation", "render_generations", "main"]


@dataclass(frozen=True)
class Generation:
    name: str            # the article's name
    drafter: str         # our bench's drafter spec
    lever: str           # what the article says it improves
    article_tau: str     # the article's reported τ
    beats: str | None    # the generation whose τ it should exceed, in the article


GENERATIONS = (
    Generation("EAGLE-3", "eagle3", "longer acceptance (feature fusion, training-time test)",
               "1.3", None),
    Generation("DFlash", "dflash:8", "cheaper drafting (a block in one pass)", "2.2–2.5",
               "eagle3"),
    Generation("DSpark", "dspark", "cheaper verification (confidence-scheduled length)", "3.5",
               "dflash:8"),
    Generation("DFlash 2", "dflash2:8", "longer acceptance (parallel selector)",
               "5.97 vs DFlash 4.92", "dflash:8"),
)


def _tau_by(data: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, float]]]:
    domains: list[str] = []
    taus: dict[str, dict[str, float]] = {}
    for r in data["rows"]:
        if r["domain"] not in domains:
            domains.append(r["domain"])
        parts = r["method"].split(":spec:", 1)
        if len(parts) == 2 and r.get("tau") is not None:
            taus.setdefault(parts[1], {})[r["domain"]] = float(r["tau"])
    return domains, taus


def render_generations(data: dict[str, Any]) -> str:
    """Markdown: one row per generation, then the line with the file's command.

    Raises ``ValueError`` naming a generation the file did not run."""
    domains, taus = _tau_by(data)
    missing = [g.drafter for g in GENERATIONS if g.drafter not in taus]
    if missing:
        raise ValueError(f"the bench file has no rows for {', '.join(missing)}")

    def mean(d: str) -> float:
        return statistics.fmean(taus[d].values())

    head = (["generation", "our drafter", "what it improves", "article's τ"]
            + [f"our τ, {d}" for d in domains] + ["our mean τ", "article's ordering here"])
    rows = []
    for g in GENERATIONS:
        if g.beats is None:
            order = "first"
        else:
            prev = next(p for p in GENERATIONS if p.drafter == g.beats)
            holds = mean(g.drafter) > mean(g.beats)
            order = f"{'holds' if holds else 'does not hold'} (vs {prev.name})"
        cells = [g.name, f"`{g.drafter}`", g.lever, g.article_tau]
        cells += [f"{taus[g.drafter][d]:.2f}" if d in taus[g.drafter] else "-" for d in domains]
        cells += [f"{mean(g.drafter):.2f}", order]
        rows.append(cells)
    env = data.get("environment", {})
    return markdown_table(head, rows, f"`{data['command']}`"
                          + (f", {env['cpu']}" if env.get("cpu") else "")
                          + load_average(env)
                          + "; greedy τ of `eagle3` and the block drafters depends only on the outputs, "
                          "while `dspark`'s schedule also reads the pass costs measured at start-up.")


# main(argv=None) -> exit status: prints the table of the file named on the command line
main = partial(render_file_main, 'python -m token_spec.generations',
               "Print the article's four drafter generations with their τ from a token_spec bench file.",
               'a token_spec bench results JSON that ran eagle3, dflash:8, dspark and dflash2:8', render_generations)


if __name__ == "__main__":
    raise SystemExit(main())
