"""The documentation site (``mkdocs.yml``, ``docs/``) builds with ``mkdocs build --strict``.

mkdocs and mkdocs-material are dev dependencies (``pip install -e ".[dev]"``, which
``scripts/setup.sh`` runs): when they are missing the test fails and says so; it is
never skipped. The build runs without ``--quiet``: mkdocs counts warnings for
``--strict`` only at the log level it shows. A negative control builds a copy of the tree with one broken internal
link and checks that the strict build rejects it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    for module in ("mkdocs", "material"):
        assert importlib.util.find_spec(module) is not None, (
            f"{module} is not installed: it is a dev dependency; run "
            f"`pip install -e \".[dev]\" -c constraints.txt` (scripts/setup.sh does)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(project / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=project, env=env, capture_output=True, text=True, timeout=240)


def copy_tree(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    return project


def test_the_docs_site_builds_strict(tmp_path):
    run = build(ROOT, tmp_path / "site")
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    for page in ("index", "tool-tier", "token-tier", "results", "design"):
        assert (tmp_path / "site" / page / "index.html").is_file() or page == "index"
    assert (tmp_path / "site" / "index.html").is_file()


def test_negative_control_a_broken_internal_link_fails_the_strict_build(tmp_path):
    project = copy_tree(tmp_path)
    page = project / "docs" / "tool-tier.md"
    page.write_text(page.read_text() + "\nSee [a page that is not there](no-such-page.md).\n")
    run = build(project, tmp_path / "site")
    assert run.returncode != 0, "a broken internal link passed the strict build"
    assert "no-such-page.md" in run.stdout + run.stderr


def test_every_page_is_in_the_nav(tmp_path):
    """A page left out of ``nav`` would be built but unreachable: the config warns on it
    (``validation.omitted_files: warn``), so the strict build fails."""
    project = copy_tree(tmp_path)
    (project / "docs" / "orphan.md").write_text("# Orphan\n")
    run = build(project, tmp_path / "site")
    assert run.returncode != 0 and "orphan.md" in run.stdout + run.stderr
