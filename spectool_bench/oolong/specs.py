"""Official OOLONG-synth per-dataset constants: token estimates and header wording.

Source: ``abertsch72/oolong`` ``src/data_gen/oolong-synth/datasets_loader.py``
(``PROMPT_TOKENS``, ``PER_EXAMPLE_TOKENS``, ``QUESTION_TOKENS = 250``,
``get_examples_in_context``, ``get_general_desc`` and each class's ``get_desc``). The
header sentences are the benchmark's prompt text, carried over as data.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sections import sections

QUESTION_TOKENS = 250  # datasets_loader.EvalDataset.QUESTION_TOKENS


@dataclass(frozen=True)
class Spec:
    prompt_tokens: int  # P: header + footer, Llama-2/GPT-4 token estimate
    per_example_tokens: int  # E: one rendered line
    text: str  # dataset-specific header sentence; {k} = #labels, {labels} = quoted list


def _specs(block: str) -> dict[str, Spec]:
    """A ``[dataset P E]`` section per dataset, its lines the header sentence."""
    specs = {}
    for head, lines in sections(block).items():
        name, prompt_tokens, per_example_tokens = head.split()
        specs[name] = Spec(int(prompt_tokens), int(per_example_tokens), " ".join(lines))
    return specs


SPECS: dict[str, Spec] = _specs("""
    [trec_coarse 168 39]
    general-knowledge questions, one per line. Each question has an answer that can be
    described as one of {k} categories: {labels}.
    [imdb 144 376]
    movie reviews, one per line. Each review has a sentiment that can be classified as
    either 'positive' or 'negative.' There are no neutral reviews.
    [agnews 168 90]
    short news articles, one per line. Each article consists of a headline and a lead
    sentence. The topic of each article can be classified into one of {k} categories:
    {labels}.
    [negation 138 45]
    sentences, one per line. Each sentence makes a single claim; the claim can be
    classified as true or false.
    [yahoo 216 74]
    Yahoo Answers questions, one per line. Each line consists of the title and body text
    of the question. The topic of each question can be classified into one of {k}
    categories: {labels}.
    [formality 153 51]
    sentences, one per line. Each sentence can be classified as informal or formal;
    there are no neutral-style sentences, so each sentence must be given one of these
    two descriptions.
    [spam 142 57]
    text messages, one per line. Each text message can be classified as spam or ham
    (i.e., not spam).
    [multinli 183 70]
    pairs of sentences, one pair per line. On each line, the two sentences are separated
    by the marker " -> ". The relationship of the claims in the second sentence to the
    claims in the first sentence can be classified as one of the following {k} types of
    relationships: {labels}.
    [metaphors 173 51]
    pairs of sentences, one per line. On each line, the first sentence contains a
    metaphorical statement and the second sentence (separated by " <--> ") contains a
    candidate literal interpretation of the statement. The literal interpretation can be
    classified as either correct or incorrect.
    [app_reviews 140 49]
    reviews of software applications, one per line. Each review can be classified as
    positive or negative; there are no neutral reviews.
""")


def instance_count(dataset: str, context_tokens: int) -> int:
    """N = floor((L * 0.95 - P - 250) / E)  (``get_examples_in_context``)."""
    s = SPECS[dataset]
    return int((context_tokens * 0.95 - s.prompt_tokens - QUESTION_TOKENS) // s.per_example_tokens)


def describe(dataset: str, n: int, labels: list[str] | tuple[str, ...], intro: bool) -> str:
    """Header (``intro``) or footer text, as ``get_general_desc`` builds it."""
    quoted = ", ".join(f"'{lab}'" for lab in labels)
    specific = SPECS[dataset].text.format(k=len(labels), labels=quoted)
    start = "The following" if intro else "Recall: the preceding"
    return (f"{start} lines contain {n} {specific}\n\nYou will be asked to answer questions about "
            f"the aggregate label statistics across all {n} examples in this dataset. Do not try "
            f"to guess, estimate, or approximate the result. Calculate the exact answer given "
            f"these datapoints.\n\n")
