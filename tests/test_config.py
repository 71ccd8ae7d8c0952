"""The one config layer (rag_curriculum.config): every command takes recipe=NAME + Hydra overrides + flags,
composed by one function (flags > recipe > dataclass defaults); unknown keys get a "did you mean" everywhere; the
options' help is the config fields' own; the shipped evaluation recipe is the paper's."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.config import (
    bind,
    compose,
    field_help,
    list_recipes,
    recipe_path,
    recipe_summary,
    resolve,
)
from rag_curriculum.curricula import BuildConfig
from rag_curriculum.errors import ConfigError, RecipeError
from rag_curriculum.evaluation import EvalConfig
from rag_curriculum.shards import read_manifest
from rag_curriculum.train import TrainConfig

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_lines(r) -> list[str]:
    return [line for line in r.output.splitlines() if line.startswith("error:")]


EXPECTED_EVAL_RECIPES = ["rag-rl"]


def test_eval_recipes_counted_and_paper_settings():
    assert list_recipes("eval") == EXPECTED_EVAL_RECIPES
    cfg = resolve(EvalConfig, "eval", ["recipe=rag-rl"])
    # RAG-RL 4.5: both settings, each response sampled 3 times; 800 completion tokens; vLLM
    assert cfg.m == 3 and cfg.max_tokens == 800 and cfg.backend == "vllm"
    assert cfg.data == ["eval/musique-distractor", "eval/musique-ideal"]
    assert [m.name for m in cfg.models] == ["base"] and cfg.models[0].path == "Qwen/Qwen2.5-7B-Instruct"
    # the two evaluation sets are where the shipped build recipes write them
    for setting in ("distractor", "ideal"):
        built = BuildConfig.from_dict(compose("build", f"musique-eval-{setting}", ["input=x.jsonl"]))
        assert built.out == f"eval/musique-{setting}" and built.setting == setting
    text = recipe_path("eval", "rag-rl").read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("curriculum eval recipe=rag-rl" in line for line in header)
    assert "4.5" in recipe_summary("eval", "rag-rl")


def test_recipes_command_lists_every_kind():
    r = invoke("recipes")
    assert r.exit_code == 0, r.output
    for name in ("musique-min-max", "rag-rl-min-max", "rag-rl"):
        assert name in r.output
    r = invoke("recipes", "eval")
    assert r.exit_code == 0 and "rag-rl" in r.output and "musique-min-max" not in r.output


def _script(sets, path):
    """A scripted model: every question answered right, citing passage 1."""
    import pyarrow.parquet as pq

    script = {}
    for d in sets:
        for row in pq.read_table(d / "data" if (d / "data").is_dir() else d).to_pylist():
            ans = row["answers"][0]
            script[row["prompt"][-1]["content"]] = [
                f"<reasoning>\nr{j}\n</reasoning>\n<answer>\nFinal answer: {ans}\nSupporting passages: 1\n</answer>"
                for j in range(4)]
    path.write_text(json.dumps(script), encoding="utf-8")


@pytest.mark.slow
def test_eval_from_the_paper_recipe_with_overrides_and_flags(shared_data, tmp_path):
    sets = []
    for setting in ("distractor", "ideal"):
        out = tmp_path / "eval" / f"musique-{setting}"
        r = invoke("build", f"recipe=musique-eval-{setting}", f"input={MUSIQUE_DEV}", "n=6", f"out={out}",
                   "--no-progress")
        assert r.exit_code == 0, r.output
        sets.append(out)
    _script(sets, tmp_path / "script.json")
    run = tmp_path / "run"
    r = invoke("eval", "recipe=rag-rl", f"data=[{sets[0]},{sets[1]}]", f"out={run}", "limit=4", "plots=false",
               "temperature=0.5", "--model", f"scripted={tmp_path / 'script.json'}", "--backend", "scripted",
               "--samples", 2, "--no-progress")
    assert r.exit_code == 0, r.output
    saved = json.loads((run / "eval_config.json").read_text())
    saved = saved.get("config", saved)
    assert saved["m"] == 2  # the flag, over the recipe's m = 3
    assert saved["temperature"] == 0.5 and saved["limit"] == 4  # the overrides, over the recipe
    assert saved["max_tokens"] == 800 and saved["backend"] == "scripted"  # the recipe, and the flag
    assert [m["name"] for m in saved["models"]] == ["scripted"]  # --model replaces the recipe's models
    assert sorted(p.name for p in (run / "results" / "scripted").glob("*.parquet")) == [
        "musique-distractor.parquet", "musique-ideal.parquet"]


def test_flags_win_over_the_recipe_and_the_recipe_over_the_defaults(shared_data, tmp_path):
    out = tmp_path / "b"
    r = invoke("build", "recipe=musique-linear", f"input={MUSIQUE_TRAIN}", "n=20", "seed=2", f"out={out}",
               "--seed", 5, "--schedule", "max", "--no-progress")
    assert r.exit_code == 0, r.output
    config = read_manifest(out)["config"]
    assert config["seed"] == 5 and config["schedule"] == "max"  # flags over the recipe and its overrides
    assert config["batch_prompts"] == 42  # the recipe over the dataclass default (None)
    assert BuildConfig.__dataclass_fields__["batch_prompts"].default is None
    # the same in Python, for every kind
    cfg = resolve(EvalConfig, "eval", ["recipe=rag-rl", "m=4", "seed=1"], {"m": 7, "seed": None, "limit": None})
    assert (cfg.m, cfg.seed, cfg.max_tokens) == (7, 1, 800)
    assert resolve(EvalConfig, "eval", [], {"m": 2}).m == 2  # no recipe: flags over the defaults
    assert resolve(EvalConfig, "eval", []).data == []


@pytest.mark.parametrize("args, words", [
    (["build", "recipe=musique-max", f"input={MUSIQUE_TRAIN}", "sead=1", "--no-progress"],
     ["'sead'", "did you mean 'seed'?"]),
    (["eval", "recipe=rag-rl", "samples=5"], ["'samples'", "did you mean 'm'?"]),  # the option's name
    (["eval", "recipe=rag-rl", "max_token=5"], ["'max_token'", "did you mean 'max_tokens'?"]),
    (["train", "recipe=rag-rl-min-max", "run.nmae=x", "--dry-run"], ["'run.nmae'", "did you mean 'run.name'?"]),
])
def test_unknown_keys_get_did_you_mean_on_every_command(shared_data, args, words):
    r = invoke(*args)
    assert r.exit_code == 2, r.output  # a usage error
    lines = error_lines(r)
    assert len(lines) == 1, r.output
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "+" + args[-2 if args[-1].startswith("--") else -1].split("=")[0] not in r.output  # not Hydra's "+key"


def test_bind_refuses_unknown_keys_with_did_you_mean_for_every_config():
    for cls, data, words in [
        (BuildConfig, {"sources": [{"dataset": "musique"}], "shedule": "max"}, ["'shedule'", "'schedule'"]),
        (BuildConfig, {"sources": [{"dataset": "musique", "inptu": "x"}]}, ["sources[0]", "'input'"]),
        (EvalConfig, {"modles": []}, ["'modles'", "'models'"]),
        (EvalConfig, {"model": ["x"]}, ["'model'", "did you mean 'models'?"]),  # --model's key is models
        (BuildConfig, {"eval_set": ["x"]}, ["did you mean 'eval_sets'?"]),
        (TrainConfig, {"curriculum": "max", "bach": {}}, ["'bach'", "'batch'"]),
    ]:
        with pytest.raises(ConfigError) as e:
            bind(cls, data)
        for w in words:
            assert w in str(e.value), (w, str(e.value))
    with pytest.raises(ConfigError, match="needs dataset"):
        BuildConfig.from_dict({"sources": [{"input": "x"}]})
    cfg = EvalConfig.from_dict({"models": ["a=x/y", {"name": "b", "path": "z"}], "data": ["d"]})
    assert [(m.name, m.path) for m in cfg.models] == [("a", "x/y"), ("b", "z")]
    assert TrainConfig.from_dict({"curriculum": "max", "rewards": ["rag-rl-answer"]}).rewards[0].name == "rag-rl-answer"


def test_overrides_need_a_recipe_and_arguments_are_checked(shared_data):
    r = invoke("build", "seed=1", "-d", "musique", "-i", MUSIQUE_TRAIN)
    assert r.exit_code == 2 and "overrides need a recipe" in error_lines(r)[0]
    r = invoke("eval", "recipe=rag-rl", "oops")
    assert r.exit_code == 2 and "unexpected argument 'oops'" in error_lines(r)[0]
    with pytest.raises(RecipeError, match="did you mean 'rag-rl'"):
        resolve(EvalConfig, "eval", ["recipe=rag-lr"])


def test_option_help_is_the_config_fields_own():
    r = invoke("build", "--help")
    text = " ".join(r.output.replace("│", " ").split())
    for name in ("seed", "leakage", "rows_per_shard"):
        assert field_help(BuildConfig, name) in text, name
    r = invoke("eval", "--help")
    text = " ".join(r.output.replace("│", " ").split())
    assert field_help(EvalConfig, "m") in text and "[default: 3]" in text and "[default: 800]" in text
    sections = ("model", "data", "batch", "run", "adaptive", "agent")  # TrainConfig's nested configs: their fields carry the help
    for cls in (BuildConfig, EvalConfig, TrainConfig):
        for name, f in cls.__dataclass_fields__.items():
            assert f.metadata.get("help") or (cls is TrainConfig and name in sections), (cls.__name__, name)
