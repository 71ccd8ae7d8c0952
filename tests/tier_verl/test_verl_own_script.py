"""The curriculum in a user's own verl script (examples/verl_curriculum.py, run as written with ``--check``, the
part that runs without GPUs): verl's own config composed with the toolkit's overrides, verl's trainer loading the
toolkit's dataset class and replay buffer, and the rows verl's train loader gives each step asserted to be the
curriculum's, in order; a setting that would shuffle them is refused before anything runs. (The run itself needs
GPUs, Ray and vLLM; the steps it takes are tested in test_verl_curriculum.py.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "verl_curriculum.py"


@pytest.fixture(scope="module")
def own_shards(tmp_path_factory):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("own-verl-script") / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=12)], schedule="min-max", K=3,
                                 out=str(out), seed=0))
    return out


def _run(shards, model, out, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--shards", str(shards), "--model", str(model), "--out",
                           str(out), "--check", *extra], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_the_example_script_gets_the_curriculum_in_order_from_verls_loader(tmp_path, own_shards, tiny_model_dir):
    r = _run(own_shards, tiny_model_dir, tmp_path / "run")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CurriculumRLHFDataset and CurriculumReplayBuffer loaded by verl" in r.stdout
    # 12 rows, 4 prompts a step: verl's loader gives the three batches in curriculum order
    assert "curriculum_index of each step's rows: [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]" in r.stdout
    assert "12 rows in data.train_files (1 file), 3 steps an epoch of data.train_batch_size=4" in r.stderr


def test_the_example_script_refuses_what_would_lose_the_order_or_every_step(tmp_path, own_shards, tiny_model_dir):
    r = _run(own_shards, tiny_model_dir, tmp_path / "run", "data.shuffle=True")
    assert r.returncode != 0 and "data.shuffle=True would shuffle the curriculum" in r.stderr
    r = _run(own_shards, tiny_model_dir, tmp_path / "run", "--prompts-per-step", "16")
    assert r.returncode != 0
    assert "has 12 rows, fewer than one batch of data.train_batch_size=16 prompts" in r.stderr


def test_the_example_script_refuses_a_run_of_no_steps_in_one_line(tmp_path, own_shards, tiny_model_dir):
    for setting in ("trainer.total_training_steps=0", "trainer.total_epochs=0"):
        r = _run(own_shards, tiny_model_dir, tmp_path / "run", setting)
        assert r.returncode == 1, (setting, r.stdout[-2000:])
        assert f"error: {setting}: verl's trainer would train 0 steps" in r.stderr
        assert "for one pass over the curriculum (3 steps of 4 prompts)" in r.stderr
        assert "Traceback" not in r.stderr and "curriculum_index of each step" not in r.stdout


def test_the_example_script_says_each_epoch_restarts_the_curriculum(tmp_path, own_shards, tiny_model_dir):
    """trainer.total_epochs=2: verl's loader reads the 12 rows twice; the check passes, says before the run that
    the curriculum goes from easy to hard twice, and at which step it restarts (no bare AssertionError)."""
    r = _run(own_shards, tiny_model_dir, tmp_path / "run", "trainer.total_epochs=2")
    assert r.returncode == 0, r.stderr[-3000:]
    once = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert f"curriculum_index of each step's rows: {once + once}" in r.stdout
    assert "step 4 restarts the curriculum at its easiest rows (curriculum_index 0): epoch 2" in r.stdout
    assert "the run trains 6 steps, 2 epochs of 3: each epoch restarts the curriculum at its easiest rows" in r.stderr
    r = _run(own_shards, tiny_model_dir, tmp_path / "run", "trainer.total_training_steps=2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "curriculum_index of each step's rows: [[0, 1, 2, 3], [4, 5, 6, 7]]" in r.stdout
    assert "the run stops after 2 of the curriculum's 3 steps" in r.stderr
