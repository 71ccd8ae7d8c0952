#!/usr/bin/env bash
# Create .venv (if missing) and install rag-curriculum with the training, test and Ray extras.
# Sourced by scripts/quickstart.sh and scripts/test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# PyTorch first, pinned: on CPU-only machines this is the CPU build (an unpinned torch pulls the CUDA build).
python -c "import torch" 2>/dev/null || pip install -q "torch==${TORCH_VERSION:-2.13.0}"
pip install -q -e ".[train,dev,ray]"
