"""On the fast exact path (bf16; and the Q4_1 weights), greedy speculative decoding emits
vanilla greedy's tokens on 100+ prompts, for every drafter.

This is the end-to-end consequence of batch invariance (``test_batch_invariance.py``):
a verify pass of k+1 tokens scores every position bit for bit as a one-token vanilla
step does, so at temperature 0 the accepted prefix and the bonus token are exactly
vanilla's argmaxes, at any precision. Drafters are set to draft as often as they can
(n_min = 1, the draft model without a confidence cut) so that most tokens come out of
wide verify passes. The EAGLE-3 head and the DFlash-style block drafters also read the
target's hidden features through a tap on the same forward (it must not change a bit of the logits), and the DSpark
schedule varies the verified length per round. Short outputs keep it affordable; marked slow.
"""

from __future__ import annotations

import pytest

from token_spec.drafters import HybridDrafter, ModelDrafter, NgramDrafter, SuffixDrafter
from token_spec.engine import SpeculativeDecoder, VanillaDecoder
from token_spec.gamma import AdaptiveGamma, FixedGamma
from token_spec.sampling import SamplingParams

# generous: the vanilla references and a drafter over 102 prompts take minutes on a loaded 2-core machine
pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]

NEW_TOKENS = 12
PARAMS = SamplingParams(temperature=0, max_tokens=NEW_TOKENS)

_NAMES = ["items", "values", "rows", "users", "orders", "lines", "scores", "files", "words", "chunks"]
_TASKS = ["sum", "sort", "filter", "count", "group", "reverse", "merge", "parse", "dedupe", "validate"]


def _prompts() -> list:
    """100+ distinct prompts: code completions, agent REPL cells, chat and prose."""
    out: list = []
    for i, (name, task) in enumerate(zip(_NAMES, _TASKS, strict=True)):
        out.append(f"def {task}_{name}({name}):\n    ")
        out.append(f"# {task} the {name} and print the result\n{name} = load_{name}()\nfor x in {name}:\n")
        out.append(f"```repl\n{name} = context.split('\\n')\nresults = llm_query_batched([f'{task}: {{c}}' for c in {name}[:{i + 2}]])\n")
        out.append(f"```repl\nanswer = llm_query(f\"{task.capitalize()} the {name} in: {{context[:{500 + 100 * i}]}}\")\nprint(")
        out.append([{"role": "user", "content": f"Write a Python function that can {task} a list of {name}."}])
        out.append([{"role": "user", "content": f"In one sentence, why would someone {task} {name}?"}])
        out.append(f"The {name} were {task}ed carefully, because")
        out.append(f"Q: How do I {task} {name} in SQL?\nA:")
        out.append(f"class {name.capitalize()}Store:\n    def {task}(self, {name}):\n        ")
        out.append(f"import json\n\ndef {task}_json(path):\n    with open(path) as f:\n        {name} = json.load(f)\n")
    out.append("def fibonacci(n):\n    ")
    out.append([{"role": "user", "content": "What is the capital of France?"}])
    return out


PROMPTS = _prompts()
assert len(PROMPTS) >= 100 and len({str(p) for p in PROMPTS}) == len(PROMPTS)


def _fast_draft(target):
    from token_spec.draft_model import DraftWeightsMissing, fast_draft, load_draft

    try:
        draft = load_draft(target.model)
    except DraftWeightsMissing as exc:
        pytest.skip(f"distilled draft weights not built yet: {exc}")
    return ModelDrafter(fast_draft(draft, target.dtype), name="draft_model")  # int8 weights in bf16


def _eagle3(target):
    from token_spec.eagle3 import Eagle3Drafter, Eagle3WeightsMissing, load_eagle3

    try:
        return Eagle3Drafter(target, load_eagle3(target))
    except Eagle3WeightsMissing as exc:
        pytest.skip(f"EAGLE-3 head weights not built yet: {exc}")


def _dflash(target, variant: str = "dflash"):
    from token_spec.dflash import DFlashDrafter, DFlashWeightsMissing, load_dflash

    try:
        return DFlashDrafter(target, *load_dflash(target, variant), name=variant)
    except DFlashWeightsMissing as exc:
        pytest.skip(f"block drafter weights not built yet: {exc}")


def _dspark(stepper):
    """DSpark verification over a step drafter, with a flat cost profile so that the
    schedule verifies long drafts where the drafter is confident and stops elsewhere."""
    from token_spec.dspark import DSparkDrafter, SurvivalSchedule, TopProbConfidence

    return DSparkDrafter(stepper, TopProbConfidence(), SurvivalSchedule((1.0, 1.05, 1.1, 1.15, 1.2, 1.25), max_tokens=5))


DRAFTERS = {
    "ngram": (lambda t: NgramDrafter(n_min=1), lambda: FixedGamma(4)),
    "suffix": (lambda t: SuffixDrafter(n_min=1), lambda: AdaptiveGamma(initial=3, max_gamma=15)),
    "draft_model": (_fast_draft, lambda: FixedGamma(3)),
    # the lookup where it matches (n >= 2), the draft model in every other round
    "ngram+draft_model": (lambda t: HybridDrafter(NgramDrafter(), _fast_draft(t), model_tokens=3),
                          lambda: FixedGamma(6)),
    "eagle3": (_eagle3, lambda: FixedGamma(4)),
    "dspark": (lambda t: _dspark(_fast_draft(t)), lambda: FixedGamma(5)),
    "dspark-eagle3": (lambda t: _dspark(_eagle3(t)), lambda: FixedGamma(5)),
    # prompt lookup in front of a feature drafter (bench names ngram+eagle3, ngram+dspark)
    "ngram+eagle3": (lambda t: HybridDrafter(NgramDrafter(), _eagle3(t), model_tokens=3), lambda: FixedGamma(6)),
    "ngram+dspark": (lambda t: HybridDrafter(NgramDrafter(), _dspark(_fast_draft(t)), model_tokens=4),
                     lambda: FixedGamma(6)),
    # one block pass per round drafts up to 8 tokens; dflash2 drafts its selector's best path
    "dflash": (_dflash, lambda: FixedGamma(8)),
    "dflash2": (lambda t: _dflash(t, "dflash2"), lambda: FixedGamma(8)),
}


@pytest.fixture(scope="module", params=["bf16", "bf16-q4"])
def exact_target(request, fast_target):
    return fast_target if request.param == "bf16" else request.getfixturevalue("q4_target")


@pytest.fixture(scope="module")
def references(exact_target):
    assert exact_target.exact
    dec = VanillaDecoder(exact_target)
    return [dec.generate(p, PARAMS).token_ids for p in PROMPTS]


# the feature drafters' heads draft in fp32 plain torch (several times a lookup's cost):
# in CI they decode every third prompt, which still spans every domain of the set; the block
# drafters every ninth (12 prompts; the set cycles through 10 kinds of prompt, so a stride
# of 9 visits every kind)
EVERY = {"eagle3": 3, "dspark": 3, "dspark-eagle3": 3, "ngram+eagle3": 3, "ngram+dspark": 3, "dflash": 9,
         "dflash2": 9}


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_greedy_speculative_is_vanilla_on_100_prompts(exact_target, references, name):
    make_drafter, make_policy = DRAFTERS[name]
    dec = SpeculativeDecoder(exact_target, make_drafter(exact_target), gamma_policy=make_policy())
    step = EVERY.get(name, 1)
    pairs = list(zip(PROMPTS, references, strict=True))[::step]
    differ = [i * step for i, (p, ref) in enumerate(pairs)
              if dec.generate(p, PARAMS).token_ids != ref]
    assert not differ, f"{name}: {len(differ)}/{len(pairs)} prompts differ from vanilla: {differ[:10]}"
    m = dec.metrics.cumulative
    assert m.num_requests == len(pairs)
    # not vacuous: hundreds of multi-token verify passes, many drafts accepted
    assert m.num_draft_tokens > 2 * len(pairs) and m.num_accepted_tokens > len(pairs) // 2
