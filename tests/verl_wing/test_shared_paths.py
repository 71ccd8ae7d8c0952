"""verl across nodes: the paths every node reads or writes (the curriculum, the model directory, the checkpoints'
folder) must be absolute and on a filesystem every node mounts; recipes/verl/run_grpo.sh refuses a relative path
or one on the head's own disk before Ray starts, unless SHARED_FS=1 says the files are at the same paths on every
node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.verl.data import check_shared_paths, filesystem_type

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def mounts(tmp_path) -> Path:
    """A mount table: / on the machine's own disk, /nfs shared over the network."""
    table = tmp_path / "mounts"
    table.write_text("/dev/vda / ext4 rw 0 0\nserver:/export /nfs nfs4 rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n")
    return table


def test_the_filesystem_of_a_path(mounts):
    assert filesystem_type("/nfs/runs/a-run-not-made-yet", mounts) == "nfs4"
    assert filesystem_type("/home/me/shards", mounts) == "ext4"
    assert filesystem_type("/", mounts) == "ext4"


def test_every_node_needs_the_same_paths(mounts):
    shared = {"SHARDS": "/nfs/musique-min-max", "OUT": "/nfs/runs/rag-rl", "MODEL": "Qwen/Qwen2.5-7B-Instruct"}
    notes = check_shared_paths(shared, nnodes=2, installed={"REWARD_PY": "/opt/venv/rewards.py"}, mounts=mounts)
    text = " ".join(notes)
    assert "SHARDS=/nfs/musique-min-max (nfs4)" in text and "MODEL=Qwen/Qwen2.5-7B-Instruct: a Hub id" in text
    assert "REWARD_PY=/opt/venv/rewards.py: each node's own install" in text
    assert check_shared_paths({"SHARDS": "outputs/x"}, nnodes=1, mounts=mounts) == []  # one node: nothing to check
    with pytest.raises(ConfigError) as e:  # relative, and on the head's own disk
        check_shared_paths({"SHARDS": "outputs/musique-min-max", "OUT": "/home/me/run"}, nnodes=3, mounts=mounts)
    text = str(e.value)
    assert "SHARDS=outputs/musique-min-max is relative" in text
    assert "OUT=/home/me/run is on this node's own disk (ext4): the other 2 node(s) do not see it" in text
    assert "SHARED_FS=1" in e.value.hint
    # copied to the same paths on every node, as the user says: accepted (a relative path still is not)
    assert check_shared_paths({"OUT": "/home/me/run"}, nnodes=2, shared=True, mounts=mounts)
    with pytest.raises(ConfigError, match="is relative"):
        check_shared_paths({"OUT": "run"}, nnodes=2, shared=True, mounts=mounts)


@pytest.mark.slow  # the launch script's Python steps, each a process
def test_the_launch_script_refuses_head_local_paths(min_max_shards, tmp_path):
    env = {**os.environ, "SHARDS": os.path.relpath(min_max_shards, ROOT), "DRY_RUN": "1", "PYTHON": sys.executable,
           "NNODES": "2", "GPUS_PER_NODE": "7", "MODEL": "Qwen/Qwen2.5-7B-Instruct"}
    res = subprocess.run(["bash", str(ROOT / "recipes" / "verl" / "run_grpo.sh")], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    assert res.returncode == 2, res.stderr
    assert "verl on 2 nodes: SHARDS=" in res.stderr and "is relative" in res.stderr
    assert "OUT=outputs/verl/rag-rl-musique-min-max is relative" in res.stderr
