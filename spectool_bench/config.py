"""What one ``spectool bench oolong`` run is asked to do: ``BenchConfig`` and its choices.

``BenchConfig`` holds every option of the main job (modes, decodings, concurrency, the
window's dataset and size, program shapes, time scale, real models, tasks, the loaded
scenario) and ``validate()`` checks them with one message per bad value. The runner
(``runner.py``) runs it; the report (``report.py``) reads it; neither imports the other
for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .programs import SHAPES

__all__ = ["BenchConfig", "DECODINGS", "MODES", "TASKS"]

MODES = ("baseline", "lazy", "spec")
DECODINGS = ("vanilla", "speculative")
TASKS = ("synth", "pairs", "both")


@dataclass
class BenchConfig:
    out: Path = Path("out/oolong")
    modes: tuple[str, ...] = MODES
    concurrency: tuple[int, ...] = (1, 4)
    repeats: int = 1
    seeds: tuple[int, ...] = (0,)
    context_tokens: tuple[int, ...] = (8192,)
    decoding: tuple[str, ...] = DECODINGS
    dataset: str = "trec_coarse"
    shapes: tuple[str, ...] = SHAPES
    time_scale: float = 0.1
    accuracy: float = 0.95
    max_batch: int = 8
    alpha: float = 0.12
    root_model: str | None = None
    sub_model: str | None = None
    model_kwargs: dict | None = None  # extra litellm arguments (api_base, api_key, ...)
    max_questions: int | None = None  # real root model: questions per window (default all)
    data: Path | None = None  # official OOLONG files instead of the generator (oolong.loader)
    tasks: str = "synth"  # "synth" | "pairs" (the 20 OOLONG-Pairs tasks) | "both"
    all_windows: bool = False  # keep windows the official subsample drops (< 25 questions)
    max_turns: int = 6
    progress: bool = True
    plots: bool = True
    admission: bool = True      # cost-aware admission (spectool.speculation.admission)
    # the loaded-server scenario: these shapes again, at concurrency 1, on a simulated
    # server whose latency grows by ``loaded_alpha`` per extra call in flight, with
    # admission on and off (None: skip)
    loaded_alpha: float | None = 0.5
    loaded_shapes: tuple[str, ...] = ("reassigned_loop",)

    def validate(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"modes must be among {MODES}, got {list(self.modes)}")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ValueError("concurrency values must be >= 1")
        if self.repeats < 1:
            raise ValueError("repeats must be >= 1")
        if any(c < 1024 or c > 131072 for c in self.context_tokens) or not self.context_tokens:
            raise ValueError("context tokens must be within 1024..131072")
        if any(d not in DECODINGS for d in self.decoding) or not self.decoding:
            raise ValueError(f"decoding must be among {DECODINGS}")
        if any(s not in SHAPES for s in self.shapes) or not self.shapes:
            raise ValueError(f"shapes must be among {SHAPES}")
        if not self.time_scale > 0:
            raise ValueError("time scale must be > 0")
        if not 0 <= self.accuracy <= 1:
            raise ValueError("accuracy must be in [0, 1]")
        if self.tasks not in TASKS:
            raise ValueError(f"tasks must be one of {TASKS}, got {self.tasks!r}")
        if self.tasks != "synth" and self.data is not None:
            raise ValueError("--tasks applies to generated windows; --data runs the file's own "
                             "questions (OOLONG-Pairs JSON included)")
        if self.tasks != "synth" and self.dataset != "trec_coarse":
            raise ValueError("OOLONG-Pairs is defined over trec_coarse windows (RLM paper E.1); "
                             f"got --dataset {self.dataset}")
        if self.data is not None and self.root_model is None:
            raise ValueError("--data needs --root-model: the simulated root model only writes "
                             "programs for generated questions")
        if self.data is not None and self.sub_model is None:
            from .oolong.loader import check_simulated_sub_model, select_windows
            for seed in self.seeds:
                check_simulated_sub_model(select_windows(self.data, self.context_tokens, seed))

    @property
    def simulated(self) -> bool:
        return self.root_model is None and self.sub_model is None
