"""A trained model that loads: `curriculum train` (the real CLI, TRL's GRPOTrainer, a tiny model built here, a
curriculum built from ../shared/data) ends with a model card whose snippet names the folder that holds the model
(the newest checkpoint when the run saves no final model, the run's folder when it does), and the snippet runs as
written from where the run was started. The base model is recorded as given, a GGUF file with its digest."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.shards import shared_path

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")


def snippet(card: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    assert len(blocks) == 1, card
    return blocks[0]


def run_snippet(code: str) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "<model card>", "exec"), {})
    return printed.getvalue()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model_dir) -> Path:
    root = tmp_path_factory.mktemp("trained-model")
    r = CliRunner().invoke(app, ["build", "--dataset", "hotpotqa", "--input", str(HOTPOT_TRAIN), "--schedule",
                                 "min-max", "--K", "3", "--n", "4", "--out", str(root / "outputs" / "hotpotqa-cpu")])
    assert r.exit_code == 0, r.output
    return root


def train(workdir: Path, tiny_model_dir: Path, name: str, *extra: str) -> Path:
    r = CliRunner().invoke(app, ["train", "recipe=cpu-tiny", f"model.name_or_path={tiny_model_dir}",
                                 "data.shards=outputs/hotpotqa-cpu", f"run.output_dir=outputs/train/{name}",
                                 "grpo.max_steps=2", "grpo.save_steps=2", "grpo.max_completion_length=8",
                                 "grpo.report_to=none", *extra])
    assert r.exit_code == 0, r.output
    return workdir / "outputs" / "train" / name


def test_the_card_names_the_checkpoint_when_no_final_model_is_saved(workdir, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(workdir)  # as the README runs it: relative paths from the checkout
    out = train(workdir, tiny_model_dir, "no-final")  # cpu-tiny: run.save_final=false
    assert not (out / "config.json").exists() and (out / "checkpoint-2" / "config.json").exists()
    card = (out / "README.md").read_text()
    assert f"| base model | `{shared_path(tiny_model_dir)}` (a local folder) |" in card  # no machine path
    code = snippet(card)
    assert 'model="outputs/train/no-final/checkpoint-2"' in code and "newest checkpoint" in card
    printed = run_snippet(code)  # as written, from where `curriculum train` ran
    assert printed.startswith("Question: Which river flows through Paris?")


def test_the_card_names_the_run_folder_once_the_final_model_is_saved(workdir, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(workdir)
    out = train(workdir, tiny_model_dir, "final", "run.save_final=true")
    assert (out / "config.json").exists()
    card = (out / "README.md").read_text()
    code = snippet(card)
    assert 'model="outputs/train/final"' in code and "The final model is in this folder" in card
    assert run_snippet(code).startswith("Question: Which river flows through Paris?")


def test_a_gguf_base_model_is_recorded_with_its_digest():
    from rag_curriculum.train import compose_train_config
    from rag_curriculum.train._recipes import model_card

    cfg = compose_train_config("cpu-tiny", ["model.name_or_path=models/gemma-3-270m-q4_k_m.gguf"])
    digest = "ab" * 32
    card = model_card(cfg, {"total_steps": 2, "gguf_sha256": digest, "model": "models/gemma-3-270m-q4_k_m.gguf"},
                      {"config": {"schedule": "min-max"}}, step=0)
    assert (f"| base model | `models/gemma-3-270m-q4_k_m.gguf` (a GGUF file, SHA-256 `{digest}`, converted into a "
            "model folder) |") in card
    assert "(a local folder)" not in card and "No model is saved yet" in card and "```python" not in card
