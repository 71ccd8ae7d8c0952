"""The drop-in trainer's ledger of what trained, against the rows TRL's loss actually computed: a real
``GRPOTrainer`` on a tiny random model, and a witness that maps every completion the loss sees back to the row it
was generated for (by its prompt's token ids, independently of the ledger's own tags).

Covered: a resume with another batch (refused before anything is generated, with the numbers; or continued
exactly at the next row, said in one line), ``ignore_data_skip`` on a resume, ``order_policy="warn"`` on a
shuffled dataset, a generation batch spread over several optimiser steps, the messages in the drop-in's own
argument names, and the documented verification after a resume."""

from __future__ import annotations

import logging
import re
import shutil
from collections import defaultdict

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

ROWS = 16


def _witness_class():
    from rag_curriculum.train import CurriculumGRPOTrainer

    class Witness(CurriculumGRPOTrainer):
        """Records the rows of every generation call, and the row of each completion every loss computation saw
        (by optimiser step), from the prompt token ids TRL hands the loss."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.prompt_rows: dict[tuple, int] = {}
            self.generations: list[list[int]] = []
            self.loss_rows: dict[int, list[int]] = defaultdict(list)

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            if self.model.training:
                for i, row in enumerate(inputs):
                    self.prompt_rows[_prompt(out, i)] = row["curriculum_index"]
                self.generations.append([r["curriculum_index"] for r in inputs[::self.num_generations]])
            return out

        def _compute_loss(self, model, inputs):
            if self.model.training:
                step = self.state.global_step + 1  # the optimiser step these micro-batches make
                self.loss_rows[step] += [self.prompt_rows[_prompt(inputs, i)] for i in range(len(inputs["prompt_ids"]))]
            return super()._compute_loss(model, inputs)

        def trained(self) -> dict[int, list[int]]:
            """The rows each optimiser step's loss saw, in curriculum order."""
            return {step: sorted(set(rows)) for step, rows in sorted(self.loss_rows.items())}

    return Witness


def _prompt(batch, i) -> tuple:
    return tuple(batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist())


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("ledger") / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=ROWS)], schedule="min-max", K=3,
                                 out=str(out), seed=0))
    return out


@pytest.fixture(scope="module")
def rows(shards):
    from datasets import load_dataset

    return load_dataset(str(shards), split="train")


def _config(out, **kw):
    from trl import GRPOConfig

    base = {"max_steps": 2, "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 8,
            "learning_rate": 1e-5, "beta": 0.0, "logging_steps": 1, "report_to": "none", "save_strategy": "steps",
            "save_steps": 1, "use_cpu": True, "bf16": False, "dataloader_pin_memory": False, "seed": 0}
    return GRPOConfig(output_dir=str(out), **{**base, **kw})


def _trainer(model, rows, out, *, order_policy="refuse", **kw):
    from rag_curriculum.rewards import RagRlReward

    return _witness_class()(model=str(model), reward_funcs=[RagRlReward()], args=_config(out, **kw),
                            train_dataset=rows, order_policy=order_policy,
                            steps_file=out / "curriculum_steps.jsonl")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, tiny_model_dir, rows):
    """Two steps of 2 prompts (4 completions a step), a checkpoint after each."""
    out = tmp_path_factory.mktemp("ledger-run") / "run"
    trainer = _trainer(tiny_model_dir, rows, out)
    trainer.train()
    assert trainer.trained() == {1: [0, 1], 2: [2, 3]}
    return out


def _resumable(first_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    return out


def test_a_resume_with_a_larger_batch_is_refused_before_generation_with_the_numbers(first_run, tiny_model_dir,
                                                                                      rows, tmp_path, caplog):
    """4 prompts a step after a checkpoint of 2-prompt steps: HF's Trainer would skip 2 batches of 4 prompts and
    continue at row 8, so rows 4..7 would never be trained. Refused before anything is generated."""
    from rag_curriculum.train import CurriculumOrderError

    out = _resumable(first_run, tmp_path)
    trainer = _trainer(tiny_model_dir, rows, out, per_device_train_batch_size=8, max_steps=4)
    with pytest.raises(CurriculumOrderError) as e:
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    msg = str(e.value)
    for part in ("checkpoint-2 trained 4 rows (rows_done 4: 2 steps of 2 prompts",
                 "with GRPOConfig(per_device_train_batch_size=8) (4 prompts per step)",
                 "continue at row 8", "skip rows 4..7 (curriculum_index 4..7)",
                 "Resume with GRPOConfig(per_device_train_batch_size=4)"):
        assert part in msg, msg
    assert 'order_policy="warn"' in e.value.hint and "grpo." not in msg and "data.order_policy" not in msg
    assert trainer.generations == [] and trainer.trained() == {}  # nothing generated, nothing trained


def test_a_resume_that_skips_rows_under_warn_is_recorded_out_of_order(first_run, tiny_model_dir, rows, tmp_path,
                                                                      caplog):
    out = _resumable(first_run, tmp_path)
    trainer = _trainer(tiny_model_dir, rows, out, per_device_train_batch_size=8, max_steps=3, order_policy="warn")
    with caplog.at_level(logging.WARNING):
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert trainer.trained() == {3: [8, 9, 10, 11]}  # what TRL trained: rows 4..7 skipped
    last = trainer.recorder.records[-1]
    assert (last["step"], last["curriculum_index"], last["in_order"]) == (3, [8, 9, 10, 11], False)
    assert last["curriculum_has"] == [4, 5, 6, 7] and trainer.recorder.out_of_order == 1
    assert "skip rows 4..7" in caplog.text
    assert "step 3 trained on curriculum_index [8, 9, 10, 11] where the curriculum has [4, 5, 6, 7]" in caplog.text


def test_a_resume_with_another_batch_of_the_same_rows_continues_exactly(first_run, tiny_model_dir, rows, tmp_path,
                                                                        caplog):
    """2 completions a pass and 2 passes a step: still 2 prompts a step, so the data lands on row 4, where the
    checkpoint stopped. Said in one line; the ledger holds every step, and the documented check holds."""
    from rag_curriculum.train import read_steps

    out = _resumable(first_run, tmp_path)
    trainer = _trainer(tiny_model_dir, rows, out, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                       max_steps=3)
    with caplog.at_level(logging.INFO, logger="rag_curriculum"):
        trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert trainer.trained() == {3: [4, 5]}
    assert "the run continues exactly at row 4 (curriculum_index 4)" in caplog.text
    assert "per_device_train_batch_size=2, gradient_accumulation_steps=2" in caplog.text
    # The verification of docs/own-trainer.md, as written there, after the resume:
    trained = [r["curriculum_index"] for r in trainer.recorder.records]
    flat = [i for step in trained for i in step]
    assert flat == list(rows["curriculum_index"][: len(flat)]), "not trained in curriculum order"
    assert trainer.recorder.out_of_order == 0
    assert trained == [[0, 1], [2, 3], [4, 5]]
    records = read_steps(out / "curriculum_steps.jsonl")
    assert all(r["in_order"] for r in records) and [r["step"] for r in records] == [1, 2, 3]


def test_ignore_data_skip_on_a_resume_is_refused_before_generation(first_run, tiny_model_dir, rows, tmp_path):
    from rag_curriculum.train import CurriculumOrderError

    out = _resumable(first_run, tmp_path)
    trainer = _trainer(tiny_model_dir, rows, out, ignore_data_skip=True, max_steps=3)
    with pytest.raises(CurriculumOrderError) as e:
        trainer.train(resume_from_checkpoint=True)  # the last checkpoint: checkpoint-2
    msg = str(e.value)
    assert "GRPOConfig(ignore_data_skip=True) restarts the data" in msg, msg
    assert "rows_done 4" in msg and "train rows 0..3 (curriculum_index 0..3) again" in msg, msg
    assert "set GRPOConfig(ignore_data_skip=False)" in msg
    assert trainer.generations == [] and trainer.trained() == {}


def test_warn_on_a_shuffled_dataset_records_and_counts_every_step_out_of_order(tiny_model_dir, rows, tmp_path,
                                                                                caplog):
    shuffled = rows.shuffle(seed=1)
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="rag_curriculum"):
        trainer = _trainer(tiny_model_dir, shuffled, out, order_policy="warn", save_strategy="no")
        trainer.train()
    trained = trainer.trained()
    first = list(shuffled["curriculum_index"])
    assert trained == {1: sorted(first[0:2]), 2: sorted(first[2:4])}  # TRL trained the shuffled order
    records = trainer.recorder.records
    assert [r["curriculum_index"] for r in records] == [trained[1], trained[2]]
    assert [r["in_order"] for r in records] == [trained[1] == [0, 1], trained[2] == [2, 3]] == [False, False]
    assert trainer.recorder.out_of_order == 2
    for step in (1, 2):
        assert f"step {step} trained on curriculum_index {trained[step]} where the curriculum has" in caplog.text
    # The notice before step 1 names the rows never reached as they are, not as a backwards range.
    spans = re.findall(r"curriculum_index (\d+)\.\.(\d+)", caplog.text)
    assert all(int(a) <= int(b) for a, b in spans), spans
    assert "scattered: the rows are not in curriculum order" in caplog.text
    assert "grpo." not in caplog.text and "data.order_policy" not in caplog.text and "data.max_rows" not in caplog.text
    assert "GRPOConfig(max_steps)" in caplog.text and 'order_policy="warn"' in caplog.text


def test_a_generation_batch_over_several_steps_is_refused(tiny_model_dir, rows, tmp_path):
    from rag_curriculum.train import CurriculumOrderError

    with pytest.raises(CurriculumOrderError, match=r"steps_per_generation=2 with gradient_accumulation_steps=1") as e:
        _trainer(tiny_model_dir, rows, tmp_path / "run", steps_per_generation=2, max_steps=4)
    assert 'order_policy="warn" trains anyway' in str(e.value)
    assert 'order_policy="warn"' in e.value.hint and "data.order_policy" not in e.value.hint


def test_a_generation_batch_over_several_steps_under_warn_records_every_step(tiny_model_dir, rows, tmp_path,
                                                                             caplog):
    """Generation batches of 4 prompts, each trained over 2 optimiser steps after TRL shuffled its completions:
    every optimiser step is recorded with the rows its loss saw and logs its curriculum/* metrics, and a step whose
    rows are not the curriculum's is warned and counted."""
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        trainer = _trainer(tiny_model_dir, rows, out, steps_per_generation=2, max_steps=4, order_policy="warn",
                           save_strategy="no")
        trainer.train()
    assert trainer.generations == [[0, 1, 2, 3], [4, 5, 6, 7]]
    trained = trainer.trained()
    assert sorted(trained) == [1, 2, 3, 4]
    records = trainer.recorder.records
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert [r["curriculum_index"] for r in records] == [trained[s] for s in (1, 2, 3, 4)]
    assert [r["completions"] for r in records] == [4, 4, 4, 4]
    curriculum = {1: [0, 1], 2: [2, 3], 3: [4, 5], 4: [6, 7]}
    for r in records:
        assert r["in_order"] == (trained[r["step"]] == curriculum[r["step"]])
        if not r["in_order"]:
            assert (f"step {r['step']} trained on curriculum_index {trained[r['step']]} where the curriculum has "
                    f"{curriculum[r['step']]}: TRL shuffles the completions") in caplog.text
    assert trainer.recorder.out_of_order == sum(not r["in_order"] for r in records) > 0
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in logged] == [1, 2, 3, 4]
    assert all("curriculum/level_mean" in h and "curriculum/in_order" in h for h in logged)
    assert [h["curriculum/index_first"] for h in logged] == [float(trained[s][0]) for s in (1, 2, 3, 4)]


def test_num_iterations_and_a_second_epoch_are_in_order(tiny_model_dir, rows, tmp_path, caplog):
    """num_iterations=2 trains each generation batch on two optimiser steps, and a second epoch starts again from
    the first row: both are the curriculum's order (the ledger says so), and the ledger matches the loss."""
    trainer = _trainer(tiny_model_dir, rows, tmp_path / "iterations", num_iterations=2, max_steps=3,
                       save_strategy="no")
    trainer.train()
    assert trainer.trained() == {1: [0, 1], 2: [0, 1], 3: [2, 3]}
    assert [(r["curriculum_index"], r["in_order"]) for r in trainer.recorder.records] == [
        ([0, 1], True), ([0, 1], True), ([2, 3], True)]
    with caplog.at_level(logging.WARNING):
        trainer = _trainer(tiny_model_dir, rows, tmp_path / "epochs", per_device_train_batch_size=8, max_steps=5,
                           save_strategy="no")
    assert "max_steps=5 is more than one pass over the curriculum (4 steps)" in caplog.text
    trainer.train()
    assert trainer.trained()[5] == [0, 1, 2, 3]
    assert [r["in_order"] for r in trainer.recorder.records] == [True] * 5 and trainer.recorder.out_of_order == 0


TWO_PROCESSES = '''
import json, sys
from collections import defaultdict
from datasets import load_dataset
from trl import GRPOConfig
from rag_curriculum.rewards import RagRlReward
from rag_curriculum.train import CurriculumGRPOTrainer

shards, model, out = sys.argv[1:4]
prompt_rows, loss_rows = {}, defaultdict(list)

def key(batch, i):
    return tuple(batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist())

class Witness(CurriculumGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        batch = super()._generate_and_score_completions(inputs)
        for i, row in enumerate(inputs):
            prompt_rows[key(batch, i)] = row["curriculum_index"]
        return batch

    def _compute_loss(self, model, inputs):
        loss_rows[self.state.global_step + 1] += [prompt_rows[key(inputs, i)] for i in range(len(inputs["prompt_ids"]))]
        return super()._compute_loss(model, inputs)

args = GRPOConfig(output_dir=out, max_steps=2, num_generations=2, per_device_train_batch_size=2,
                  gradient_accumulation_steps=2, max_completion_length=8, beta=0.0, report_to="none",
                  save_strategy="no", use_cpu=True, bf16=False, dataloader_pin_memory=False, seed=0)
trainer = Witness(model=model, reward_funcs=[RagRlReward()], args=args,
                  train_dataset=load_dataset(shards, split="train"))
trainer.train()
# Files, not stdout: the trainer's own log lines from the other process can split a printed line in two.
rank = trainer.accelerator.process_index
with open(f"{out}.loss-{rank}.json", "w") as f:
    json.dump(loss_rows, f)
if trainer.accelerator.is_main_process:
    with open(f"{out}.records.json", "w") as f:
        json.dump([(r["curriculum_index"], r["in_order"], r["completions"]) for r in trainer.recorder.records], f)
'''


def test_two_processes_record_the_rows_every_process_trained(shards, tiny_model_dir, tmp_path):
    """Two training processes (torchrun, gloo on the CPU): each step's record is the rows the loss saw on both
    processes together, in the curriculum's order."""
    import json
    import socket
    import subprocess
    import sys

    script = tmp_path / "two.py"
    script.write_text(TWO_PROCESSES)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        str(port), str(script), str(shards), str(tiny_model_dir), str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    loss: dict[str, set] = defaultdict(set)
    for rank in (0, 1):
        for step, rows in json.loads((tmp_path / f"run.loss-{rank}.json").read_text()).items():
            loss[step].update(rows)
    records = json.loads((tmp_path / "run.records.json").read_text())
    assert {k: sorted(v) for k, v in loss.items()} == {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}
    assert records == [[[0, 1, 2, 3], True, 8], [[4, 5, 6, 7], True, 8]]  # 2 processes x 2 passes x 2 each
