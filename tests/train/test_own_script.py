"""The curriculum in a user's own TRL script (examples/trl_curriculum.py, run as written): the shards loaded with
``datasets.load_dataset``, ``CurriculumGRPOTrainer`` in place of ``GRPOTrainer`` with TRL's default
``shuffle_dataset=True``, and the order asserted from what the trainer saw; a dataset out of curriculum order is
refused before anything trains."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import MUSIQUE_TRAIN, ROOT

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("own-script") / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=12)], schedule="min-max", K=3,
                                 out=str(out), seed=0))
    return out


def test_the_example_script_trains_in_curriculum_order_with_trls_default_shuffle(tmp_path, shards):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "trl_curriculum.py"), "--shards", str(shards),
                        "--out", str(out), "--steps", "3"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "curriculum_index of each step's rows: [[0, 1], [2, 3], [4, 5]]" in r.stdout
    assert "shuffle_dataset=True) would shuffle the curriculum: ignored" in r.stderr
    assert "reach only the first 6 rows" in r.stderr  # the rows the run will not reach, said before step 1
    steps = [json.loads(line) for line in (out / "curriculum_steps.jsonl").read_text().splitlines()]
    assert [s["curriculum_index"] for s in steps] == [[0, 1], [2, 3], [4, 5]]


def test_a_dataset_out_of_curriculum_order_is_refused_before_training(tmp_path, shards, tiny_model_dir):
    from datasets import load_dataset
    from trl import GRPOConfig

    from rag_curriculum.errors import CurriculumOrderError
    from rag_curriculum.rewards import RagRlReward
    from rag_curriculum.train import CurriculumGRPOTrainer

    rows = load_dataset(str(shards), split="train").shuffle(seed=1)  # what a user's own shuffle does
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=8, report_to="none", use_cpu=True, bf16=False)
    with pytest.raises(CurriculumOrderError, match="curriculum_index is not increasing"):
        CurriculumGRPOTrainer(model=str(tiny_model_dir), reward_funcs=[RagRlReward()], args=args, train_dataset=rows)
    assert not (tmp_path / "run" / "curriculum_steps.jsonl").exists()
