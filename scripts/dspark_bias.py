#!/usr/bin/env python
"""How large is the joint DSpark schedule's bias on the real model, and could a test see it?

    .venv/bin/python scripts/dspark_bias.py [--prompts 6] [--costs measured|1,1.05,...]

For each prompt, the exact law of the FIRST emitted token of one round at T = 1 is
computed under the joint schedule (draft d_1 ~ q_1, then d_2 ~ q_2(.|d_1); verify the
length L in {0, 1, 2} with the best expected throughput, which for L >= 1 depends on
a_2 = confidence(q_2(.|d_1)), i.e. on d_1):

    P(x) = p(x) + sum_d q(d) v(d) [V(x | d) - p(x)],

v(d) = 1 if the joint schedule verifies d_1 = d (0: the round is a plain target step,
which emits x ~ p), V(x | d) = the verifier's law given draft d (accept with min(1, p/q),
else the residual). Every d with q(d) >= ``--floor`` is scored with one
draft step; the rest (below ``--floor`` each) is counted as verified. The first-decline schedule's v does not depend on
d, so its law is p exactly. Reported per prompt: TV(P, p), KL(P || p), and the number of
rounds a G-test of the first token needs to reach p < 1e-8 on average,
n ~ (chi2 quantile at 1e-8 with the test's degrees of freedom - df) / (2 KL).
"""

from __future__ import annotations

import argparse
import json
import sys

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)

import torch  # noqa: E402
from scipy.stats import chi2  # noqa: E402

from token_spec.draft_model import fast_draft, load_draft  # noqa: E402
from token_spec.dspark import SurvivalSchedule, TopProbConfidence  # noqa: E402
from token_spec.gamma import measure_pass_costs, measure_step_ratio  # noqa: E402
from token_spec.prompts import DOMAINS, prompts_for  # noqa: E402
from token_spec.target import load_target  # noqa: E402


@torch.inference_mode()
def first_token_law(target, draft, conf, schedule, ids, floor: float):
    """(p, the joint schedule's law of the first emitted token, P(d_1 is verified), a_1)."""
    p = torch.softmax(target.start(ids[:-1]).extend(torch.tensor(ids[-1:]))[-1].float(), -1).double()
    session = draft.start(ids[:-1])
    q_logits = session.extend(torch.tensor(ids[-1:]))[-1].float()
    q = torch.softmax(q_logits, -1).double()
    a1 = conf(q_logits, False)
    base = session.length
    v = torch.ones_like(q)  # tokens with q < floor: counted as verified
    rates0 = [schedule.rate(1.0, 0), schedule.rate(1 + a1, 1)]
    for tok in (q >= floor).nonzero()[:, 0].tolist():
        session.truncate(base)
        a2 = conf(session.extend(torch.tensor([tok]))[-1], False)
        rates = rates0 + [schedule.rate(1 + a1 + a1 * a2, 2)]
        v[tok] = 1.0 if max(range(3), key=lambda j: (rates[j], -j)) >= 1 else 0.0
    acc = torch.minimum(torch.ones_like(q), p / q.clamp(min=1e-300))  # accept probability of each d
    resid = (p - q).clamp(min=0)
    resid = resid / resid.sum()
    qv = q * v
    law = qv * acc + (qv * (1 - acc)).sum() * resid + (1 - qv.sum()) * p
    return p, law, float(qv.sum()), a1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=2, help="prompts per domain")
    ap.add_argument("--costs", default="measured", help="'measured' or a comma list costs[0..2]")
    ap.add_argument("--draft-cost", type=float, default=0.0, help="with --costs: a draft step in target steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--floor", type=float, default=1e-5, help="draft tokens below this q are not scored one by one")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_target(dtype=torch.bfloat16)
    if args.costs == "measured":
        costs = measure_pass_costs(target, max_width=3)
        draft_cost = measure_step_ratio(fast_draft(load_draft(target.model), target.dtype), target)
    else:
        costs, draft_cost = tuple(float(c) for c in args.costs.split(",")), args.draft_cost
    schedule = SurvivalSchedule(costs, draft_cost, max_tokens=2)
    draft = fast_draft(load_draft(target.model), target.dtype)
    conf = TopProbConfidence.load("draft")
    out = {"costs": [round(c, 3) for c in costs], "draft_cost": round(draft_cost, 3), "confidence": conf.source,
           "prompts": []}
    for domain in DOMAINS:
        for msgs in prompts_for(domain)[: args.prompts]:
            ids = target.encode(msgs)
            p, law, verified, a1 = first_token_law(target, draft, conf, schedule, ids, args.floor)
            tv = 0.5 * float((law - p).abs().sum())
            kl = float((law * (law.clamp(min=1e-300) / p.clamp(min=1e-300)).log()).sum())
            df = int(((p * 1000) >= 5).sum())  # cells with >= 5 expected at n = 1000: the G-test's bins, roughly
            need = (chi2.isf(1e-8, df) - df) / (2 * kl) if kl > 0 else float("inf")
            row = {"domain": domain, "a1": round(a1, 3), "p_verify_d1": round(verified, 3), "tv": tv, "kl": kl,
                   "rounds_for_p_1e-8": need}
            out["prompts"].append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
