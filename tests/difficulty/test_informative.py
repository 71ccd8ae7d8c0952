"""The informative probability of a GRPO group from a question's sample rewards: equal to brute-force enumeration of
every group of G draws on planted reward distributions (discrete, continuous, tolerance 0 and above); the closed
form 1 - p^G - (1-p)^G for a pass/fail reward; and a profile's per-row and per-schedule predictions built on it."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from rag_curriculum.difficulty.profile import (
    LevelProfile,
    informative_probability,
    level_intervals,
    spread_probability,
)


def brute_force(values: list[float], g: int, max_spread: float) -> float:
    """Every ordered group of g indices into the samples (each equally likely: draws with replacement), counted."""
    hits = sum(1 for group in itertools.product(values, repeat=g) if max(group) - min(group) > max_spread)
    return hits / len(values) ** g


# RAG-RL totals (answer 5 x EM + citation 5 x recall - 2 x wrong + format +1 / -1), a continuous reward, ties
PLANTED = [
    [11.0, 11.0, 6.0, -1.0, 1.0],
    [-1.0, -1.0, -1.0, -1.0],
    [3.5, -1.0, 3.5, 6.0, 8.5, 3.5],
    [0.13, 0.52, 0.51, 0.98, 0.2],
    [2.0],
    [0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0],
]


@pytest.mark.parametrize("values", PLANTED)
def test_the_exact_probability_equals_enumerating_every_group(values):
    for max_spread in (0.0, 0.01, 0.5, 1.0, 2.5, 5.0, 100.0):
        for g in (1, 2, 3, 4):
            assert spread_probability(values, g, max_spread) == pytest.approx(
                brute_force(values, g, max_spread), abs=1e-12), (max_spread, g)


def test_random_continuous_and_discrete_distributions_match_enumeration():
    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(1, 6)
        if rng.random() < 0.5:
            values = [rng.uniform(-3, 12) for _ in range(n)]
        else:
            values = [float(rng.choice([-1, 1, 3.5, 6, 11])) for _ in range(n)]
        g, t = rng.randint(2, 5), rng.choice([0.0, rng.uniform(0, 6)])
        assert spread_probability(values, g, t) == pytest.approx(brute_force(values, g, t), abs=1e-12), (values, g, t)


def test_a_window_exactly_max_spread_wide_is_not_informative_as_in_the_dynamic_sampler():
    # the sampler keeps a group when max - min > max_spread: a spread of exactly 2.0 at max_spread 2.0 is dropped
    assert spread_probability([1.0, 3.0], 2, 2.0) == 0.0
    assert spread_probability([1.0, 3.0], 2, 1.999) == pytest.approx(0.5)


def test_tolerance_zero_is_one_minus_the_sum_of_q_to_the_g():
    values = [4.0, 4.0, 4.0, -1.0, 6.0, 6.0]
    q = [3 / 6, 1 / 6, 2 / 6]
    assert spread_probability(values, 7) == pytest.approx(1 - sum(x ** 7 for x in q))


def test_a_pass_fail_reward_gives_the_closed_form():
    for c in range(9):
        samples = [4.0] * c + [-1.0] * (8 - c)  # RAG-RL's total when only the answer varies
        p = c / 8
        for g in (1, 2, 7, 16):
            closed = 1 - p ** g - (1 - p) ** g if g > 1 else 0.0
            assert spread_probability(samples, g) == pytest.approx(closed, abs=1e-12)
            assert spread_probability(samples, g) == pytest.approx(informative_probability(p, g), abs=1e-12)
            assert spread_probability(samples, g, max_spread=4.99) == pytest.approx(closed, abs=1e-12)
            assert spread_probability(samples, g, max_spread=5.0) == 0.0


def test_nan_rewards_are_left_out_and_no_reward_is_never_informative():
    assert spread_probability([1.0, float("nan"), 2.0], 2) == pytest.approx(0.5)
    assert spread_probability([], 4) == 0.0


def profile_with_rewards() -> LevelProfile:
    rewards = {("a", 1): (11.0, 11.0, 6.0, -1.0), ("a", 4): (-1.0, -1.0, 1.0, -1.0),
               ("b", 1): (4.0, 4.0, 4.0, 4.0), ("b", 4): (4.0, -1.0, -1.0, -1.0)}
    rates = {("a", 1): 0.5, ("a", 4): 0.0, ("b", 1): 1.0, ("b", 4): 0.25}
    return LevelProfile(Path("p"), {"group_size": 4}, rates, [1, 4], ["musique"], None, rewards)


def test_a_rows_prediction_is_its_own_reward_distributions_interpolated_or_its_levels():
    prof = profile_with_rewards()
    a1, a4 = spread_probability([11, 11, 6, -1], 3), spread_probability([-1, -1, 1, -1], 3)
    assert prof.row_informative("a", 1, 3) == pytest.approx(a1)
    assert prof.row_informative("a", 2, 3) == pytest.approx(a1 * 2 / 3 + a4 / 3), "a third of the way to level 4"
    # the answer never varies at level 4 for "a" (pass rate 0), the citations do: the pass rate alone says 0
    assert informative_probability(0.0, 3) == 0.0 and prof.row_informative("a", 4, 3) > 0.4
    b4 = spread_probability([4, -1, -1, -1], 3)
    assert prof.row_informative("unseen", 4, 3) == pytest.approx((a4 + b4) / 2)
    rows = [("a", 1), ("b", 4), ("unseen", 1)]
    expected = (a1 + b4 + (a1 + 0.0) / 2) / 3
    assert prof.informative(rows, 3) == pytest.approx(expected)
    assert prof.informative(rows, 3, max_spread=4.5) == pytest.approx(
        sum(prof.row_informative(r, lv, 3, 4.5) for r, lv in rows) / 3)
    assert prof.row_informative("a", 1, 3, max_spread=4.5) == pytest.approx(spread_probability([11, 11, 6, -1], 3, 4.5))
    assert prof.level_reward(1) == pytest.approx((27 / 4 + 4) / 2)


def test_a_pass_fail_profile_predicts_the_closed_form():
    rates = {("a", 1): 0.5, ("a", 4): 0.25}
    prof = LevelProfile(Path("p"), {}, rates, [1, 4], ["musique"], None)
    assert not prof.has_rewards and prof.level_reward(1) is None
    assert prof.row_informative("a", 4, 7) == pytest.approx(1 - 0.25 ** 7 - 0.75 ** 7)
    assert prof.informative([("a", 1), ("a", 4)], 7) == pytest.approx(
        (informative_probability(0.5, 7) + informative_probability(0.25, 7)) / 2)


def test_a_target_on_the_informative_fraction_picks_the_most_informative_level():
    prof = profile_with_rewards()
    # by pass rate (target 0.5) "b" goes to level 4 (0.25 is nearer 0.5 than 1.0); by informative fraction as well
    assert prof.calibrated_level("b", 4)[0] == 4
    assert prof.calibrated_level("b", 4, informative=1.0)[0] == 4
    # "a": pass rate 0.5 at level 1; the informative fraction is higher at level 1 too (three distinct rewards)
    assert prof.calibrated_level("a", 4, informative=1.0)[0] == 1
    assert prof.calibrated_level("a", 4, informative=0.0)[0] == 4


def test_level_intervals_report_the_reward_its_components_and_the_pass_rates_fraction():
    rewards = {1: [[11.0, 6.0, -1.0], [4.0, 4.0, 4.0]], 4: [[-1.0, 1.0, -1.0], [-1.0, -1.0, -1.0]]}
    answer = {1: [[5.0, 5.0, 0.0], [5.0, 5.0, 5.0]], 4: [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]}
    out = level_intervals({1: [2 / 3, 1.0], 4: [0.0, 0.0]}, 2, rewards=rewards, components={"answer": answer},
                          resamples=100)
    assert out["1"]["reward"] == pytest.approx((16 / 3 + 4) / 2, abs=1e-6)
    assert out["1"]["informative"] == pytest.approx((spread_probability(rewards[1][0], 2) + 0.0) / 2, abs=1e-6)
    assert out["4"]["informative"] == pytest.approx(spread_probability([-1, 1, -1], 2) / 2, abs=1e-6)
    assert out["4"]["informative_pass_rate"] == 0.0 and out["4"]["components"]["answer"]["informative"] == 0.0
    assert out["1"]["components"]["answer"]["informative"] == pytest.approx(
        informative_probability(2 / 3, 2) / 2, abs=1e-6)
    lo, hi = out["1"]["informative_ci"]
    assert lo <= out["1"]["informative"] <= hi
