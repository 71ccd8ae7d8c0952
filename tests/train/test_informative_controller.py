"""The `informative` controller: each row at the level whose informative forecast, refreshed from the rollouts, is
highest. Before any rollout it places as the calibrated rule on the profile's own prediction; a level whose groups
stop teaching loses the next questions (a factor pooled over every level would keep them); its forecasts are the
formula's, by hand, step by step; its state round-trips exactly; bad settings are refused in one line."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

import pytest
from support.level_oracle import LEVELS, PLANTED, SAMPLES

from rag_curriculum.difficulty.profile import LevelProfile
from rag_curriculum.errors import ConfigError
from rag_curriculum.train.controllers import GroupResult, InformativeLevels, make_controller

G = 4


def profile_of(rewards: dict[tuple[str, int], tuple[float, ...]], levels: list[int], sha: str | None = "s0",
               group_size: int = G) -> LevelProfile:
    rates = {k: sum(1.0 for v in r if v > 0) / len(r) for k, r in rewards.items()}
    return LevelProfile(Path("p"), {"group_size": group_size, "table_sha256": sha}, rates, levels, ["musique"], None,
                        rewards)


def planted(sha: str | None = "s0") -> LevelProfile:
    """support.level_oracle's questions (q0..q5 at levels 1, 2, 4, 8), each sample scored 2 (right) or 0, and q6
    with a third value (a format reward: -1), so that the forecasts are not a pass/fail reward's."""
    rewards = {(f"q{q}", lv): (2.0,) * c[i] + (0.0,) * (SAMPLES - c[i])
               for q, c in enumerate(PLANTED) for i, lv in enumerate(LEVELS)}
    rewards.update({("q6", 1): (2.0, 2.0, 0.0, -1.0), ("q6", 2): (2.0, 0.0, -1.0, -1.0),
                    ("q6", 4): (0.0, 0.0, -1.0, -1.0), ("q6", 8): (-1.0, -1.0, -1.0, -1.0)})
    return profile_of(rewards, LEVELS, sha)


IDS = [f"q{q}" for q in range(7)] + ["not-profiled"]


@pytest.mark.parametrize("aim", [1.0, 0.6, 0.3])
def test_before_any_rollout_it_places_as_the_calibrated_rule(aim):
    prof = planted()
    c = make_controller("informative", K=8, profile=prof, group_size=G, target_informative=aim)
    calibrated = [prof.calibrated_level(q, 8, 0.5, informative=aim, group_size=G)[0] for q in IDS]
    assert c.levels([(q, 8) for q in IDS]) == calibrated
    assert c.levels([(q, 2) for q in IDS]) == [prof.calibrated_level(q, 2, 0.5, informative=aim, group_size=G)[0]
                                               for q in IDS], "never above the row's own K"
    assert len(set(calibrated)) > 1
    assert [c.forecast(q, lv) for q in IDS for lv in LEVELS] == [
        prof.row_informative(q, lv, G) for q in IDS for lv in LEVELS], "the profile's own prediction, exactly"


def collapse_profile() -> LevelProfile:
    """Eight questions, each most informative at level 2 (0.875 for G = 4), then level 1 (0.68), level 3 never."""
    rewards = {}
    for q in range(8):
        rewards[(f"c{q}", 1)] = (0.0, 0.0, 0.0, 1.0)
        rewards[(f"c{q}", 2)] = (0.0, 0.0, 1.0, 1.0)
        rewards[(f"c{q}", 3)] = (0.0, 0.0, 0.0, 0.0)
    return profile_of(rewards, [1, 2, 3])


@pytest.mark.parametrize("pooled_only", [False, True])
def test_a_level_whose_groups_stop_teaching_loses_the_next_questions(pooled_only):
    prof = collapse_profile()
    # pooled only: the level factor's prior worth a billion groups, so that every level's factor is the pooled one
    c = make_controller("informative", K=3, profile=prof, group_size=G,
                        **({"level_prior_groups": 1e9} if pooled_only else {}))
    rows = [(f"c{q}", 3) for q in range(8)]
    assert c.levels(rows) == [2] * 8
    # the first batch, four questions at level 2: every group's rewards alike (the model's samples grew alike)
    c.update([GroupResult(f"c{q}", 2, 3, (1.0,) * G) for q in range(4)])
    later = c.levels(rows[4:])  # questions not seen yet: only a factor can move them
    pooled, level2, level1 = c.pooled.factor(), c.level_factor(2), c.level_factor(1)
    if pooled_only:
        assert later == [2] * 4 and level2 == pytest.approx(level1)
        assert c.levels(rows[:4]) == [2] * 4, "one group of their own does not move the collapsed questions"
    else:
        assert later == [1] * 4, (pooled, level1, level2)
        # 4 groups forecast 0.875 each, none informative: pooled 2 / (2 + 3.5); level 2 shrunk toward it
        assert pooled == pytest.approx(2 / 5.5) and level1 == pytest.approx(pooled)
        assert level2 == pytest.approx(2 * pooled / (2 + 3.5))
        assert c.levels(rows[:4]) == [1] * 4, "the collapsed questions move too"


def test_the_forecast_is_the_formula_step_by_step():
    # one question, levels 1 and 2, G = 2; the profile's samples: (0, 1) at level 1, (0, 2) at level 2
    prof = profile_of({("a", 1): (0.0, 1.0), ("a", 2): (0.0, 2.0)}, [1, 2], group_size=2)
    c = make_controller("informative", K=2, profile=prof, group_size=2)
    F = Fraction
    d = F(9, 10)  # both decays, 0.9; both prior weights, 2 groups
    # before any rollout: the profile's 1 - sum q_v^2 = 1/2 at both levels, every factor 1
    assert c.forecast("a", 1) == c.forecast("a", 2) == 0.5
    # batch 1: (a, 1) shows (0, 0), not informative, its forecast 1/2 then
    c.update([GroupResult("a", 1, 2, (0.0, 0.0))])
    # its posterior {0: 3, 1: 1}: 1 - (3*4 + 1*2) / (4*5) = 3/10; the prior's {0: 1, 1: 1}: 1/3; p x R = 1/2 x 9/10
    base1 = F(1, 2) * F(3, 10) / F(1, 3)
    pooled = F(2 + 0, 2) / (1 + F(1, 4))  # (2 x 1 + M) / (2 + F): M = 0, F = 1/2
    assert pooled == F(4, 5)
    d1 = (2 * pooled + 0) / (2 + F(1, 2))
    d2 = (2 * pooled + 0) / (2 + 0)
    assert c.pooled.factor() == pytest.approx(float(pooled), abs=1e-12)
    assert c.level_factor(1) == pytest.approx(float(d1), abs=1e-12)
    assert c.level_factor(2) == pytest.approx(float(d2), abs=1e-12)
    assert c.forecast("a", 1) == pytest.approx(float(base1 * d1), abs=1e-12)  # 0.288
    assert c.forecast("a", 2) == pytest.approx(float(F(1, 2) * d2), abs=1e-12)  # 0.4
    assert c.levels([("a", 2)]) == [2]
    # batch 2: (a, 2) shows (0, 2), informative, its forecast 1/2 then (its own posterior untouched so far)
    c.update([GroupResult("a", 2, 2, (0.0, 2.0))])
    base2 = F(1, 2) * (1 - F(2 * 3 + 2 * 3, 4 * 5)) / F(1, 3)  # posterior {0: 2, 2: 2}: 2/5; R = 6/5
    M, Fsum = d * 0 + 1, d * F(1, 2) + F(1, 2)
    pooled = (2 + M) / (2 + Fsum)
    assert pooled == F(60, 59)
    d1 = (2 * pooled + d * 0) / (2 + d * F(1, 2))  # level 1: nothing new, its sums discounted
    d2 = (2 * pooled + 1) / (2 + F(1, 2))
    assert c.level_factor(1) == pytest.approx(float(d1), abs=1e-12)
    assert c.level_factor(2) == pytest.approx(float(d2), abs=1e-12)
    assert c.forecast("a", 1) == pytest.approx(float(base1 * d1), abs=1e-12)
    assert c.forecast("a", 2) == pytest.approx(min(1.0, float(base2 * d2)), abs=1e-12)
    assert c.target() == 2.0 and c.batch == 2


def feed(c: InformativeLevels, rng: random.Random, batches: int) -> None:
    for _ in range(batches):
        rows = [(q, 8) for q in rng.sample(IDS, 4)]
        results = [GroupResult(q, lv, K, tuple(float(rng.choice([-1, 0, 2])) for _ in range(G)))
                   for (q, K), lv in zip(rows, c.levels(rows), strict=True)]
        c.update(results)


def test_the_state_round_trips_exactly_and_a_resumed_controller_picks_the_same_levels():
    prof = planted()
    c = make_controller("informative", K=8, profile=prof, group_size=G, level_prior_groups=1.0)
    feed(c, random.Random(5), 6)
    saved = json.loads(json.dumps(c.state_dict()))  # as a checkpoint keeps it
    resumed = make_controller("informative", K=8, profile=planted(), group_size=G, level_prior_groups=1.0)
    resumed.load_state_dict(saved)
    assert resumed.state_dict() == saved
    rows = [(q, K) for q in IDS for K in (2, 4, 8)]
    assert resumed.levels(rows) == c.levels(rows)
    assert [resumed.forecast(q, lv) for q in IDS for lv in LEVELS] == [c.forecast(q, lv) for q in IDS
                                                                       for lv in LEVELS]
    feed(c, random.Random(6), 3)
    feed(resumed, random.Random(6), 3)
    assert resumed.state_dict() == c.state_dict() and resumed.target() == c.target()
    c.update([GroupResult("q0", 2, 8, (float("nan"),) * G)])  # no completion scored: the posterior unmoved
    assert c.posterior.state_dict() == resumed.posterior.state_dict() and c.base("q0", 2) > 0
    with pytest.raises(ConfigError, match="another level profile"):
        make_controller("informative", K=8, profile=planted(sha="s1"), group_size=G).load_state_dict(saved)
    with pytest.raises(ConfigError, match="'informative' with K=8"):
        make_controller("mastery", K=8).load_state_dict(saved)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"target_informative": 1.5}, r"adaptive.kwargs.target_informative=1.5: must be in 0..1"),
    ({"level_decay": -0.1}, r"adaptive.kwargs.level_decay=-0.1: must be in 0..1"),
    ({"level_prior_groups": 0.0}, r"adaptive.kwargs.level_prior_groups=0.0: must be > 0"),
    ({"prior_weight": -1.0}, r"adaptive.kwargs.prior_weight=-1.0: must be >= 0"),
    ({"level_prior": 2.0}, r"adaptive.kwargs.level_prior: not a setting of the 'informative' controller"),
    ({"target": "high"}, r"adaptive.kwargs.target"),
])
def test_bad_settings_are_refused_in_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match) as e:
        make_controller("informative", K=8, profile=planted(), group_size=G, **kwargs)
    assert "\n" not in str(e.value)


def test_without_a_profile_it_is_refused_with_what_to_do():
    with pytest.raises(ConfigError, match="needs a level profile") as e:
        make_controller("informative", K=8)
    assert "data.profile" in (e.value.hint or "")


def test_a_controller_that_needs_no_profile_keeps_its_own_setting_of_that_name():
    from rag_curriculum.train.controllers import Controller, register_controller

    class Named(Controller):
        name = "test-named-profile"

        def __init__(self, *, K: int, seed: int = 0, profile: str = "flat") -> None:
            super().__init__(K=K, seed=seed)
            self.profile = profile

    register_controller("test-named-profile", Named, overwrite=True)
    assert make_controller("test-named-profile", K=3, profile="steep").profile == "steep"
    with pytest.raises(ConfigError, match="adaptive.kwargs.profile: not a setting of the 'mastery' controller"):
        make_controller("mastery", K=3, profile="steep")
