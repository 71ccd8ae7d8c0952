#!/usr/bin/env bash
# Create .venv-verl (if missing) for tests/tier_verl: verl 0.9.1 from the registry next to rag-curriculum's core install.
#   bash scripts/setup_verl.sh && .venv-verl/bin/python -m pytest -q -p no:cacheprovider tests/tier_verl
# verl 0.9.1 pins transformers>=5.5.3,<5.11 and its extras pin torch 2.11 / vllm 0.24, which clash with the [train]
# extra (and would pull a CUDA torch), so it gets an environment of its own: PyTorch pinned first (the CPU build on
# CPU-only machines), verl with --no-deps, then exactly what the modules the tests drive import (dataset, sampler,
# the trainer's data loader, reward loop, agent loop): no vLLM, no Ray cluster, no wandb/tensorboard; and
# rag-curriculum itself, editable, with its core dependencies only (no [train]), plus pytest.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv-verl}
VERL_VERSION=${VERL_VERSION:-0.9.1}
. scripts/_venv.sh  # the environment, pip_install, missing, install_torch

# 1. PyTorch first, pinned: an unpinned torch (or verl's extras) would pull the multi-GB CUDA build.
install_torch

# 2. verl itself, and TransferQueue (imported by verl's trainer module; its own requirements include
#    ray[default]), without their dependencies.
mapfile -t todo < <(missing "verl==$VERL_VERSION" "TransferQueue>=0.1.10")
(( ${#todo[@]} == 0 )) || pip_install --no-deps "${todo[@]}"

# 3. What those modules import, within verl 0.9.1's own pins; pytest.
mapfile -t todo < <(missing \
  "transformers>=5.5.3,!=5.6.0,<5.11" "tensordict>=0.8.0,!=0.9.0,<=0.10.0" "torchdata" "ray>=2.41.0" \
  "numpy>=2.0.0" "pyarrow>=19.0.0" "peft" "codetiming" "aiohttp" "cachetools" "fastapi" "uvicorn" "pyzmq" \
  "msgspec" "psutil" "prometheus_client" "pytest>=8" \
  "bm25s>=0.3" "scipy>=1.11")  # the last two: the toolkit's index, for the verl search tool's tests

# 4. rag-curriculum from this checkout, editable, core dependencies only.
if ! "$PY" - "$PWD/src" <<'PY' 2>/dev/null; then
import sys
from pathlib import Path

import rag_retriever  # noqa: F401
import rag_curriculum

sys.exit(0 if Path(rag_curriculum.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
  todo+=(-e ./retriever -e .)  # the retriever (its own distribution) first: it resolves offline
fi
(( ${#todo[@]} == 0 )) || pip_install "${todo[@]}"

if [ -n "$installed" ] && ! "$PY" -c "import verl.trainer.ppo.utils, rag_curriculum.verl.rewards"; then
  echo "error: verl does not import in $VENV; remove $VENV and run this again" >&2
  exit 1
fi
