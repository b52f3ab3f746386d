"""The installed distribution provides no generic top-level import names.

The folder ``agents/`` installs as ``spectool_agents`` (``agents`` is the OpenAI
Agents SDK's import name, and the dev extra installs that SDK next to us) and the
benchmarks as ``spectool_bench`` (no ``benchmarks``). Run from outside the checkout
(so the folders themselves are not on sys.path), the installed metadata must map
only ``spectool*`` / ``token_spec`` names to the ``spectool`` distribution.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import importlib.metadata as md, json
import spectool_agents, spectool_agents.repl_agent as ra
mine = sorted(name for name, dists in md.packages_distributions().items() if "spectool" in dists)
agents = md.packages_distributions().get("agents", [])
print(json.dumps([mine, agents, ra.__name__, hasattr(spectool_agents, "ReplAgent")]))
"""


def test_installed_top_level_names_are_all_project_specific(tmp_path):
    out = subprocess.run([sys.executable, "-I", "-c", CHECK], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    mine, agents, module, has_agent = json.loads(out.stdout)
    assert "spectool" not in agents        # `agents` (if any) is the OpenAI Agents SDK's
    assert "benchmarks" not in mine and "agents" not in mine
    assert {"spectool", "spectool_agents", "spectool_bench"} <= set(mine), mine
    assert set(mine) <= {"spectool", "spectool_agents", "spectool_bench", "token_spec"}, mine
    assert module == "spectool_agents.repl_agent" and has_agent
