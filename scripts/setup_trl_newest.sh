#!/usr/bin/env bash
# Create .venv-trl-newest (if missing): the main environment (scripts/setup.sh: core + train + dev + ray) with TRL
# upgraded to the newest release that the train extra's pin allows (pyproject.toml: trl>=1.0,<2), for the trainer's
# tests against it:
#   TIERS=trl-newest bash scripts/test.sh     (not a default tier: a scheduled job runs it, docs/development.md)
# The toolkit's GRPOTrainer overrides two private TRL methods (src/rag_curriculum/train/_trainer.py); a TRL release
# that changes them fails here first. Safe to run again: pip installs only what is missing or newer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export VENV=${VENV:-.venv-trl-newest}
bash scripts/setup.sh
PY="$VENV/bin/python"
spec=$("$PY" - <<'PY'
import re
import tomllib

with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["train"]
print(next(r for r in extra if re.match(r"trl\b", r)))
PY
)
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q --upgrade "$spec"
echo "setup: $("$PY" -c 'import trl; print("trl", trl.__version__)') (the newest release of $spec)"
