"""OOLONG scorers: the official rubric, RLM's lenient rubric and Pairs F1.

The differential tests compare ``score_official`` / ``score_lenient`` with a second,
independent statement of each rubric written here (from the official
``eval_helpers.py`` and RLM's ``env.py`` step lists) on >= 2,000 generated cases each.
"""

import ast
import datetime
import random
import re

import dateutil.parser
import pytest

from spectool_bench.oolong import (pairs_f1, parse_gold, parse_output, parse_pairs, score,
                                   score_lenient, score_official)

N, D, L, C, U, M = ("ANSWER_TYPE.NUMERIC", "ANSWER_TYPE.DATE", "ANSWER_TYPE.LABEL",
                    "ANSWER_TYPE.COMPARISON", "ANSWER_TYPE.USER", "ANSWER_TYPE.MONTH_YEAR")
SHORT = ("more common", "less common", "same frequency")
FULL = ("more common than", "less common than", "same frequency as")


# ------------------------------------------------------------ reference rubrics --
def ref_gold(answer):
    m = re.fullmatch(r"\[datetime\.date\((\d+), (\d+), (\d+)\)\]", answer)
    if "datetime" in answer:
        return datetime.datetime(*map(int, m.groups()))  # midnight
    return ast.literal_eval(answer)[0]


def ref_official(output, answer, atype):
    """Official rubric; whitespace-only output >= 20 chars raises, as the official code does."""
    gold = ref_gold(answer)
    if ":" in output:
        cand = re.sub(r"[*\[\]]", "", output.rpartition(":")[2].strip())
        if len(cand) >= 20:
            cand = next((p for p in SHORT if p in cand), cand)
    elif len(output) < 20:
        cand = output
    else:
        cand = output.split()[-1]
    gs = str(gold)
    if cand == gs:
        return 1.0
    if cand in SHORT:
        return float(cand in gs)
    typed = ref_typed(cand, gold, atype)
    return 0.0 if typed is None else typed


def ref_typed(cand, gold, atype):
    """Both rubrics: 0.75 per unit off for a number, exact match for a date, else None."""
    if atype == N:
        try:
            return 0.75 ** abs(int(gold) - int(cand))
        except (ValueError, TypeError):
            return 0.0
    if atype == D:
        try:
            return float(dateutil.parser.parse(cand) == gold)
        except (ValueError, OverflowError, TypeError):
            return 0.0
    return None


def ref_lenient(output, answer, atype):
    """RLM's rubric; raises on whitespace-only output >= 20 chars without a phrase."""
    try:
        gold = ref_gold(answer)
    except (ValueError, SyntaxError, AttributeError, IndexError):
        gold = answer
    low = output.lower()
    found = sorted((low.rfind(p), p) for p in FULL if p in low)
    if found:
        cand = found[-1][1]
    elif ":" in output:
        cand = re.sub(r"[*\[\]]", "", output.rpartition(":")[2].strip())
    elif len(output) < 20:
        cand = output
    else:
        cand = output.split()[-1]
    gs = str(gold)
    if cand.lower() == gs.lower():
        return 1.0
    typed = ref_typed(cand, gold, atype)
    if typed is not None:
        return typed
    if gs and gs.lower() not in FULL and gs.lower() in low:
        return 1.0
    return 0.0


# ------------------------------------------------------------ generated cases ----
GOLDS = [("['entity']", L), ("['description and abstract concept']", L), ("['True']", L),
         ("['ham']", L), ("[44436]", U), ("['50213']", U), ("[7]", N), ("[28]", N), ("[0]", N),
         ("['12']", N), ("['more common than']", C), ("['less common than']", C),
         ("['same frequency as']", C), ("['more common']", C), ("['the same frequency']", C),
         ("[datetime.date(2023, 5, 1)]", D), ("[datetime.date(2024, 12, 31)]", D),
         ("['March 2023']", M), ("['January 2025']", M)]
VALUES = ["entity", "Entity", "ENTITY", "description and abstract concept", "True", "true",
          "spam", "ham", "44436", "44437", "50213", "7", "17", "6", "9", "28", "0", "-3", "12",
          "12.0", " 7", "seven", "more common than", "less common than", "same frequency as",
          "More Common Than", "more common", "the same frequency", "2023-05-01", "May 1, 2023",
          "01/05/2023", "05/01/2023", "2023-05-01 12:30", "2023-05-01 9am", "May 1 2023 5pm",
          "2023-05-01T00:00:00Z",
          "2024-12-31", "Dec 31, 2024", "May 2023", "March 2023", "march 2023", "January 2025",
          "not sure", "", "N/A", "label entity is the answer"]
PREFIXES = ["", "Answer: ", "Label: ", "User: ", "Date: ", "**Answer:** ", "Answer: [",
            "The final answer is ", "After counting every line carefully, the result: ",
            "x is ", "Answer: entity is ", "I think that the label 'a' is ", "Final: **"]
SUFFIXES = ["", "]", ".", " b", "**", "\n", "  ", " entity"]


def cases(n, seed):
    rng = random.Random(seed)
    out = [(" " * 25, "['entity']", L), ("\t \n" * 9, "[7]", N), ("", "[7]", N),
           ("Answer: 17", "[7]", N), ("Date: 2023-05-01 9am", "[datetime.date(2023, 5, 1)]", D)]
    while len(out) < n:
        gold, atype = rng.choice(GOLDS)
        out.append((rng.choice(PREFIXES) + rng.choice(VALUES) + rng.choice(SUFFIXES), gold, atype))
    return out


def _agree(ours, ref, case):
    try:
        expected = ref(*case)
    except IndexError:  # the reference code crashes: ours documents 0
        expected = 0.0
    got = ours(*case)
    return got == pytest.approx(expected, abs=1e-12), (case, got, expected)


@pytest.mark.parametrize("ours,ref", [(score_official, ref_official), (score_lenient, ref_lenient)],
                         ids=["official", "lenient"])
def test_differential_2500_cases(ours, ref):
    data = cases(2500, 8)
    bad = [info for ok, info in (_agree(ours, ref, c) for c in data) if not ok]
    assert not bad, bad[:5]
    # the generated cases exercise every branch: full, partial, zero credit
    scores = {ours(*c) for c in data}
    assert 1.0 in scores and 0.0 in scores and any(0 < s < 1 for s in scores)


def _old_official(output, answer, atype):  # the pre-fix scorer: compared dates only
    gold = ref_gold(answer)
    if atype == D:
        try:
            return float(dateutil.parser.parse(parse_output(output)).date() == gold.date())
        except (ValueError, OverflowError):
            return 0.0
    return ref_official(output, answer, atype)


def _old_lenient(output, answer, atype):  # the pre-fix lenient: gold substring first
    gold = str(ref_gold(answer))
    if gold.lower() in output.lower():
        return 1.0
    return ref_official(output, answer, atype)


@pytest.mark.parametrize("broken,ref", [(_old_official, ref_official), (_old_lenient, ref_lenient)])
def test_differential_catches_a_broken_scorer(broken, ref):
    """Negative control: the same harness flags the scorers this issue replaced."""
    data = [c for c in cases(2500, 8) if not c[0].isspace() and c[0]]
    assert any(not _agree(broken, ref, c)[0] for c in data)


# ------------------------------------------------------------ pinned behaviour ---
def test_gold_parsing_matches_official():
    assert parse_gold("['abbreviation']") == "abbreviation"
    assert parse_gold("[28]") == 28
    assert parse_gold("[datetime.date(2023, 5, 1)]") == datetime.datetime(2023, 5, 1)


def test_output_parsing_steps():
    assert parse_output("entity") == "entity"
    assert parse_output("I believe the answer is entity") == "entity"
    assert parse_output("Label: **entity**") == "entity"
    assert parse_output("Answer: [42]") == "42"
    assert parse_output("Answer: location is more common than entity") == "more common"
    assert parse_output("Answer: more common") == "more common"  # < 20 chars: kept as is


def test_numeric_partial_credit_and_no_substring_credit():
    assert score_official("Answer: 28", "[28]", N) == 1.0
    assert score_official("Answer: 26", "[28]", N) == pytest.approx(0.75 ** 2)
    assert score_lenient("Answer: 17", "[7]", N) == pytest.approx(0.75 ** 10)  # not 1.0
    assert score_official("Answer: many", "[28]", N) == 0.0


def test_date_with_time_of_day_scores_zero():
    gold = "[datetime.date(2023, 5, 1)]"
    assert score_official("Date: May 1, 2023", gold, D) == 1.0
    assert score_official("Date: 2023-05-01 9am", gold, D) == 0.0  # a time of day: unequal
    assert score_lenient("Date: May 1 2023 5pm", gold, D) == 0.0


def test_month_year_is_exact_and_independent_of_today():
    assert score_official("Answer: March 2023", "['March 2023']", M) == 1.0
    assert score_official("Answer: 2023-03-01", "['March 2023']", M) == 0.0
    assert score_lenient("Answer: march 2023", "['March 2023']", M) == 1.0


def test_comparison_phrases():
    assert score_official("Answer: a is more common than b", "['more common than']", C) == 1.0
    assert score_official("Answer: a is less common than b", "['more common than']", C) == 0.0
    assert score_official("More common than b, I think", "['more common than']", C) == 0.0
    assert score_lenient("More common than b, I think", "['more common than']", C) == 1.0


def test_whitespace_only_output_scores_zero_where_official_crashes():
    with pytest.raises(IndexError):
        ref_official(" " * 25, "['entity']", L)
    assert score_official(" " * 25, "['entity']", L) == 0.0
    assert score_lenient(" " * 25, "['entity']", L) == 0.0


def test_case_sensitivity():
    assert score("Label: Entity", "['entity']", L, "official") == 0.0
    assert score("Label: Entity", "['entity']", L, "lenient") == 1.0
    with pytest.raises(ValueError, match="unknown scorer"):
        score("x", "['x']", L, "fuzzy")


def test_pairs_f1_normalises_format():
    gold = "(1, 2)\n(2, 3)\n(3, 4)"
    assert pairs_f1("(2,1), [3, 2], (3, 4), (3, 4)", gold) == 1.0
    assert pairs_f1("(1, 2)", gold) == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))
    assert pairs_f1("[]", "[]") == 1.0
    assert pairs_f1("[]", gold) == 0.0
    assert pairs_f1("(5, 6)", gold) == 0.0
    assert parse_pairs([(3, 1), (1, 3), (2, 2)]) == {(1, 3)}
    assert score("(1, 2), (2, 3), (3, 4)", gold, "ANSWER_TYPE.PAIRS") == 1.0


def test_real_rows_use_the_dnd_rubric():
    assert score(r"so \boxed{12}", "12", "ANSWER_TYPE.REAL") == 1.0
    assert score(r"\boxed{10}", "12", "ANSWER_TYPE.REAL") == pytest.approx(0.75 ** 2)
    assert score("12", "12", "ANSWER_TYPE.REAL") == 0.0


@pytest.mark.parametrize("ours,ref", [(score_official, ref_official), (score_lenient, ref_lenient)],
                         ids=["official", "lenient"])
def test_differential_on_arbitrary_text(ours, ref):
    """Random text (any unicode, colons, brackets, digits) around each gold type."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = st.sampled_from(["Answer:", "Label:", ":", "*", "[", "]", " ", "\n", "7", "٣", "+7",
                              "2023-05-01", "more common", "less common than", "entity"])
    text = st.lists(st.one_of(st.text(max_size=6), pieces), max_size=8).map("".join)

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(text, st.sampled_from(GOLDS))
    def check(output, gold):
        ok, info = _agree(ours, ref, (output, *gold))
        assert ok, info

    check()
