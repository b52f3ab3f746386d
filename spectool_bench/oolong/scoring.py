"""OOLONG scorers: the official synth scorer, the lenient variant, and Pairs set-F1.

``score_official`` follows ``shared/reference/FACTS.md`` §4 step by step (written
from that specification, not copied):

1. gold = the first element of the stored literal list; for a ``datetime`` answer, the
   date.
2. Parse the output: without ``:`` take the whole output if it is shorter than 20
   characters, else its last whitespace-separated word. With ``:`` take the text after
   the last ``:``, stripped, with every ``*``, ``[`` and ``]`` removed; only if that
   candidate is 20 characters or longer and contains "more common", "less common" or
   "same frequency" (checked in that order) is it replaced by that phrase.
3. 1 if ``str(candidate) == str(gold)`` (case-sensitive); else, if the candidate is one
   of the three phrases, 1 when it is contained in ``str(gold)`` (else 0); else for
   NUMERIC ``0.75 ** |int(gold) - int(candidate)|`` (0 if either does not parse as an
   int); else for DATE 1 if the candidate parsed by dateutil is the gold date (the
   parsed datetime's date is compared, so "May 1, 2023" matches
   ``datetime.date(2023, 5, 1)``); else 0.

``score_lenient`` (the variant RLM and the spec-PTC campaign report) additionally
gives 1 for a case-insensitive match of the parsed candidate and for the gold string
appearing anywhere in the output (case-insensitive, plain substring). Every number the
benchmark reports names the scorer it used.
"""

from __future__ import annotations

import ast
import datetime
import re

import dateutil.parser

PHRASES = ("more common", "less common", "same frequency")
_DATE_RE = re.compile(r"datetime\.date\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_PAIR_RE = re.compile(r"\(\s*'?(\d+)'?\s*,\s*'?(\d+)'?\s*\)")


def parse_gold(answer: str):
    """Step 1: the first element of the stored list; a ``datetime.date`` for date golds."""
    m = _DATE_RE.search(answer)
    if m is not None:
        return datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    value = ast.literal_eval(answer)
    if isinstance(value, (list, tuple)):
        return value[0] if value else ""
    return value


def parse_output(output: str) -> str:
    """Step 2: the answer candidate extracted from a model's output."""
    if ":" not in output:
        if len(output) < 20:
            return output
        words = output.split()
        return words[-1] if words else ""
    candidate = output.split(":")[-1].strip()
    for ch in "*[]":
        candidate = candidate.replace(ch, "")
    if len(candidate) >= 20:
        for phrase in PHRASES:
            if phrase in candidate:
                return phrase
    return candidate


def score_official(output: str, answer: str, answer_type: str) -> float:
    """The official OOLONG-synth score of ``output`` against the stored ``answer``."""
    gold = parse_gold(answer)
    candidate = parse_output(str(output))
    if str(candidate) == str(gold):
        return 1.0
    if candidate in PHRASES:
        return 1.0 if candidate in str(gold) else 0.0
    if answer_type == "ANSWER_TYPE.NUMERIC":
        try:
            return 0.75 ** abs(int(gold) - int(candidate))
        except (TypeError, ValueError):
            return 0.0
    if answer_type == "ANSWER_TYPE.DATE":
        try:
            parsed = dateutil.parser.parse(candidate)
        except (ValueError, OverflowError, TypeError):
            return 0.0
        gold_date = gold.date() if isinstance(gold, datetime.datetime) else gold
        return 1.0 if parsed.date() == gold_date else 0.0
    return 0.0


def score_lenient(output: str, answer: str, answer_type: str) -> float:
    """Official score, raised to 1 on a case-insensitive match or gold found in the output."""
    official = score_official(output, answer, answer_type)
    if official == 1.0:
        return 1.0
    gold = str(parse_gold(answer))
    if parse_output(str(output)).strip().lower() == gold.lower():
        return 1.0
    if gold.lower() in str(output).lower():
        return 1.0
    return official


def parse_pairs(value) -> set[tuple[str, str]]:
    """Pairs from a string (every ``(a, b)`` in it) or an iterable of 2-sequences,
    normalised to ``(min, max)`` as strings."""
    if isinstance(value, str):
        raw = _PAIR_RE.findall(value)
    else:
        raw = [(a, b) for a, b in value]
    out = set()
    for a, b in raw:
        a, b = str(a).strip(), str(b).strip()
        out.add((a, b) if _key(a) <= _key(b) else (b, a))
    return out


def _key(s: str):
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def pairs_f1(predicted, gold) -> float:
    """Set F1 between predicted and gold pairs (unordered within a pair). Both empty: 1."""
    p, g = parse_pairs(predicted), parse_pairs(gold)
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    tp = len(p & g)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(p), tp / len(g)
    return 2 * precision * recall / (precision + recall)


def score(output: str, answer: str, answer_type: str, scorer: str = "official") -> float:
    """Dispatch: PAIRS questions use ``pairs_f1``; others the named scorer."""
    if answer_type == "ANSWER_TYPE.PAIRS":
        return pairs_f1(output, answer)
    if scorer == "official":
        return score_official(output, answer, answer_type)
    if scorer == "lenient":
        return score_lenient(output, answer, answer_type)
    raise ValueError(f"unknown scorer {scorer!r} (official | lenient)")
