"""OOLONG long-context aggregation benchmark, offline: generator, questions, scorers,
OOLONG-Pairs and a loader for the official data files (see docs/oolong.md)."""

from .dataset import Dataset
from .generator import (CHARS_PER_TOKEN, CONTEXT_SIZES, Instance, Question, Window,
                        estimate_tokens, generate_window, parse_line)
from .pools import DATASETS
from .questions import COMPARISON, DATE, LABEL, MONTH_YEAR, NUMERIC, PAIRS, USER
from .scoring import (pairs_f1, parse_gold, parse_output, parse_pairs, score, score_lenient,
                      score_official)

__all__ = [
    "CHARS_PER_TOKEN", "COMPARISON", "CONTEXT_SIZES", "DATASETS", "DATE", "Dataset",
    "Instance", "LABEL", "MONTH_YEAR", "NUMERIC", "PAIRS", "Question", "USER", "Window",
    "estimate_tokens", "generate_window", "pairs_f1", "parse_gold", "parse_line",
    "parse_output", "parse_pairs", "score", "score_lenient", "score_official",
]
