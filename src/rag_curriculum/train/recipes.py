"""Training recipes: Hydra YAML files under ``recipes/train/``, composed with command-line overrides into a
:class:`~rag_curriculum.train.config.TrainConfig`.

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

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import RecipeError  # noqa: F401
from .config import RewardSpec, TrainConfig

TRAIN = "train"
BASE = "_base"
DEFAULT_RECIPE = "rag-rl-min-max"
CONFIG_FILE = "train_config.yaml"
PLAN_FILE = "train_plan.json"


def recipes_root() -> Path:
    """The folder holding the shipped recipes (``train/``, ``build/``, ``accelerate/``, ``verl/``)."""
    from .._recipes import recipes_root as root

    try:
        return root()
    except FileNotFoundError as e:
        raise RecipeError(f"{e}: reinstall rag-curriculum (the wheel carries rag_curriculum/recipes) or run from "
                          "a checkout that has recipes/") from None


def train_recipes_dir() -> Path:
    return recipes_root() / TRAIN


def list_recipes() -> list[str]:
    """Names of the runnable training recipes (every YAML in ``recipes/train`` but the shared ``_base``)."""
    return sorted(p.stem for p in train_recipes_dir().glob("*.yaml") if not p.stem.startswith("_"))


def recipe_path(recipe: str) -> Path:
    """The YAML file of a recipe name (``rag-rl-min-max``) or path (``my/recipe.yaml``)."""
    if recipe.endswith((".yaml", ".yml")) or "/" in recipe or "\\" in recipe:
        path = Path(recipe).expanduser()
        if not path.is_file():
            raise RecipeError(f"recipe file {path} does not exist")
        return path.resolve()
    path = train_recipes_dir() / f"{recipe}.yaml"
    if recipe.startswith("_"):
        raise RecipeError(f"{recipe!r} is a shared base of the recipes, not a run; pick one of "
                          f"{', '.join(list_recipes())}")
    if not path.is_file():
        known = list_recipes()
        close = difflib.get_close_matches(recipe, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise RecipeError(f"unknown recipe {recipe!r}{hint} Known: {', '.join(known)} (or a path to a YAML file)")
    return path


_FREE_KEYS = re.compile(r"^(grpo\.|rewards\.\d+\.kwargs\.)")


def _hydra_overrides(overrides: Sequence[str]) -> list[str]:
    """``grpo.X=v`` becomes ``++grpo.X=v`` (add or override), so any GRPOConfig field can be set."""
    out = []
    for o in overrides:
        if _FREE_KEYS.match(o) and "=" in o:
            o = "++" + o
        out.append(o)
    return out


def compose_raw(recipe: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The recipe composed with Hydra (defaults list + overrides), as plain data, interpolations unresolved."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    path = recipe_path(recipe or DEFAULT_RECIPE)
    hydra_overrides = _hydra_overrides(overrides)
    shipped = train_recipes_dir()
    if path.parent != shipped:  # a recipe of one's own may build on the shipped base
        hydra_overrides.append(f"hydra.searchpath=[file://{shipped}]")
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(path.parent), job_name="curriculum-train"):
            composed = compose(config_name=path.stem, overrides=hydra_overrides)
    except Exception as e:  # Hydra's errors name the override or file at fault
        from .._recipes import _keys_at, unknown_key_message

        message = unknown_key_message(e, f"recipe {path.stem!r}",
                                      lambda parent: _keys_at(compose_raw(recipe, ()), parent), _schema_keys_at)
        raise RecipeError(message or f"recipe {path.stem!r}: {e}") from None
    return OmegaConf.to_container(composed, resolve=False)  # type: ignore[return-value]


def to_train_config(raw: Mapping[str, Any], *, recipe: str | None = None) -> TrainConfig:
    """Bind composed data to the :class:`TrainConfig` schema (types checked, interpolations resolved)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

    data = dict(raw)
    if recipe is not None:
        data["recipe"] = recipe
    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), data)
        plain = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except ConfigKeyError as e:
        key = str(getattr(e, "full_key", "") or "")
        raise RecipeError(f"unknown option {key!r}: {_first_line(e)}{_did_you_mean(key)}") from None
    except MissingMandatoryValue as e:
        key = str(getattr(e, "full_key", "") or "")
        raise RecipeError(f"{key} is not set: give it on the command line ({key}=...)") from None
    except OmegaConfBaseException as e:
        raise RecipeError(f"{getattr(e, 'full_key', '') or 'config'}: {_first_line(e)}") from None
    cfg = TrainConfig.from_dict(plain)  # type: ignore[arg-type]
    return cfg


def compose_train_config(recipe: str | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Compose a recipe (name or path; default ``rag-rl-min-max``) with Hydra overrides into a TrainConfig."""
    name = recipe or DEFAULT_RECIPE
    return to_train_config(compose_raw(name, overrides), recipe=name)


def config_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML (what is printed and saved with the run)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(cfg.to_dict()))


def save_run_files(cfg: TrainConfig, output_dir: str | Path, *, plan: Mapping[str, Any],
                   overrides: Sequence[str] = ()) -> Path:
    """Write ``train_config.yaml`` (resolved, with the command-line overrides in a header) and
    ``train_plan.json`` (the batch mapping, tail and order facts) into ``output_dir``."""
    from ..shards import _atomic_write_bytes, write_json

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = f"# recipe: {cfg.recipe}\n# overrides: {json.dumps(list(overrides))}\n"
    _atomic_write_bytes(out / CONFIG_FILE, (header + config_yaml(cfg)).encode("utf-8"))
    write_json(out / PLAN_FILE, dict(plan))
    return out / CONFIG_FILE


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _schema_keys_at(parent: str) -> list[str]:
    """The option names the TrainConfig schema has under ``parent`` (``""``, ``data``, ``rewards.0``, ...)."""
    node: Any = TrainConfig()
    for p in [p for p in parent.split(".") if p]:
        if isinstance(node, list) and p.isdigit():
            node = node[int(p)] if int(p) < len(node) else RewardSpec()
        else:
            node = getattr(node, p, None)
        if node is None:
            return []
    return list(node.__dataclass_fields__) if hasattr(node, "__dataclass_fields__") else []


def _did_you_mean(full_key: str) -> str:
    parts = full_key.split(".")
    node: Any = TrainConfig()
    for p in parts[:-1]:
        node = getattr(node, p, None)
        if node is None:
            return ""
    if not hasattr(node, "__dataclass_fields__"):
        return ""
    known = list(node.__dataclass_fields__)
    close = difflib.get_close_matches(parts[-1], known, n=1)
    return f"; did you mean {'.'.join([*parts[:-1], close[0]])!r}?" if close else ""
