"""OOLONG-synth generator: the official construction (counts, users, labels, dates,
header/footer, 25-question subsample, tie rules) on every dataset."""

import datetime
import random
import re
from collections import Counter

import pytest

from spectool_bench.oolong import DATASETS, generate_window, parse_gold, parse_line, score_official
from spectool_bench.oolong.generator import FIRST_DAY, LAST_DAY, Instance, label_counts
from spectool_bench.oolong.questions import closest_gap, counting_block, ranked, timeline_block
from spectool_bench.oolong.specs import SPECS, instance_count

OFFICIAL_LABELS = {  # datasets_loader.py label lists
    "trec_coarse": {"abbreviation", "entity", "description and abstract concept", "human being",
                    "location", "numeric value"},
    "spam": {"ham", "spam"}, "imdb": {"negative", "positive"},
    "agnews": {"World", "Sports", "Business", "Sci/Tech"}, "negation": {"True", "False"},
    "yahoo": {"Society & Culture", "Science & Mathematics", "Health", "Education & Reference",
              "Computers & Internet", "Sports", "Business & Finance", "Entertainment & Music",
              "Family & Relationships", "Politics & Government"},
    "formality": {"formal", "informal"}, "multinli": {"entailment", "neutral", "contradiction"},
    "metaphors": {"correct", "incorrect"}, "app_reviews": {"negative", "positive"},
}


@pytest.fixture(scope="module", params=[("trec_coarse", 8192, 0), ("trec_coarse", 32768, 3),
                                        ("imdb", 16384, 1), ("spam", 8192, 2), ("yahoo", 4096, 5)])
def window(request):
    return generate_window(*request.param)


def test_deterministic():
    a, b = generate_window("trec_coarse", 4096, 5), generate_window("trec_coarse", 4096, 5)
    assert a.context == b.context
    assert [(q.text, q.answer) for q in a.all_questions] == [(q.text, q.answer) for q in b.all_questions]
    assert generate_window("trec_coarse", 4096, 6).context != a.context


def test_instance_counts_follow_the_official_token_estimates():
    assert instance_count("trec_coarse", 32768) == 787  # the official figures
    assert instance_count("imdb", 8192) == 19
    for name, spec in SPECS.items():
        n = len(generate_window(name, 8192, 0).instances)
        assert n == (8192 * 0.95 - spec.prompt_tokens - 250) // spec.per_example_tokens


def test_all_ten_official_label_sets():
    assert set(DATASETS) == set(OFFICIAL_LABELS)
    for name, labels in OFFICIAL_LABELS.items():
        assert set(DATASETS[name].labels) == labels


def test_official_header_and_footer_with_shuffled_labels(window):
    n = len(window.instances)
    head = window.context.split("\n")[0]
    assert head.startswith(f"The following lines contain {n} ")
    assert (f"You will be asked to answer questions about the aggregate label statistics across "
            f"all {n} examples in this dataset. Do not try to guess, estimate, or approximate the "
            f"result. Calculate the exact answer given these datapoints.") in window.context
    rows = window.context.split("\n")
    recall = [k for k, x in enumerate(rows) if x.startswith(f"Recall: the preceding lines contain {n} ")]
    assert len(recall) == 1 and " || Instance: " in rows[recall[0] - 1]
    lines = [x for x in window.context.split("\n") if " || Instance: " in x]
    assert len(lines) == n
    for line in lines:
        assert re.fullmatch(r"Date: [A-Z][a-z]{2} \d{2}, 202[2-5] \|\| User: \d{5} \|\| Instance: .+", line)


def test_label_order_is_shuffled_per_window():
    orders = {generate_window("trec_coarse", 4096, s).labels for s in range(8)}
    assert len(orders) > 1
    w = generate_window("trec_coarse", 4096, 0)
    quoted = ", ".join(f"'{x}'" for x in w.labels)
    assert quoted in w.context.split("\n")[0]


def test_label_mix_formula():
    """softmax(randint(1, 30) ** (1/T)), T in 2..6, rounded; the counts sum to N."""
    import random

    rng = random.Random(1)
    for _ in range(200):
        t, counts = label_counts(787, 6, rng)
        assert 2 <= t <= 6 and sum(counts) == 787 and min(counts) >= 0
        # max weight ratio bound: exp(30 ** (1/T) - 1)
        assert max(counts) <= (min(counts) + 1) * 2.72 ** (30 ** (1 / t) - 1) + 1


def test_users_are_common_ids_plus_fresh_ones(window):
    n = len(window.instances)
    users = Counter(i.user for i in window.instances)
    n_common = max(1, int(0.1 * n))
    common = [u for u, _ in users.most_common(n_common)]
    covered = sum(users[u] for u in common)
    assert covered >= 0.6 * n  # ~80% of lines carry one of the common ids
    if n >= 150:
        assert users.most_common(1)[0][1] / n <= 0.1  # top-user share stays small


def test_dates_within_the_official_range(window):
    for i in window.instances:
        assert FIRST_DAY <= i.date <= LAST_DAY


def test_labels_not_in_text(window):
    words = {w.lower() for lab in window.labels for w in lab.split() if len(w) > 3}
    for inst in window.instances:
        low = inst.text.lower()
        assert not any(lab.lower() in low for lab in window.labels), inst.text
        assert not words & set(re.findall(r"[a-z]+", low)), inst.text


def test_side_table_consistent_on_every_dataset():
    for name in DATASETS:
        w = generate_window(name, 8192, 2)
        for line in w.context.split("\n"):
            rec = parse_line(line)
            if rec is not None:
                assert w.label_of[rec[2]] in w.labels
        for inst in w.instances:
            assert w.label_of[inst.text] == inst.label


def test_texts_vary_on_every_dataset():
    for name in DATASETS:
        w = generate_window(name, 32768, 0)
        assert len({i.text for i in w.instances}) >= 0.85 * len(w.instances), name


def test_twenty_five_questions_first_in_generation_order(window):
    assert window.questions == window.all_questions[:25]
    order = {"counting": 0, "user": 1, "timeline": 2}
    ranks = [order[q.group] for q in window.all_questions]
    assert ranks == sorted(ranks)


def test_every_family_is_generated():
    tasks, types = set(), set()
    for name in ("spam", "imdb", "trec_coarse"):
        for s in range(3):
            for q in generate_window(name, 16384, s).all_questions:
                tasks.add(q.task)
                types.add(q.task_type)
    # a strict top-3 of dates is rare in real windows: pin the date questions on a crafted one
    d = datetime.date
    inst = [Instance(day, 10000 + k, f"t{k}", "x" if k % 2 else "y") for k, day in enumerate(
        [d(2023, 1, 1)] * 3 + [d(2023, 2, 1)] * 2 + [d(2023, 3, k) for k in range(1, 20)])]
    crafted = timeline_block(inst, random.Random(0))
    assert [(t, g) for t, _, _, g, _, _ in crafted[:2]] == [
        ("most_frequent_date", [d(2023, 1, 1)]), ("second_most_frequent_date", [d(2023, 2, 1)])]
    for spec in crafted:
        tasks.add(spec[0])
        types.add(spec[1])
    assert types == {"TASK_TYPE.MOST_FREQ", "TASK_TYPE.SECOND_MOST_FREQ", "TASK_TYPE.LEAST_FREQ",
                     "TASK_TYPE.RELATIVE_FREQ", "TASK_TYPE.NUMERIC_ONE_CLASS",
                     "TASK_TYPE.REPRESENTED_N_TIMES"}  # constants.TASK_TYPE
    assert tasks == {"most_common_label", "least_common_label", "compare_labels", "label_count",
                     "most_represented_user", "second_most_represented_user", "user_most_label",
                     "user_a_or_b", "most_frequent_date", "second_most_frequent_date",
                     "dates_exactly_n", "before_after", "first_month_beats", "months_beats_count",
                     "months_single_most"}


def test_scoped_counting_questions_use_the_official_subset_clauses():
    texts = [q.text for s in range(3) for q in generate_window("spam", 16384, s).all_questions]
    assert any(t.startswith("For the following question, only consider the subset of instances "
                            "that are associated with user IDs ") for t in texts)
    assert any(" of any year. Among instances occuring in " in t for t in texts)
    assert any(", inclusive. Among instances occuring in this date range, " in t for t in texts)


def test_first_month_question_is_month_year():
    seen = 0
    for s in range(6):
        w = generate_window("spam", 8192, s)
        first = min(i.date for i in w.instances)
        for q in w.all_questions:
            if q.task == "first_month_beats":
                seen += 1
                assert q.answer_type == "ANSWER_TYPE.MONTH_YEAR"
                assert q.answer == repr([first.strftime("%B %Y")])  # official: first month only
    assert seen


def test_counting_tie_and_gap_rules():
    """MOST only when unique and > 2% ahead; LEAST always, listing ties; pairs > 2% or equal."""
    specs = counting_block({"a": 50, "b": 49, "c": 1}, {})
    tasks = [s[0] for s in specs]
    assert "most_common_label" not in tasks  # 1% ahead of 'b'
    assert ("compare_labels", ("a", "b")) not in [(s[0], (s[5].get("a"), s[5].get("b"))) for s in specs]
    specs = counting_block({"a": 10, "b": 10, "c": 30}, {})
    least = next(s for s in specs if s[0] == "least_common_label")
    assert least[3] == ["a", "b"]
    same = [s for s in specs if s[0] == "compare_labels" and s[3] == ["same frequency as"]]
    assert len(same) == 1
    assert closest_gap({"a": 1}, "a") == 1.0
    assert ranked([3, 1, 1, 3, 2]) == [(3, 2), (1, 2), (2, 1)]  # ties keep first-seen order


def test_tied_top_user_question_is_dropped():
    dropped = kept = 0
    for s in range(30):
        w = generate_window("trec_coarse", 8192, s)
        users = Counter(i.user for i in w.instances).most_common(2)
        asked = any(q.task == "most_represented_user" for q in w.all_questions)
        assert asked == (users[0][1] != users[1][1])
        dropped += not asked
        kept += asked
    assert dropped and kept


def test_gold_scores_one_in_answer_format(window):
    for q in window.all_questions:
        g = parse_gold(q.answer)
        prefix = {"ANSWER_TYPE.LABEL": "Label", "ANSWER_TYPE.USER": "User",
                  "ANSWER_TYPE.DATE": "Date"}.get(q.answer_type, "Answer")
        if isinstance(g, datetime.datetime):
            g = g.date()
        assert score_official(f"{prefix}: {g}", q.answer, q.answer_type) == 1.0, q.text


def test_bad_args():
    with pytest.raises(ValueError, match="unknown dataset"):
        generate_window("nope", 4096, 0)
    with pytest.raises(ValueError, match=">= 1024"):
        generate_window("trec_coarse", 100, 0)
    with pytest.raises(ValueError, match="instance"):
        generate_window("imdb", 1024, 0)


def test_window_with_fewer_than_25_questions_is_dropped_as_the_official_subsample_does():
    """subsample.py skips a window with < 25 questions; ``all_questions`` still has them,
    and ``kept_window`` walks seeds in order past the dropped ones."""
    from spectool_bench.oolong.generator import kept_window

    dropped = generate_window("imdb", 8192, 14)
    assert dropped.dropped and dropped.questions == []
    assert 0 < len(dropped.all_questions) < 25
    kept = [kept_window("imdb", 8192, i).seed for i in range(16)]
    assert 14 not in kept and kept[:14] == list(range(14)) and kept[14] == 15
    assert not generate_window("imdb", 8192, 13).dropped  # negative control: a kept one


def test_official_subsample_rules():
    from spectool_bench.oolong.questions import official_subsample

    qs = generate_window("trec_coarse", 8192, 0).all_questions
    assert official_subsample(qs[:24], "trec_coarse", 8192) == []
    assert official_subsample(qs[:25], "trec_coarse", 8192) == qs[:25]
    assert official_subsample(qs, "trec_coarse", 8192) == qs[:25]
    # two-label datasets at 1K: short windows are pooled whole, up to 50 questions
    assert official_subsample(qs[:12], "spam", 1024) == qs[:12]
    assert official_subsample(qs, "spam", 1024) == qs[:50]
    assert official_subsample(qs[:12], "spam", 2048) == []


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_at_least_90_percent_distinct_lines_and_no_label_word_at_128k(name):
    for seed in (0, 1):
        w = generate_window(name, 131072, seed)
        texts = [i.text for i in w.instances]
        assert len(set(texts)) >= 0.90 * len(texts), (name, seed, len(set(texts)) / len(texts))
        words = {x.lower() for lab in w.labels for x in lab.split() if len(x) > 3}
        for text in set(texts):
            low = text.lower()
            assert not any(lab.lower() in low for lab in w.labels), text
            assert not words & set(re.findall(r"[a-z]+", low)), text
