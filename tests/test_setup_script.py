"""``scripts/setup.sh`` in a sandbox with stub ``python``, ``pip`` and ``nvidia-smi`` (with ``INSTALLER=pip``; the uv
path is tests/test_test_script.py's): it says
which torch build it installed, takes PyTorch's CPU index on a machine without a GPU when that index answers, keeps
the configured index where it does not (offline, a PyPI mirror only: this machine, CI) and on GPU machines, and
takes TORCH_INDEX_URL when given. A real install is not made here: the stubs record what pip was asked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ACTIVATE = r'''
python() {
  case "$*" in
    *"import torch;"*) [ -f "$SANDBOX/torch" ] && cat "$SANDBOX/torch" ;;
    *urllib*) [ -n "${REACH:-}" ] ;;
    *) return 0 ;;
  esac
}
'''

#: the environment's interpreter: ``-m pip install ...`` recorded (and a torch build "installed"), the rest a no-op
VENV_PYTHON = r'''#!/usr/bin/env bash
[ "$1 $2" = "-m pip" ] || exit 0
shift 2
echo "pip $*" >> "$SANDBOX/pip.log"
case "$*" in
  *torch==*whl/cpu*) echo "torch 2.13.0+cpu (CPU build)" > "$SANDBOX/torch" ;;
  *torch==*) echo "${PLAIN_BUILD:-torch 2.13.0 (CUDA 12.8 build)}" > "$SANDBOX/torch" ;;
esac
'''


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(VENV_PYTHON)
    (venv / "python").chmod(0o755)
    (venv / "activate").write_text(ACTIVATE)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "nvidia-smi").write_text('#!/usr/bin/env bash\n[ -n "${GPU:-}" ]\n')  # -L fails: no GPU
    (stubs / "nvidia-smi").chmod(0o755)
    return tmp_path


def setup(sandbox: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    base = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX_URL", "TORCH_VERSION", "VIRTUAL_ENV")}
    base["PATH"] = f"{sandbox / 'stubs'}:{base['PATH']}"
    r = subprocess.run(["bash", "scripts/setup.sh"], cwd=sandbox, capture_output=True, text=True, timeout=60,
                       env={**base, "SANDBOX": str(sandbox), "INSTALLER": "pip", **env})
    log = sandbox / "pip.log"
    return r, (log.read_text().splitlines() if log.exists() else [])


def torch_installs(pips: list[str]) -> list[str]:
    return [p for p in pips if "torch==" in p]


def test_no_gpu_takes_the_cpu_index_when_it_answers_and_says_so(sandbox):
    r, pips = setup(sandbox, REACH="1")
    assert r.returncode == 0, r.stderr
    assert torch_installs(pips) == [
        "pip install -q --no-compile torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu"]
    assert "setup: torch 2.13.0+cpu (CPU build)" in r.stdout.splitlines()
    # the plumbing and the retriever from this checkout, named with the toolkit: they resolve offline
    assert 'pip install -q --no-compile -e ./plumbing -e ./retriever -e .[train,dev,ray,deepspeed]' in pips


def test_no_gpu_and_no_cpu_index_keeps_the_configured_index_as_before(sandbox):
    """What this machine and CI do: only the configured index can be reached, and its torch is the CPU build."""
    r, pips = setup(sandbox, PLAIN_BUILD="torch 2.13.0+cpu (CPU build)")
    assert r.returncode == 0, r.stderr
    assert torch_installs(pips) == ["pip install -q --no-compile torch==2.13.0"]
    assert "setup: torch 2.13.0+cpu (CPU build)" in r.stdout.splitlines()


def test_a_gpu_machine_keeps_the_configured_index_and_names_the_cuda_build(sandbox):
    r, pips = setup(sandbox, GPU="1", REACH="1")
    assert r.returncode == 0, r.stderr
    assert torch_installs(pips) == ["pip install -q --no-compile torch==2.13.0"]
    assert "setup: torch 2.13.0 (CUDA 12.8 build)" in r.stdout.splitlines()


def test_torch_index_url_forces_the_index(sandbox):
    r, pips = setup(sandbox, TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu", GPU="1")
    assert r.returncode == 0, r.stderr
    assert torch_installs(pips) == [
        "pip install -q --no-compile torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"]
    assert "setup: torch 2.13.0+cpu (CPU build)" in r.stdout.splitlines()


def test_an_installed_torch_is_kept_and_named(sandbox):
    (sandbox / "torch").write_text("torch 2.13.0+cpu (CPU build)\n")
    r, pips = setup(sandbox, REACH="1")
    assert r.returncode == 0, r.stderr
    assert torch_installs(pips) == [] and "setup: torch 2.13.0+cpu (CPU build)" in r.stdout.splitlines()


def test_a_torch_that_does_not_import_after_installing_fails_the_setup(sandbox):
    (sandbox / ".venv" / "bin" / "python").write_text(VENV_PYTHON.replace('> "$SANDBOX/torch"', "> /dev/null"))
    r, _ = setup(sandbox)
    assert r.returncode != 0 and "torch does not import after installing it" in r.stderr
