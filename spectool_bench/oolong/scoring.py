"""OOLONG scorers: the official synth scorer, RLM's lenient scorer, and Pairs set-F1.

Sources (read, then re-written here; no code copied):

* ``score_official`` — ``abertsch72/oolong`` ``src/eval/eval_helpers.py``,
  functions ``synth_attempt_answer_parse`` and ``synth_process_response``.
* ``score_lenient`` — ``alexzhang13/rlm``
  ``training/environments/oolong/oolong/env.py``, functions
  ``_attempt_answer_parse`` and ``_synth_score`` (RLM's published OOLONG scorer).
* ``pairs_f1`` — RLM paper (arXiv 2512.24601) §2.1 / appendix E.1: OOLONG-Pairs is
  "scored by F1 over the answer"; the pair format is normalised here.

Official rubric, step by step:

1. gold = the first element of ``ast.literal_eval(answer)``; a stored date
   ``"[datetime.date(Y, M, D)]"`` becomes a *midnight* ``datetime.datetime``.
2. Candidate: without ``:`` the whole output when shorter than 20 characters, else its
   last whitespace-separated word. With ``:`` the text after the last ``:``, stripped,
   with every ``*``, ``[`` and ``]`` removed; only when that is >= 20 characters and
   contains "more common" / "less common" / "same frequency" (checked in that order)
   is it replaced by the phrase.
3. 1 if ``str(candidate) == str(gold)``; else if the candidate is one of the three
   phrases: 1 when it is contained in ``str(gold)``, else 0; else NUMERIC:
   ``0.75 ** |int(gold) - int(candidate)|`` (0 when either is not an int); else DATE:
   1 when ``dateutil.parser.parse(candidate) == gold`` (a parsed time of day or a
   timezone makes it unequal; a missing day/month/year is filled from *today*, as
   dateutil does); else 0. MONTH_YEAR / LABEL / USER / COMPARISON: exact string only.

Deliberate divergence: output that is only whitespace and >= 20 characters long
makes the official code raise ``IndexError`` (``"".split()[-1]``); here it scores 0.
RLM's scorer raises the same way and gets the same treatment.

RLM's lenient rubric (``score_lenient``) differs from the official one in four ways:
(a) a full comparison phrase ("more common than" / "less common than" / "same
frequency as") found anywhere in the output, case-insensitively, wins (the last one
in the text); (b) a case-insensitive exact match scores 1; (c) NUMERIC and DATE
answers return before any substring rule; (d) for other types, the gold string found
anywhere in the output (case-insensitively) scores 1, except when the gold is a
comparison phrase. A stored answer that does not parse is used as the gold string.
"""

from __future__ import annotations

import ast
import datetime
import re

import dateutil.parser

NUMERIC = "ANSWER_TYPE.NUMERIC"
DATE = "ANSWER_TYPE.DATE"
PHRASES = ("more common", "less common", "same frequency")  # official step 2/3
FULL_PHRASES = ("more common than", "less common than", "same frequency as")  # RLM
_DATE_FMT = "[datetime.date(%Y, %m, %d)]"
_PAIR_RE = re.compile(r"[(\[]\s*['\"]?(\d+)['\"]?\s*,\s*['\"]?(\d+)['\"]?\s*[)\]]")


# ---------------------------------------------------------------- official ------
def parse_gold(answer: str):
    """Official step 1: first element of the stored list; dates as midnight datetimes."""
    if "datetime" in answer:
        return datetime.datetime.strptime(answer, _DATE_FMT)
    return ast.literal_eval(answer)[0]


def parse_output(output: str) -> str:
    """Official step 2 (``synth_attempt_answer_parse``): the answer candidate."""
    if ":" not in output:
        if len(output) < 20:
            return output
        words = output.split()
        return words[-1] if words else ""  # official: IndexError (see module doc)
    candidate = output.split(":")[-1].strip()
    candidate = candidate.replace("*", "").replace("[", "").replace("]", "")
    if len(candidate) >= 20:
        for phrase in PHRASES:
            if phrase in candidate:
                return phrase
    return candidate


def score_official(output: str, answer: str, answer_type: str) -> float:
    """The official OOLONG-synth score (``synth_process_response``) as a float."""
    gold = parse_gold(answer)
    candidate = parse_output(str(output))
    if candidate == str(gold):
        return 1.0
    if candidate in PHRASES:
        return 1.0 if candidate in str(gold) else 0.0
    typed = _typed_score(candidate, gold, answer_type)
    return 0.0 if typed is None else typed


def _typed_score(candidate: str, gold, answer_type: str) -> float | None:
    """Both rubrics' score of a numeric answer (0.75 per unit off) or a date (exact);
    None for the other answer types."""
    if answer_type == NUMERIC:
        try:
            return 0.75 ** abs(int(gold) - int(candidate))
        except Exception:  # the official code catches everything here too
            return 0.0
    if answer_type == DATE:
        try:
            return 1.0 if dateutil.parser.parse(candidate) == gold else 0.0
        except Exception:
            return 0.0
    return None


# ---------------------------------------------------------------- lenient (RLM) --
def _last_full_phrase(output: str) -> str | None:
    """RLM (a): the comparison phrase occurring last in the output, case-insensitively."""
    low = output.lower()
    hits = [(low.rfind(p), p) for p in FULL_PHRASES if p in low]
    return max(hits)[1] if hits else None


def parse_output_lenient(output: str) -> str:
    """RLM's ``_attempt_answer_parse``: phrase anywhere first, then the official cut
    without the >= 20-character phrase replacement."""
    phrase = _last_full_phrase(output)
    if phrase is not None:
        return phrase
    if ":" not in output:
        if len(output) < 20:
            return output
        words = output.split()
        return words[-1] if words else ""  # RLM: IndexError (see module doc)
    return output.split(":")[-1].strip().replace("*", "").replace("[", "").replace("]", "")


def _gold_lenient(answer: str):
    try:
        return parse_gold(answer)
    except Exception:
        return answer


def score_lenient(output: str, answer: str, answer_type: str) -> float:
    """RLM's published OOLONG-synth scorer (``_synth_score``)."""
    output = str(output)
    gold = _gold_lenient(answer)
    candidate = parse_output_lenient(output)
    gold_s = str(gold)
    if candidate == gold_s or candidate.lower() == gold_s.lower():
        return 1.0
    typed = _typed_score(candidate, gold, answer_type)
    if typed is not None:
        return typed
    if gold_s and gold_s.lower() not in FULL_PHRASES and gold_s.lower() in output.lower():
        return 1.0
    return 0.0


# ---------------------------------------------------------------- pairs ----------
def parse_pairs(value) -> set[tuple[int, int]]:
    """Normalised pair set: every ``(a, b)`` / ``[a, b]`` of integers in a string (or an
    iterable of 2-sequences), as ``(min, max)``; self-pairs dropped, duplicates merged."""
    if isinstance(value, str):
        raw = _PAIR_RE.findall(value)
    else:
        raw = [tuple(p) for p in value]
    out = set()
    for a, b in raw:
        a, b = int(a), int(b)
        if a != b:
            out.add((min(a, b), max(a, b)))
    return out


def pairs_f1(predicted, gold) -> float:
    """Set F1 between predicted and gold pairs (RLM paper §2.1). Both empty: 1."""
    p, g = parse_pairs(predicted), parse_pairs(gold)
    if not p and not g:
        return 1.0
    tp = len(p & g)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(p), tp / len(g)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- OOLONG-real ----
_BOXED = (re.compile(r"\\boxed\{\\text\{([^}]*)\}\}"), re.compile(r"\\boxed[{]+([^}]*)[}]+"))


def _real_value(text: str):
    """int, list of str (comma-separated) or str (``dnd_parse_answer``)."""
    try:
        return int(text)
    except ValueError:
        pass
    if "," in text:
        return [x.strip() for x in text.split(",") if x.strip()]
    return text


def score_real(output: str, answer: str) -> float:
    """OOLONG-real (D&D) score after ``eval_helpers.dnd_process_response``: the
    ``\\boxed{}`` answer; ints 0.75^|diff|, strings case-insensitive equality, lists the
    share of gold items present; no box or mismatched kinds: 0."""
    m = _BOXED[0].search(output) or _BOXED[1].search(output)
    if m is None:
        return 0.0
    got, gold = _real_value(m.group(1)), _real_value(str(answer))
    if isinstance(gold, int) and isinstance(got, int):
        return 0.75 ** abs(gold - got)
    if isinstance(gold, str) and isinstance(got, str):
        return float(gold.strip().lower() == got.strip().lower())
    if isinstance(gold, list) and isinstance(got, list):
        return len(set(gold) & set(got)) / len(gold) if gold else 0.0
    return 0.0


def score(output: str, answer: str, answer_type: str, scorer: str = "official") -> float:
    """Dispatch: PAIRS questions use ``pairs_f1``, OOLONG-real rows ``score_real``;
    others the named scorer."""
    if answer_type == "ANSWER_TYPE.PAIRS":
        return pairs_f1(output, answer)
    if answer_type == "ANSWER_TYPE.REAL":
        return score_real(str(output), answer)
    if scorer == "official":
        return score_official(output, answer, answer_type)
    if scorer == "lenient":
        return score_lenient(output, answer, answer_type)
    raise ValueError(f"unknown scorer {scorer!r} (official | lenient)")
