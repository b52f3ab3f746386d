"""The shipped SmolLM2 draft model (token_spec.draft_model).

Fast tests use a tiny random LLaMA as a stand-in target; tests marked ``model`` load
the real SmolLM2-135M-Instruct target and the shipped draft weights.
"""

from __future__ import annotations

import json

import pytest
import torch

from token_spec.draft_model import (
    DraftModel,
    DraftWeightsMissing,
    SubsetHead,
    default_weights_path,
    draft_own_state_dict,
    init_draft_from_target,
    load_draft,
    save_draft_weights,
)

WEIGHTS = default_weights_path()

# Held-out text (not in the build's training prompts or its stdlib windows): code,
# RLM-style agent code, and chat prose, each in the target's chat format.
SNIPPETS = [
    "<|im_start|>user\nWrite a Python function that returns the last word of a sentence.<|im_end|>\n"
    "<|im_start|>assistant\nHere is a simple function:\n\n```python\ndef last_word(sentence):\n"
    "    words = sentence.split()\n    if not words:\n        return None\n    return words[-1]\n\n"
    "print(last_word(\"The quick brown fox\"))  # Output: fox\n```\n<|im_end|>\n",
    "<|im_start|>user\nHow many lines of the context mention a city?<|im_end|>\n<|im_start|>assistant\n```repl\n"
    'lines = context.split("\\n")\ncount = 0\nfor line in lines:\n'
    '    answer = llm_query(f"Does this line mention a city? Answer yes or no: {line}")\n'
    '    if "yes" in answer.lower():\n        count += 1\nprint(count)\n```\n<|im_end|>\n',
    "<|im_start|>user\nWhat is the largest ocean on Earth?<|im_end|>\n<|im_start|>assistant\n"
    "The largest ocean on Earth is the Pacific Ocean. It covers about one third of the surface of the planet "
    "and is larger than all of the land area combined.<|im_end|>\n",
]

# Measured on these 224 positions (bf16 target): the undistilled 2-layer truncation
# (target layers 0-1 + final norm) agrees with the target's argmax on 1.8%, the first
# shipped draft (120 steps on 23 prompts' replies) on 23.2%, the current one (600 steps on
# ~830 prompts' replies, scripts/draft_corpus.py) on 37.9% (47.0% code, 37.4% agent code,
# 24.0% chat). The floor sits above the first draft and below the measured value.
AGREEMENT_FLOOR = 0.30


def tiny_target(vocab: int = 96, layers: int = 3) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


# ---------------------------------------------------------------- no target model needed


def test_missing_weights_file_names_the_rebuild_command(tmp_path):
    with pytest.raises(DraftWeightsMissing, match=r"scripts/build_draft\.py"):
        load_draft(tiny_target(), path=tmp_path / "absent.safetensors")
    assert issubclass(DraftWeightsMissing, FileNotFoundError)


def test_shipped_file_holds_only_the_drafts_own_weights():
    from safetensors import safe_open

    assert WEIGHTS.is_file(), f"{WEIGHTS} missing: run python scripts/build_draft.py"
    assert WEIGHTS.stat().st_size <= 30 * 1024 * 1024
    with safe_open(str(WEIGHTS), framework="pt") as f:
        keys = set(f.keys())
        meta = f.metadata()
        vocab_ids = f.get_tensor("lm_head.vocab_ids")
    assert "model.embed_tokens.weight" not in keys and "lm_head.weight" not in keys
    assert int(meta["vocab_size"]) == 49152
    assert int(meta["num_hidden_layers"]) == 2
    assert vocab_ids.numel() == torch.unique(vocab_ids).numel() and 0 <= int(vocab_ids.min()) < int(vocab_ids.max()) < 49152
    provenance = json.loads(WEIGHTS.with_suffix(".json").read_text())
    assert provenance["heldout"]["after"]["all"]["agree"] > provenance["heldout"]["before"]["all"]["agree"]


def test_save_and_load_round_trip_shares_the_target_embedding(tmp_path):
    target = tiny_target()
    ids = torch.tensor([0, 3, 5, 7, 11, 13, 17, 19, 23, 95])
    draft = init_draft_from_target(target, [0, 2], vocab_ids=ids)
    path = save_draft_weights(draft, tmp_path / "d.safetensors", metadata={"vocab_size": 96})
    assert not any(k.startswith("model.embed_tokens") for k in draft_own_state_dict(draft))
    loaded = load_draft(target, path=path)
    assert isinstance(loaded, DraftModel) and loaded.hf_model is loaded.model
    assert loaded.num_layers == 2 and loaded.vocab_size == 96
    emb = target.get_input_embeddings().weight
    assert loaded.hf_model.get_input_embeddings().weight.data_ptr() == emb.data_ptr()
    assert isinstance(loaded.hf_model.lm_head, SubsetHead)
    x = torch.tensor([[1, 4, 9, 16, 25]])
    with torch.inference_mode():
        a = draft(input_ids=x).logits[0]
        b = loaded.hf_model(input_ids=x).logits[0]
    # fp16 storage: close, not equal
    torch.testing.assert_close(b, a, atol=2e-2, rtol=2e-2)
    outside = torch.ones(96, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(b[:, outside]).all() and torch.isfinite(b[:, ~outside]).all()
    assert torch.softmax(b, -1)[:, outside].sum() == 0


def test_wrong_vocabulary_is_refused(tmp_path):
    draft = init_draft_from_target(tiny_target(vocab=96), [0])
    path = save_draft_weights(draft, tmp_path / "d.safetensors", metadata={"vocab_size": 96})
    with pytest.raises(ValueError, match="vocabulary"):
        load_draft(tiny_target(vocab=128), path=path)


def rollback_is_exact(lm) -> None:
    a, b, c = [5, 9, 2, 7, 1], [4, 4, 8], [3, 6]
    s1 = lm.start([])
    s1.extend(a)
    s1.extend(b)
    s1.truncate(len(a))
    assert s1.length == len(a)
    got = s1.extend(c)
    s2 = lm.start([])
    s2.extend(a)
    want = s2.extend(c)
    assert got.shape == (len(c), lm.vocab_size)
    assert torch.equal(got, want)


def test_session_rollback_is_exact_on_a_tiny_draft(tmp_path):
    target = tiny_target()
    path = save_draft_weights(init_draft_from_target(target, [1]), tmp_path / "d.safetensors")
    rollback_is_exact(load_draft(target, path=path))


# ---------------------------------------------------------------- the real target


@pytest.fixture(scope="module")
def pair():
    from token_spec.target import load_target

    target = load_target(dtype=torch.float32)  # the draft shares (not copies) an fp32 embedding
    return target, load_draft(target.model)


@pytest.mark.model
def test_draft_shares_the_targets_vocabulary_and_embedding(pair):
    target, draft = pair
    assert draft.vocab_size == target.vocab_size == 49152
    assert draft.num_layers == 2
    assert draft.hf_model.get_input_embeddings() is target.model.get_input_embeddings()
    ids = target.encode("def add(a, b):\n    return a + b\n")
    logits = draft.start(ids[:-3]).extend(ids[-3:])
    assert logits.shape == (3, 49152) and logits.dtype == torch.float32


@pytest.mark.model
def test_real_draft_rollback_is_exact(pair):
    rollback_is_exact(pair[1])


@pytest.mark.model
def test_greedy_agreement_beats_the_undistilled_floor(pair):
    target, draft = pair
    agree = total = 0
    for text in SNIPPETS:
        ids = torch.tensor(target.encode(text))[None]
        with torch.inference_mode():
            t = target.model(input_ids=ids).logits[0, :-1].argmax(-1)
            d = draft.hf_model(input_ids=ids).logits[0, :-1].argmax(-1)
        agree += int((t == d).sum())
        total += t.numel()
    assert total > 150
    assert agree / total > AGREEMENT_FLOOR, f"greedy agreement {agree / total:.3f}"


@pytest.mark.model
def test_hf_assisted_generation_accepts_the_draft(pair):
    target, draft = pair
    ids = torch.tensor(target.encode([{"role": "user", "content": "Write a Python function that adds two numbers."}]))[None]
    kwargs = dict(max_new_tokens=16, do_sample=False, pad_token_id=target.eos_id)
    with torch.inference_mode():
        plain = target.model.generate(ids, **kwargs)
        assisted = target.model.generate(ids, assistant_model=draft.hf_model, **kwargs)
    assert torch.equal(plain, assisted)


@pytest.fixture(scope="module")
def int8_draft(fast_target):
    if fast_target.dtype != torch.bfloat16:
        pytest.skip("the int8 draft runs with bf16 activations; this CPU has no native bf16")
    from token_spec.draft_model import fast_draft

    return fast_draft(load_draft(fast_target.model), torch.bfloat16)


@pytest.mark.model
def test_a_wide_catch_up_runs_the_dense_gemms_and_a_narrow_step_the_int8_ones(int8_draft, fast_target):
    """Passes wider than PAD_WIDTH (a prompt's catch-up) run the dense bf16 GEMMs; their
    last row agrees with the int8 forward's within the int8 rounding, and a narrow step
    after them still runs the int8 GEMMs. Negative control: the all-int8 forward of the
    same pass differs in its bits, so the test sees which GEMMs ran."""
    from token_spec.exact_kernels import PAD_WIDTH
    from token_spec.fast_forward import FastLlama

    draft = int8_draft
    assert draft._wide is not None
    ids = fast_target.encode(SNIPPETS[0])[: 3 * PAD_WIDTH]
    int8_only = FastLlama(draft.source, torch.bfloat16, exact=False, linears=[l[1:3] + l[4:6] for l in draft.layers],
                          head=draft._head)
    dense_only = FastLlama(draft.source, torch.bfloat16, exact=False)
    wide = draft.start([]).extend_last(ids)
    assert torch.equal(wide, dense_only.start([]).extend_last(ids))  # the dense GEMMs ran
    assert not torch.equal(wide, int8_only.start([]).extend_last(ids))  # which differ from the int8 ones
    assert torch.allclose(wide.softmax(-1), int8_only.start([]).extend_last(ids).softmax(-1), atol=0.05)
    narrow = ids[:PAD_WIDTH]  # a narrow prompt and one step: the int8 GEMMs, bit for bit
    assert torch.equal(draft.start(narrow[:-1]).extend(narrow[-1:]), int8_only.start(narrow[:-1]).extend(narrow[-1:]))
    with pytest.raises(ValueError, match="wide_dense changes a wide pass's GEMMs: it needs exact=False"):
        FastLlama(draft.source, torch.bfloat16, exact=True, linears=[l[1:3] + l[4:6] for l in draft.layers],
                  wide_dense=True)


@pytest.mark.model
def test_extend_last_is_the_last_row_of_extend(int8_draft, fast_target):
    ids = fast_target.encode(SNIPPETS[1])[:40]
    a, b = int8_draft.start(ids[:5]), int8_draft.start(ids[:5])
    last, full = a.extend_last(ids[5:]), b.extend(ids[5:])[-1]
    assert last.shape == (49152,) and a.length == b.length == 40
    assert torch.allclose(last, full, atol=1e-2, rtol=1e-2)
    assert torch.equal(last.argmax(), full.argmax())
