#!/usr/bin/env bash
# Create .venv-trl-newest or .venv-trl-oldest (if missing): the main environment (scripts/setup.sh: core + train +
# dev + ray) with TRL moved to the newest, or the oldest, release that the train extra's pin allows (pyproject.toml:
# trl>=1.0,<2), for the trainer's tests against it:
#   TIERS=trl-newest bash scripts/test.sh     (not default tiers: a scheduled job runs them, docs/development.md)
#   TIERS=trl-oldest bash scripts/test.sh
# The toolkit's GRPOTrainer overrides two private TRL methods (src/rag_curriculum/train/_trainer.py); a TRL release
# that changes them fails here first. Safe to run again: pip installs only what is missing or different.
#   bash scripts/setup_trl.sh newest|oldest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which=${1:?usage: bash scripts/setup_trl.sh newest|oldest}
case $which in newest|oldest) ;; *) echo "error: setup_trl.sh $which: give newest or oldest" >&2; exit 2 ;; esac
export VENV=${VENV:-.venv-trl-$which}
bash scripts/setup.sh
PY="$VENV/bin/python"
spec=$("$PY" - "$which" <<'PY'
import re
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["train"]
spec = next(r for r in extra if re.match(r"trl\b", r))
if sys.argv[1] == "oldest":  # the pin's lower bound, as a release: trl>=1.0,<2 -> trl==1.0.*
    low = re.search(r">=\s*([0-9.]+)", spec).group(1)
    spec = f"trl=={low}.*" if low.count(".") < 2 else f"trl=={low}"
print(spec)
PY
)
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q --upgrade "$spec"
echo "setup: $("$PY" -c 'import trl; print("trl", trl.__version__)') (the $which release of the pin: $spec)"
