"""Every ```python block of README.md and of the docs pages (docs/**/*.md) runs as printed.

Each block runs in its own interpreter, from a folder outside the checkout, with
``MAX_TOKENS=8`` in the environment (the token-tier example reads it, so the model
block stays short). Blocks that load the SmolLM2 target are marked ``model`` and
``slow``. A block must exit 0 and print something, and every line a ``# prints: TEXT``
comment promises; its stderr is shown on failure. A block that appears on two pages
(the README's tool-tier example is also on docs/tool-tier.md) runs once.

Only blocks fenced ```` ```python ```` run: the signature sketches of docs/design.md
are fenced ```` ```py ```` (highlighted the same, not runnable on their own).

README.md opens with the two commands a new user needs on a fresh machine: the setup
plus the main job, and the test command that ``.ci/run`` runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
# ``# prints: TEXT`` after a print call: the block must print that exact line
PRINTS = re.compile(r"#\s*prints:\s*(.+)$", re.MULTILINE)


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SETUP_AND_MAIN_JOB = ("bash scripts/setup.sh && .venv/bin/spectool bench oolong "
                      "--out out/oolong")
TEST_COMMAND = ".venv/bin/python -m pytest"


def page_blocks(path: Path) -> list[tuple[str, str]]:
    """(section heading, code) for every python block of one page, in order."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.MULTILINE)
        blocks.append((headings[-1] if headings else "top", match.group(1)))
    return blocks


def readme_blocks() -> list[tuple[str, str]]:
    """(section heading, code) for every python block of README.md, in order."""
    return page_blocks(ROOT / "README.md")


def all_blocks() -> list[tuple[str, str, str]]:
    """(page, section heading, code) for every distinct python block of every page."""
    seen, blocks = set(), []
    for path in PAGES:
        for heading, code in page_blocks(path):
            if code not in seen:
                seen.add(code)
                blocks.append((path.stem, heading, code))
    return blocks


def _param(i: int, page: str, heading: str, code: str):
    heavy = "token_spec.load_target" in code
    marks = [pytest.mark.model, pytest.mark.slow] if heavy else []
    slug = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")
    return pytest.param(code, id=f"{i}-{page}-{slug}", marks=marks)


BLOCKS = readme_blocks()
ALL_BLOCKS = all_blocks()


def check_opens_with_the_two_commands(text: str) -> None:
    """The first code block is the setup-and-main-job line, then the test command,
    before any section."""
    first = re.search(r"^```bash\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert first, "no bash block"
    assert text.index(first.group(0)) < text.index("\n## "), "the commands come before any section"
    commands = [line.split("#", 1)[0].strip() for line in first.group(1).splitlines()]
    assert commands == [SETUP_AND_MAIN_JOB, TEST_COMMAND]


def test_the_readme_opens_with_the_setup_and_test_commands():
    """README.md opens with the two commands, exactly as ``.ci/run`` runs them."""
    check_opens_with_the_two_commands((ROOT / "README.md").read_text())
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh" in ci and TEST_COMMAND in ci


def test_negative_control_a_readme_opening_otherwise_fails():
    """Control: a README whose first block runs another command, or that puts a section
    before the commands, fails the check above."""
    text = (ROOT / "README.md").read_text()
    with pytest.raises(AssertionError):
        check_opens_with_the_two_commands(text.replace(TEST_COMMAND, "pytest", 1))
    with pytest.raises(AssertionError):
        check_opens_with_the_two_commands("# spectool\n\n## Install\n\n" + text.split("\n", 1)[1])


def test_the_readme_has_its_python_examples():
    assert len(BLOCKS) >= 4
    assert len({code for _, code in BLOCKS}) == len(BLOCKS)


def test_the_docs_pages_have_their_python_examples():
    """The README's examples and the docs pages' ones: the twelve examples, each page's
    blocks distinct within the page."""
    assert len(ALL_BLOCKS) >= 12
    for path in PAGES:
        blocks = page_blocks(path)
        assert len({code for _, code in blocks}) == len(blocks), path


@pytest.mark.parametrize("code", [_param(i, p, h, c) for i, (p, h, c) in enumerate(ALL_BLOCKS)])
def test_readme_block_runs_as_printed(code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {**os.environ, "MAX_TOKENS": "8", "HF_HUB_OFFLINE": "1",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"stdout:\n{run.stdout[-2000:]}\nstderr:\n{run.stderr[-4000:]}"
    assert run.stdout.strip(), "the block printed nothing"
    printed = [line.strip() for line in run.stdout.splitlines()]
    for expected in PRINTS.findall(code):            # what the README says it prints
        assert expected.strip() in printed, f"the block did not print {expected!r}:\n{run.stdout}"


def test_negative_control_a_broken_block_fails(tmp_path):
    """Control: the runner reports a block that raises (so the test above can fail)."""
    with pytest.raises(AssertionError):
        test_readme_block_runs_as_printed("import spectool\nspectool.no_such_name\n", tmp_path)


def test_negative_control_a_block_that_prints_otherwise_than_promised_fails(tmp_path):
    """Control: a ``# prints:`` promise the block does not keep fails the test."""
    with pytest.raises(AssertionError, match="did not print 'SyntaxError 2 2'"):
        test_readme_block_runs_as_printed("print('SyntaxError 1 0')   # prints: SyntaxError 2 2\n",
                                          tmp_path)
