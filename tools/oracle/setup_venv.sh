#!/usr/bin/env bash
# Create the oracle venv: the official qwen-tts package (transformers-5 build) and its pins.
# It is a separate venv from the project's; the project's tests and CI never need it.
#
# Usage: tools/oracle/setup_venv.sh [VENV_DIR]      (default /work/oracle)
# Needs python3.11 and a package index (or the local wheel mirrors pip is configured with).
set -euo pipefail

VENV="${1:-/work/oracle}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3.11}"

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install --upgrade pip

# torch 2.13 CPU build. transformers 5.23 breaks qwen-tts (Mimi encoder init fails on a missing
# rope_theta), so transformers stays at 5.15.1.
"$PIP" install "torch==2.13.0" --extra-index-url https://download.pytorch.org/whl/cpu
"$PIP" install "transformers==5.15.1" accelerate librosa soundfile einops huggingface_hub \
    sox onnxruntime scipy safetensors numpy
# The package itself without its pins (its metadata asks for versions that do not exist here).
"$PIP" install --no-deps "qwen-tts-hf==0.1.1.post1"

# torchaudio has no wheel for torch 2.13; make_golden.py installs an import stub for it
# (only the 25 Hz tokenizer uses torchaudio). "sox" prints a warning on import: harmless.
ORACLE_DIR="$HERE" "$VENV/bin/python" - <<'PY'
import os, sys
sys.path.insert(0, os.environ["ORACLE_DIR"])
from oracle_env import install_torchaudio_stub
install_torchaudio_stub()
import qwen_tts, torch, transformers
print("oracle venv ok:", "torch", torch.__version__, "transformers", transformers.__version__)
PY
