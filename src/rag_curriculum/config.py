"""One config layer for every command: shipped recipes (Hydra YAML under ``recipes/<kind>/``), composed with
``key=value`` overrides, merged with the command-line flags the user set, and bound to the command's config
dataclass, whose fields are the schema (type, range and help of each setting; see :func:`._settings.rule`).

Precedence, for every command: the dataclass defaults, then the recipe (with its overrides), then the flags.

The recipes travel with the package (the wheel force-includes ``recipes/`` as ``rag_curriculum/recipes``); an
editable install reads the repository's ``recipes/``. A recipe is a name (``musique-min-max``) or a path to a YAML
file of one's own, whose defaults list may name the shipped ``_base`` of its kind.

>>> "musique-min-max" in list_recipes("build") and "rag-rl" in list_recipes("eval")
True
>>> compose("eval", "rag-rl", ["m=5"])["m"]
5
>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     rows_per_shard: int = 10
>>> bind(Demo, {"rows_per_shrd": 3})
Traceback (most recent call last):
...
rag_curriculum.errors.UsageError: unknown option 'rows_per_shrd' in the Demo config; did you mean 'rows_per_shard'? Known: rows_per_shard
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError, RecipeError, UsageError

__all__ = ["KINDS", "RecipeKind", "bind", "compose", "field_help", "list_recipes", "recipe_path", "recipe_summary",
           "recipes_root", "resolve", "split_args", "given", "merge_flags"]

T = TypeVar("T")


@dataclass(frozen=True)
class RecipeKind:
    """How the recipes of one command are composed and bound."""

    default: str | None = None
    """The recipe used when none is named (None: flags alone, no recipe)."""
    free_keys: str | None = None
    """Keys any name may take (``++key=value``, present in the recipe or not): the dict-typed sections."""
    typed: bool = False
    """Bind through OmegaConf's structured schema: interpolations between sections (``${run.name}``) resolved
    against the dataclass defaults, values converted to the field types."""


#: The recipe folders (``recipes/<kind>/``) and how each is bound.
KINDS: dict[str, RecipeKind] = {
    "build": RecipeKind(),
    "partition": RecipeKind(free_keys=r"^backend_args\."),
    "train": RecipeKind(default="rag-rl-min-max", free_keys=r"^(grpo\.|rewards\.\d+\.kwargs\.|adaptive\.kwargs\.)", typed=True),
    "eval": RecipeKind(free_keys=r"^backend_args\."),
}

_NO_KEY = re.compile(r"Could not override '([^']+)'")

#: Checks of a kind's composed recipe, run before it is bound (:func:`resolve`): ``check(data, where)``, ``where``
#: naming the recipe (``recipe rag-rl-min-max``, ``... and its overrides``). A package above adds its own: the
#: rewards' weights and numbers are checked where they enter (:mod:`rag_curriculum.train`).
DATA_CHECKS: dict[str, dict[str, Callable[[dict[str, Any], str], None]]] = {kind: {} for kind in KINDS}


# -- recipes -------------------------------------------------------------------------------------------------------
def recipes_root() -> Path:
    """The folder holding the shipped recipes (``build/``, ``train/``, ``eval/``, ``accelerate/``, ``verl/``): inside
    the installed package (the wheel carries ``recipes/``), or at the root of a source checkout (editable)."""
    from importlib.resources import files

    packaged = Path(str(files("rag_curriculum"))) / "recipes"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "recipes"
    if checkout.is_dir():
        return checkout
    raise RecipeError("the recipes directory was not found in the package nor in a source checkout",
                      hint="reinstall rag-curriculum (the wheel carries rag_curriculum/recipes) or run from a "
                      "checkout that has recipes/")


def _kind(kind: str) -> RecipeKind:
    if kind not in KINDS:
        raise ConfigError(f"no recipe kind {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind]


def list_recipes(kind: str) -> list[str]:
    """Names (file stems) of the runnable recipes of one kind: every YAML in ``recipes/<kind>/`` but the shared
    bases (``_*``)."""
    _kind(kind)
    return sorted(p.stem for p in (recipes_root() / kind).glob("*.yaml") if not p.stem.startswith("_"))


def recipe_path(kind: str, recipe: str) -> Path:
    """The YAML file of a recipe name (``musique-min-max``) or path (``my/recipe.yaml``)."""
    if recipe.endswith((".yaml", ".yml")) or "/" in recipe or "\\" in recipe:
        path = Path(recipe).expanduser()
        if not path.is_file():
            raise RecipeError(f"recipe file {path} does not exist")
        return path.resolve()
    known = list_recipes(kind)
    if recipe.startswith("_"):
        raise RecipeError(f"{recipe!r} is a shared base of the {kind} recipes, not a run; pick one of "
                          f"{', '.join(known)}")
    path = recipes_root() / kind / f"{recipe}.yaml"
    if not path.is_file():
        close = difflib.get_close_matches(recipe, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise RecipeError(f"unknown {kind} recipe {recipe!r}{hint} Known: {', '.join(known)} (or a path to a YAML "
                          "file)", hint=f"`curriculum recipes {kind}` lists them")
    return path


def recipe_summary(kind: str, recipe: str) -> str:
    """What a recipe is for: the first sentence of its header comment (its prose may run over several lines; the
    indented lines after it are commands), never cut inside a sentence.

    >>> recipe_summary("train", "cpu-tiny")  # doctest: +ELLIPSIS
    'Try training on a CPU: GRPO on a tiny model for 3 steps, ... before renting GPUs.'
    """
    prose: list[str] = []
    for line in recipe_path(kind, recipe).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line[1:]
        if text.startswith("   ") or not text.strip():  # a command line of the header, or a blank one: prose ends
            break
        prose.append(text.strip())
    return first_sentence(" ".join(prose))


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence: a period (or ! ?) followed by a space and a capital, outside
    parentheses (so "App. B" or "et al." inside them does not end it); the whole text when there is none.

    >>> first_sentence("One (CRAFT App. B): ten. Two.")
    'One (CRAFT App. B): ten.'
    """
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(depth - 1, 0)
        elif ch in ".!?" and depth == 0 and text[i + 1:i + 2] == " " and text[i + 2:i + 3].isupper():
            return text[:i + 1]
    return text


def _hydra_overrides(kind: str, overrides: Sequence[str], schema: type | None = None) -> list[str]:
    """``grpo.X=v`` (a free key of the kind) becomes ``++grpo.X=v`` (add or override), and so does ``key=v`` for a
    top-level field of ``schema`` (the config dataclass): a field is a recipe key whether or not the recipe writes
    it, so a new field needs writing in no recipe."""
    free = _kind(kind).free_keys
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else set()
    overrides = [_renamed_override(o, schema) for o in overrides] if isinstance(schema, type) else list(overrides)

    def field_key(o: str) -> bool:
        key, sep, _ = o.partition("=")
        return bool(sep) and key in fields

    return ["++" + o if "=" in o and ((free and re.match(free, o)) or field_key(o)) else o for o in overrides]


def compose(kind: str, recipe: str, overrides: Sequence[str] = (), *, resolve: bool = True,
            schema: type | None = None) -> dict[str, Any]:
    """Compose a recipe of ``kind`` (a name or a YAML path) with Hydra (defaults list, ``key=value``,
    ``+key=value`` to add, ``~key`` to delete) into plain data. ``resolve=False`` keeps interpolations for a
    typed bind; ``schema`` (the config dataclass) names the keys a recipe may leave out in an unknown-key error.

    Args:
        kind: ``build``, ``partition``, ``train`` or ``eval``.
        recipe: a shipped recipe's name (``curriculum recipes KIND`` lists them) or a YAML file's path.
        overrides: Hydra overrides, as on the command line.
        resolve: resolve interpolations (``${...}``).
        schema: see above.

    Returns:
        The composed recipe as plain data (bind it with the config's ``from_dict``).

    Raises:
        RecipeError: an unknown recipe (with a "did you mean"), a shared base named as a recipe, or an override
            or recipe that does not compose (an unknown key named, with a "did you mean").

    Examples:
        >>> from rag_curriculum.config import compose
        >>> data = compose("build", "musique-min-max", ["n=100"])
        >>> data["dataset"], data["n"], data["schedule"]
        ('musique', 100, 'min-max')
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    path = recipe_path(kind, recipe)
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        _refuse_both_names(path, overrides, schema)
    hydra_overrides = _hydra_overrides(kind, overrides, schema)
    shipped = recipes_root() / kind
    if path.parent != shipped:  # a recipe of one's own may build on the shipped base
        hydra_overrides.append(f"hydra.searchpath=[file://{shipped}]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.3", job_name=f"curriculum-{kind}"):
            composed = hydra_compose(config_name=path.stem, overrides=hydra_overrides)
        return OmegaConf.to_container(composed, resolve=resolve)  # type: ignore[return-value]
    except Exception as e:  # Hydra's override grammar, composition and interpolation errors name what is at fault
        where = f"{kind} recipe {path.stem!r}"
        problem = _compose_problem(e, path, overrides)
        if problem is not None:
            raise RecipeError(f"could not compose {where}: {problem[0]}", hint=problem[1]) from None
        message = unknown_key_message(
            e, where, lambda parent: _keys_at(compose(kind, recipe, (), resolve=False), parent),
            (lambda parent: _schema_keys_at(schema, parent)) if schema is not None else None, schema)
        raise RecipeError(message or f"could not compose {where}: {_first_line(e)}",
                          hint=None if message else "overrides are key=value (Hydra syntax), e.g. n=500") from None


#: OmegaConf's refusal to merge a mapping with a list (or a list with a mapping), and the key it names.
_MERGE = re.compile(r"Cannot merge (\w+) with (\w+)")
_FULL_KEY = re.compile(r"full_key: ?(\S*)\s+object_type=(\w+)")


def _compose_problem(error: BaseException, path: Path, overrides: Sequence[str]) -> tuple[str, str] | None:
    """Hydra's errors that name neither the key nor the value at fault, as (one line, hint): an override whose value
    holds ``=`` (the grammar's "mismatched input '='"), and a mapping where the recipe has a list (or a list where
    it has a mapping), given by an override or by the recipe file over the recipe it builds on (OmegaConf's "Cannot
    merge DictConfig with ListConfig", whose cause is on a line of its own). None for any other error."""
    text = str(error)
    if "mismatched input '='" in text:
        for o in overrides:
            key, sep, value = o.lstrip("+~").partition("=")
            if sep and "=" in value and value[:1] not in "'\"[{":
                quote = '"' if "'" in value else "'"
                return (f"override {o}: its value holds '=', which Hydra's override grammar cannot read unquoted",
                        f"quote the value: {key}={quote}{value}{quote}")
    cause = error.__cause__ or error.__context__
    said = f"{text}\n{cause}" if cause is not None else text
    if not _MERGE.search(said):
        return None
    found = _FULL_KEY.search(said)
    key, there = (found.group(1), found.group(2)) if found else ("", "")
    names = {"dict": "a mapping", "list": "a list"}
    if text.startswith("Error merging override "):
        override = text.removeprefix("Error merging override ").splitlines()[0]
        override = next((o for o in overrides if override in (o, f"++{o}")), override)  # (as the user wrote it)
        if key and there in names:
            other = "a list" if there == "dict" else "a mapping"
            return (f"override {override}: {key} is {names[there]} in the recipe, and the override gives {other} "
                    "(Hydra cannot merge the two)", f"give {key} as {names[there]}, as the recipe does")
        return f"override {override}: {_first_line(cause or error)}", "check the override's type against the recipe's"
    mismatch = _mismatched_key(path)
    if mismatch is None:
        return f"{_first_line(error)} {_first_line(cause) if cause is not None else ''}".strip(), (
            f"check the types of {path.name}'s keys against the recipe it builds on")
    key, mine, base, theirs = mismatch
    return (f"{key} is {names.get(mine, mine)} in {path.name} and {names.get(theirs, theirs)} in {base}, which it "
            "builds on (Hydra cannot merge the two)", f"write {key} as {names.get(theirs, theirs)}, as {base} does")


def _mismatched_key(path: Path) -> tuple[str, str, str, str] | None:
    """The first key of the recipe file ``path`` that is a mapping where the recipes it builds on (its defaults
    list) have a list, or the other way round: (key, its type here, the base's name, the base's type)."""
    import yaml

    def load(p: Path) -> dict[str, Any]:
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
        return data if isinstance(data, dict) else {}

    def base_of(p: Path, data: dict[str, Any], depth: int = 0) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for name in data.get("defaults") or []:
            if not isinstance(name, str) or name == "_self_" or depth > 8:
                continue
            for folder in (p.parent, recipes_root() / path.parent.name, *[recipes_root() / k for k in KINDS]):
                f = folder / f"{name}.yaml"
                if f.is_file():
                    d = load(f)
                    merged.update(base_of(f, d, depth + 1))
                    merged.update({k: v for k, v in d.items() if k != "defaults"})
                    break
        return merged

    own = load(path)
    base = base_of(path, own)
    bases = ", ".join(str(n) for n in own.get("defaults") or [] if isinstance(n, str) and n != "_self_")

    def walk(mine: Any, theirs: Any, prefix: str) -> tuple[str, str, str, str] | None:
        if not isinstance(mine, dict) or not isinstance(theirs, dict):
            return None
        for k, v in mine.items():
            if k in ("defaults", "hydra") and not prefix or k not in theirs:
                continue
            t = theirs[k]
            kinds = (type(v).__name__, type(t).__name__)
            if {kinds[0], kinds[1]} == {"dict", "list"}:
                return f"{prefix}{k}", kinds[0], bases, kinds[1]
            found = walk(v, t, f"{prefix}{k}.")
            if found:
                return found
        return None

    return walk(own, base, "")


# -- renamed fields ------------------------------------------------------------------------------------------------
def renamed_fields(cls: type) -> dict[str, str]:
    """The old names of ``cls``'s renamed fields (:func:`._settings.rule`'s ``renamed_from``), each to its new name.

    >>> from rag_curriculum.partition import PartitionConfig
    >>> renamed_fields(PartitionConfig)["k"]
    'samples'
    """
    return {old: f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if (old := (f.metadata.get("setting") or {}).get("renamed_from"))}


def _warn_renamed(old: str, new: str, where: str) -> None:
    warnings.warn(f"{where}: {old!r} is now called {new!r}; the old name is read until the next release, write "
                  f"{new!r}", FutureWarning, stacklevel=4)


def read_renamed(cls: type, data: Mapping[str, Any], where: str, *, deep: bool = False) -> dict[str, Any]:
    """``data`` with ``cls``'s old field names read as the new ones, each with a :class:`FutureWarning` naming the new
    name; ``deep``: the fields of nested config dataclasses too. An old key given with its new one wins (the shipped
    recipes write only new names, so the old one is the user's).

    >>> import warnings
    >>> from rag_curriculum.partition import PartitionConfig
    >>> with warnings.catch_warnings(record=True):
    ...     read_renamed(PartitionConfig, {"k": 4}, "the partition config")
    {'samples': 4}
    """
    renamed = renamed_fields(cls) if dataclasses.is_dataclass(cls) else {}
    out = dict(data)
    for old, new in renamed.items():
        if old in out:
            _warn_renamed(old, new, where)
            out[new] = out.pop(old)
    if deep and dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            tp, _ = _strip_optional(hints.get(f.name, Any))
            if dataclasses.is_dataclass(tp) and isinstance(tp, type) and isinstance(out.get(f.name), Mapping):
                out[f.name] = read_renamed(tp, out[f.name], f.name, deep=True)
    return out


def _both_names(data: Any, cls: Any, at: str = "") -> tuple[str, str] | None:
    """The first (old, new) pair of ``cls``'s renamed fields that the mapping ``data`` gives both of (nested config
    dataclasses too), dotted from the top."""
    if not (isinstance(data, Mapping) and dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        return None
    for old, new in renamed_fields(cls).items():
        if old in data and new in data:
            return at + old, at + new
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        got = _both_names(data.get(f.name), _strip_optional(hints.get(f.name, Any))[0], f"{at}{f.name}.")
        if got:
            return got
    return None


def _refuse_both_names(path: Path, overrides: Sequence[str], schema: type) -> None:
    """A recipe file, or the overrides, giving a setting under both its old and its new name: refused naming both
    (which one was meant cannot be told)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None  # (Hydra's composition says what is wrong with it)
    both = _both_names(data, schema)
    where = f"{path}"
    if both is None:
        keys: dict[str, Any] = {}
        for o in overrides:
            key, sep, _ = str(o).lstrip("+").partition("=")
            if sep:
                node = keys
                *parents, last = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
                node[last] = True
        both, where = _both_names(keys, schema), "the overrides"
    if both is not None:
        old, new = both
        raise RecipeError(f"{where} give{'' if where == 'the overrides' else 's'} both {old!r} and {new!r}: {old!r} is the old name of {new!r}, so which "
                          "value is meant cannot be told", hint=f"keep {new!r} only")


def _renamed_override(override: str, schema: type) -> str:
    """A Hydra override naming a renamed field by its old name (``agent.topk=2``), named by the new one."""
    prefix = override[:len(override) - len(override.lstrip("+~"))]
    key, sep, value = override[len(prefix):].partition("=")
    parts, cls, hints = key.split("."), schema, None
    for i, part in enumerate(parts):
        if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
            return override
        new = renamed_fields(cls).get(part)
        if new is not None:
            _warn_renamed(".".join(parts[:i + 1]), ".".join([*parts[:i], new]), "override")
            parts[i] = part = new
        hints = typing.get_type_hints(cls)
        cls = _strip_optional(hints.get(part, Any))[0]
    return prefix + ".".join(parts) + sep + value


def _first_line(e: BaseException) -> str:
    """An error's first line; one that ends in ``:`` with the line that follows it (Hydra puts the cause there)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _keys_at(tree: Any, parent: str) -> list[str]:
    node = tree
    for part in [p for p in parent.split(".") if p]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return []
    return sorted(map(str, node)) if isinstance(node, dict) else []


def _schema_keys_at(schema: type, parent: str) -> list[str]:
    """The field names the dataclass ``schema`` has under ``parent`` (``""``, ``data``, ``rewards.0``, ...)."""
    tp: Any = schema
    for part in [p for p in parent.split(".") if p]:
        if typing.get_origin(tp) is list and part.isdigit():
            (tp,) = typing.get_args(tp) or (Any,)
            continue
        if not dataclasses.is_dataclass(tp):
            return []
        tp = typing.get_type_hints(tp).get(part)
        tp, _ = _strip_optional(tp)
    return [f.name for f in dataclasses.fields(tp)] if dataclasses.is_dataclass(tp) else []


def _flag_names(schema: type | None, parent: str) -> dict[str, str]:
    """``{flag spelled as a key: field}`` for the fields whose option is not named after them (``samples: m``,
    ``pass_at: k``, ``eval_set: eval_sets``): the key a user types after reading ``--help``."""
    if schema is None:
        return {}
    tp: Any = schema
    for part in [p for p in parent.split(".") if p]:
        if not dataclasses.is_dataclass(tp):
            return {}
        tp, _ = _strip_optional(typing.get_type_hints(tp).get(part))
    if not dataclasses.is_dataclass(tp):
        return {}
    out = {}
    for f in dataclasses.fields(tp):
        flag = (f.metadata.get("setting") or {}).get("flag")
        key = flag.lstrip("-").replace("-", "_") if flag else None
        if key and key != f.name:
            out[key] = f.name
    return out


def _closest(key: str, known: Iterable[str], schema: type | None = None, parent: str = "") -> str | None:
    """The known key a mistyped ``key`` most likely means: the field whose option it names, else the closest."""
    by_flag = _flag_names(schema, parent).get(key)
    if by_flag is not None:
        return by_flag
    close = difflib.get_close_matches(key, list(known), n=1)
    return close[0] if close else None


def unknown_key_message(error: BaseException, where: str, keys_at: Callable[[str], Iterable[str]],
                        schema_keys_at: Callable[[str], Iterable[str]] | None = None,
                        schema: type | None = None) -> str | None:
    """A one-line message for Hydra's "Could not override 'KEY'" (whose "use +KEY=value" hint misleads when the
    key is a typo): the keys that exist there, with a "did you mean". ``schema_keys_at`` gives the keys the schema
    knows but a recipe may leave out (those do take ``+KEY=value``); ``schema`` (the dataclass) maps an option's
    name to its field (``samples`` is ``m``). None for any other error."""
    m = _NO_KEY.search(str(error))
    if not m:
        return None
    key = m.group(1)
    parent, _, leaf = key.rpartition(".")
    present = sorted(set(keys_at(parent)))
    left_out = sorted(set(schema_keys_at(parent)) if schema_keys_at else set())
    value = str(error).rsplit("=", 1)[-1] if "=" in str(error) else "VALUE"
    if leaf in left_out:
        return f"{where} has no {key!r}: add it with +{key}={value} (a known option the recipe leaves out)"
    known = sorted(set(present) | set(left_out))
    close = _closest(leaf, known, schema, parent)
    hint = f"; did you mean {'.'.join([*([parent] if parent else []), close])!r}?" if close else ""
    where_keys = f" under {parent!r}" if parent else ""
    return f"unknown option {key!r} in {where}{hint} Known{where_keys}: {', '.join(known) or '(none)'}"


# -- binding -------------------------------------------------------------------------------------------------------
def _strip_optional(tp: Any) -> tuple[Any, bool]:
    import types

    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _label(cls: type) -> str:
    return {"BuildConfig": "the build config", "SourceSpec": "a source", "EvalConfig": "the evaluation config",
            "ModelSpec": "a model", "TrainConfig": "the training config",
            "PartitionConfig": "the partition config"}.get(cls.__name__, f"the {cls.__name__} config")


def bind(cls: type[T], data: Any, *, where: str | None = None) -> T:
    """Plain data (a composed recipe, merged flags) to the dataclass ``cls``: unknown keys are refused with a "did
    you mean"; nested dataclass fields and ``list[Dataclass]`` fields are bound in turn (a string item through the
    item class's ``parse``, e.g. ``ModelSpec.parse("NAME=PATH")``); values are then checked by ``cls`` itself
    (``__post_init__``: types and ranges, see :mod:`._settings`).

    Args:
        cls: the config dataclass.
        data: a mapping of its fields (or an instance, returned as it is).
        where: what the data is, in error messages (default: the class's name).

    Returns:
        The config.

    Raises:
        UsageError: data that is not a mapping, an unknown key (with a "did you mean"), or a required field left
            out.
        ConfigError: a value of the wrong type or out of range (a :class:`SettingError`).

    Examples:
        >>> from rag_curriculum import EvalConfig
        >>> from rag_curriculum.config import bind
        >>> bind(EvalConfig, {"models": ["base=Qwen/Qwen2.5-7B-Instruct"], "m": 3}).models[0].name
        'base'
    """
    if isinstance(data, cls):
        return data
    where = where or _label(cls)
    if not isinstance(data, Mapping):
        raise UsageError(f"{where} must be a mapping of options, got {data!r}")
    data = read_renamed(cls, data, where)
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in known:
            close = _closest(str(key), known, cls)
            hint = f"; did you mean {close!r}?" if close else ""
            raise UsageError(f"unknown option {key!r} in {where}{hint} Known: {', '.join(sorted(known))}")
    missing = [name for name, f in known.items() if name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise UsageError(f"{where} needs {', '.join(missing)}: {dict(data)!r}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        tp, optional = _strip_optional(hints.get(key, Any))
        if dataclasses.is_dataclass(tp) and isinstance(tp, type) and not (value is None and optional):
            kwargs[key] = bind(tp, value or {}, where=key)
        elif typing.get_origin(tp) is list and isinstance(value, list | tuple):
            (item,) = typing.get_args(tp) or (Any,)
            if dataclasses.is_dataclass(item) and isinstance(item, type):
                kwargs[key] = [_bind_item(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
            else:
                kwargs[key] = list(value)
        elif typing.get_origin(tp) is dict and isinstance(value, Mapping):
            kwargs[key] = dict(value)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def _bind_item(item: type, value: Any, where: str) -> Any:
    if isinstance(value, str) and hasattr(item, "parse"):
        return item.parse(value)  # type: ignore[attr-defined]
    return bind(item, value, where=where)


def bind_typed(cls: type[T], raw: Mapping[str, Any]) -> T:
    """Bind composed data through OmegaConf's structured schema of ``cls`` (values converted to the field types,
    interpolations resolved against the defaults, ``???`` refused), then :func:`bind`."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

    raw = read_renamed(cls, raw, _label(cls), deep=True)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), dict(raw))
        plain = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except ConfigKeyError as e:
        key = str(getattr(e, "full_key", "") or "")
        parent, _, leaf = key.rpartition(".")
        close = _closest(leaf, _schema_keys_at(cls, parent), cls, parent)
        hint = f"; did you mean {'.'.join([*([parent] if parent else []), close])!r}?" if close else ""
        raise RecipeError(f"unknown option {key!r}: {_first_line(e)}{hint}") from None
    except MissingMandatoryValue as e:
        key = str(getattr(e, "full_key", "") or "")
        raise RecipeError(f"{key} is not set: give it on the command line ({key}=...)") from None
    except OmegaConfBaseException as e:
        raise RecipeError(f"{getattr(e, 'full_key', '') or 'config'}: {_first_line(e)}") from None
    return bind(cls, plain)


def field_help(cls: type, name: str) -> str:
    """The help text a config field carries (``metadata["help"]``, set with :func:`._settings.rule`)."""
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == name:
            return str(f.metadata.get("help", ""))
    raise ConfigError(f"{cls.__name__} has no field {name!r}")


# -- one function for every command --------------------------------------------------------------------------------
def split_args(args: Sequence[str] | None) -> tuple[str | None, list[str]]:
    """A command's positional arguments: ``recipe=NAME`` and Hydra overrides (``key=value``, ``+key=value``,
    ``~key``). Anything else is refused."""
    recipe = None
    rest: list[str] = []
    for a in args or []:
        if a.startswith("recipe="):
            recipe = a.split("=", 1)[1]
        elif "=" in a or a.startswith("~"):
            rest.append(a)
        else:
            raise RecipeError(f"unexpected argument {a!r}", hint="arguments are recipe=NAME and key=value overrides "
                              "(Hydra syntax, e.g. seed=1); options start with --")
    return recipe, rest


def given(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags the user set: not None (an option's "not given") nor an empty repeatable option."""
    return {k: v for k, v in flags.items() if v is not None and not (isinstance(v, list | tuple) and not v)}


def merge_flags(data: Mapping[str, Any] | None, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's data with every flag the user set on top."""
    return {**(data or {}), **given(flags)}


def resolve(cls: type[T], kind: str, args: Sequence[str] | None = None, flags: Mapping[str, Any] | None = None, *,
            merge: Callable[[dict[str, Any] | None, Mapping[str, Any]], Mapping[str, Any]] | None = None) -> T:
    """A command's config: ``recipe=NAME`` and Hydra overrides (``args``) composed, the flags the user set
    (``flags``, None meaning "not given") on top, bound to ``cls``. ``merge(data, flags)`` replaces the plain
    merge for commands whose flags do more than set a field (``data`` is None when no recipe was named).

    >>> from rag_curriculum.evaluation import EvalConfig
    >>> cfg = resolve(EvalConfig, "eval", ["recipe=rag-rl", "limit=10"], {"m": 5, "seed": None})
    >>> cfg.m, cfg.limit, cfg.max_tokens, cfg.seed
    (5, 10, 800, 0)
    """
    spec = _kind(kind)
    recipe, overrides = split_args(args)
    recipe = recipe or spec.default
    if overrides and recipe is None:
        raise RecipeError("key=value overrides need a recipe", hint=f"add recipe=NAME (`curriculum recipes {kind}` "
                          "lists them), or use --options")
    data = compose(kind, recipe, overrides, resolve=not spec.typed, schema=cls) if recipe else None
    if data is not None:
        for check in DATA_CHECKS.get(kind, {}).values():
            check(data, f"recipe {recipe}" + (" and its overrides" if overrides else ""))
    if data is not None and recipe is not None and "recipe" in {f.name for f in dataclasses.fields(cls)}:  # type: ignore[arg-type]
        data["recipe"] = recipe
    merged = (merge or merge_flags)(data, flags or {})
    return bind_typed(cls, merged) if spec.typed else bind(cls, merged)
