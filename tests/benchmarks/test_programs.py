"""The simulated root model's programs: run with plain ``exec`` and a perfect
sub-model, every shape answers every task it applies to exactly (official score 1)."""

import contextlib
import io
import re

import pytest

from spectool_bench.oolong import generate_window, score
from spectool_bench.programs import LABEL_SHAPES, MIXES, SHAPES, build_program
from spectool_bench.simulated import SimulatedSubModel


def _run(program, window, sub):
    final = {}
    ns = {"context": window.context, "answer": {"content": "", "ready": False}}
    ns.update(
        llm_query=sub.answer,
        llm_query_batched=lambda prompts: [sub.answer(p) for p in prompts],
        FINAL=lambda x: final.setdefault("v", x),
        FINAL_VAR=lambda name: final.setdefault("v", ns[name]),
        labelling_guide=lambda: "Labelling guide.\n",
    )
    for msg in program.turns:
        for code in re.findall(r"```repl\n(.*?)```", msg, re.S):
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, ns)  # noqa: S102 - the project's own generated programs
        m = re.search(r"^FINAL_VAR\((\w+)\)", msg.split("```")[-1], re.M)
        if m:
            final.setdefault("v", ns[m.group(1)])
        if ns["answer"].get("ready"):
            final.setdefault("v", ns["answer"]["content"])
        if "v" in final:
            break
    return final.get("v")


@pytest.mark.parametrize("dataset, size, seed", [("trec_coarse", 4096, 0), ("imdb", 2048, 1)])
def test_every_shape_answers_exactly(dataset, size, seed):
    w = generate_window(dataset, size, seed)
    sub = SimulatedSubModel(None, w.label_of, w.labels, accuracy=1.0)
    for q in w.questions:
        for shape in (LABEL_SHAPES if q.needs_labels else ("pure_python",)):
            program = build_program(w, q, shape)
            out = _run(program, w, sub)
            assert score(out, q.answer, q.answer_type) == 1.0, (q.task, shape, out)


def test_call_annotations_match_execution():
    w = generate_window("trec_coarse", 4096, 0)
    q = next(q for q in w.questions if q.needs_labels)
    calls = []

    class Counting(SimulatedSubModel):
        def answer(self, prompt):
            calls.append(prompt)
            return super().answer(prompt)

    for shape in LABEL_SHAPES:
        calls.clear()
        program = build_program(w, q, shape)
        _run(program, w, Counting(None, w.label_of, w.labels, accuracy=1.0))
        annotated = [c for turn in program.calls for c in turn if c.kind == "sub"]
        assert len(annotated) == len(calls), shape
        for turn, spec in zip(program.turns, program.calls):
            for i, c in enumerate(spec):
                assert 0 < c.offset <= len(turn)
                assert all(d < i for d in c.deps)  # depends on earlier calls only


def test_shapes_and_errors():
    w = generate_window("trec_coarse", 1024, 0)
    free = next(q for q in w.questions if not q.needs_labels)
    assert build_program(w, free, "pure_python").calls == [[], []]
    with pytest.raises(ValueError):
        build_program(w, free, "loop_blocking")
    with pytest.raises(ValueError):
        build_program(w, free, "nope")
    assert "pure_python" in SHAPES and "pure_python" not in LABEL_SHAPES


def test_mixes_partition_the_shapes():
    """The loop-heavy and batched mixes the table reports side by side cover every
    shape exactly once."""
    members = [s for shapes in MIXES.values() for s in shapes]
    assert sorted(members) == sorted(SHAPES)


def test_new_shapes_have_the_structure_they_model():
    w = generate_window("trec_coarse", 4096, 0)
    q = next(q for q in w.questions if q.needs_labels)
    p = build_program(w, q, "reassigned_loop")
    # the argument is re-assigned after the call, at the end of the loop body
    assert p.turns[1].index("out = llm_query(prompt)") < p.turns[1].index("    prompt = PROMPT")
    assert p.calls[1][0].offset < p.calls[1][1].offset
    p = build_program(w, q, "batched_end")
    cell = p.turns[1].split("```repl\n")[1].split("```")[0]
    assert cell.rstrip().splitlines()[-1] == "outs = llm_query_batched(prompts)"
    p = build_program(w, q, "helper_across_cells")
    assert "def classify" in p.turns[0] and "def classify" not in p.turns[1]
    assert "classify(" in p.turns[1] and p.calls[0] == []
