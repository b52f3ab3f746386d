"""Load the official OOLONG data files into ``Window`` objects (no network access).

Accepted inputs (a file, or a folder whose ``*.parquet`` / ``*.jsonl`` / ``*.json``
files are all read):

* **OOLONG-synth rows** as published on the Hugging Face hub
  (``oolongbench/oolong-synth``; schema of ``src/data_gen/oolong-synth/subsample.py``):
  ``id, context_len, dataset, context_window_id, context_window_text,
  context_window_text_with_labels, question, task_group, task, answer, answer_type,
  input_subset, num_labels``. The labelled text gives each instance's label (the
  side table a simulated sub-model needs).
* **OOLONG-real rows** (``oolongbench/oolong-real``; ``prepare_cr_questions.py``):
  ``id, context_window_id, context_window_text, question, answer, question_type,
  episodes, campaign`` (``context_len`` optional). No instance labels.
* **OOLONG-Pairs JSON**: a list of objects (or ``{"tasks": [...]}``) with
  ``question``, ``answer`` (the pair lines, or a list of ``[a, b]``) and
  ``context_window_text`` (or ``context``); optional ``context_len``,
  ``context_window_id``, ``id``.

Parquet needs ``pyarrow`` (the ``oolong-data`` extra); JSON/JSONL need nothing.
Rows of one ``context_window_id`` become one ``Window`` whose ``questions`` are the
rows' questions, in file order.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .generator import parse_line
from .model import Instance, Question, Window
from .questions import PAIRS

SYNTH_COLUMNS = ("context_len", "dataset", "context_window_id", "context_window_text",
                 "question", "task_group", "task", "answer", "answer_type")
_SUFFIXES = (".parquet", ".jsonl", ".json")


class DataError(ValueError):
    """An input file that is missing, unreadable or not in an OOLONG schema."""


def read_rows(path: str | Path) -> list[dict]:
    """All rows of ``path`` (a file or a folder of files), as dicts."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"--data: {path} does not exist")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
        if not files:
            raise DataError(f"--data: no .parquet/.jsonl/.json files under {path}")
        return [row for f in files for row in read_rows(f)]
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - the dev extra installs pyarrow
            raise DataError("reading parquet needs pyarrow: pip install 'spectool[oolong-data]'"
                            ) from None
        try:
            return pq.read_table(path).to_pylist()
        except Exception as exc:
            raise DataError(f"--data: cannot read parquet file {path}: {exc}") from None
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif path.suffix == ".json":
            rows = json.loads(text)
            if isinstance(rows, dict):
                rows = rows.get("tasks", rows.get("rows", rows.get("data")))
        else:
            raise DataError(f"--data: {path.name}: expected .parquet, .jsonl or .json")
    except json.JSONDecodeError as exc:
        raise DataError(f"--data: {path} is not valid JSON: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise DataError(f"--data: {path} must hold a list of objects (rows)")
    return rows


# columns only OOLONG-synth rows have: a row with one of them is a synth row, complete or not
_SYNTH_ONLY = ("dataset", "task_group", "task", "answer_type", "context_window_text_with_labels",
               "input_subset", "num_labels")


def kind_of(row: dict) -> str:
    """'synth' | 'real' | 'pairs' from the row's columns."""
    if all(k in row for k in SYNTH_COLUMNS):
        return "synth"
    marks = [k for k in _SYNTH_ONLY if k in row]
    if marks:
        missing = [k for k in SYNTH_COLUMNS if k not in row]
        raise DataError(f"--data: a row has OOLONG-synth columns ({', '.join(marks)}) but "
                        f"lacks {', '.join(missing)}")
    if "question" in row and "answer" in row and ("context_window_text" in row or "context" in row):
        if _looks_like_pairs(row):
            return "pairs"
        return "real"
    missing = [k for k in ("question", "answer", "context_window_text") if k not in row]
    raise DataError(f"--data: a row is in no OOLONG schema (missing {missing}; has "
                    f"{sorted(row)[:12]})")


def _looks_like_pairs(row: dict) -> bool:
    ans = row["answer"]
    if isinstance(ans, list) and ans and all(isinstance(p, (list, tuple)) and len(p) == 2
                                             for p in ans):
        return True
    return "list all pairs of user IDs" in str(row["question"])


def _labelled(text: str) -> list[tuple[Instance, str]]:
    """Instances from ``context_window_text_with_labels`` (``… || Label: y`` lines)."""
    out = []
    for line in text.split("\n"):
        head, sep, label = line.rpartition(" || Label: ")
        if not sep:
            continue
        rec = parse_line(head)
        if rec is not None:
            out.append((Instance(rec[0], rec[1], rec[2], label.strip()), label.strip()))
    return out


def _labels_from(inst: list[Instance]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i.label for i in inst))


def load_windows(path: str | Path) -> list[Window]:
    """Windows (with their questions) from official OOLONG files, in file order."""
    rows = read_rows(path)
    if not rows:
        raise DataError(f"--data: {path} holds no rows")
    groups: dict[object, list[dict]] = defaultdict(list)
    for k, row in enumerate(rows):
        kind = kind_of(row)
        key = (kind, row.get("context_window_id", f"row{k}" if kind == "pairs" else None),
               row.get("context_len"))
        groups[key].append(row)
    windows = []
    for (kind, wid, clen), grp in groups.items():
        first = grp[0]
        context = first.get("context_window_text", first.get("context"))
        if not isinstance(context, str) or not context:
            raise DataError(f"--data: window {wid!r} has no context text")
        instances: list[Instance] = []
        label_of: dict[str, str] = {}
        if kind == "synth" and first.get("context_window_text_with_labels"):
            for inst, lab in _labelled(first["context_window_text_with_labels"]):
                instances.append(inst)
                label_of[inst.text.replace("\n", " ")] = lab
        questions = []
        for k, row in enumerate(grp):
            answer = row["answer"]
            if kind == "pairs":
                if not isinstance(answer, str):
                    answer = "\n".join(f"({min(a, b)}, {max(a, b)})" for a, b in answer) or "[]"
                atype, task, group = PAIRS, "pairs", "pairs"
            else:
                if kind == "real" and isinstance(answer, list):  # dnd_parse_answer's list form
                    answer = ", ".join(str(x) for x in answer)
                atype = row.get("answer_type", "ANSWER_TYPE.REAL" if kind == "real" else "")
                task = str(row.get("task", row.get("question_type", kind)))
                group = str(row.get("task_group", kind))
            questions.append(Question(str(row.get("id", f"{wid}-{k}")), group, task,
                                      str(row["question"]), str(answer), str(atype),
                                      {"source": kind}, task))
        dataset = str(first.get("dataset", "oolong-real" if kind == "real" else "oolong-pairs"))
        windows.append(Window(dataset, int(clen or 0), _seed(wid), 0,
                              _labels_from(instances), instances, context, questions, label_of,
                              list(questions)))
    return windows


def _seed(wid) -> int:
    try:
        return int(wid)
    except (TypeError, ValueError):
        return 0


def check_simulated_sub_model(windows: list[Window]) -> None:
    """The simulated sub-model answers from each instance's hidden label: a window
    without labelled text (OOLONG-real, or synth rows without
    ``context_window_text_with_labels``) needs a real sub-model."""
    for w in windows:
        if not w.labels:
            raise DataError(f"--data: window {w.seed} ({w.dataset}, {w.context_tokens} "
                            f"tokens) has no labelled text, which the simulated sub-model "
                            f"answers from: pass --sub-model MODEL")


def select_windows(path: str | Path, context_tokens: tuple[int, ...], index: int) -> list[Window]:
    """For each requested context length, the ``index``-th loaded window of that length
    (windows without a stated length match any request)."""
    loaded = load_windows(path)
    out = []
    for L in context_tokens:
        match = [w for w in loaded if w.context_tokens in (L, 0)]
        if not match:
            have = sorted({w.context_tokens for w in loaded})
            raise DataError(f"--data: no window of {L} tokens in {path} (it has {have})")
        if index >= len(match) or index < 0:
            raise DataError(f"--data: seed {index} selects window {index}, but {path} has "
                            f"{len(match)} window(s) of {L} tokens")
        out.append(match[index])
    return out
