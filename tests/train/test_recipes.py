"""Every shipped training recipe composes, reproduces the paper's settings, and binds to TRL's GRPOConfig; the
recipe machinery refuses what it cannot run; the `curriculum train` command prints and plans."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag_curriculum.train import (
    BatchError,
    RecipeError,
    check_recipe,
    compose_train_config,
    list_recipes,
)
from rag_curriculum.train._recipes import train_recipes_dir

ROOT = Path(__file__).resolve().parents[2]


def needs_trl() -> None:
    """Binding TRL's GRPOConfig imports TRL and torch (the [train] extra): skip, not fail, without them."""
    pytest.importorskip("torch")
    pytest.importorskip("trl")
PAPER_RECIPES = ["rag-rl-base-answerable", "rag-rl-base-unanswerable", "rag-rl-linear", "rag-rl-max",
                 "rag-rl-min-max"]
#: On the paper's base settings too, with the curriculum the model's success steers (docs/adaptive.md).
ADAPTIVE_RECIPES = ["rag-rl-adaptive"]
#: CRAFT's GRPO settings on its craft-v1 trace format (docs/craft.md).
CRAFT_RECIPES = ["craft-v1"]
#: Search agents on the Search-R1 protocol (docs/search-agents.md): Search-R1's settings and a CPU one.
SEARCH_RECIPES = ["search-r1", "search-r1-cpu-tiny", "search-learn"]
#: VERITAS's faithfulness reward on the search agent (docs/veritas.md): the paper's settings and a CPU one.
VERITAS_RECIPES = ["veritas", "veritas-cpu-tiny", "veritas-learn"]
#: GlobalRAG's plan rewards on the search agent (docs/globalrag.md): the paper's settings and a CPU one.
GLOBALRAG_RECIPES = ["globalrag", "globalrag-cpu-tiny"]


def test_recipes_found_and_counted():
    found = list_recipes()
    assert found == sorted(["cpu-tiny", "cpu-learn", "cpu-gemma", *PAPER_RECIPES, *ADAPTIVE_RECIPES, *CRAFT_RECIPES, *SEARCH_RECIPES,
                            *VERITAS_RECIPES, *GLOBALRAG_RECIPES])
    assert len(found) == 13 + len(VERITAS_RECIPES) + len(GLOBALRAG_RECIPES)
    # Nothing in the folder escapes the listing but the shared base.
    yamls = sorted(p.stem for p in train_recipes_dir().glob("*.yaml"))
    assert yamls == ["_base", *sorted(["cpu-tiny", "cpu-learn", "cpu-gemma", *PAPER_RECIPES, *ADAPTIVE_RECIPES, *CRAFT_RECIPES, *SEARCH_RECIPES,
                                       *VERITAS_RECIPES, *GLOBALRAG_RECIPES])]
    assert train_recipes_dir() == ROOT / "recipes" / "train"


@pytest.mark.parametrize("name", PAPER_RECIPES + ADAPTIVE_RECIPES)
@pytest.mark.parametrize("num_processes", [1, 7])
def test_recipe_resolves_and_binds_to_grpo_config(name, num_processes):
    needs_trl()
    cfg = compose_train_config(name)
    assert cfg.recipe == name
    assert cfg.curriculum == name.removeprefix("rag-rl-")
    if name.startswith("rag-rl-base-"):  # the answerable/ or unanswerable/ output of `curriculum partition`
        assert cfg.data.shards == f"outputs/musique-partition/{cfg.curriculum.removeprefix('base-')}"
    else:  # where `curriculum build recipe=musique-<curriculum>` writes
        assert cfg.data.shards == f"outputs/musique-{cfg.curriculum}"
    args, plan = check_recipe(cfg, num_processes=num_processes, num_rows=5000)
    # RAG-RL 4.2 / appendix B.
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-7B-Instruct"
    assert args.learning_rate == 1e-6
    assert str(args.lr_scheduler_type.value if hasattr(args.lr_scheduler_type, "value")
               else args.lr_scheduler_type) == "constant"
    assert args.warmup_steps == 0 and args.max_steps == -1
    assert args.beta == 0.01 and args.epsilon == 0.2
    # the paper's GRPO KL is Schulman's k3 (axolotl on the TRL of early 2025, and verl's low_var_kl); TRL 1.16
    # multiplies it by the importance ratio by default (trl#6503), which changes the KL gradient even on-policy
    assert args.use_bias_correction_kl is False
    assert args.epsilon_high is None  # symmetric clipping (TRL uses epsilon for both sides)
    assert args.loss_type == "grpo" and args.scale_rewards == "group"  # TRL 1.16's defaults are dapo / group
    assert args.temperature == 1.0 and args.top_p == 1.0
    assert args.num_generations == 7 and args.max_completion_length == 800
    assert args.num_train_epochs == 1 and args.num_iterations == 1
    assert args.use_vllm is True
    assert cfg.grpo["bf16"] is True  # bound with bf16 off only where there is no GPU
    assert args.shuffle_dataset is False and args.remove_unused_columns is False
    assert plan.prompts_per_step == 42 and plan.completions_per_step == 294
    assert plan.num_processes == num_processes
    assert args.per_device_train_batch_size == 7
    assert args.gradient_accumulation_steps == {1: 42, 7: 6}[num_processes]
    assert plan.steps_per_epoch == 119 and plan.unseen_rows == 5000 - 119 * 42
    assert [r.name for r in cfg.rewards] == ["rag-rl"]
    assert {k: cfg.rewards[0].kwargs[k] for k in ("gamma_answer", "gamma_correct", "gamma_incorrect")} == {
        "gamma_answer": 5.0, "gamma_correct": 5.0, "gamma_incorrect": 2.0}
    assert args.reward_weights == [1.0]


@pytest.mark.parametrize("name", PAPER_RECIPES)
def test_recipe_header_shows_launch_command(name):
    text = (train_recipes_dir() / f"{name}.yaml").read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any(f"curriculum train recipe={name}" in line for line in header)
    assert any("accelerate launch" in line for line in header)


def test_paper_batch_impossible_on_8_training_processes():
    cfg = compose_train_config("rag-rl-min-max", ["batch.num_processes=8"])
    with pytest.raises(BatchError, match="294 completions .* 8 process"):
        check_recipe(cfg)


def test_overrides_any_grpo_field_and_reward_kwargs():
    cfg = compose_train_config("rag-rl-max", ["dataset=hotpotqa", "grpo.max_steps=3", "grpo.top_p=0.9",
                                              "rewards.0.kwargs.gamma_format=0.5", "batch.prompts_per_step=null"])
    assert cfg.data.shards == "outputs/hotpotqa-max"
    assert cfg.run.output_dir == "outputs/train/rag-rl-hotpotqa-max"
    assert cfg.grpo["max_steps"] == 3 and cfg.grpo["top_p"] == 0.9
    assert cfg.rewards[0].kwargs["gamma_format"] == 0.5
    assert cfg.batch.prompts_per_step is None


def test_recipe_errors_are_helpful(tmp_path):
    with pytest.raises(RecipeError, match="did you mean 'rag-rl-min-max'"):
        compose_train_config("rag-rl-minmax")
    with pytest.raises(RecipeError, match="shared base"):
        compose_train_config("_base")
    with pytest.raises(RecipeError, match="did you mean 'data.shards'"):
        compose_train_config("rag-rl-max", ["+data.shard=x"])
    with pytest.raises(RecipeError, match="max_rows"):
        compose_train_config("rag-rl-max", ["data.max_rows=many"])
    needs_trl()
    cfg = compose_train_config("rag-rl-max", ["grpo.shufle_dataset=false"])
    with pytest.raises(ValueError, match="did you mean grpo.shuffle_dataset"):
        check_recipe(cfg)


def test_shuffle_is_refused_when_binding():
    from rag_curriculum.train import CurriculumOrderError

    with pytest.raises(CurriculumOrderError, match="shuffle_dataset"):
        check_recipe(compose_train_config("rag-rl-linear", ["grpo.shuffle_dataset=true"]))


def test_own_recipe_builds_on_shipped_base(tmp_path):
    needs_trl()
    mine = tmp_path / "my-curriculum.yaml"
    mine.write_text("defaults:\n  - _base\n  - _self_\ncurriculum: my-schedule\ngrpo:\n  learning_rate: 3.0e-6\n")
    cfg = compose_train_config(str(mine), ["dataset=2wikimultihopqa"])
    assert cfg.data.shards == "outputs/2wikimultihopqa-my-schedule"
    assert cfg.grpo["learning_rate"] == 3e-6 and cfg.grpo["beta"] == 0.01
    check_recipe(cfg, num_processes=1)


@pytest.mark.slow
def test_importing_the_package_imports_no_heavy_library():
    code = ("import sys, rag_curriculum, rag_curriculum.train, rag_curriculum._cli.train;"
            "bad = [m for m in ('torch', 'transformers', 'trl', 'vllm') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_python_m_train_is_the_train_command_alone(tmp_path):
    """``python -m rag_curriculum.train`` (accelerate launch -m, torchrun -m) runs `curriculum train`, reached
    through the `curriculum` entry point (the train package does not import the CLI): its usage names the
    ``-m`` form, and a usage error or an unknown recipe exits 2 with the CLI's message, no traceback."""
    def run(*args: str) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "rag_curriculum.train", *args], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
        return done.returncode, " ".join((done.stdout + done.stderr).split())

    code, said = run("--bogus")
    assert code == 2 and "Usage: python" in said and "-m rag_curriculum.train [OPTIONS] [args]..." in said
    assert "No such option: --bogus" in said
    code, said = run("recipe=no-such-recipe")
    assert code == 2 and "error: unknown train recipe 'no-such-recipe'" in said and "rag-rl-min-max" in said
    assert "Traceback" not in said


def _app():
    import typer

    from rag_curriculum._cli import train as train_cli

    app = typer.Typer()
    train_cli.register(app)
    return app


def test_cli_print_config_and_list():
    runner = CliRunner()
    res = runner.invoke(_app(), ["recipe=rag-rl-linear", "dataset=hotpotqa", "--print-config"])
    assert res.exit_code == 0, res.output
    assert "curriculum: linear" in res.output and "shards: outputs/hotpotqa-linear" in res.output
    res = runner.invoke(_app(), ["--list"])
    assert res.exit_code == 0, res.output
    for name in PAPER_RECIPES:
        assert name in res.output
    res = runner.invoke(_app(), ["recipe=rag-rl-linear", "grpo"])
    assert res.exit_code != 0 and "unexpected argument" in res.output


@pytest.mark.slow
def test_cli_dry_run_plans_the_batch(tmp_path, shared_data):
    needs_trl()
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    runner = CliRunner()
    # shards the dry run cannot read are refused as the real run refuses them
    res = runner.invoke(_app(), ["recipe=rag-rl-min-max", f"data.shards={tmp_path / 'none'}",
                                 "batch.num_processes=7", "--dry-run"])
    assert res.exit_code == 1 and "no such shard directory" in res.output, res.output
    shards = tmp_path / "mm"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 42, K=3)], schedule="min-max",
                                 out=str(shards), seed=0), command="t")
    res = runner.invoke(_app(), ["recipe=rag-rl-min-max", f"data.shards={shards}", "batch.num_processes=7",
                                 "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "binds to trl.GRPOConfig" in res.output
    assert "294" in res.output
    res = runner.invoke(_app(), ["recipe=rag-rl-min-max", f"data.shards={shards}", "batch.num_processes=8",
                                 "--dry-run"])
    assert res.exit_code == 1 and "294" in res.output


ACCELERATE = ["single-gpu", "zero2-7gpu", "zero2-8gpu", "zero2-multinode", "zero2-offload-1gpu"]


@pytest.mark.parametrize("name", ACCELERATE)
def test_accelerate_configs_launch_the_paper_batch(name):
    """Each launcher config runs from its header, and the batch it launches is one TRL can make."""
    needs_trl()
    import json
    import re

    import yaml

    assert sorted(p.stem for p in (ROOT / "recipes" / "accelerate").glob("*.yaml")) == ACCELERATE
    path = ROOT / "recipes" / "accelerate" / f"{name}.yaml"
    text = path.read_text()
    conf = yaml.safe_load(text)
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert f"accelerate launch --config_file recipes/accelerate/{name}.yaml" in header
    assert "-m rag_curriculum.train" in header and "recipe=rag-rl-" in header
    deepspeed_file = (conf.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if deepspeed_file:  # the precision is the DeepSpeed file's, from the run's grpo.bf16 (the recipes: true)
        assert "mixed_precision" not in conf
        assert json.loads((ROOT / deepspeed_file).read_text())["bf16"] == {"enabled": "auto"}
    else:
        assert conf["mixed_precision"] == "bf16"
    prompts = re.search(r"batch\.prompts_per_step=(\d+)", header)
    overrides = [f"batch.num_processes={conf['num_processes']}"]
    if prompts:
        overrides.append(f"batch.prompts_per_step={prompts.group(1)}")
    if "vllm_mode=server" in header:
        assert "trl vllm-serve" in header
    _, plan = check_recipe(compose_train_config("rag-rl-min-max", overrides))
    assert plan.prompts_per_step == (int(prompts.group(1)) if prompts else 42)


def test_cli_dry_run_on_real_shards_reports_the_tail(tmp_path):
    needs_trl()
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    shards = tmp_path / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=50)], schedule="min-max",
                                 out=str(shards), seed=0))
    res = CliRunner().invoke(_app(), ["recipe=rag-rl-min-max", f"data.shards={shards}", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "curriculum_index 42..49 are never trained on" in " ".join(res.output.split())
    assert "steps per epoch" in res.output


def test_cli_dry_run_says_which_rows_a_short_run_never_reaches(tmp_path):
    """grpo.max_steps shorter than one pass: the min-max curriculum's hard half is never trained on, and the
    dry run says so (rows, curriculum_index span and levels), not only the sampler's dropped tail."""
    needs_trl()
    import re

    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    shards = tmp_path / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=100)], schedule="min-max",
                                 out=str(shards), seed=0))
    res = CliRunner().invoke(_app(), ["recipe=rag-rl-min-max", f"data.shards={shards}", "grpo.max_steps=1",
                                      "--dry-run"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert re.search(r"rows this run reaches\W+42\b", text)
    assert re.search(r"rows after its last step \(never trained on\)\W+42\b", text)
    assert "rows with curriculum_index 42..83 (levels {'1': 8, '20': 34}) are never reached" in text
    assert "max_steps=1 stops the run after 1 of the 2 steps of one pass: it trains on only rows 0..41" in text


def test_old_and_new_name_of_a_grpo_field_cannot_disagree():
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing and keeps the old name as an alias
    that loses to the new one: `grpo.gradient_checkpointing=false` on a recipe that sets activation_checkpointing
    would silently keep checkpointing on. Refused with the name to use; agreeing values are fine."""
    needs_trl()
    cfg = compose_train_config("rag-rl-max", ["grpo.gradient_checkpointing=false"])
    with pytest.raises(ValueError, match="grpo.activation_checkpointing"):
        check_recipe(cfg, num_processes=1)
    args, _ = check_recipe(compose_train_config("rag-rl-max", ["grpo.gradient_checkpointing=true"]), num_processes=1)
    assert args.activation_checkpointing is True
    args, _ = check_recipe(compose_train_config("rag-rl-max", ["grpo.activation_checkpointing=false"]),
                           num_processes=1)
    assert args.activation_checkpointing is False and args.gradient_checkpointing is False


def test_a_field_older_trl_lacks_is_dropped_when_it_asks_for_the_old_behaviour(monkeypatch):
    """use_bias_correction_kl=false asks for what TRLs without the field do anyway: binding there drops it instead
    of refusing the recipe; asking such a TRL for true is refused."""
    needs_trl()
    from rag_curriculum.train import _trl

    known = {k: v for k, v in _trl._grpo_fields().items() if k != "use_bias_correction_kl"}
    monkeypatch.setattr(_trl, "_grpo_fields", lambda: known)
    assert "use_bias_correction_kl" not in _trl.check_grpo_keys({"beta": 0.01, "use_bias_correction_kl": False})
    with pytest.raises(ValueError, match="use_bias_correction_kl is not a field"):
        _trl.check_grpo_keys({"use_bias_correction_kl": True})


def test_craft_v1_recipe_has_the_papers_settings():
    """CRAFT App. B / Table 6 where the paper gives them; the paper's "4 x 4 x 64" is 4 per device x 4 GPUs x 64."""
    needs_trl()
    cfg = compose_train_config("craft-v1")
    assert cfg.data.shards == "outputs/mixture-craft-v1"  # where `curriculum build recipe=mixture-craft-v1` writes
    assert [(r.name, r.weight, r.kwargs["output_format"], r.kwargs["normalize"]) for r in cfg.rewards] == [
        ("craft", 1.0, "craft-v1", False)]
    args, plan = check_recipe(cfg, num_processes=4, num_rows=20000)
    assert (args.learning_rate, args.warmup_steps, args.num_generations, args.max_completion_length) == (
        5e-6, 0.1, 4, 256)
    assert "cosine" in str(args.lr_scheduler_type).lower() and args.temperature == 1.0 and args.shuffle_dataset is False
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 64)
    assert plan.prompts_per_generation * args.num_generations == 1024
    # full CRAFT: the judge term through an override of the reward's kwargs
    judged = compose_train_config("craft-v1", [
        "+rewards.0.kwargs.judge={backend: openai, model: Qwen3-Max, backend_args: {base_url: 'http://x/v1'}}"])
    from rag_curriculum.train import reward_funcs_from_config

    (reward,), _ = reward_funcs_from_config([{"name": r.name, "kwargs": r.kwargs} for r in judged.rewards])
    assert reward.terms == ("format", "answer", "evidence", "judge") and reward._judge.model == "Qwen3-Max"


def test_the_model_cards_snippet_names_no_machine_path_for_a_run_outside_the_working_folder(tmp_path, monkeypatch):
    """A run folder neither inside nor beside the working folder: the card's loading snippet names the checkpoint
    from the run folder (where the card is), not the machine's absolute path; the base model under the home
    folder is named under ~."""
    from rag_curriculum.train._recipes import model_card

    run = tmp_path / "runs" / "x"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "config.json").write_text("{}")
    home, here = tmp_path / "home", tmp_path / "a" / "b" / "c"
    (home / "models" / "base").mkdir(parents=True)
    here.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    cfg = compose_train_config("cpu-tiny", [f"run.output_dir={run}", f"model.name_or_path={home / 'models' / 'base'}"])
    card = model_card(cfg, {"total_steps": 2, "shards": "outputs/x"}, {"config": {"schedule": "min-max"}}, step=2)
    assert 'model="checkpoint-2"' in card and "`checkpoint-2` is its path from this folder" in card
    assert "| base model | `~/models/base` (a local folder) |" in card
    assert str(tmp_path) not in card
