"""One labelled dataset of the OOLONG-style generator: its templates and fillers.

A :class:`Dataset` maps a label to a list of templates and the slot fillers they draw
from; :meth:`Dataset.sample` renders one instance text for a label, deterministically
given the caller's ``random.Random``. :meth:`Dataset.from_text` reads a dataset's
labels and templates from one text block. The ten pools are in :mod:`.pools`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .sections import sections

__all__ = ["Dataset"]


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str  # what the lines are, as the header states it
    labels: tuple[str, ...]
    templates: dict[str, tuple[str, ...]]  # label -> templates with {slot} fields
    fillers: dict[str, tuple[str, ...]]  # slot -> values
    # label-neutral framings ("{}" = the text); a label may override with its own
    wrappers: tuple[str, ...] = ("{}",)
    label_wrappers: dict[str, tuple[str, ...]] | None = None
    tails: tuple[str, ...] = ("",)  # label-neutral endings appended to the text

    @classmethod
    def from_text(cls, name: str, description: str, block: str,
                  fillers: dict[str, tuple[str, ...]], **options) -> Dataset:
        """The dataset whose labels, in order, and templates are read from ``block``:
        a line ``[label]`` starts that label's templates and each other non-blank line is
        one template (indentation and trailing blanks dropped)."""
        templates = sections(block)
        return cls(name, description, tuple(templates), templates, fillers, **options)

    def sample(self, label: str, rng: random.Random) -> str:
        """One instance text for ``label`` (deterministic given ``rng``)."""
        template = rng.choice(self.templates[label])
        values = {}
        for slot in _slots(template):
            values[slot] = rng.choice(self.fillers[slot])
        text = template.format(**values)
        wrappers = (self.label_wrappers or {}).get(label, self.wrappers)
        return rng.choice(wrappers).replace("{}", text) + rng.choice(self.tails)


def _slots(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]

