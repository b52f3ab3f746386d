"""The official OOLONG-synth scorer (every branch of FACTS.md §4), lenient, pairs F1."""

import datetime

import pytest

from spectool_bench.oolong import pairs_f1, parse_gold, parse_output, score, score_lenient, score_official

L, U, N, C, D = ("ANSWER_TYPE.LABEL", "ANSWER_TYPE.USER", "ANSWER_TYPE.NUMERIC",
                 "ANSWER_TYPE.COMPARISON", "ANSWER_TYPE.DATE")


def test_step1_gold():
    assert parse_gold("['abbreviation']") == "abbreviation"
    assert parse_gold("[28]") == 28
    assert parse_gold("[datetime.date(2023, 5, 1)]") == datetime.date(2023, 5, 1)
    assert parse_gold("['more common than']") == "more common than"


@pytest.mark.parametrize("output, expected", [
    ("entity", "entity"),                                # no ':' and short: whole output
    ("  entity ", "  entity "),                          # ... not even stripped
    ("I think the answer is clearly entity", "entity"),  # no ':' and long: last word
    ("Label: **[entity]**", "entity"),                   # after last ':', * [ ] removed
    ("Reasoning: x. Label:  human being ", "human being"),
    ("Answer: entity is more common than location", "more common"),
    ("Answer: entity is less common than location", "less common"),
    ("Answer: entity has the same frequency as location", "same frequency"),
    ("Answer: more common", "more common"),              # < 20 chars: not replaced
    ("Answer: description and abstract concept", "description and abstract concept"),
    ("Answer: the same frequency but more common", "more common"),  # checked in order
])
def test_step2_parse(output, expected):
    assert parse_output(output) == expected


def test_step3_exact_match_case_sensitive():
    assert score_official("Label: entity", "['entity']", L) == 1.0
    assert score_official("Label: Entity", "['entity']", L) == 0.0
    assert score_official("User: 44436", "[44436]", U) == 1.0
    assert score_official("Label: human being", "['human being']", L) == 1.0


def test_step3_comparison_phrases():
    assert score_official("Answer: entity is more common than location", "['more common than']", C) == 1.0
    assert score_official("Answer: entity is less common than location", "['more common than']", C) == 0.0
    assert score_official("Answer: a is the same frequency as b here", "['same frequency as']", C) == 1.0
    assert score_official("more common", "['more common than']", C) == 1.0  # phrase in gold


def test_step3_numeric():
    assert score_official("Answer: 28", "[28]", N) == 1.0
    assert score_official("Answer: 30", "[28]", N) == pytest.approx(0.75 ** 2)
    assert score_official("Answer: 25", "[28]", N) == pytest.approx(0.75 ** 3)
    assert score_official("Answer: twenty", "[28]", N) == 0.0
    assert score_official("Answer: 28.0", "[28]", N) == 0.0  # int() fails
    assert score_official("Answer: 30", "[28]", L) == 0.0  # not numeric type: no partial credit


def test_step3_date():
    gold = "[datetime.date(2023, 5, 1)]"
    assert score_official("Date: 2023-05-01", gold, D) == 1.0  # str(date) matches
    assert score_official("Date: May 1, 2023", gold, D) == 1.0  # dateutil
    assert score_official("The first month is May 01 2023", gold, D) == 0.0  # last word '2023'
    assert score_official("Date: 2023-05-02", gold, D) == 0.0
    assert score_official("Date: not a date at all, sorry", gold, D) == 0.0
    assert score_official("Date: 2023-05-01", gold, L) == 1.0  # exact str match for any type


def test_other_types_zero():
    assert score_official("Label: location", "['entity']", L) == 0.0
    assert score_official("", "['entity']", L) == 0.0


def test_lenient():
    assert score_lenient("Label: Entity", "['entity']", L) == 1.0  # case-insensitive
    assert score_lenient("I believe it is entity overall, yes.", "['entity']", L) == 1.0
    assert score_lenient("Label: location", "['entity']", L) == 0.0
    assert score_lenient("Answer: 30", "[28]", N) == pytest.approx(0.75 ** 2)
    assert score_lenient("Answer: 28", "[28]", N) == 1.0


def test_pairs_f1():
    gold = "[(1, 2), (2, 3), (3, 4)]"
    assert pairs_f1("(1, 2), (2, 3), (3, 4)", gold) == 1.0
    assert pairs_f1("(2, 1), (3, 2), (4, 3)", gold) == 1.0  # unordered within a pair
    assert pairs_f1("(1, 2)", gold) == pytest.approx(2 * 1.0 * (1 / 3) / (1 + 1 / 3))
    assert pairs_f1("(1, 2), (5, 6)", gold) == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert pairs_f1("", gold) == 0.0
    assert pairs_f1("none", "[]") == 1.0
    assert pairs_f1([(1, 2)], [(2, 1)]) == 1.0
    assert score("(1, 2), (2, 3), (3, 4)", gold, "ANSWER_TYPE.PAIRS") == 1.0


def test_score_dispatch():
    assert score("Label: Entity", "['entity']", L, "official") == 0.0
    assert score("Label: Entity", "['entity']", L, "lenient") == 1.0
    with pytest.raises(ValueError):
        score("x", "['x']", L, "fuzzy")
