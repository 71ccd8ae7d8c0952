"""The light commands start light: ``curriculum --help`` imports no command's module (its list of commands comes
from ``cli.COMMANDS``), and ``validate`` and ``inspect`` import their own module only, never pandas (what
``pyarrow.parquet.read_table`` imports through ``pyarrow.dataset``), torch, transformers, matplotlib or the
retriever. Checked on the modules a fresh process holds after each command, not on a clock (the machine's load
moves a clock tenfold; a module imported is imported at any load)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: What no light command may import (each costs from a few tenths of a second to seconds of CPU).
HEAVY = ("pandas", "pyarrow.dataset", "torch", "transformers", "trl", "datasets", "matplotlib", "scipy", "numba",
         "rag_retriever", "bm25s", "huggingface_hub")

SCRIPT = """
import json, sys
from typer.main import get_command
from rag_curriculum.cli import app
root = get_command(app)
seen = {}
for args in json.loads(sys.argv[1]):
    try:
        root.main(args, prog_name="curriculum", standalone_mode=False)
    except SystemExit:
        pass
    seen[" ".join(args)] = sorted(sys.modules)
print(json.dumps(seen))
"""


def _modules_after(*commands: list[str]) -> dict[str, list[str]]:
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(commands)], capture_output=True, text=True,
                       timeout=120, env={"COLUMNS": "100", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_help_imports_no_commands_module_and_no_heavy_library():
    seen = _modules_after(["--help"])["--help"]
    assert "rag_curriculum.cli" in seen  # (the script ran the command line)
    commands = sorted(m for m in seen if m.startswith("rag_curriculum._cli.") and m != "rag_curriculum._cli.common")
    assert not commands, f"curriculum --help imported {commands}"
    heavy = sorted(m for m in seen if m.split(".")[0] in HEAVY or m in HEAVY)
    assert not heavy, f"curriculum --help imported {heavy}"
    assert "numpy" not in seen and "pyarrow" not in seen  # nothing of the data's libraries either


@pytest.mark.slow
def test_validate_and_inspect_import_their_own_module_and_no_heavy_library(min_max_shards):
    seen = _modules_after(["validate", str(min_max_shards)], ["inspect", str(min_max_shards)])
    for command, modules in seen.items():
        assert "rag_curriculum.shards" in modules, command  # (the command ran)
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
        assert not heavy, f"curriculum {command} imported {heavy}"
        commands = {m for m in modules if m.startswith("rag_curriculum._cli.")}
        assert commands <= {"rag_curriculum._cli.common", "rag_curriculum._cli.data",
                            "rag_curriculum._cli.predictions"}, f"curriculum {command} imported {sorted(commands)}"
