#!/usr/bin/env bash
# Create .venv-retriever (if missing): rag-retriever alone, as a Search-R1 user installs it (./retriever with its
# fast, serve and test extras), without rag-curriculum, torch, transformers or TRL; for its own tests:
#   bash scripts/setup_retriever.sh && .venv-retriever/bin/python -m pytest -q retriever/tests
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VENV:-.venv-retriever}
# shellcheck source=scripts/_venv.sh
. scripts/_venv.sh

if ! "$PY" - "$PWD/retriever/src" <<'PY' 2>/dev/null; then
import sys
from pathlib import Path

import bm25s, fastapi, numba, pytest, uvicorn  # noqa: E401, F401
import rag_retriever

sys.exit(0 if Path(rag_retriever.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()) else 1)
PY
  pip_install -e "./retriever[fast,serve,test]"
fi

# The point of this environment: the retriever alone, none of the toolkit or the training stack.
if "$PY" -c "import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in ('rag_curriculum', 'torch', 'transformers', 'trl')))"; then
  echo "error: $VENV has rag_curriculum, torch, transformers or trl installed; remove $VENV and run this again" >&2
  exit 1
fi
