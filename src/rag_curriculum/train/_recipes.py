"""Training recipes: Hydra YAML files under ``recipes/train/``, composed with command-line overrides into a
:class:`~rag_curriculum.train._config.TrainConfig` by the one config layer (:mod:`rag_curriculum.config`), and the
run files saved with a run.

The recipes travel with the package (the wheel force-includes ``recipes/`` as ``rag_curriculum/recipes``); an
editable install reads the repository's ``recipes/``. Each curriculum recipe is a few lines on a shared
``_base.yaml`` (Hydra defaults list). A recipe may also be a path to a YAML file of one's own, whose defaults
list can name the shipped ``_base``.

Overrides follow Hydra's grammar (``key=value``, ``+key=value`` to add, ``~key`` to delete); ``grpo.*`` and
``*.kwargs.*`` may name any key, present in the recipe or not (any ``GRPOConfig`` field, any reward argument).

>>> "rag-rl-min-max" in list_recipes()
True
>>> cfg = compose_train_config("rag-rl-linear", ["dataset=hotpotqa", "grpo.max_steps=3"])
>>> cfg.curriculum, cfg.data.shards, cfg.grpo["max_steps"], cfg.grpo["beta"]
('linear', 'outputs/hotpotqa-linear', 3, 0.01)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import config
from .._plumbing import atomic_write_bytes
from ..shards import relative_path, shared_path, write_json
from ._config import TrainConfig

TRAIN = "train"
BASE = "_base"
DEFAULT_RECIPE = config.KINDS[TRAIN].default or "rag-rl-min-max"
CONFIG_FILE = "train_config.yaml"
PLAN_FILE = "train_plan.json"


def recipes_root() -> Path:
    """The folder holding the shipped recipes (``train/``, ``build/``, ``eval/``, ``accelerate/``, ``verl/``)."""
    return config.recipes_root()


def train_recipes_dir() -> Path:
    return config.recipes_root() / TRAIN


def list_recipes() -> list[str]:
    """Names of the runnable training recipes (every YAML in ``recipes/train`` but the shared ``_base``)."""
    return config.list_recipes(TRAIN)


def recipe_path(recipe: str) -> Path:
    """The YAML file of a recipe name (``rag-rl-min-max``) or path (``my/recipe.yaml``)."""
    return config.recipe_path(TRAIN, recipe)


def compose_train_config(recipe: str | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Compose a recipe (name or path; default ``rag-rl-min-max``) with Hydra overrides into a TrainConfig.

    Args:
        recipe: a shipped recipe's name (``curriculum train --list``) or a YAML file's path; None: the default.
        overrides: Hydra overrides, as on the command line (``grpo.learning_rate=2e-6``, ``data.shards=DIR``).

    Returns:
        The config, bound and type-checked (:meth:`TrainConfig.validate` checks the rest when the run starts).

    Raises:
        RecipeError: a recipe that cannot be found or composed (with a "did you mean").
        ConfigError: an unknown key or a value of the wrong type or range (a :class:`SettingError`).

    Examples:
        >>> from rag_curriculum.train import compose_train_config
        >>> cfg = compose_train_config("rag-rl-min-max", ["grpo.learning_rate=2e-6"])
        >>> cfg.data.shards, cfg.grpo["learning_rate"], cfg.batch.prompts_per_step
        ('outputs/musique-min-max', 2e-06, 42)
    """
    args = [*([f"recipe={recipe}"] if recipe else []), *overrides]
    return config.resolve(TrainConfig, TRAIN, args)


def config_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what is printed and saved with the run)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(cfg.to_dict()))


def save_run_files(cfg: TrainConfig, output_dir: str | Path, *, plan: Mapping[str, Any],
                   overrides: Sequence[str] = ()) -> Path:
    """Write ``train_config.yaml`` (resolved, with the command-line overrides in a header) and
    ``train_plan.json`` (the batch mapping, tail and order facts) into ``output_dir``."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = f"# recipe: {cfg.recipe}\n# overrides: {json.dumps(list(overrides))}\n"
    atomic_write_bytes(out / CONFIG_FILE, (header + config_yaml(cfg)).encode("utf-8"))
    write_json(out / PLAN_FILE, dict(plan))
    return out / CONFIG_FILE


CARD_FILE = "README.md"


def saved_model(output_dir: str | Path, *, save_final: bool) -> Path | None:
    """The folder of a run's model as it stands: ``output_dir`` itself once the final model is saved there
    (``run.save_final``), else its newest ``checkpoint-N/`` holding a model; None before either exists.

    >>> saved_model("no/such/run", save_final=True) is None
    True
    """
    out = Path(output_dir)
    if save_final and (out / "config.json").exists():
        return out
    steps = [(int(p.name.split("-", 1)[1]), p) for p in out.glob("checkpoint-*")
             if p.name.split("-", 1)[1].isdigit() and (p / "config.json").exists()]
    return max(steps)[1] if steps else None


def _base_model_text(base: str, plan: Mapping[str, Any]) -> str:
    """The card's base model: the reference as given, and what it is (a GGUF file with its SHA-256, a local
    folder, else a Hub id)."""
    digest = plan.get("gguf_sha256")
    if digest:
        return f"`{shared_path(base)}` (a GGUF file, SHA-256 `{digest}`, converted into a model folder)"
    return f"`{shared_path(base)}`" + (" (a local folder)" if Path(str(base)).expanduser().is_dir() else "")


def model_card(cfg: TrainConfig, plan: Mapping[str, Any], manifest: Mapping[str, Any], *, step: int,
               versions: Mapping[str, str] | None = None) -> str:
    """The run's model card (``README.md`` in ``run.output_dir``, rewritten at every checkpoint and at the end):
    the base model, the data (rows, datasets, schedule, K, fingerprint), the recipe, the curriculum and batch, the
    rewards, the search agent or controller when there is one, and the steps done of the run's. Written instead of
    TRL's generic card, which names no base model for a local path and nothing of the curriculum.

    >>> cfg = compose_train_config("cpu-tiny")
    >>> text = model_card(cfg, {"total_steps": 3, "prompts_per_step": 2, "num_generations": 2, "num_rows": 6},
    ...                   {"config": {"schedule": "min-max"}, "K": {"musique": 3}}, step=3)
    >>> "| base model | `trl-internal-testing/tiny-Qwen2ForCausalLM-2.5` |" in text, "| steps | 3 of 3 |" in text
    (True, True)
    """
    built = manifest.get("config") or {}
    schedule = built.get("schedule") or cfg.curriculum or "?"
    Ks = manifest.get("K") or {}
    datasets = ", ".join(f"{d} (K = {k})" for d, k in sorted(Ks.items())) or "?"
    base = cfg.model.name_or_path
    local = Path(str(base)).expanduser().exists()
    model = saved_model(cfg.run.output_dir, save_final=bool(cfg.run.save_final))
    front = ["---", "library_name: transformers", "pipeline_tag: text-generation",
             *([f"base_model: {base}"] if not local else []),
             "tags:", "- rag-curriculum", "- curriculum-learning", "- grpo", "- trl", "---", ""]
    total = plan.get("total_steps")
    rows = f"{plan['num_rows']} rows" if plan.get("num_rows") is not None else "rows"
    fingerprint = plan.get("shards_fingerprint")
    data = (f"`{plan.get('shards') or shared_path(cfg.data.shards)}`: {rows} of {datasets}, built with the `{schedule}` "
            f"schedule" + (f" (fingerprint `{fingerprint}`)" if fingerprint else ""))
    order = "in curriculum order" if not cfg.grpo.get("shuffle_dataset") else "shuffled"
    rewards = ", ".join(f"`{r.name}` ({r.weight:g})" for r in cfg.rewards)
    table = [
        ("base model", _base_model_text(str(base), plan)),
        ("data", data),
        ("recipe", f"`{cfg.recipe or DEFAULT_RECIPE}` (resolved: `{CONFIG_FILE}`; batch plan: `{PLAN_FILE}`)"),
        ("curriculum", f"`{schedule}`, {order}; {plan.get('prompts_per_step', '?')} prompts x "
                       f"{plan.get('num_generations', '?')} generations per step"),
        ("rewards", rewards),
    ]
    if cfg.agent.retriever is not None:
        r = plan.get("retriever") or {}
        fp = r.get("fingerprint") or (r.get("index") or {}).get("fingerprint")
        table.append(("search agent", f"template `{cfg.agent.template}`, protocol `{cfg.agent.protocol}`, top "
                      f"{cfg.agent.top_k}, {cfg.agent.max_turns} turns; index fingerprint `{str(fp)[:16]}`"))
    if cfg.adaptive.controller is not None:
        table.append(("adaptive", f"controller `{cfg.adaptive.controller}` on {cfg.adaptive.success}"))
    table.append(("steps", f"{step} of {total}" if total is not None else str(step)))
    if versions:
        table.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items())))
    if model is None:
        where = ("No model is saved yet: a checkpoint comes every `grpo.save_steps` steps"
                 + (", and the final model into this folder when training ends." if cfg.run.save_final
                    else "; `run.save_final=true` saves the final model into this folder when training ends."))
        use: list[str] = [where, ""]
    else:
        final = model == Path(cfg.run.output_dir)
        what = ("The final model is in this folder" if final else
                f"The model is `{model.name}/`, the newest checkpoint (this run does not save a final model into "
                "its folder: `run.save_final=false`)")
        # its path from where the run started when that is inside or beside it, else from this folder: never the
        # machine's (a card is shared)
        here = relative_path(model, os.getcwd())
        path = here if here is not None else ("." if final else model.name)
        where = "where `curriculum train` ran" if here is not None else "this folder"
        text = (f"{what}; `{path}` is its path from {where}. A base model without a chat template is prompted in the "
                "completion style (docs/base-models.md).")
        use = [text, "", "```python", "from transformers import pipeline", "",
               f'generator = pipeline("text-generation", model="{path}")',
               'print(generator("Question: Which river flows through Paris?\\nFinal answer:", max_new_tokens=16, '
               'do_sample=False)[0]["generated_text"])', "```", ""]
    lines = [*front, f"# {cfg.run.name}", "",
             f"A GRPO run of the rag-curriculum toolkit on a {schedule} curriculum. The rows each step "
             "trained on are in `curriculum_steps.jsonl`; the checkpoints are `checkpoint-N/`.", "",
             "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in table], "", *use]
    return "\n".join(lines)
