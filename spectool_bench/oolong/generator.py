"""Offline, seeded OOLONG-synth windows, built the way the official generator builds them.

Sources: ``abertsch72/oolong`` ``src/data_gen/oolong-synth/`` (``datasets_loader.py``,
``EvalContextWindow.py``, ``generate_dataset.py``) and ``shared/reference/FACTS.md`` §4
(the official ``example_constructor`` formulas, which the stored snapshot of the
repository does not include):

* **Instances**: ``N = floor((L * 0.95 - P - 250) / E)`` with the per-dataset
  estimates ``P``/``E`` of ``specs.SPECS`` (trec_coarse 32K -> 787, imdb 8K -> 19).
* **Labels**: integer temperature ``T ~ randint(2, 6)``; per label
  ``w_i = randint(1, 30) ** (1 / T)``; ``p = softmax(w)``; ``count_i = round(p_i * N)``
  and the first label (in the window's shuffled label order) absorbs the rounding.
  Larger ``T`` flattens the mix.
* **Users**: ``max(1, floor(0.1 * N))`` "common" 5-digit ids; each line takes a common
  id (uniformly) with probability 0.8, else a fresh random 5-digit id.
* **Dates**: uniform over 2022-02-16 .. 2025-06-21, rendered ``%b %d, %Y``.
* **Text**: header ``describe(intro=True)`` with the labels in the window's shuffled
  order, the lines ``Date: … || User: … || Instance: …`` in shuffled order, footer
  ``describe(intro=False)`` ("Recall: the preceding lines …").

Questions: see ``questions.py`` (every family, official tie rules, official 25-question
subsample; a window with fewer than 25 questions is dropped, ``Window.dropped``, and
``kept_window`` walks seeds in order to the windows the release would keep). Everything
is a pure function of ``(dataset, context_tokens, seed)``.
"""

from __future__ import annotations

import datetime
import math
import random
from collections import Counter

# the data model lives in model.py; its names stay importable from here
from .model import _SEP, CHARS_PER_TOKEN, LABEL_FREE_TASKS, Instance, Question, Window, estimate_tokens  # noqa: F401
from .pools import DATASETS
from .specs import describe, instance_count

CONTEXT_SIZES = tuple(1024 * 2**k for k in range(8))  # 1K ... 128K
FIRST_DAY = datetime.date(2022, 2, 16)
LAST_DAY = datetime.date(2025, 6, 21)
COMMON_SHARE = 0.1  # common ids = 10% of N
COMMON_PROB = 0.8  # P(line takes a common id)


def label_counts(n: int, k: int, rng: random.Random) -> tuple[int, list[int]]:
    """``(T, counts)``: softmax of ``randint(1, 30) ** (1/T)`` weights, rounded; the
    first label absorbs the rounding (kept >= 0 by taking any deficit from the largest)."""
    t = rng.randint(2, 6)
    w = [rng.randint(1, 30) ** (1.0 / t) for _ in range(k)]
    top = max(w)
    e = [math.exp(x - top) for x in w]
    p = [x / sum(e) for x in e]
    counts = [round(x * n) for x in p]
    counts[0] += n - sum(counts)
    while counts[0] < 0:  # only possible for tiny N
        j = max(range(1, k), key=lambda i: counts[i])
        counts[j] -= 1
        counts[0] += 1
    return t, counts


def draw_users(n: int, rng: random.Random) -> list[int]:
    """One user id per line: common ids with probability 0.8, else fresh ids."""
    n_common = max(1, int(COMMON_SHARE * n))
    common = rng.sample(range(10000, 100000), n_common)
    common_set = set(common)
    out = []
    for _ in range(n):
        if rng.random() < COMMON_PROB:
            out.append(rng.choice(common))
        else:
            u = rng.randrange(10000, 100000)
            while u in common_set:
                u = rng.randrange(10000, 100000)
            out.append(u)
    return out


def draw_date(rng: random.Random) -> datetime.date:
    return FIRST_DAY + datetime.timedelta(days=rng.randrange((LAST_DAY - FIRST_DAY).days + 1))


def generate_window(dataset: str = "trec_coarse", context_tokens: int = 4096,
                    seed: int = 0) -> Window:
    """One window with its questions; deterministic in ``(dataset, context_tokens, seed)``."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {sorted(DATASETS)}")
    if not isinstance(context_tokens, int) or context_tokens < 1024:
        raise ValueError(f"context_tokens must be an int >= 1024, got {context_tokens!r}")
    ds = DATASETS[dataset]
    n = instance_count(dataset, context_tokens)
    if n < 2:
        raise ValueError(f"{dataset} at {context_tokens} tokens holds {n} instance(s) by the "
                         f"official estimate; use a longer context")
    rng = random.Random(f"oolong:{dataset}:{context_tokens}:{seed}")
    labels = list(ds.labels)
    rng.shuffle(labels)
    temperature, counts = label_counts(n, len(labels), rng)
    seq = [lab for lab, c in zip(labels, counts, strict=True) for _ in range(c)]
    rng.shuffle(seq)
    users = draw_users(n, rng)
    label_of: dict[str, str] = {}
    instances = []
    for lab, user in zip(seq, users, strict=True):
        text = ds.sample(lab, rng)
        label_of[text] = lab
        instances.append(Instance(draw_date(rng), user, text, lab))
    body = "".join(i.render() + "\n" for i in instances)
    context = describe(dataset, n, labels, True) + body + describe(dataset, n, labels, False)
    from .questions import make_questions, official_subsample

    window = Window(dataset, context_tokens, seed, temperature, tuple(labels), instances,
                    context, [], label_of)
    window.all_questions = make_questions(window, random.Random(f"q:{dataset}:{context_tokens}:{seed}"))
    window.questions = official_subsample(window.all_questions, dataset, context_tokens)
    return window


def kept_window(dataset: str = "trec_coarse", context_tokens: int = 4096, index: int = 0,
                max_seeds: int = 10_000) -> Window:
    """The ``index``-th window (generator seeds 0, 1, ... in order) that the official
    subsample keeps: ``subsample.py`` walks a length's windows in order and skips those
    with fewer than 25 questions, so a dropped window never appears in the release."""
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    kept = -1
    for seed in range(max_seeds):
        window = generate_window(dataset, context_tokens, seed)
        kept += not window.dropped
        if kept == index:
            return window
    raise ValueError(f"{dataset} at {context_tokens} tokens: fewer than {index + 1} of the "
                     f"first {max_seeds} windows have the 25 questions the official subsample "
                     f"needs")


def parse_line(line: str) -> tuple[datetime.date, int, str] | None:
    """``(date, user, text)`` of one instance line, or None for header/footer lines."""
    parts = line.split(_SEP, 2)
    if len(parts) != 3 or not parts[0].startswith("Date: ") or not parts[1].startswith("User: "):
        return None
    day = datetime.datetime.strptime(parts[0][len("Date: "):], "%b %d, %Y").date()
    return day, int(parts[1][len("User: "):]), parts[2][len("Instance: "):]


def labelled_records(window: Window) -> list[tuple[datetime.date, int, str]]:
    """``(date, user, label)`` per line, recovered from the context and the side table."""
    out = []
    for line in window.context.split("\n"):
        rec = parse_line(line)
        if rec is not None:
            out.append((rec[0], rec[1], window.label_of[rec[2]]))
    return out


def user_counts(window: Window) -> Counter:
    return Counter(i.user for i in window.instances)
