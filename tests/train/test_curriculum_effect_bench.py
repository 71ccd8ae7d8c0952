"""bench/bench_curriculum_effect.py's pieces: the pre-registration read and checked (against the predictions the
profile gives and against the runs), the paired intervals and verdicts against hand computations, and the
prediction recomputed from a planted profile."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stats():
    return _load("_effect_stats")


@pytest.fixture(scope="module")
def bench():
    return _load("bench_curriculum_effect")


@pytest.fixture(scope="module")
def prereg(bench):
    return bench.read_preregistration(bench.PREREG)


# -- the paired intervals, by hand ------------------------------------------------------------------------------------

def test_the_paired_interval_of_two_seeds_is_the_exact_bootstrap_worked_by_hand(stats):
    # two seeds' differences 0 and 1: the 4 equally likely resamples have means 0, 0.5, 0.5, 1; numpy's linear
    # percentile puts 2.5% at 0.075 of the way along the sorted means (0 + 0.075 * 0.5) and 97.5% at 2.925
    assert sorted(stats.resample_means([0.0, 1.0])) == [0.0, 0.5, 0.5, 1.0]
    assert stats.paired_bootstrap([0.0, 1.0]) == {"mean": 0.5, "ci": [0.0375, 0.9625], "seeds": 2}


def test_the_paired_interval_of_three_seeds_against_its_27_resamples_counted_by_hand(stats):
    # differences 0, 0, 3: a resample's mean is (number of 3s drawn); 0 threes: 8 of 27 resamples (2^3), 1: 12,
    # 2: 6, 3: 1. Sorted, positions 0..26; 2.5% sits at 0.65 (mean 0) and 97.5% at 25.35 (between 2 at 25 and 3 at 26)
    means = sorted(stats.resample_means([0.0, 0.0, 3.0]))
    assert [means.count(v) for v in (0.0, 1.0, 2.0, 3.0)] == [8, 12, 6, 1]
    got = stats.paired_bootstrap([0.0, 0.0, 3.0])
    assert got["mean"] == 1.0 and got["ci"] == [0.0, pytest.approx(2.35)]


def test_paired_differences_are_taken_seed_by_seed(bench, stats):
    # an arm better than its reference by 0.1 on every seed, whatever the seeds' own spread: a zero-width interval
    runs = []
    for seed, base in enumerate([0.0, 0.3, 0.6, 0.2, 0.9]):
        for arm, em in (("max", base), ("calibrated", base + 0.1)):
            runs.append({"setting": "answer", "arm": arm, "seed": seed, "informative": [0.5, 0.5],
                         "entropy": [1.0, 1.0], "eval": {"top": {"exact_match": em}}})
    doc = {"evaluation": {"primary": "top"}, "training": {},
           "settings": {"answer": {"reward": "rag-rl-answer", "reference": "max", "smallest_effect": 0.05,
                                   "arms": {"max": {}, "calibrated": {}}, "expect": {"calibrated": 1}}}}
    predicted = {"arms": {a: {"whole": 0.5, "run": 0.5, "quarters": [0.5], "mean_level": 1.0}
                          for a in ("max", "calibrated")}}
    start = {s: {"top": {"exact_match": 0.0}} for s in range(5)}
    got = bench.read_setting(doc, "answer", runs, start, predicted)["comparisons"]["calibrated"]
    assert got["primary"]["mean"] == pytest.approx(0.1) and got["primary"]["ci"] == [pytest.approx(0.1)] * 2
    assert got["outcome"] == "as predicted"


# -- verdicts and seeds needed ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ci", "expect", "outcome"), [
    ([0.02, 0.10], 1, "as predicted"), ([-0.10, -0.02], 1, "opposite"), ([-0.03, 0.04], 1, "null"),
    ([-0.03, 0.08], 1, "inconclusive"), ([-0.04, 0.04], 0, "as predicted"), ([0.01, 0.03], 0, "as predicted"),
    ([0.02, 0.09], 0, "difference, none predicted"), ([-0.06, 0.02], 0, "inconclusive"),
    ([-0.10, -0.02], -1, "as predicted"), ([-0.04, 0.03], -1, "null"),
])
def test_a_comparison_is_read_against_its_interval_as_pre_registered(stats, ci, expect, outcome):
    diff = {"mean": sum(ci) / 2, "ci": ci, "seeds": 5}
    assert stats.verdict(diff, expect=expect, smallest_effect=0.05)["outcome"] == outcome


def test_seeds_needed_shrinks_the_half_width_as_one_over_root_seeds(stats):
    # expected +, estimate 0.02 with half-width 0.05 at 5 seeds: excluding 0 needs half-width 0.02 (5 * 6.25 =
    # 31.25 -> 32 seeds); excluding 0.05 needs 0.03 (5 * 2.78 -> 14 seeds): the fewer decides it
    diff = {"mean": 0.02, "ci": [-0.03, 0.07], "seeds": 5}
    assert stats.seeds_needed(diff, smallest_effect=0.05, expect=1) == 14
    # no effect expected, estimate -0.04, half-width 0.06: excluding 0 needs 0.04 (5 * 2.25 -> 12), the margin 0.01
    diff = {"mean": -0.04, "ci": [-0.10, 0.02], "seeds": 5}
    assert stats.seeds_needed(diff, smallest_effect=0.05, expect=0) == 12
    assert stats.seeds_needed({"mean": 0.0, "ci": [-0.1, 0.1], "seeds": 5}, smallest_effect=0.0, expect=0) is None


# -- the pre-registration ---------------------------------------------------------------------------------------------

def test_the_committed_preregistration_says_everything_the_bench_needs(prereg):
    assert len(prereg["seeds"]) >= 5
    for s in prereg["settings"].values():
        assert len(s["arms"]) >= 2 and s["reference"] in s["arms"]
        assert set(s["expect"]) == set(s["arms"]) - {s["reference"]}
    # one setting where the prediction differs by at least 0.3 between two arms, and one where it does not
    spreads = {name: max(a["predicted"] for a in s["arms"].values()) - min(a["predicted"] for a in s["arms"].values())
               for name, s in prereg["settings"].items()}
    assert max(spreads.values()) >= 0.3 and min(spreads.values()) < 0.1, spreads


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["training"].pop("steps"), "training.steps"),
    (lambda d: d.pop("seeds"), "seeds"),
    (lambda d: next(iter(d["settings"].values())).update(reference="linear"), "is not one of its arms"),
    (lambda d: next(iter(d["settings"].values()))["expect"].clear(), "does not say what is expected"),
    (lambda d: next(iter(d["settings"].values()))["expect"].update(
        {a: 2 for a in next(iter(d["settings"].values()))["expect"]}), "each must be +1, -1 or 0"),
])
def test_an_incomplete_preregistration_is_refused_naming_what_it_lacks(bench, prereg, tmp_path, edit, message):
    import yaml

    doc = copy.deepcopy(prereg)
    edit(doc)
    path = tmp_path / "prereg.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(bench.PreregistrationError, match=re.escape(message)):
        bench.read_preregistration(path)


def test_an_uncommitted_preregistration_is_refused(bench, tmp_path):
    path = bench.ROOT / "bench" / "preregistered" / "an-uncommitted-test-file.yaml"
    path.write_text("x: 1\n")
    try:
        with pytest.raises(bench.PreregistrationError, match="commit the pre-registration"):
            bench.preregistration_commit(path)
    finally:
        path.unlink()
    assert len(bench.preregistration_commit(bench.PREREG)) == 40


def test_predictions_that_are_not_the_profiles_are_listed(bench, prereg):
    predicted = {name: {"arms": {arm: {"run": a["predicted"], "quarters": a.get("quarters", [])}
                                 for arm, a in s["arms"].items()}}
                 for name, s in prereg["settings"].items()}
    assert bench.check_predictions(prereg, predicted) == []
    name, s = next(iter(prereg["settings"].items()))
    arm = s["reference"]
    predicted[name]["arms"][arm]["run"] = s["arms"][arm]["predicted"] + 0.01
    wrong = bench.check_predictions(prereg, predicted)
    assert len(wrong) == 1 and f"settings.{name}.arms.{arm}.predicted" in wrong[0]


def test_runs_that_depart_from_the_preregistration_are_listed(bench, prereg):
    tr = prereg["training"]
    runs = [{"setting": name, "arm": arm, "seed": seed, "learning_rate": tr["learning_rate"], "steps": tr["steps"]}
            for name, s in prereg["settings"].items() for arm in s["arms"] for seed in prereg["seeds"]]
    runs += [{"setting": name, "arm": "control", "seed": seed, "learning_rate": tr.get("control_learning_rate", 0),
              "steps": tr["steps"]} for name in prereg["settings"] for seed in tr["control_seeds"]]
    assert bench.check_runs(prereg, runs) == []
    gone, short = runs.pop(0), runs[0]
    runs[0] = {**short, "steps": tr["steps"] - 1}
    runs.append({**gone, "seed": 99})
    wrong = bench.check_runs(prereg, runs)
    assert len(wrong) == 3
    assert any(f"no run of {gone['setting']}, {gone['arm']}, seed {gone['seed']}" in w for w in wrong)
    assert any("seed 99" in w and "not pre-registered" in w for w in wrong)
    assert any(f"{tr['steps'] - 1} steps" in w for w in wrong)


def test_the_gpu_preregistration_registers_its_expectations_as_a_rule_on_the_profile(bench, tmp_path):
    """Registered by rule (the profile and the runs happen in one GPU session): an arm predicted at least
    ``min_predicted_gap`` above (below) the reference is expected above (below) it, else no difference; a rule
    without its gap is refused."""
    import yaml

    path = bench.ROOT / "bench" / "preregistered" / "curriculum_effect_gpu.yaml"
    doc = bench.read_preregistration(path)
    s = doc["settings"]["answer"]
    assert s["expect"] == "auto" and s["min_predicted_gap"] == 0.3 and len(doc["seeds"]) >= 5

    def expect(calibrated: float) -> dict:
        predicted = {"answer": {"arms": {"max": {"run": 0.1}, "calibrated": {"run": calibrated}}}}
        resolved = bench.resolve_rules(doc, predicted)["settings"]["answer"]
        assert resolved["arms"]["calibrated"]["predicted"] == calibrated
        return resolved["expect"]

    assert expect(0.45) == {"calibrated": 1}
    assert expect(0.35) == {"calibrated": 0}    # a gap of 0.25: below the rule's 0.3
    assert expect(-0.25) == {"calibrated": -1}
    del doc["settings"]["answer"]["min_predicted_gap"]
    bad = tmp_path / "gpu-prereg-without-gap.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(bench.PreregistrationError, match="say min_predicted_gap"):
        bench.read_preregistration(bad)


# -- the prediction recomputed from a profile -------------------------------------------------------------------------

@pytest.mark.slow
def test_the_prediction_per_step_and_quarter_is_the_profiles_over_the_rows_each_step_trains(bench, tmp_path):
    """A pass/fail profile planted by hand (level 1: pass rate 0.5; level 2: 0.25): with G = 2 a group is
    informative with probability 2p(1 - p), 0.5 and 0.375; a min-max build of 4 questions trains 2 rows a step,
    level 1 first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rag_curriculum._plumbing import file_sha256
    from rag_curriculum.shards import read_rows

    data = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
    shards = bench.build(tmp_path / "min-max", data, 4, 2, dataset="musique", schedule="min-max")
    rows = read_rows(shards)
    assert [int(r["level"]) for r in rows] == [1, 1, 2, 2]
    ids = [r["id"] for r in rows]
    prof = tmp_path / "profile"
    prof.mkdir()
    rates = {1: 0.5, 2: 0.25}
    table = pa.table({"id": [i for i in ids for _ in (1, 2)], "level": [lv for _ in ids for lv in (1, 2)],
                      "num_distractors": [lv for _ in ids for lv in (1, 2)], "n": [4] * 8,
                      "c": [int(4 * rates[lv]) for _ in ids for lv in (1, 2)],
                      "pass_rate": [rates[lv] for _ in ids for lv in (1, 2)], "data_source": ["musique"] * 8,
                      "skipped": pa.array([None] * 8, pa.string())})
    pq.write_table(table, prof / "profile.parquet")
    (prof / "profile.json").write_text(json.dumps({"kind": "level-profile", "levels": [1, 2],
                                                   "table_sha256": file_sha256(prof / "profile.parquet")}))
    got = bench.predicted_per_step(shards, prof, steps=4, prompts=2, group_size=2)
    assert got == pytest.approx([0.5, 0.375, 0.5, 0.375])  # the steps outrun the 4 rows: from the start again
    assert bench.quarters(got) == pytest.approx([0.5, 0.375, 0.5, 0.375])


# -- the whole bench, as small as it goes -----------------------------------------------------------------------------

@pytest.mark.slow
def test_the_bench_trains_the_registered_runs_and_reads_them_against_the_registration(bench, prereg, tmp_path):
    """The pre-registration's structure on the smallest testbed: a warm start, one profile rescored for the second
    setting, the arms built with it, real TRL steps per arm and seed and a learning-rate-0 control, every model
    scored; a registration whose predictions are not the profile's is refused before any training."""
    pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
    doc = copy.deepcopy(prereg)
    doc["testbed"].update(questions=4, K=2, levels=[1, 2], profile={"samples": 2, "seed": 0},
                          warm_start={"rows": 4, "epochs": 1, "copies": 1, "plain": 0.0, "seed": 0})
    doc["training"].update(steps=2, prompts=2, generations=2, max_completion_length=16, control_seeds=[0])
    doc["seeds"] = [0]
    doc["evaluation"].update(samples=1, secondary_samples=1, held_out_questions=2, levels=[])
    for s in doc["settings"].values():  # two arms a setting
        s["arms"] = {a: s["arms"][a] for a in ("max", "min-max")}
        s["expect"] = {"min-max": s["expect"]["min-max"]}
    out = tmp_path / "effect"  # the arms built with the registration's keys (predicted, quarters) as they stand
    predicted = bench.experiment(out, doc, predict_only=True)["predictions"]
    assert not list(out.glob("runs"))  # nothing trained
    with pytest.raises(bench.PreregistrationError, match="not the profile's"):
        bench.experiment(out, doc)  # the registration's own predictions are another testbed's
    for name, s in doc["settings"].items():
        for arm, a in s["arms"].items():
            a["predicted"], a["quarters"] = predicted[name]["arms"][arm]["run"], predicted[name]["arms"][arm]["quarters"]
            # the card's figure over the whole build, and the run's over the rows its steps train (here all of them)
            assert predicted[name]["arms"][arm]["whole"] == pytest.approx(a["predicted"], abs=1e-3)
    summary = bench.experiment(out, doc, commit="0" * 40)
    assert json.loads((out / "summary.json").read_text())["runs"] == summary["runs"]
    assert (out / "effect.png").stat().st_size > 0
    assert bench.check_runs(doc, summary["runs"]) == []
    assert len(summary["runs"]) == 2 * 2 + 2  # two arms a setting, and a control per setting
    for r in summary["runs"]:
        state = json.loads(next((out / "runs" / r["setting"]).glob(f"{r['arm']}-seed{r['seed']}/checkpoint-2/"
                                                                     "trainer_state.json")).read_text())
        logged = [1 - h["frac_reward_zero_std"] for h in state["log_history"] if "frac_reward_zero_std" in h]
        assert r["informative"] == pytest.approx(logged, abs=1e-6)  # TRL's own log
        assert set(r["eval"]) == {"top", "fresh", "held_out"}
    for name, s in summary["settings"].items():
        for arm, c in s["comparisons"].items():
            mine = {r["seed"]: r["eval"]["top"]["exact_match"] for r in summary["runs"]
                    if r["setting"] == name and r["arm"] == arm}
            ref = {r["seed"]: r["eval"]["top"]["exact_match"] for r in summary["runs"]
                   if r["setting"] == name and r["arm"] == s["reference"]}
            assert c["primary"]["mean"] == pytest.approx(mine[0] - ref[0], abs=1e-6)
            assert c["outcome"] in ("as predicted", "opposite", "null", "inconclusive", "difference, none predicted")
        # the control trained at learning rate 0: its weights, and so its scores, are the start's
        control = next(r for r in summary["runs"] if r["setting"] == name and r["arm"] == "control")
        assert control["eval"] == summary["start"]["0"]
