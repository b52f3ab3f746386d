"""What the model scripts set up before they import the project: the Hugging Face hub
and transformers offline (the models come from the local cache), and the repository
root and ``scripts/`` on ``sys.path`` (the scripts run as files, not as an installed
package). Imported for that effect, first among a script's imports of the project."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
