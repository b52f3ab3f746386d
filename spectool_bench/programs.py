"""RLM-style programs that the **simulated** root model writes, one shape at a time.

Each shape is modelled on real RLM trajectories over OOLONG windows:

* ``loop_blocking``: an exploration turn (``print(len(context))``, peek at lines), then
  a chunk-and-classify loop of blocking ``llm_query`` calls over batches of
  ``context.split("\\n")``, aggregation in plain Python, ``FINAL(...)``.
* ``batched``: exploration, prompts built in a list comprehension, one
  ``llm_query_batched`` call, aggregation, the answer dict marked ready.
* ``helper_loop``: a helper function that wraps ``llm_query`` is defined and then
  called in a loop; the aggregation is a separate pure-Python turn; ``FINAL_VAR``.
* ``judge``: per chunk a classify call, then a judge call that checks those labels and
  so depends on the earlier result; aggregation; ``FINAL`` written as plain text.
* ``nonspec_dep``: every sub-call's prompt embeds the result of a non-speculatable
  tool (``labelling_guide()``), so nothing can start before the real cell runs it.
* ``pure_python``: questions answerable without labels (user / date counts): an
  exploration turn and a pure-Python aggregation turn, no sub-calls at all.
* ``reassigned_loop``: a loop whose call argument (``prompt``) is re-assigned at the
  end of the body for the next iteration: a peek at iteration i+1 taken while
  iteration i waits still sees iteration i's prompt (a stale binding), the case
  cost-aware admission exists for (``spectool.speculation.admission``).
* ``batched_end``: what current models write in batch-first harnesses: the prompts
  built by a comprehension and one ``llm_query_batched`` call as the cell's last line;
  the aggregation in the next turn.
* ``helper_across_cells``: a helper function defined in one cell (with an exploration
  print) and called in a loop in the next turn's cell.

For an OOLONG-Pairs question (``group == "pairs"``) every label shape first sorts the
instance lines by user id, so each user's lines are classified together by the
sub-calls, and the aggregation builds the pair list in Python
(``oolong.solutions``); the answer is the printed pair template.

Two mixes (``MIXES``) group the shapes the table reports side by side: ``loop-heavy``
(the RLM paper's trajectories: blocking sub-calls in loops) and ``batched`` (current
models in batch-first harnesses: exploration, one batched call at the end of a cell,
helpers from earlier cells).

Besides the message texts, a ``Program`` lists per turn the calls its cell makes, in
execution order, each with the character offset in the message at which it can start
(a sub-call: the end of the call expression whose arguments determine it; a
non-speculatable tool: the end of the cell, since only the real run, which starts
with the complete cell, makes it) and the earlier calls whose results its arguments
depend on. The runner uses that
to compute the oracle bound (see ``spectool_bench.oracle``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the CLI reads SHAPES without loading the generator
    from .oolong.model import Question, Window

SHAPES = ("loop_blocking", "batched", "helper_loop", "judge", "nonspec_dep", "pure_python",
          "reassigned_loop", "batched_end", "helper_across_cells")
LABEL_SHAPES = tuple(s for s in SHAPES if s != "pure_python")
MIXES = {
    "loop-heavy": ("loop_blocking", "helper_loop", "judge", "nonspec_dep", "reassigned_loop"),
    "batched": ("batched", "batched_end", "helper_across_cells", "pure_python"),
}
GUIDE_TOOL_S = 1.0  # simulated latency of the non-speculatable ``labelling_guide()`` tool
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class CallSpec:
    kind: str  # "sub" (llm_query / one element of llm_query_batched) | "tool"
    # characters of the message after which the call can start: its arguments are known
    # (a sub-call, which the shadow may start early), or the cell is complete (a
    # non-speculatable tool runs only in the real run, which starts with the whole cell)
    offset: int
    deps: tuple[int, ...] = ()  # indices (in this turn's call list) it depends on
    work: float | None = None  # fixed simulated latency for "tool" calls


@dataclass
class Program:
    shape: str
    turns: list[str]
    calls: list[list[CallSpec]] = field(default_factory=list)


def _prompt_const(window: Window) -> str:
    labels = list(window.labels)
    return (f'PROMPT = ("Label each line below with exactly one of these labels: {labels}. "\n'
            f'          "Reply with one label per line, in the same order.\\n")\n')


_EXPLORE = (
    "The context is too long to read at once. Let me first look at its size and the "
    "format of the lines, then decide how to split it.\n"
    "```repl\n"
    "print(len(context))\n"
    'lines = context.split("\\n")\n'
    "print(len(lines))\n"
    "for line in lines[:3]:\n"
    "    print(line[:200])\n"
    "print(lines[-1][:200])\n"
    "```"
)

_LABELS_FROM_OUT = '    labels += out.strip().split("\\n")\n'
_LABELS_FROM_OUTS = "labels = []\nfor out in outs:\n" + _LABELS_FROM_OUT
_CLASSIFY = (
    "def classify(rows):\n"
    '    out = llm_query(PROMPT + "\\n".join(rows))\n'
    '    return [x.strip() for x in out.strip().split("\\n")]\n'
)


def _chunk_loop(chunk: int, site: str) -> str:
    """A loop that labels ``data`` ``chunk`` lines at a time, one ``site`` call each."""
    return ("labels = []\n"
            f"for i in range(0, len(data), {chunk}):\n"
            f'    chunk = "\\n".join(data[i:i + {chunk}])\n'
            f"    out = {site}\n" + _LABELS_FROM_OUT)


_RECORDS = (
    "records = []\n"
    "for line, lab in zip(data, labels):\n"
    '    d, u, _ = line.split(" || ")\n'
    "    records.append((d[6:], int(u[6:]), lab.strip()))\n"
)


def aggregation(q: Question, labels: tuple[str, ...]) -> str:
    """Plain-Python code that computes ``result`` (the final answer text) from
    ``records`` = [(date string, user id, label)] or, for label-free tasks, ``data``
    (one program per OOLONG question family: ``spectool_bench.oolong.solutions``)."""
    from .oolong.solutions import solution_code

    return solution_code(q, labels)


def _cell(prose: str, code: str, after: str = "") -> str:
    return f"{prose}\n```repl\n{code}```{after}"


def _cell_end(message: str) -> int:
    """Characters of the message once its (last) cell's closing fence has streamed."""
    return message.rindex("```") + 3


def _offset_after(message: str, marker: str) -> int:
    k = message.index(marker)
    return k + len(marker)


def build_program(window: Window, question: Question, shape: str, seed: int = 0) -> Program:
    """The turns a simulated RLM root model writes for ``question`` in ``shape``."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {SHAPES}")
    if shape != "pure_python" and not question.needs_labels:
        raise ValueError(f"task {question.task!r} needs no labels; use shape 'pure_python'")
    rng = random.Random(f"program:{question.qid}:{shape}:{seed}")
    n = len(window.instances)
    # about 30-50 lines per sub-call, at least 6 and at most 64 calls (long windows get
    # bigger chunks rather than hundreds of calls)
    n_chunks = min(64, max(6, math.ceil(n / rng.randint(30, 50))))
    chunk = max(1, math.ceil(n / n_chunks))
    n_calls = math.ceil(n / chunk)
    agg = aggregation(question, window.labels)
    data = 'data = [l for l in lines if " || Instance: " in l]\n'
    plan = (f"There are {n} instance lines between a header and a footer. I will label them "
            f"in chunks of {chunk} lines with the sub-model, then count in Python.")
    if question.group == "pairs":  # OOLONG-Pairs: each user's lines go to the sub-model
        # together (a stable sort by user id), the pairs are built in Python
        data += 'data.sort(key=lambda l: int(l.split(" || ")[1][6:]))\n'
        plan = (f"There are {n} instance lines. The pairs depend on each user's labels, so I "
                f"group the lines by user, label them in chunks of {chunk} lines with the "
                f"sub-model, then build the pairs in Python.")
    turns = [_EXPLORE]
    calls: list[list[CallSpec]] = [[]]

    def add_turn(msg: str, site: str) -> None:
        """A turn whose every sub-call can start once ``site`` has streamed."""
        turns.append(msg)
        calls.append([CallSpec("sub", _offset_after(msg, site)) for _ in range(n_calls)])

    if shape == "pure_python":
        turns.append(_cell(
            "This question only needs the user ids and dates, which I can parse directly "
            "without labelling anything.", data + agg + "FINAL(result)\n"))
        calls.append([])
    elif shape == "loop_blocking":
        site = "llm_query(PROMPT + chunk)"
        msg = _cell(plan, data + _prompt_const(window) + _chunk_loop(chunk, site)
            + 'print(len(labels), "labels for", len(data), "lines")\n'
            + _RECORDS + agg + "print(result)\nFINAL(result)\n")
        add_turn(msg, site)
    elif shape == "batched":
        site = "llm_query_batched(prompts)"
        msg = _cell(plan + " The chunks are independent, so I query them in one batch.",
                    data + _prompt_const(window) + (
                        f'prompts = [PROMPT + "\\n".join(data[i:i + {chunk}]) for i in range(0, len(data), {chunk})]\n'
                        f"outs = {site}\n") + _LABELS_FROM_OUTS
                    + _RECORDS + agg + 'answer = {"content": result, "ready": True}\n')
        add_turn(msg, site)
    elif shape == "helper_loop":
        site = f"classify(data[i:i + {chunk}])"
        msg = _cell(plan + " A small helper keeps the parsing in one place.",
                    data + _prompt_const(window) + _CLASSIFY + (
                        "labels = []\n"
                        f"for i in range(0, len(data), {chunk}):\n"
                        f"    labels += {site}\n"
                        'print(len(labels), "labels;", labels[:5])\n'))
        add_turn(msg, site)
        turns.append(_cell("The labels look consistent. Now I aggregate them in Python.",
                           _RECORDS + agg + "print(result)\n", after="\nFINAL_VAR(result)"))
        calls.append([])
    elif shape == "judge":
        site1 = "llm_query(PROMPT + chunk)"
        site2 = 'llm_query(CHECK + "\\n".join(r + " => " + x for r, x in zip(rows, first)))'
        msg = _cell(plan + " Each chunk's labels get a second check before I trust them.",
                    data + _prompt_const(window) + (
                        'CHECK = "Check each proposed label and reply with the corrected label per line, in order.\\n"\n'
                        "labels = []\n"
                        f"for i in range(0, len(data), {chunk}):\n"
                        f"    rows = data[i:i + {chunk}]\n"
                        '    chunk = "\\n".join(rows)\n'
                        f'    first = {site1}.strip().split("\\n")\n'
                        f"    checked = {site2}\n"
                        '    labels += checked.strip().split("\\n")\n')
                    + _RECORDS + agg, after="\nFINAL_VAR(result)")
        off1, off2 = _offset_after(msg, site1), _offset_after(msg, site2)
        specs = []
        for _ in range(n_calls):
            specs.append(CallSpec("sub", off1))
            specs.append(CallSpec("sub", off2, deps=(len(specs) - 1,)))
        turns.append(msg)
        calls.append(specs)
    elif shape == "reassigned_loop":
        first = f'prompt = PROMPT + "\\n".join(data[0:{chunk}])\n'
        body = f'    prompt = PROMPT + "\\n".join(data[i:i + {chunk}])\n'
        site = "llm_query(prompt)"
        msg = _cell(plan + " I prepare each next prompt at the end of the loop body.",
                    data + _prompt_const(window) + first + (
                        "labels = []\n"
                        f"for i in range({chunk}, len(data) + {chunk}, {chunk}):\n"
                        f"    out = {site}\n") + _LABELS_FROM_OUT + body
                    + _RECORDS + agg + "FINAL(result)\n")
        off0, off_body = _offset_after(msg, first), _offset_after(msg, body)
        turns.append(msg)
        calls.append([CallSpec("sub", off0 if k == 0 else off_body) for k in range(n_calls)])
    elif shape == "batched_end":
        site = "llm_query_batched(prompts)"
        msg = _cell(plan + " The chunks are independent: one batch, then I look at the "
                    "results in the next step.",
                    data + _prompt_const(window) + (
                        f'prompts = [PROMPT + "\\n".join(data[i:i + {chunk}]) for i in range(0, len(data), {chunk})]\n'
                        'print(len(prompts), "prompts")\n'
                        f"outs = {site}\n"))
        add_turn(msg, site)
        turns.append(_cell("All chunks are labelled. Now I count in Python.",
                           _LABELS_FROM_OUTS + _RECORDS + agg
                           + 'answer["content"] = result\nanswer["ready"] = True\n'))
        calls.append([])
    elif shape == "helper_across_cells":
        turns[0] = _cell(
            "Let me look at the input and set up a helper I can reuse for every chunk.",
            "print(len(context))\n"
            'lines = context.split("\\n")\n'
            "print(lines[1][:200])\n"
            + data + _prompt_const(window) + _CLASSIFY
            + 'print(len(data), "instance lines")\n')
        site = f"classify(data[i:i + {chunk}])"
        msg = _cell(plan + " The helper from before does the labelling.",
                    "labels = []\n"
                    f"for i in range(0, len(data), {chunk}):\n"
                    f"    labels += {site}\n"
                    + _RECORDS + agg + "FINAL(result)\n")
        add_turn(msg, site)
    elif shape == "nonspec_dep":
        tool_site = "labelling_guide()"
        site = "llm_query(guide + PROMPT + chunk)"
        msg = _cell(plan + " The labelling guide from the tool goes into every prompt.",
                    data + _prompt_const(window) + f"guide = {tool_site}\n" + _chunk_loop(chunk, site)
                    + _RECORDS + agg + "FINAL(result)\n")
        specs = [CallSpec("tool", _cell_end(msg), work=GUIDE_TOOL_S)]
        off = _offset_after(msg, site)
        specs += [CallSpec("sub", off, deps=(0,)) for _ in range(n_calls)]
        turns.append(msg)
        calls.append(specs)
    return Program(shape, turns, calls)
