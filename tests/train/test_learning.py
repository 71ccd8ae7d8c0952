"""A model learns, on a CPU, through the commands docs/learning.md gives: `curriculum warm-start` makes the tiny
model (offline, seeded), `curriculum train recipe=cpu-learn` trains it with TRL's GRPOTrainer, and the mean reward
of the last 8 steps exceeds that of the first 8 by a margin set from the measured spread across seeds.

bench/bench_learning.py measured (GRPO seeds 0, 1, 2 on one warm start): gains of +1.10, +1.15 and +1.50
(1.25 +- 0.22), and +1.41 with the recipe's seed 42 that this test runs; each planted bug gains nothing (advantages
zeroed -0.10, rewards shuffled across samples -1.22, the loss mask inverted -0.38). That was one machine. On another
of the same kind (a fresh machine, the same package versions, an AVX-512 CPU) the same seeded runs go elsewhere
(floating-point kernels differ, and 32 steps of 8 samples amplify it): seeds 0, 1, 2 and 42 gain +1.17, +0.23,
+0.19 and +0.42 (+0.47 inside the whole suite: what ran before in the process moves it too), and the planted bugs
+0.28 (advantages zeroed), -0.41 (rewards shuffled) and +0.23 (loss mask inverted, its exact match falling). MARGIN
= 0.3 sits between the test's seed 42 and every planted bug on both machines (narrowly on the second: 0.42 against
0.28); it is a check of this seed, not a promise that every seed learns by 0.3 in 32 steps (seeds 1 and 2 above do
not, on the second machine). docs/learning.md has both tables.

What the margin holds on: the train sample's rows, the ones the recipe was tuned on, which this test trains on. On
rows held out from the tuning (bench_learning.py --rows dev --control: the MuSiQue dev sample's rows, each seed
again at learning rate 0), seeds 0, 1 and 2 gained +3.23, +4.18 and +3.26 over their controls, but seed 42 +0.20
(+0.21 against its control's +0.01): learning at every seed, under this margin at one; docs/learning.md says so
("On rows the recipes were not tuned on").
"""

from __future__ import annotations

import json
import logging
import math

import pytest
from cli_runs import run
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

MARGIN = 0.3
WINDOW = 8


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    d = tmp_path_factory.mktemp("learn")
    rows = d / "musique-learn"
    r = run("build", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--schedule", "min-max", "--K", 3,
            "--n", 48, "--out", rows)
    assert r.exit_code == 0, r.output
    r = run("warm-start", rows, "--out", d / "tiny-warm")
    assert r.exit_code == 0, r.output
    return d, rows, d / "tiny-warm"


def test_the_warm_start_is_written_whole_with_its_card(warm):
    _, _, model = warm
    card = json.loads((model / "warm_start.json").read_text())
    assert card["examples"] == 8 * 4 and card["settings"]["plain"] == 0.5
    assert card["loss"][-1] < card["loss"][0] / 10  # it learnt the taught completions
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert not model.with_name(model.name + ".partial").exists()


def test_grpo_raises_the_reward_of_the_warm_started_model(warm, caplog):
    from rag_curriculum.train import learning_summary

    d, rows, model = warm
    out = d / "run"
    with caplog.at_level(logging.WARNING):
        r = run("train", "recipe=cpu-learn", f"model.name_or_path={model}", f"data.shards={rows}",
                f"run.output_dir={out}")
    assert r.exit_code == 0, r.output
    history = json.loads((out / "checkpoint-32" / "trainer_state.json").read_text())["log_history"]
    steps = [h for h in history if "reward" in h]
    assert len(steps) == 32
    s = learning_summary(steps, keys=["reward", "rag_rl/exact_match"], window=WINDOW)
    assert s["reward"]["last"] - s["reward"]["first"] > MARGIN, (s, [h["reward"] for h in steps])
    assert s["rag_rl/exact_match"]["last"] > s["rag_rl/exact_match"]["first"], s
    # a gradient at most steps: the groups are mixed (a random model gives 0 at every step). More than half: the
    # first machine measured 24 or more of 32, the second 21 inside the whole suite (its runs go elsewhere, above)
    assert sum(h["grad_norm"] > 0 for h in steps) > len(steps) // 2, [h["grad_norm"] for h in steps]
    assert all(math.isfinite(h["loss"]) for h in steps)
    # the closing lines compare the first steps with the last
    assert "reward: " in r.output and "over the first 8 steps" in r.output and "rag_rl/exact_match:" in r.output


def test_a_step_with_nothing_to_learn_says_so_once(warm, tmp_path, caplog):
    """A random model: every group scores alike, every advantage is zero; one warning, with what to do."""
    from rag_curriculum.train import make_tiny_model

    _, rows, _ = warm
    model = make_tiny_model(tmp_path / "random", ["<reasoning> a b c </reasoning>"] * 20, hidden_size=32,
                            vocab_size=300)
    with caplog.at_level(logging.WARNING, logger="rag_curriculum.train._progress"):
        r = run("train", "recipe=cpu-learn", f"model.name_or_path={model}", f"data.shards={rows}",
                f"run.output_dir={tmp_path / 'run'}", "grpo.max_steps=3", "grpo.max_completion_length=8",
                "grpo.save_strategy=no")
    assert r.exit_code == 0, r.output
    said = [m for m in caplog.messages if "every group's rewards are equal" in m]
    assert len(said) == 1, caplog.messages
    assert "curriculum warm-start" in said[0] and "dynamic.enabled=true" in said[0]


def test_the_learning_page_gives_the_commands_this_test_runs():
    from conftest import ROOT

    page = (ROOT / "docs" / "learning.md").read_text()
    for command in ("curriculum build --dataset musique --input $TRAIN --schedule min-max --K 3 --n 48 --out "
                    "outputs/musique-learn", "curriculum warm-start outputs/musique-learn --out outputs/tiny-warm",
                    "curriculum train recipe=cpu-learn"):
        assert command in page, command


def test_learning_summary_compares_the_first_and_last_steps():
    from rag_curriculum.train import learning_summary

    history = [{"reward": float(i), "step": i} for i in range(8)] + [{"train_loss": 0.0, "step": 8}]
    assert learning_summary(history, window=2) == {"reward": {"first": 0.5, "last": 6.5, "steps": 2}}
    assert learning_summary([{"reward": 1.0, "step": 1}]) == {}
