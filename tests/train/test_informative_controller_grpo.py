"""The `informative` controller on TRL's GRPOTrainer, on the CPU: the tiny random model, adaptive shards of real
MuSiQue rows (K = 8) with a level profile of planted pass rates made by `curriculum profile`. The first step's rows
are at the levels a `--schedule calibrated --target-informative 1` build gives the same questions; every step
trains the rows at the levels a controller fed the groups' rewards the run logged picks (the ledger, the per-step
metrics and the levels log agree); the checkpoint keeps that controller's state exactly; a bad setting is refused in
one line before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from support.level_oracle import LEVELS, PLANTED, SAMPLES, LevelOracle

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

G = 2
K = 8
STEPS = 3


class Parity:
    """1 for an odd-length completion, 0 for an even one: groups whose rewards differ now and then."""

    __name__ = "test-parity"

    def __call__(self, completions, **kwargs):
        return [float(len(c if isinstance(c, str) else c[-1]["content"]) % 2) for c in completions]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, shared_data) -> tuple[Path, Path, Path]:
    """An adaptive build of 6 MuSiQue questions (K = 8), their profile at levels 1, 2, 4, 8 (planted pass rates),
    and a calibrated build of the same questions on the most informative level."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import ProfileConfig, profile
    from rag_curriculum.rewards import register_reward

    register_reward("test-parity", Parity, overwrite=True)
    base = tmp_path_factory.mktemp("informative-controller")
    adaptive = base / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=K)],
                                 schedule="adaptive", out=str(adaptive), seed=0))
    prof = base / "profile"
    profile(ProfileConfig(shards=str(adaptive), out=str(prof), backend="scripted", samples=SAMPLES, group_size=G,
                          levels=",".join(map(str, LEVELS))), backend=ScriptedBackend(script=LevelOracle(adaptive)))
    calibrated = base / "musique-calibrated"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=K)],
                                 schedule="calibrated", target_informative=1.0, out=str(calibrated), seed=0,
                                 profile=str(prof)))
    return adaptive, prof, calibrated


def _settings(model, shards, prof, out, *extra):
    return [f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
            f"data.profile={prof}", f"grpo.max_steps={STEPS}", f"grpo.save_steps={STEPS}", f"grpo.num_generations={G}",
            "grpo.max_completion_length=8", "grpo.logging_steps=1", "grpo.report_to=none",
            "rewards=[{name: rag-rl}, {name: test-parity}]", "adaptive.controller=informative", *extra]


@pytest.fixture(scope="module")
def run(profiled, tiny_model_dir, tmp_path_factory):
    from rag_curriculum.train import compose_train_config, train

    adaptive, prof, _ = profiled
    out = tmp_path_factory.mktemp("informative-controller-run") / "run"
    result = train(compose_train_config("cpu-tiny", _settings(tiny_model_dir, adaptive, prof, out)))
    return result, out


def test_the_levels_trained_are_the_controllers_fed_the_runs_rewards(profiled, run):
    from rag_curriculum.difficulty.profile import read_profile
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train._informative import read_step_metrics
    from rag_curriculum.train.adaptive import read_levels
    from rag_curriculum.train.controllers import GroupResult, make_controller

    _, prof, calibrated = profiled
    result, out = run
    metrics = read_step_metrics(out / "step_metrics.jsonl")
    ledger = [json.loads(line) for line in (out / "curriculum_steps.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [r["step"] for r in ledger] == list(range(1, STEPS + 1))
    # the first step's rows at the calibrated build's levels of the same questions (none seen before)
    built = {r["id"]: r["level"] for r in read_rows(calibrated)}
    assert metrics[0]["levels"] == [built[i] for i in metrics[0]["ids"]]
    # a fresh controller, fed each step's groups as the run logged them, picks every step's levels
    c = make_controller("informative", K=K, profile=read_profile(prof), group_size=G, seed=42)  # grpo.seed
    for m, r in zip(metrics, ledger, strict=True):
        assert c.levels([(i, K) for i in m["ids"]]) == m["levels"], m
        assert r["curriculum_index"] == m["rows"]  # the ledger's rows: the ones the metrics line scored
        assert r["levels"] == {str(lv): m["levels"].count(lv) for lv in sorted(set(m["levels"]))}
        c.update([GroupResult(i, lv, K, tuple(rw)) for i, lv, rw in zip(m["ids"], m["levels"], m["rewards"],
                                                                          strict=True)])
    levels_log = read_levels(out / "curriculum_levels.jsonl")
    assert [rec["levels"] for rec in levels_log] == [r["levels"] for r in ledger]
    saved = json.loads((out / f"checkpoint-{STEPS}" / "curriculum_controller.json").read_text())
    assert saved == json.loads(json.dumps(c.state_dict())), "the run's controller was in the replayed state"
    assert saved["posterior"]["observed"], "the groups' rewards reached the posterior"


def test_a_bad_setting_is_refused_in_one_line_before_anything_is_written(profiled, tiny_model_dir, tmp_path):
    from support.cli_runs import one_error
    from support.cli_runs import run as cli

    adaptive, prof, _ = profiled
    res = cli("train", "recipe=cpu-tiny", *_settings(tiny_model_dir, adaptive, prof, tmp_path / "run",
                                                     "adaptive.kwargs.level_decay=1.5"))
    line = one_error(res)
    assert "adaptive.kwargs.level_decay=1.5: must be in 0..1" in line
    assert not (tmp_path / "run").exists()


def test_without_a_profile_the_controller_is_refused_before_anything_is_written(profiled, tiny_model_dir, tmp_path):
    from support.cli_runs import one_error
    from support.cli_runs import run as cli

    adaptive, prof, _ = profiled  # the adaptive shards were built without --profile
    settings = [s for s in _settings(tiny_model_dir, adaptive, prof, tmp_path / "run") if not s.startswith("data.prof")]
    res = cli("train", "recipe=cpu-tiny", *settings)
    assert "adaptive.controller=informative: needs a level profile" in one_error(res)
    assert "give data.profile=DIR" in res.output  # the hint
    assert not (tmp_path / "run").exists()
