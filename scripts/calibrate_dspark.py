#!/usr/bin/env python
"""Fit the DSpark confidence head (token_spec.dspark.TopProbConfidence): a Platt scaling
a = sigmoid(w * logit(m) + b) of a drafter's own top probability m, per drafter, written to
token_spec/data/dspark-confidence.json.

    .venv/bin/python scripts/calibrate_dspark.py            # ~2 min on 2 idle cores
    .venv/bin/python scripts/calibrate_dspark.py --quick    # smoke run, prints only

Data: the target's greedy replies to every ``--stride``-th training prompt of the draft
corpus (scripts/build_draft.py / scripts/draft_corpus.py, disjoint from the benchmark and
held-out prompts) plus stdlib windows from the training files; evaluation on the held-out
prompts and held-out stdlib files. Per scored position (the reply tokens; every code
position) and drafter (the distilled draft model; the EAGLE-3 head when its weights exist,
at its first draft step):
* greedy label: the drafter's argmax == the target's argmax (acceptance at T = 0);
* sampled label: sum(min(p, q)) at T = 1 (the acceptance probability of a sampled draft).
Each pair (w, b) minimises the cross-entropy to its label (soft for the sampled one).
Held-out Brier scores of the identity (a = m) and of the fit are reported next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)
os.environ.setdefault("TOKEN_SPEC_NATIVE", "0")  # only the Hugging Face forward is used: no C++ build needed

import torch  # noqa: E402

import build_draft  # noqa: E402
import draft_corpus  # noqa: E402
from token_spec.draft_model import load_draft  # noqa: E402
from token_spec.dspark import default_confidence_path  # noqa: E402
from token_spec.eagle3 import Eagle3WeightsMissing, load_eagle3  # noqa: E402
from token_spec.target import load_target  # noqa: E402


@torch.inference_mode()
def rows(docs, target, draft, head):
    """Per drafter: (top probability m, greedy label, sampled label) at every scored position."""
    out = {"draft": [], "eagle3": []}
    model = target.model
    for d in docs:
        ids = torch.tensor(d.ids)[None]
        res = model(input_ids=ids, output_hidden_states=True)
        p = torch.softmax(res.logits.float()[0], -1)  # row t: token t + 1
        t_arg = p.argmax(-1)
        scored = torch.tensor(d.scored)
        q = torch.softmax(draft.hf_model(input_ids=ids).logits.float()[0], -1)
        out["draft"].append(torch.stack([q.max(-1).values, (q.argmax(-1) == t_arg).float(),
                                         torch.minimum(p, q).sum(-1)], -1)[scored])
        if head is not None:
            feats = torch.cat([res.hidden_states[li + 1] for li in head.tap_layers], -1).float()[:, :-1]
            o = head.unroll(feats, ids[:, 1:], 1)[0][0]  # row t: feature t, token t + 1 -> token t + 2
            qh = torch.softmax(head.full_logits(o), -1)[:-1]
            ph, ah = p[1:-1], t_arg[1:-1]
            sc = scored[1:-1]
            out["eagle3"].append(torch.stack([qh.max(-1).values, (qh.argmax(-1) == ah).float(),
                                              torch.minimum(ph, qh).sum(-1)], -1)[sc])
    return {k: torch.cat(v) for k, v in out.items() if v}


def fit(m, y, steps: int = 300):
    x = torch.logit(m.clamp(1e-6, 1 - 1e-6)).double()
    y = y.double()
    wb = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([wb], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(wb[0] * x + wb[1], y)
        loss.backward()
        return loss

    opt.step(closure)
    return [round(float(v), 4) for v in wb.detach()]


def brier(m, y, wb=None):
    a = m.double() if wb is None else torch.sigmoid(wb[0] * torch.logit(m.clamp(1e-6, 1 - 1e-6)).double() + wb[1])
    return round(float(((a - y.double()) ** 2).mean()), 4)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stride", type=int, default=20, help="every s-th training prompt")
    ap.add_argument("--code-tokens", type=int, default=2304)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    train_files, held_files = build_draft.stdlib_files()
    functions = draft_corpus.stdlib_functions(train_files)
    prompts = build_draft.training_prompts(args.seed, functions, 320)[args.stride // 2 :: args.stride]
    held = build_draft.heldout_prompts()
    if args.quick:
        prompts, held, args.max_new_tokens, args.code_tokens = prompts[:3], held[:2], 16, 384
    target = load_target(dtype=torch.bfloat16)
    tok = target.tokenizer
    gen = build_draft.generate_replies(target, prompts + held, args.max_new_tokens, 48, "generate")
    fit_docs = build_draft.code_windows(tok, train_files, args.code_tokens, 384, args.seed + 7, "code") + gen[: len(prompts)]
    eval_docs = build_draft.code_windows(tok, held_files, 768, 384, args.seed + 1, "stdlib") + gen[len(prompts):]
    target.model.float()
    draft = load_draft(target.model)
    try:
        head = load_eagle3(target)
    except Eagle3WeightsMissing:
        head = None
    fit_rows, eval_rows = rows(fit_docs, target, draft, head), rows(eval_docs, target, draft, head)
    result = {"how": "Platt scaling of the drafter's top probability, scripts/calibrate_dspark.py",
              "command": "python scripts/calibrate_dspark.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    for name, r in fit_rows.items():
        e = eval_rows[name]
        entry = {"fit_positions": int(r.shape[0]), "heldout_positions": int(e.shape[0])}
        for label, col in (("greedy", 1), ("sampled", 2)):
            wb = fit(r[:, 0], r[:, col])
            entry[label] = {"platt": wb, "heldout_mean_label": round(float(e[:, col].mean()), 4),
                            "heldout_brier_identity": brier(e[:, 0], e[:, col]),
                            "heldout_brier_fitted": brier(e[:, 0], e[:, col], wb)}
        result[name] = entry
    print(json.dumps(result, indent=1))
    if not args.quick:
        out = Path(args.out) if args.out else default_confidence_path()
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
