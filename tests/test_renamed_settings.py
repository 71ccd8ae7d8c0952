"""Settings renamed so that one idea has one name (``top_k`` for passages per search, as the build's ``--top-k``;
``samples`` for samples per question, so that ``k`` never names both the samples and the level K): the old names
still work for one release, in recipes, ``key=value`` overrides, options and recorded configs, each with a warning
naming the new one."""

from __future__ import annotations

import warnings

import pytest
import yaml
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.config import bind, compose, read_renamed, recipe_path, renamed_fields
from rag_curriculum.evaluation._agent import AgentEvalConfig
from rag_curriculum.partition import PartitionConfig
from rag_curriculum.partition._profile import ProfileConfig
from rag_curriculum.train import compose_train_config
from rag_curriculum.train._config import AgentConfig


def test_each_renamed_field_names_its_old_name():
    assert renamed_fields(PartitionConfig) == {"k": "samples", "topk": "top_k"}
    assert renamed_fields(ProfileConfig) == {"k": "samples"}
    assert renamed_fields(AgentEvalConfig) == renamed_fields(AgentConfig) == {"topk": "top_k"}


def test_an_old_key_in_a_recipe_or_an_override_sets_the_new_field_with_a_warning():
    with pytest.warns(FutureWarning, match="'k' is now called 'samples'"):
        cfg = bind(PartitionConfig, {**compose("partition", "rag-rl-pass8"), "k": 4})
    assert cfg.samples == 4
    with pytest.warns(FutureWarning, match="'topk' is now called 'top_k'"):
        data = compose("partition", "rag-rl-pass8", ["topk=5"], schema=PartitionConfig)
    assert bind(PartitionConfig, data).top_k == 5


def test_an_old_nested_key_of_the_training_recipe_is_read(tmp_path):
    with pytest.warns(FutureWarning, match="'agent.topk' is now called 'agent.top_k'"):
        cfg = compose_train_config("search-r1-cpu-tiny", ["agent.topk=1"])
    assert cfg.agent.top_k == 1
    # a recipe of one's own, written with the old key, on the shipped base
    own = tmp_path / "mine.yaml"
    shipped = yaml.safe_load(recipe_path("train", "search-r1-cpu-tiny").read_text())
    shipped["agent"]["topk"] = shipped["agent"].pop("top_k") + 1
    own.write_text(yaml.safe_dump(shipped))
    with pytest.warns(FutureWarning, match="'topk' is now called 'top_k'"):
        assert compose_train_config(str(own)).agent.top_k == 3


def test_the_new_names_raise_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert compose_train_config("search-r1-cpu-tiny", ["agent.top_k=1"]).agent.top_k == 1
        assert bind(PartitionConfig, compose("partition", "rag-rl-pass8", ["samples=4"])).samples == 4


def test_the_old_option_is_read_as_the_new_one_with_a_warning_on_stderr():
    args = ["partition", "outputs/x", "--agent", "search-r1", "--retriever", "http://127.0.0.1:1/retrieve",
            "--backend", "scripted", "--model", "m", "--print-config"]
    r = CliRunner().invoke(app, [*args, "--topk", "2"])
    assert "--topk is now called --top-k" in r.output
    assert r.exit_code == 0 and "top_k: 2" in r.output, r.output
    r = CliRunner().invoke(app, [*args, "--top-k=2"])
    assert r.exit_code == 0 and "is now called" not in r.output and "top_k: 2" in r.output, r.output


def test_a_partition_recorded_with_the_old_name_still_merges(tmp_path):
    with pytest.warns(FutureWarning):
        recorded = read_renamed(PartitionConfig, {"shards": "x", "k": 3, "topk": 2}, "the recorded config")
    assert PartitionConfig(**recorded).samples == 3 and PartitionConfig(**recorded).top_k == 2


# -- the Python names: each constructor and function takes its old keyword, with a DeprecationWarning --------------
def _called_with_old_keyword(call, old: str, new: str):
    with pytest.warns(DeprecationWarning, match=rf"\({old}=\.\.\.\) is now called .*\({new}=\.\.\.\)"):
        return call()


def test_each_config_class_takes_its_old_keyword_and_attribute():
    from rag_curriculum.agents import RolloutConfig
    from rag_curriculum.train import WarmStartConfig

    assert _called_with_old_keyword(lambda: RolloutConfig(topk=1), "topk", "top_k").top_k == 1
    part = _called_with_old_keyword(lambda: PartitionConfig(shards="x", k=4), "k", "samples")
    assert part.samples == 4
    with pytest.warns(DeprecationWarning, match=r"PartitionConfig\.k is now called PartitionConfig\.samples"):
        assert part.k == 4
    assert _called_with_old_keyword(lambda: PartitionConfig(shards="x", topk=5), "topk", "top_k").top_k == 5
    assert _called_with_old_keyword(lambda: ProfileConfig(shards="x", k=2), "k", "samples").samples == 2
    assert _called_with_old_keyword(lambda: AgentEvalConfig(topk=6), "topk", "top_k").top_k == 6
    assert _called_with_old_keyword(lambda: AgentConfig(topk=7), "topk", "top_k").top_k == 7
    warm = _called_with_old_keyword(lambda: WarmStartConfig(shards="x", out="y", topk=2), "topk", "top_k")
    assert warm.top_k == 2
    with pytest.raises(TypeError, match="got both 'topk' and its new name 'top_k'"):
        RolloutConfig(topk=1, top_k=2)


def test_each_function_takes_its_old_keyword(monkeypatch):
    from rag_curriculum.methods.globalrag import _teacher
    from rag_curriculum.train import SearchEnvironment

    class Fixed:
        def search(self, queries, k):
            return [[] for _ in queries]

    env = _called_with_old_keyword(lambda: SearchEnvironment(Fixed(), topk=2), "topk", "top_k")
    assert env._top_k == 2
    seen = []
    monkeypatch.setattr(_teacher, "run_rollouts", lambda *a, config, **kw: seen.append(config) or [])
    _called_with_old_keyword(lambda: _teacher.teacher_plans([], None, Fixed(), None, model="m", topk=4),
                             "topk", "top_k")
    assert seen[0].top_k == 4


def test_the_new_python_names_raise_no_warning():
    from rag_curriculum.agents import RolloutConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RolloutConfig(top_k=1).top_k == PartitionConfig(shards="x", samples=1).samples == 1


@pytest.mark.parametrize("old, new, value", [("k", "samples", 4), ("topk", "top_k", 2)])
def test_a_recipe_giving_both_the_old_and_the_new_name_is_refused_naming_both(tmp_path, old, new, value):
    from rag_curriculum.errors import RecipeError

    own = tmp_path / "mine.yaml"
    shipped = yaml.safe_load(recipe_path("partition", "rag-rl-pass8").read_text())
    shipped.update({old: value, new: value + 1})
    own.write_text(yaml.safe_dump(shipped))
    with pytest.raises(RecipeError, match=f"gives both '{old}' and '{new}'"):
        compose("partition", str(own), schema=PartitionConfig)
    with pytest.raises(RecipeError, match=f"the overrides give both '{old}' and '{new}'"):
        compose("partition", "rag-rl-pass8", [f"{old}={value}", f"{new}={value + 1}"], schema=PartitionConfig)


def test_a_nested_old_and_new_name_in_one_recipe_is_refused(tmp_path):
    from rag_curriculum.errors import RecipeError

    own = tmp_path / "mine.yaml"
    shipped = yaml.safe_load(recipe_path("train", "search-r1-cpu-tiny").read_text())
    shipped["agent"]["topk"] = 1
    own.write_text(yaml.safe_dump(shipped))
    with pytest.raises(RecipeError, match="gives both 'agent.topk' and 'agent.top_k'"):
        compose_train_config(str(own))


def test_an_old_option_name_is_read_only_by_a_command_that_takes_the_new_one():
    """``serve --topk``: serve has no ``--top-k``, so its refusal names what was typed (not ``--top-k``);
    ``verl steps --topk 3`` reaches verl's command as typed and is refused there, never passed over."""
    r = CliRunner().invoke(app, ["serve", "--index", "x", "--topk", "3"])
    assert r.exit_code == 2 and "No such option: --topk" in r.output and "--top-k" not in r.output, r.output
    r = CliRunner().invoke(app, ["verl", "steps", "x", "--train-batch-size", "4", "--topk", "3"])
    assert r.exit_code == 2 and "--topk: not an option of this command" in r.output, r.output
