"""Partial-JSON tracking: pydantic-core parsing vs the hand-written scanner it replaced.

``spectool_agents.partial_json.JsonTracker`` decides when a streamed tool-call
argument text has closed. It used to scan every character in Python; it now lets
pydantic-core parse the text whenever a fragment holds the closing character. This
benchmark times both on the same fragments, interleaved, best of 5 rounds: a
typical 115-character argument object in 4-character fragments and a 21 KB object
in 16-character fragments. The old scanner is read from git history (commit
39f795d), so this needs a git checkout::

    .venv/bin/python -m spectool_bench.partial_json_bench
"""

from __future__ import annotations

import json
import subprocess
import time
import types
from pathlib import Path

from spectool_agents.partial_json import JsonTracker

OLD_COMMIT = "39f795d"


def old_tracker_class() -> type:
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{OLD_COMMIT}:agents/partial_json.py"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("old_partial_json")
    exec(compile(source, "old_partial_json.py", "exec"), module.__dict__)
    return module.JsonTracker


def closes_at(tracker_class: type, fragments: list[str]) -> int | None:
    tracker = tracker_class()
    for i, fragment in enumerate(fragments):
        if tracker.feed(fragment):
            tracker.value()  # both parse the value once it is complete
            return i
    return None


def per_message_s(tracker_class: type, fragments: list[str], reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        closes_at(tracker_class, fragments)
    return (time.perf_counter() - t0) / reps


def main() -> None:
    old = old_tracker_class()
    small = json.dumps({"query": "capital of France and the population of Paris", "k": 5,
                        "filters": {"lang": "en", "year": [2020, 2021]}})
    big = json.dumps({"items": [{"id": i, "text": "lorem ipsum dolor sit amet " * 3}
                                for i in range(200)]})
    print("partial-JSON tracking, per streamed message (best of 5 interleaved rounds)")
    print(f"{'arguments':<28} {'hand-written':>13} {'pydantic-core':>14} {'ratio':>6}")
    for label, text, size, reps in (("115 chars, 4-char deltas", small, 4, 2000),
                                    ("21 KB, 16-char deltas", big, 16, 20)):
        fragments = [text[i:i + size] for i in range(0, len(text), size)]
        assert closes_at(old, fragments) == closes_at(JsonTracker, fragments) == len(fragments) - 1
        best_old = best_new = float("inf")
        for _ in range(5):
            best_old = min(best_old, per_message_s(old, fragments, reps))
            best_new = min(best_new, per_message_s(JsonTracker, fragments, reps))
        print(f"{label:<28} {best_old * 1e6:>10.1f} us {best_new * 1e6:>11.1f} us "
              f"{best_old / best_new:>5.1f}x")


if __name__ == "__main__":
    main()
