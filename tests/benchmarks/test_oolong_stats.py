"""``python -m spectool_bench.oolong.stats``: both tables of docs/oolong.md, on a few windows."""

import pytest

from spectool_bench.oolong import stats
from spectool_bench.oolong.specs import instance_count


def test_prints_window_and_like_with_like_mix_tables(capsys):
    assert stats.main(["--windows", "8", "--max-length", "131072"]) == 0
    out = capsys.readouterr().out
    for L, name in ((8192, "8K"), (32768, "32K"), (131072, "128K")):
        row = next(x for x in out.splitlines() if x.startswith(f"| {name} | generator |"))
        assert float(row.split("|")[3]) == instance_count("trec_coarse", L)
    assert "| generator 1K |" in out and "| generator 256K |" not in out
    assert "| generator pooled 1K..128K (equal weight) |" in out
    assert "| public 131K (2 windows) | 50 |" in out and "| public pooled (>= 6 lengths) | 300 |" in out
    assert "| gap: generator 128K vs public 131K |" in out


def test_spam_is_compared_with_its_own_public_sample_and_other_datasets_with_none(capsys):
    assert stats.main(["--dataset", "spam", "--windows", "8", "--max-length", "131072"]) == 0
    out = capsys.readouterr().out
    assert "| public spam, validation shards 1-3 (derived) | 308 | 0.286 | 0.237 | 0.266 | 0.149 |" in out
    assert "| gap: generator pooled 1K..128K vs public spam" in out and "public 131K" not in out
    assert stats.main(["--dataset", "agnews", "--windows", "8", "--max-length", "131072"]) == 0
    out = capsys.readouterr().out
    assert "no public per-type counts known for agnews" in out and "| public" not in out


def test_mix_shares_count_only_kept_questions():
    _, types, total = stats._generated("imdb", 8192, 16)  # seed 14 is dropped (< 25)
    assert total == 15 * 25 and sum(types.values()) == total


@pytest.mark.parametrize("args", [["--windows", "0"], ["--max-length", "4096"]])
def test_bad_args(args, capsys):
    with pytest.raises(SystemExit) as exc:
        stats.main(args)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err
