#!/usr/bin/env bash
# Create .venv-notrain (if missing): rag-curriculum with the dev extra but without the train extra (no torch,
# transformers or TRL), to check that the main suite skips, rather than fails, what needs them:
#   TIERS=notrain bash scripts/test.sh        (not in the default tiers: the main tier already runs those tests)
# Safe to run again: pip installs only what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-notrain}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q -e ./retriever -e ".[dev]"
if "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(not any(u.find_spec(m) for m in ('torch', 'transformers', 'trl')))"; then
  echo "error: $VENV has torch, transformers or trl installed; remove $VENV and run this again" >&2
  exit 1
fi
