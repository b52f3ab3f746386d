"""The draft build's training prompts (scripts/draft_corpus.py) stay apart from what
measures the draft: the benchmark's prompts and the held-out snippets of
test_draft_model.py."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import build_draft  # noqa: E402
import draft_corpus  # noqa: E402
from test_draft_model import SNIPPETS  # noqa: E402

from token_spec.prompts import DOMAINS  # noqa: E402


@pytest.fixture(scope="module")
def prompts():
    train_files, _ = build_draft.stdlib_files()
    functions = draft_corpus.stdlib_functions(train_files)
    return build_draft.training_prompts(0, functions, 320)


def _user_texts(prompts) -> list[str]:
    return [m["content"] for _, msgs, _ in prompts for m in msgs if m["role"] == "user"]


def test_training_prompts_share_no_line_with_the_benchmark_or_held_out_text(prompts):
    bench = [text for domain in DOMAINS.values() for text in domain]
    held = [m["content"] for _, msgs, _ in build_draft.heldout_prompts() for m in msgs]
    # 40 characters, the build's own rule: shorter generic instructions are shared (e.g.
    # "Write the corrected ```repl``` cell.", 35 characters), task text is not
    draft_corpus.check_disjoint(_user_texts(prompts), bench + held + SNIPPETS)
    assert not {t for t in _user_texts(prompts)} & set(bench + held)


def test_check_disjoint_refuses_a_prompt_copied_from_the_benchmark(prompts):
    # negative control: one benchmark prompt smuggled into the training set is caught
    bench = [text for domain in DOMAINS.values() for text in domain]
    with pytest.raises(ValueError, match="shares a line with a benchmark prompt"):
        draft_corpus.check_disjoint(_user_texts(prompts) + [bench[0]], bench)


def test_training_prompts_cover_every_domain_and_are_deterministic(prompts):
    domains = [d for d, _, _ in prompts]
    assert {d: domains.count(d) >= 30 for d in ("code", "agent", "chat")} == {"code": True, "agent": True, "chat": True}
    again = build_draft.training_prompts(0, draft_corpus.stdlib_functions(build_draft.stdlib_files()[0]), 320)
    assert again == prompts


def test_edit_prompts_quote_only_functions_of_the_builds_training_files():
    train_files, held_files = build_draft.stdlib_files()
    assert train_files and held_files and not set(train_files) & set(held_files)
    train = draft_corpus.stdlib_functions(train_files)
    for text in draft_corpus.code_edit_prompts(train, 50, random.Random(1)):
        code = text.split("```python\n", 1)[1].rsplit("```", 1)[0]
        swapped = {f.replace(a, b, 1) for f in train for a, b in draft_corpus._BUG_SWAPS if a in f}
        assert code in train or code in swapped


def test_injected_bug_changes_exactly_one_operator():
    code = "def f(a, b):\n    return a < b and b < 10\n"
    buggy = draft_corpus.inject_bug(code, random.Random(0))
    assert buggy is not None and buggy != code
    assert buggy in {code.replace(a, b, 1) for a, b in draft_corpus._BUG_SWAPS if a in code}
    assert draft_corpus.inject_bug("x = 1\n", random.Random(0)) is None
