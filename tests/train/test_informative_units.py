"""The informative-fraction check's arithmetic, without a model: a group is informative exactly when TRL's own zero-std
test says it is not; the per-level and per-quarter comparison against planted predictions (the prediction's
binomial interval, the drift where the measured fraction leaves it); where the profile comes from."""

from __future__ import annotations

import json
import logging
import math
import random

import pytest

from rag_curriculum.difficulty.profile import DriftFactor, dirichlet_spread_probability, spread_probability
from rag_curriculum.errors import ConfigError, ProfileError
from rag_curriculum.train._informative import (
    InformativeCheck,
    compare,
    informative,
    prediction_interval,
    resolve_profile,
    wilson,
)


@pytest.mark.slow  # imports TRL (seconds)
def test_a_group_is_informative_exactly_when_trls_zero_std_test_says_not():
    torch = pytest.importorskip("torch")
    nanstd = pytest.importorskip("trl.trainer.utils").nanstd
    rng = random.Random(0)
    for _ in range(300):
        g = rng.choice([2, 4, 7])
        values = [rng.choice([-1.0, 0.0, 1.0, 2.5, 1.0 + 1e-12]) for _ in range(g)]
        is_zero = torch.isclose(nanstd(torch.tensor([values], dtype=torch.float32), dim=1), torch.zeros(1)).item()
        assert informative(values) == (not is_zero), values


class Planted:
    """A profile answering a planted probability per (row id, level), as LevelProfile.row_informative does."""

    def __init__(self, p):
        self.p = p

    def row_informative(self, row_id, level, group_size, max_spread=0.0):
        return self.p[level]


def _run(check, steps, level_of_step, informative_of):
    rng = random.Random(1)
    for step in range(1, steps + 1):
        rows = []
        for k in range(4):
            idx = step * 10 + k
            row = {"curriculum_index": idx, "id": f"q{idx}", "level": level_of_step(step)}
            rows.append(row)
            inf = rng.random() < informative_of(step)
            check.scored([row] * 2, [1.0, 0.0] if inf else [1.0, 1.0])
        check.step(step, rows)


def test_the_summary_compares_per_level_and_finds_where_the_prediction_drifted():
    check = InformativeCheck(Planted({1: 0.8, 3: 0.2}), 2, source="planted")
    # levels 1 then 3; measured as predicted for the first 30 steps, then level 3 turns informative (the model
    # learned: its rewards spread where the profile said they would not)
    _run(check, 40, lambda s: 1 if s <= 20 else 3, lambda s: 0.8 if s <= 20 else 0.2 if s <= 30 else 1.0)
    s = check.summary()
    assert s["steps"] == 40 and s["whole"]["groups"] == 160
    assert s["per_level"]["1"]["predicted"] == pytest.approx(0.8) and s["per_level"]["1"]["groups"] == 80
    assert s["per_level"]["1"]["predicted_interval"] == prediction_interval([0.8] * 80)
    assert s["per_level"]["1"]["inside"]
    assert [w["steps"] for w in s["windows"]] == [[1, 10], [11, 20], [21, 30], [31, 40]]
    assert [w["inside"] for w in s["windows"]][:3] == [True, True, True] and not s["windows"][3]["inside"]
    assert s["drift"]["first_outside"] == [31, 40]
    assert s["windows"][3]["measured"] == 1.0 and s["windows"][3]["error"] == pytest.approx(0.8)
    lo, hi = s["windows"][3]["error_interval"]
    assert lo <= 0.8 <= hi


def test_the_prediction_interval_is_the_poisson_binomial_normal_one():
    p = [0.1, 0.5, 0.9, 0.3]
    mean, sd = sum(p) / 4, math.sqrt(sum(x * (1 - x) for x in p)) / 4
    lo, hi = prediction_interval(p)
    assert lo == pytest.approx(max(0, mean - 1.959964 * sd), abs=1e-6) and hi == pytest.approx(mean + 1.959964 * sd,
                                                                                               abs=1e-6)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    c = compare([(0.5, True), (0.5, False)])
    assert c["measured"] == 0.5 and c["error"] == 0.0 and c["inside"]


def test_the_profile_is_the_one_given_else_the_builds_and_a_missing_recorded_one_is_said(tmp_path, caplog):
    assert resolve_profile(None, tmp_path, {}) == (None, None)
    with caplog.at_level(logging.WARNING):
        assert resolve_profile(None, tmp_path / "shards", {"profile": {"path": "../gone"}}) == (None, None)
    assert "../gone" in caplog.text and "data.profile=DIR" in caplog.text
    with pytest.raises(ProfileError, match="no profile.json"):
        resolve_profile(str(tmp_path), tmp_path, {"profile": {"path": "../gone"}})
    (tmp_path / "profile.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ProfileError):
        resolve_profile(str(tmp_path), tmp_path, {})


class Recorded:
    """A profile with recorded sample rewards per (row id, level), predicting as LevelProfile does from them."""

    def __init__(self, rewards):
        self.rewards = rewards

    def row_informative(self, row_id, level, group_size, max_spread=0.0):
        return spread_probability(self.rewards[(row_id, level)], group_size, max_spread)


def test_the_refreshed_forecast_is_made_before_the_steps_groups_and_follows_the_model(tmp_path):
    # the profile saw "a" always right and "b" always wrong; in training the model gets "a" wrong half the time
    prof = Recorded({("a", 1): (1.0,) * 4, ("b", 2): (0.0,) * 4})
    path = tmp_path / "step_metrics.jsonl"
    check = InformativeCheck(prof, 2, path=path, source="planted", drift_decay=None)  # the posterior alone
    seen = {"a": {1.0: 4.0}, "b": {0.0: 4.0}}
    forecasts = []
    for step in range(1, 21):
        rows = [{"curriculum_index": 2 * step, "id": "a", "level": 1}, {"curriculum_index": 2 * step + 1, "id": "b",
                                                                          "level": 2}]
        groups = [[1.0, 0.0] if step % 2 else [1.0, 1.0], [0.0, 0.0]]
        check.scored([rows[0]] * 2 + [rows[1]] * 2, groups[0] + groups[1])
        metrics = check.step(step, rows)
        expected = [dirichlet_spread_probability(seen[q], 2) for q in ("a", "b")]  # only the earlier steps' groups
        assert check.steps[-1]["q"] == pytest.approx(expected)
        assert metrics["informative/refreshed"] == pytest.approx(sum(expected) / 2)
        assert metrics["informative/predicted"] == 0.0, "the static prediction is unchanged"
        forecasts.append(expected[0])
        for q, g in zip(("a", "b"), groups, strict=True):
            for v in g:
                seen[q][v] = seen[q].get(v, 0.0) + 1
        check.logged({"frac_reward_zero_std": 0.5})
    assert forecasts[0] == 0.0 and forecasts[1] > 0.0 and forecasts[-1] > 0.3
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[1]["refreshed"] == pytest.approx(forecasts[1] / 2, abs=1e-6) and lines[1]["predicted"] == 0.0
    assert lines[0]["rewards"] == [[1.0, 0.0], [0.0, 0.0]] and lines[0]["ids"] == ["a", "b"]
    s = check.summary()
    static, fresh = [w["error"] for w in s["windows"]], [w["refreshed"]["error"] for w in s["windows"]]
    assert static == pytest.approx([0.3, 0.2, 0.3, 0.2]), "a: 3 or 2 of 5 informative, predicted 0; b: 0 and 0"
    assert abs(fresh[-1]) < abs(static[-1]) / 2, "the refreshed forecast stays where the model is"
    assert s["refreshed"]["whole"]["groups"] == 40 and s["per_step"][0]["refreshed"] == 0.0
    # a resumed run observes its earlier steps' groups again: the same posterior, the same next forecast
    again = InformativeCheck(prof, 2, path=path, source="planted", drift_decay=None)
    again.load(path, upto=20)
    assert again.posterior.counts("a", 1) == check.posterior.counts("a", 1) == {1.0: 34.0, 0.0: 10.0}
    assert again.summary()["windows"][3]["refreshed"] == s["windows"][3]["refreshed"]
    off = InformativeCheck(prof, 2, refresh=False)
    off.scored([{"curriculum_index": 0, "id": "a", "level": 1}] * 2, [1.0, 0.0])
    assert "informative/refreshed" not in off.step(1, [{"curriculum_index": 0}]) and "refreshed" not in off.summary()


def test_the_profiles_weight_in_the_refreshed_forecast_is_the_dirichlets_prior_count():
    # the profile saw "a" right 3 times and wrong once; each of its samples counts w against one rollout's reward
    prof = Recorded({("a", 1): (1.0, 1.0, 1.0, 0.0)})
    rows = [{"curriculum_index": 0, "id": "a", "level": 1}]
    for w in (1.0, 0.25, 6.0, 0.0):
        check = InformativeCheck(prof, 3, prior_weight=w)
        for step, group in enumerate(([0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]), start=1):
            check.scored(rows * 3, group)
            check.step(step, rows)
        # step 1: the prior alone; step 2: the prior and step 1's group; step 3: and step 2's
        want = [{1.0: 3 * w, 0.0: 1 * w}, {1.0: 3 * w, 0.0: w + 3}, {1.0: 3 * w + 1, 0.0: w + 5}]
        got = [s["q0"][0] for s in check.steps]  # the question's posterior (before the drift factor)
        assert got[1:] == pytest.approx([dirichlet_spread_probability({v: c for v, c in counts.items() if c}, 3)
                                         for counts in want[1:]], abs=1e-12)
        if w:
            assert got[0] == pytest.approx(dirichlet_spread_probability(want[0], 3), abs=1e-12)
        else:
            assert got[0] == check.steps[0]["p"][0], "no prior: the profile's own prediction until a group is seen"
        assert check.summary()["refreshed"]["prior_weight"] == w
    heavy, light = (InformativeCheck(prof, 3, prior_weight=w) for w in (6.0, 0.25))
    for c in (heavy, light):
        c.scored(rows * 3, [0.0, 0.0, 0.0])
        c.step(1, rows)
        c.scored(rows * 3, [0.0, 0.0, 0.0])
        c.step(2, rows)
    assert light.steps[1]["q0"][0] < heavy.steps[1]["q0"][0], "a lighter prior follows the all-wrong groups sooner"


def test_the_drift_factor_follows_a_model_whose_groups_grow_alike_across_questions_seen_once(tmp_path):
    # the profile saw every question mixed; in training the model has collapsed: every group alike. Each question
    # comes once, so its own posterior never moves; the factor pooled over questions does
    prof = Recorded({(f"q{i}", 1): (1.0, 0.0, 1.0, 0.0) for i in range(40)})
    path = tmp_path / "step_metrics.jsonl"
    check = InformativeCheck(prof, 2, path=path, source="planted", drift_decay=0.9)
    replay = DriftFactor(decay=0.9)
    for step in range(1, 21):
        rows = [{"curriculum_index": 2 * step + k, "id": f"q{2 * (step - 1) + k}", "level": 1} for k in (0, 1)]
        check.scored([rows[0]] * 2 + [rows[1]] * 2, [0.0, 0.0, 1.0, 1.0])
        check.step(step, rows)
        e = check.steps[-1]
        assert e["q0"] == pytest.approx([dirichlet_spread_probability({1.0: 2.0, 0.0: 2.0}, 2)] * 2), \
            "seen once: the question's posterior is its prior"
        assert e["drift"] == pytest.approx(replay.factor()) and e["q"] == pytest.approx([q * e["drift"]
                                                                                        for q in e["q0"]])
        replay.observe(e["informative"], e["q0"])
        check.logged({"frac_reward_zero_std": 1.0})
    assert check.steps[0]["drift"] == 1.0 and check.steps[-1]["drift"] < 0.25
    s = check.summary()
    assert s["refreshed"]["drift_decay"] == 0.9 and s["refreshed"]["without_drift"]["predicted"] == pytest.approx(
        check.steps[0]["q0"][0]), "without the factor, questions seen once keep their prior's forecast"
    assert abs(s["windows"][-1]["refreshed"]["error"]) < abs(s["windows"][-1]["error"]) / 4
    again = InformativeCheck(prof, 2, path=path, source="planted", drift_decay=0.9)
    again.load(path, upto=20)
    assert again.drift.factor() == pytest.approx(check.drift.factor()), "a resumed run's factor is the same"
    with pytest.raises(ConfigError, match="decay"):
        DriftFactor(decay=1.5)


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "data.profile_prior_weight = -1.0: must be a number in 0..1e+06"),
    ("nan", "data.profile_prior_weight = nan: must be a number in 0..1e+06"),
    ("heavy", "data.profile_prior_weight: Value 'heavy' of type 'str' could not be converted to Float"),
])
def test_a_bad_prior_weight_is_refused_in_one_line_naming_the_key_and_nothing_is_written(tmp_path, value, message):
    from support.cli_runs import one_error, run

    out = tmp_path / "run"
    r = run("train", "recipe=cpu-tiny", f"data.shards={tmp_path / 'shards'}", f"run.output_dir={out}",
            f"data.profile_prior_weight={value}", "--dry-run")
    assert message in one_error(r, code=2)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_profile_of_other_datasets_than_the_shards_is_refused_in_one_line_naming_both(tmp_path):
    from types import SimpleNamespace

    from rag_curriculum.train._informative import check_datasets

    wiki = SimpleNamespace(datasets=["2wikimultihopqa"])
    with pytest.raises(ProfileError) as e:
        check_datasets(wiki, {"K": {"hotpotqa": 3}}, "outputs/hotpotqa-cpu", "data.profile=outputs/profile-2wiki")
    assert str(e.value).startswith("data.profile=outputs/profile-2wiki measured 2wikimultihopqa, not "
                                   "data.shards=outputs/hotpotqa-cpu's hotpotqa") and "\n" not in str(e.value)
    assert "curriculum profile --dataset hotpotqa" in e.value.hint
    with pytest.raises(ProfileError, match="not data.shards=mix's musique"):  # a mixture: every dataset measured
        check_datasets(SimpleNamespace(datasets=["hotpotqa"]), {"K": {"hotpotqa": 3, "musique": 20}}, "mix", "p")
    check_datasets(SimpleNamespace(datasets=["hotpotqa", "musique"]), {"K": {"hotpotqa": 3}}, "hp", "p")
    check_datasets(wiki, {}, "no-manifest", "p")  # nothing recorded to compare: passes


@pytest.mark.parametrize("override", ["data.profile=outputs/profile-b", "++data.profile=outputs/profile-b"])
def test_two_profiles_given_two_ways_are_refused_in_one_line_and_nothing_is_written(tmp_path, override):
    from support.cli_runs import one_error, run

    out = tmp_path / "run"
    r = run("train", "recipe=cpu-tiny", f"data.shards={tmp_path / 'shards'}", f"run.output_dir={out}", override,
            "--profile", "outputs/profile-a", "--dry-run")
    line = one_error(r, code=2)
    assert "--profile outputs/profile-a and data.profile=outputs/profile-b: two level profiles" in line
    assert list(tmp_path.iterdir()) == []
    same = run("train", "recipe=cpu-tiny", "data.profile=outputs/profile-a", "--profile", "outputs/profile-a",
               "--print-config")
    assert same.exit_code == 0 and "profile: outputs/profile-a" in same.output, same.output
