"""The trainer checks the level profile's prediction as it trains: a real TRL GRPOTrainer run on the tiny random
model, on shards built with ``--profile`` (a profile of planted pass rates made by `curriculum profile` with a
scripted model). Each step's logged predicted fraction is the profile's prediction for exactly the rows the ledger
says the step trained, and its measured fraction is TRL's own 1 - frac_reward_zero_std; the per-step metrics file,
the closing summary, its plot and the step line carry them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from support.level_oracle import LEVELS, PLANTED, SAMPLES, LevelOracle

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

G = 2
STEPS = 3
PRIOR_WEIGHT = 0.5  # each profile sample counts half a rollout in the refreshed forecast


class Parity:
    """A reward that differs between a group's completions now and then (a random model's RAG-RL rewards are all
    the same format penalty): 1 for an odd-length completion, 0 for an even one."""

    __name__ = "test-parity"

    def __call__(self, completions, **kwargs):
        return [float(len(c if isinstance(c, str) else c[-1]["content"]) % 2) for c in completions]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, shared_data) -> tuple[Path, Path]:
    """A profile of 6 MuSiQue questions at levels 1, 2, 4, 8 (planted pass rates), and a min-max build (K = 8) of
    the same questions made with ``--profile``."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import ProfileConfig, profile

    base = tmp_path_factory.mktemp("informative")
    adaptive = base / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="adaptive", out=str(adaptive), seed=0))
    prof = base / "profile"
    profile(ProfileConfig(shards=str(adaptive), out=str(prof), backend="scripted", samples=SAMPLES, group_size=G,
                          levels=",".join(map(str, LEVELS))), backend=ScriptedBackend(script=LevelOracle(adaptive)))
    shards = base / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="min-max", out=str(shards), seed=0, profile=str(prof)))
    return prof, shards


@pytest.fixture(scope="module")
def run(profiled, tiny_model_dir, tmp_path_factory):
    from rag_curriculum.rewards import register_reward
    from rag_curriculum.train import compose_train_config, train

    _, shards = profiled
    register_reward("test-parity", Parity, overwrite=True)
    out = tmp_path_factory.mktemp("informative-run") / "run"
    cfg = compose_train_config("cpu-tiny", [
        f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}", f"run.output_dir={out}",
        f"grpo.max_steps={STEPS}", f"grpo.num_generations={G}", "grpo.max_completion_length=8",
        "grpo.logging_steps=1", "grpo.report_to=none", "rewards=[{name: rag-rl}, {name: test-parity}]",
        f"data.profile_prior_weight={PRIOR_WEIGHT}"])
    return train(cfg), out


def test_each_steps_predicted_fraction_is_the_profiles_for_the_rows_the_ledger_says_it_trained(profiled, run):
    from rag_curriculum.difficulty.profile import DriftFactor, RewardPosterior, read_profile
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import read_steps
    from rag_curriculum.train._ledger import step_line

    prof_dir, shards = profiled
    result, out = run
    prof = read_profile(prof_dir)
    row = {r["curriculum_index"]: (r["id"], int(r["level"])) for r in read_rows(shards)}
    assert {lv for _, lv in row.values()} == {1, 8}  # min-max: levels 1 and K, both profiled
    ledger = read_steps(out / "curriculum_steps.jsonl")
    metrics = [json.loads(line) for line in (out / "step_metrics.jsonl").read_text().splitlines()]
    logged = [h for h in result.log_history if "informative/predicted" in h]
    assert [r["step"] for r in ledger] == [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert len(logged) == STEPS
    wants = []
    for record, line, log in zip(ledger, metrics, logged, strict=True):
        rows = [row[i] for i in record["curriculum_index"]]
        want = prof.informative(rows, G)  # the profile's prediction for exactly these rows, groups of G
        wants.append(want)
        assert record["informative_predicted"] == pytest.approx(want, abs=1e-6)
        assert line["predicted"] == pytest.approx(want, abs=1e-6)
        assert log["informative/predicted"] == pytest.approx(want, abs=1e-6)
        assert line["rows"] == record["curriculum_index"] and line["levels"] == [lv for _, lv in rows]
        # the measured fraction is TRL's own: one generation batch a step, so the groups are the step's rows
        assert line["measured"] == pytest.approx(1.0 - log["frac_reward_zero_std"], abs=1e-6)
        assert line["trl_informative"] == pytest.approx(line["measured"], abs=1e-6)
        assert line["measured"] == pytest.approx(sum(line["informative"]) / len(line["informative"]))
        for key in ("reward", "reward_std", "grad_norm"):
            assert math.isfinite(line[key]) and line[key] == pytest.approx(log[key])
    assert len(set(wants)) > 1, "the planted rates should predict differently for different steps"
    assert {m["measured"] for m in metrics} - {0.0}, "the parity reward should make some group informative"
    # the closing summary, over every trained group
    summary = json.loads((out / "informative.json").read_text())
    assert summary == result.informative and (out / "informative.png").stat().st_size > 0
    every = [(p, m) for line in metrics for p, m in zip(line["p"], line["informative"], strict=True)]
    assert summary["whole"]["groups"] == STEPS * 2 == len(every)
    assert summary["whole"]["predicted"] == pytest.approx(sum(p for p, _ in every) / len(every), abs=1e-6)
    assert summary["whole"]["measured"] == pytest.approx(sum(m for _, m in every) / len(every), abs=1e-6)
    assert set(summary["per_level"]) == {"1", "8"} and summary["group_size"] == G
    assert sum(c["groups"] for c in summary["per_level"].values()) == len(every)
    lo, hi = summary["whole"]["predicted_interval"]
    assert summary["whole"]["inside"] == (lo <= summary["whole"]["measured"] <= hi)
    from rag_curriculum.shards import shared_path

    # the run folder is shared: the profile named as shared_path gives it, never by the machine's absolute path
    assert summary["profile"] == shared_path(prof_dir) and not Path(summary["profile"]).is_absolute()
    # the step line shows both, from the logged step
    line = step_line(logged[1], 2, STEPS)
    assert f"informative {1 - logged[1]['frac_reward_zero_std']:.4g}" in line
    assert f"predicted {logged[1]['informative/predicted']:.4g}" in line
    assert f"refreshed {logged[1]['informative/refreshed']:.4g}" in line
    # the refreshed forecast: the profile's samples (each counting data.profile_prior_weight) and every earlier
    # step's groups (TRL's rewards), not the step's
    assert summary["refreshed"]["prior_weight"] == PRIOR_WEIGHT
    post, alike = RewardPosterior(prof, prior_weight=PRIOR_WEIGHT), RewardPosterior(prof)
    drift, moved = DriftFactor(decay=0.9), False
    for line in metrics:
        flat = [v for group in line["rewards"] for v in group]
        assert sum(flat) / len(flat) == pytest.approx(line["reward"], abs=1e-5), "the groups' rewards are TRL's"
        forecast = [post.predict(i, lv, G) for i, lv in zip(line["ids"], line["levels"], strict=True)]
        assert line["q0"] == pytest.approx([p if q is None else q for p, q in zip(line["p"], forecast, strict=True)],
                                           abs=1e-6)
        assert line["q"] == pytest.approx([min(1.0, q * drift.factor()) for q in line["q0"]], abs=1e-5)
        drift.observe(line["informative"], line["q0"])
        moved |= forecast != [alike.predict(i, lv, G) for i, lv in zip(line["ids"], line["levels"], strict=True)]
        for i, lv, group in zip(line["ids"], line["levels"], line["rewards"], strict=True):
            post.observe(i, lv, group)
            alike.observe(i, lv, group)
    assert moved, "the profile's weight should move some forecast from the one with weight 1"
    assert sum(w["refreshed"]["groups"] for w in summary["windows"]) == len(every)


def test_a_profile_named_on_the_command_line_that_is_not_one_is_refused_before_training(profiled, tiny_model_dir,
                                                                                      tmp_path):
    from support.cli_runs import one_error
    from support.cli_runs import run as cli

    _, shards = profiled
    res = cli("train", "recipe=cpu-tiny", f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}",
              f"run.output_dir={tmp_path / 'run'}", "--profile", tmp_path)
    line = one_error(res)
    assert "no profile.json" in line and str(tmp_path) in line
    assert not (tmp_path / "run").exists()


def test_a_dry_run_refuses_a_profile_of_another_dataset_and_names_another_template(profiled, tiny_model_dir,
                                                                                  tmp_path, caplog):
    """The profile measured MuSiQue: HotpotQA shards are refused in one line naming both datasets; MuSiQue shards
    of another prompt template train, the warning line naming the template (and the dry run writes nothing)."""
    from conftest import HOTPOT_TRAIN
    from support.cli_runs import one_error
    from support.cli_runs import run as cli

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    prof, _ = profiled
    hotpot = tmp_path / "hotpotqa-cpu"
    build_curriculum(BuildConfig(sources=[SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 4)], schedule="min-max", K=3,
                                 out=str(hotpot), seed=0))
    common = ["recipe=cpu-tiny", f"model.name_or_path={tiny_model_dir}", f"run.output_dir={tmp_path / 'run'}",
              f"grpo.num_generations={G}", "--dry-run"]
    line = one_error(cli("train", *common, f"data.shards={hotpot}", "--profile", prof))
    assert f"data.profile={prof} measured musique, not data.shards={hotpot}'s hotpotqa" in line, line
    craft = tmp_path / "musique-craft"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), len(PLANTED), K=8)],
                                 schedule="min-max", out=str(craft), seed=0, template="craft-v1"))
    r = cli("train", *common, f"data.shards={craft}", "--profile", prof)
    assert r.exit_code == 0, r.output
    warned = [x for x in caplog.text.splitlines() + r.output.splitlines() if "made with other settings" in x]
    assert warned and "template rag-rl in the profile, craft-v1 here" in warned[0], (caplog.text, r.output)
    assert not (tmp_path / "run").exists()
