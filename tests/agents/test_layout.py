"""The agents folder installs as ``spectool_agents``, leaving ``agents`` free.

``agents`` is the OpenAI Agents SDK's import name; run from outside the checkout (so
the folder itself is not on sys.path), the installed layout must not provide it.
"""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import importlib.util, json
import spectool_agents, spectool_agents.repl_agent as ra
print(json.dumps([importlib.util.find_spec("agents") is None, spectool_agents.__name__,
                  ra.__name__, hasattr(spectool_agents, "ReplAgent")]))
"""


def test_installed_name_does_not_collide_with_openai_agents(tmp_path):
    out = subprocess.run([sys.executable, "-I", "-c", CHECK], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == '[true, "spectool_agents", "spectool_agents.repl_agent", true]'
