"""Every number that enters a reward is checked where it enters, on every route: a train recipe and its overrides
(before the recipe is bound), the Python API (``reward_funcs_from_config``, ``get_reward``), a reward's own
constants. NaN, an infinity, a weight whose weighted sum would overflow: refused in one line naming the recipe and
the key, never scored (a NaN weight made every sample's reward 0 under TRL's ``nansum``). ``curriculum profile``'s
recipe and ``--reward`` routes: ``tests/partition/test_profile.py``."""

from __future__ import annotations

import math

import pytest

from rag_curriculum.errors import ConfigError, UsageError
from rag_curriculum.rewards import get_reward, reward_entries
from rag_curriculum.train import compose_train_config, reward_funcs_from_config


@pytest.mark.parametrize(("override", "said"), [
    ("rewards.0.weight=nan", "rewards.0.weight = nan is not a finite number (NaN or infinite)"),
    ("rewards.0.weight=-inf", "rewards.0.weight = -inf is not a finite number (NaN or infinite)"),
    ("rewards.0.weight=1e7", "rewards.0.weight = 1e+07 is outside -1e+06..1e+06"),
    ("rewards.0.kwargs.gamma_answer=nan", "rewards.0.kwargs.gamma_answer = nan: not a finite number"),
])
def test_an_override_is_refused_where_it_enters_naming_the_recipe_and_key(override, said):
    with pytest.raises(UsageError) as e:
        compose_train_config("rag-rl-min-max", [override])
    assert str(e.value).startswith("recipe rag-rl-min-max and its overrides: ") and said in str(e.value)
    assert "\n" not in str(e.value)


def test_a_recipe_file_is_refused_naming_it(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("defaults: [rag-rl-min-max, _self_]\nrewards: [{name: rag-rl-answer}, {name: rag-rl, "
                      "weight: abc}]\n")
    with pytest.raises(UsageError, match=r"^recipe .*mine.yaml: rewards.1.weight = 'abc' is not a number \(a str\)"):
        compose_train_config(str(recipe))


@pytest.mark.parametrize("specs", [{"rag-rl": math.nan}, [{"name": "rag-rl", "weight": math.inf}],
                                   [{"name": "rag-rl", "weight": 1e308}, {"name": "rag-rl", "weight": 1e308}],
                                   [{"name": "rag-rl", "weight": "2"}]])
def test_the_python_api_refuses_what_the_recipe_does(specs):
    with pytest.raises(ConfigError, match=r"rewards\.(0|rag-rl)(\.weight)? = "):
        reward_funcs_from_config(specs)
    with pytest.raises(ConfigError):
        reward_entries(specs)


@pytest.mark.parametrize("kwargs", [{"gamma_answer": math.inf}, {"gamma_format": math.nan},
                                    {"gamma_answer": 1e308}])
def test_a_reward_built_with_a_number_that_is_not_finite_or_overflows_is_refused(kwargs):
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        get_reward("rag-rl", **kwargs)


def test_finite_weights_in_range_pass_as_they_were():
    assert reward_entries([{"name": "rag-rl", "weight": -1e6}, {"name": "rag-rl-format", "weight": 0.5}]) == [
        ("rag-rl", -1e6, {}), ("rag-rl-format", 0.5, {})]
    assert compose_train_config("rag-rl-min-max", ["rewards.0.weight=2.5"]).rewards[0].weight == 2.5
