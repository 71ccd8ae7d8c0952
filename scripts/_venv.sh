# Shared by the engine tiers' setup scripts (sourced, after they set VENV): make the environment if it is missing,
# and the helpers that install into it only what is not there yet.
#   pip_install ARGS...   pip install, quiet; pip's whole output and exit 1 when it fails (sets $installed)
#   missing SPEC...       the requirements among SPEC that are not installed at a matching version, one a line
#   install_torch         PyTorch first, pinned (TORCH_VERSION, default 2.13.0): unpinned, pip would pull the
#                         multi-GB CUDA build
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

installed=
pip_install() {
  installed=1
  echo "$VENV: pip install $*" >&2
  if ! "$PY" -m pip install -q --no-compile "$@" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
}

missing() {
  "$PY" - "$@" <<'PY' || printf '%s\n' "$@"  # cannot tell: treat all as missing
import sys
from importlib.metadata import PackageNotFoundError, version

from pip._vendor.packaging.requirements import Requirement

for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        ok = req.specifier.contains(version(req.name), prereleases=True)
    except PackageNotFoundError:
        ok = False
    if not ok:
        print(spec)
PY
}

install_torch() {
  local todo
  mapfile -t todo < <(missing "torch==${TORCH_VERSION:-2.13.0}")
  (( ${#todo[@]} == 0 )) || pip_install "${todo[@]}"
}
