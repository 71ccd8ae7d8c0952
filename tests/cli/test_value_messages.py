"""A value a command cannot take is one line naming the key or option and what is wrong with the value: an override
whose value holds ``=`` (Hydra's grammar would say "mismatched input '='"), a mapping where a recipe has a list (its
cause no longer cut off after "while composing config:"), another command's name for an option, a count far beyond
any run (``verl layout`` with 10^18 prompts ended in a MemoryError)."""

from __future__ import annotations

import pytest
from support.cli_runs import one_error, run


@pytest.mark.parametrize(("args", "said", "hint"), [
    (["build", "recipe=musique-min-max", "n=a=b"],
     "override n=a=b: its value holds '=', which Hydra's override grammar cannot read unquoted", "n='a=b'"),
    (["train", "recipe=rag-rl-min-max", "data.shards=/data/run?tag=a", "--dry-run"],
     "override data.shards=/data/run?tag=a: its value holds '='", "data.shards='/data/run?tag=a'"),
    (["train", "recipe=rag-rl-min-max", "rewards={}", "--dry-run"],
     "override rewards={}: rewards is a list in the recipe, and the override gives a mapping", "as a list"),
    (["train", "recipe=rag-rl-min-max", "grpo=[1]", "--dry-run"],
     "override grpo=[1]: grpo is a mapping in the recipe, and the override gives a list", "as a mapping"),
])
def test_an_override_hydra_cannot_read_is_one_line_naming_it(args, said, hint):
    r = run(*args)
    line = one_error(r, 2)
    assert said in line, line
    assert hint in r.output.split("hint:", 1)[1], r.output


def test_a_recipe_that_gives_a_mapping_where_its_base_has_a_list_names_the_key(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("defaults: [rag-rl-min-max, _self_]\nrewards: {}\n")
    line = one_error(run("train", f"recipe={recipe}", "--dry-run"), 2)
    assert line.endswith("rewards is a mapping in mine.yaml and a list in rag-rl-min-max, which it builds on (Hydra "
                         "cannot merge the two)"), line
    from rag_curriculum.errors import RecipeError
    from rag_curriculum.partition import ProfileConfig

    with pytest.raises(RecipeError, match="rewards is a mapping in mine.yaml and a list in rag-rl-min-max"):
        ProfileConfig(shards="x", out=str(tmp_path / "o"), backend="scripted", recipe=str(recipe)).resolve()


@pytest.mark.parametrize(("command", "given", "own"), [
    ("partition", "--samples", "--pass-at"),  # profile's name for it
    ("profile", "--pass-at", "--samples"),  # partition's name for it
])
def test_another_commands_name_for_an_option_is_answered_with_this_ones(command, given, own, tmp_path):
    r = run(command, given, "8", tmp_path)
    assert r.exit_code == 2
    assert f"No such option: {given} (this command's name for it is {own})" in r.output, r.output


@pytest.mark.parametrize(("flags", "said"), [
    (["--prompts", "1000000000000000000", "--gpus-per-node", "8"],
     "PROMPTS_PER_STEP=1000000000000000000: more than 1,000,000,000"),
    (["--prompts", "5", "--nnodes", "1000000000", "--gpus-per-node", "999999999"], "Choose fewer GPUs"),
])
def test_verl_layout_refuses_counts_beyond_any_run_in_one_line(flags, said):
    r = run("verl", "layout", *flags)
    assert r.exit_code == 2 and "Traceback" not in r.output and "MemoryError" not in r.output, r.output
    assert said in r.output, r.output
