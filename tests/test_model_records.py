"""Every record says which model ran, read from that model: ``warm_start.json``, ``partition.json``, the evaluation's
``summary.json`` and ``train_plan.json`` carry its hidden size, layers and vocabulary (``model_settings``), never the
settings of the tiny model the warm start makes when it is given none (train_plan.json: tests/train/
test_base_model_grpo.py)."""

from __future__ import annotations

import json

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN
from support.cli_runs import run

from rag_curriculum.models import model_settings

pytest.importorskip("trl", reason="the `train` extra is needed for the warm start")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("records") / "rows"
    r = run("build", "--dataset", "hotpotqa", "--input", HOTPOT_TRAIN, "--schedule", "min-max", "--K", 3, "--n", 4,
            "--out", d)
    assert r.exit_code == 0, r.output
    return d


def _settings(folder):
    config = json.loads((folder / "config.json").read_text())
    return config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]


@pytest.mark.slow
def test_a_warm_start_of_a_given_model_records_that_models_settings(rows, tmp_path, tiny_model_dir):
    out = tmp_path / "warm"
    r = run("warm-start", rows, "--model", tiny_model_dir, "--out", out, "--rows", 1, "--copies", 1, "--epochs", 1)
    assert r.exit_code == 0, r.output
    card = json.loads((out / "warm_start.json").read_text())
    model = card["model"]
    assert (model["hidden_size"], model["layers"], model["vocab_size"]) == _settings(tiny_model_dir) == (64, 2, 1024)
    assert not {"hidden_size", "layers", "vocab_size"} & set(card["settings"])  # the tiny model's: not this one's


@pytest.mark.slow
def test_a_partition_and_an_evaluation_record_the_model_that_ran(rows, tmp_path, tiny_model_dir):
    want = _settings(tiny_model_dir)
    part = tmp_path / "part"
    r = run("partition", rows, "--backend", "transformers", "--model", tiny_model_dir, "--pass-at", 1, "--n", 2,
            "--max-tokens", 2, "--out", part)
    assert r.exit_code == 0, r.output
    recorded = json.loads((part / "partition.json").read_text())["model_settings"]
    assert (recorded["hidden_size"], recorded["layers"], recorded["vocab_size"]) == want
    ideal = tmp_path / "ideal"
    assert run("build", "--setting", "ideal", "--dataset", "hotpotqa", "--input", HOTPOT_HUB, "--n", 1,
               "--out", ideal).exit_code == 0
    ev = tmp_path / "eval"
    r = run("eval", "--backend", "transformers", "--model", f"tiny={tiny_model_dir}", "--data", ideal, "--samples", 1,
            "--max-tokens", 2, "--limit", 1, "--out", ev, "--no-plots")
    assert r.exit_code == 0, r.output
    entry = json.loads((ev / "summary.json").read_text())["evals"][0]["model_settings"]
    assert (entry["hidden_size"], entry["layers"], entry["vocab_size"]) == want


@pytest.mark.slow
def test_a_warm_start_of_gemma_records_gemma(rows, tmp_path, gemma_gguf, gemma_dir):
    """Gemma 3 270M (640 wide, 18 layers, 262,144 tokens), not the tiny model's 128 x 2 over 2,048 tokens."""
    gemma = (640, 18, 262144)
    assert _settings(gemma_dir) == gemma
    got = model_settings(gemma_gguf)  # a .gguf file: read in its cached conversion
    assert (got["hidden_size"], got["layers"], got["vocab_size"], got["model_type"]) == (*gemma, "gemma3_text")
    warm = tmp_path / "warm"
    r = run("warm-start", rows, "--model", gemma_gguf, "--out", warm, "--rows", 1, "--copies", 1, "--plain", 0,
            "--epochs", 1, "--batch-size", 1, "--freeze-embeddings")
    assert r.exit_code == 0, r.output
    card = json.loads((warm / "warm_start.json").read_text())
    assert (card["model"]["hidden_size"], card["model"]["layers"], card["model"]["vocab_size"]) == gemma
    assert "hidden_size" not in card["settings"]
