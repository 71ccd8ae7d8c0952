"""The profile's prediction refreshed from the rollouts: a Dirichlet posterior over each question's reward values
whose posterior-predictive informative probability equals enumerating every Polya-urn sequence of G draws, tends to
the profile's own (:func:`spread_probability`) as the prior's weight grows, and is the Beta-binomial's for a
pass/fail reward."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from rag_curriculum.difficulty.profile import (
    RewardPosterior,
    dirichlet_spread_probability,
    informative_probability,
    spread_probability,
)
from rag_curriculum.errors import ConfigError


def polya_urn(counts: dict[float, float], g: int, max_spread: float) -> float:
    """Every ordered sequence of g draws from the urn (each draw returns its ball with one more of its value),
    its probability multiplied out, the informative ones summed."""
    values = sorted(counts)
    total = 0.0
    for seq in itertools.product(values, repeat=g):
        urn, prob = dict(counts), 1.0
        for k, v in enumerate(seq):
            prob *= urn[v] / (sum(counts.values()) + k)
            urn[v] += 1
        if max(seq) - min(seq) > max_spread:
            total += prob
    return total


@pytest.mark.parametrize(("counts", "g", "t"), [
    ({0.0: 1, 1.0: 1}, 2, 0.0), ({0.0: 3, 1.0: 1}, 4, 0.0), ({-1.0: 2, 6.0: 1, 11.0: 2}, 3, 0.0),
    ({-1.0: 2, 6.0: 1, 11.0: 2}, 3, 5.0), ({-1.0: 2, 6.0: 1, 11.0: 2}, 4, 7.0), ({0.0: 0.5, 0.5: 1.5, 1.0: 2}, 3, 0.5),
    ({2.0: 4}, 3, 0.0),
])
def test_the_predictive_probability_equals_enumerating_the_polya_urn(counts, g, t):
    assert dirichlet_spread_probability(counts, g, t) == pytest.approx(polya_urn(counts, g, t), abs=1e-12)


def test_random_posteriors_match_the_urn():
    rng = random.Random(3)
    for _ in range(40):
        counts = {float(rng.choice([-1, 0, 0.5, 1, 2, 6, 11])): rng.choice([0.5, 1, 2, 3]) for _ in range(4)}
        g, t = rng.choice([2, 3, 4]), rng.choice([0.0, 0.5, 1.0, 5.0])
        assert dirichlet_spread_probability(counts, g, t) == pytest.approx(polya_urn(counts, g, t), abs=1e-12)


def test_a_heavy_prior_without_observations_tends_to_the_profiles_prediction():
    class Profile:
        rewards = {("a", 2): (11.0, 11.0, 6.0, -1.0, 1.0)}

    static = spread_probability(Profile.rewards[("a", 2)], 7, 4.5)
    gaps = [abs(RewardPosterior(Profile, prior_weight=w).predict("a", 2, 7, 4.5) - static) for w in (1, 100, 1e6)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-5
    assert gaps[0] > 0.01, "a prior of five samples is not the empirical distribution"


def test_a_pass_fail_reward_is_the_beta_binomials():
    # Beta(a, b): P(all G right) = a^(G) / (a + b)^(G); uniform Beta, G = 2: E[1 - p^2 - (1-p)^2] = 1/3
    assert dirichlet_spread_probability({0.0: 1, 1.0: 1}, 2) == pytest.approx(1 / 3)
    a, b, g = 3, 5, 4
    rising = lambda x: math.prod(Fraction(x + k) for k in range(g))  # noqa: E731
    same = (rising(a) + rising(b)) / rising(a + b)
    assert dirichlet_spread_probability({1.0: a, 0.0: b}, g) == pytest.approx(float(1 - same))
    # more observations at the same proportions: towards 1 - p^G - (1-p)^G, always below it (the posterior's spread
    # in p makes all-equal groups likelier)
    values = [dirichlet_spread_probability({1.0: 3 * n, 0.0: 5 * n}, g) for n in (1, 10, 1000)]
    assert values[0] < values[1] < values[2] < informative_probability(3 / 8, g)
    assert values[2] == pytest.approx(informative_probability(3 / 8, g), abs=1e-3)


def test_observed_groups_update_the_posterior_and_new_values_become_categories():
    class Profile:
        rewards = {("a", 1): (1.0, 1.0, 1.0, 1.0)}  # the profile saw "a" always right

    post = RewardPosterior(Profile)
    assert post.predict("a", 1, 4) == 0.0
    post.observe("a", 1, [1.0, 0.0, float("nan"), 0.0])  # the model moved: wrong twice, one unscored
    assert post.counts("a", 1) == {1.0: 5.0, 0.0: 2.0}
    assert post.predict("a", 1, 4) == pytest.approx(dirichlet_spread_probability({1.0: 5, 0.0: 2}, 4))
    assert post.predict("a", 1, 4) > 0.5
    assert post.predict("b", 1, 4) is None and post.predict("a", 2, 4) is None, "no prior, nothing observed"
    light = RewardPosterior(Profile, prior_weight=0.25)
    assert light.counts("a", 1) == {1.0: 1.0}
    with pytest.raises(ConfigError):
        RewardPosterior(Profile, prior_weight=-1)
    assert dirichlet_spread_probability({}, 4) == 0.0 and dirichlet_spread_probability({1.0: 2, 0.0: 1}, 1) == 0.0
