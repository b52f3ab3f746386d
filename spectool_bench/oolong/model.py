"""The OOLONG-synth data model: an instance line, a question and a window.

Plain data shared by the generator (``generator.py``), the question constructors
(``questions.py``, ``pairs.py``), the official-file loader (``loader.py``) and the
benchmark, so none of them imports another to name these types. Build windows with
``generator.generate_window``; the 20 OOLONG-Pairs tasks over a window come from
``pairs.pairs_questions(window)``.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

__all__ = ["CHARS_PER_TOKEN", "LABEL_FREE_TASKS", "Instance", "Question", "Window", "estimate_tokens"]

CHARS_PER_TOKEN = 4.0
_SEP = " || "

def estimate_tokens(text: str) -> int:
    """Rough token count ``ceil(len(text) / 4)`` (only for sizing checks; N itself comes
    from the official per-dataset estimates, never from our own texts)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Instance:
    date: datetime.date
    user: int
    text: str
    label: str

    def render(self) -> str:
        return (f"Date: {self.date.strftime('%b %d, %Y')}{_SEP}User: {self.user}{_SEP}"
                f"Instance: {self.text}")


@dataclass(frozen=True)
class Question:
    qid: str
    group: str  # "counting" | "user" | "timeline" | "pairs"
    task: str  # this project's task key, e.g. "most_common_label"
    text: str
    answer: str  # stored like OOLONG: the string of a one-element list
    answer_type: str  # "ANSWER_TYPE.LABEL" ...
    params: dict = field(default_factory=dict, compare=False)
    task_type: str = ""  # the official TASK_TYPE.* name

    @property
    def needs_labels(self) -> bool:
        """Whether answering requires classifying instances (else plain Python suffices)."""
        return self.task not in LABEL_FREE_TASKS


LABEL_FREE_TASKS = frozenset({"most_represented_user", "second_most_represented_user",
                              "most_frequent_date", "second_most_frequent_date",
                              "dates_exactly_n"})


@dataclass
class Window:
    dataset: str
    context_tokens: int
    seed: int
    temperature: int
    labels: tuple[str, ...]  # in the window's (shuffled) header order
    instances: list[Instance]
    context: str
    questions: list[Question]  # the official 25-question subsample ([] = dropped)
    label_of: dict[str, str]  # side table: instance text -> hidden label
    all_questions: list[Question] = field(default_factory=list)  # before subsampling

    @property
    def dropped(self) -> bool:
        """True when the official subsample skips this window (fewer than 25 questions;
        ``questions`` is then empty and ``all_questions`` still holds every question)."""
        return not self.questions

    @property
    def estimated_tokens(self) -> int:
        return estimate_tokens(self.context)
