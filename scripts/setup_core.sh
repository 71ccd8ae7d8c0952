#!/usr/bin/env bash
# Create .venv-core (if missing): rag-curriculum with its core dependencies only (no extras: no torch,
# transformers, TRL or vLLM), as on a verl Ray node, plus pytest; for tests/tier_core:
#   bash scripts/setup_core.sh && .venv-core/bin/python -m pytest -q -p no:cacheprovider tests/tier_core
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-core}
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

pip_install() {
  echo "$VENV: pip install $*" >&2
  if ! "$PY" -m pip install -q --no-compile "$@" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
}

# rag-curriculum itself, editable, from this checkout (core dependencies only).
if ! "$PY" - "$PWD/src" <<'PY' 2>/dev/null; then
import sys
from pathlib import Path

import rag_retriever  # noqa: F401
import rag_curriculum

sys.exit(0 if Path(rag_curriculum.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
  pip_install -e ./retriever -e .  # the retriever (its own distribution) first: it resolves offline
fi
"$PY" -c "import pytest" 2>/dev/null || pip_install "pytest>=8"

# The point of this environment: none of the training stack may be there.
if "$PY" -c "import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in ('torch', 'transformers', 'trl', 'vllm')))"; then
  echo "error: $VENV has torch, transformers, trl or vllm installed; remove $VENV and run this again" >&2
  exit 1
fi
