"""The rules every typed setting obeys, checked once, when a config is bound (``__post_init__``) and again by its
``validate()``: the same rules whether a value came from a command-line flag, a recipe or Python.

A config dataclass declares each setting's allowed values beside its default with :func:`rule`; its type comes
from the annotation. :func:`check_settings` refuses a value of the wrong type or outside its range with a
:class:`SettingError`, one line that names the setting (and its flag), the value and what is allowed.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     rows_per_shard: int = rule(10, ge=1, le=100)
...     order: str = rule("level", choices=("level", "shuffled"))
>>> check_settings(Demo(rows_per_shard=-5))
Traceback (most recent call last):
...
rag_plumbing._errors.SettingError: rows_per_shard (--rows-per-shard) = -5: must be an integer in 1..100
>>> check_settings(Demo(order="levle"))
Traceback (most recent call last):
...
rag_plumbing._errors.SettingError: order (--order) = 'levle': must be one of level, shuffled; did you mean 'level'?
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from ._errors import SettingError, UsageError

#: Seeds are stored as int64 (manifests, Parquet) and handed to numpy, torch and vLLM.
MAX_SEED = 2**63 - 1
#: The largest level K (a level's distractor count is capped by what a question provides, at most a few dozen).
MAX_K = 1000
#: The largest number of samples per question (partition's k, eval's m); beyond it memory, not the sample, grows.
MAX_SAMPLES = 1024
#: The largest count of rows, questions, tokens, processes... that any setting accepts (a typo guard, not a limit
#: of the toolkit's data structures).
MAX_COUNT = 10**9


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def rule(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, ge: float | None = None,
            le: float | None = None, gt: float | None = None,
            choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
            flag: str | None = None, empty: bool = True, help: str | None = None,
            more: dict[str, Any] | None = None) -> Any:
    """A dataclass field with its allowed values and what it is for: ``ge`` / ``le`` / ``gt`` bounds for numbers,
    ``choices`` for strings (or a function returning them, read at each check: a registry's names, which grow as
    users register more), ``empty=False`` for a string that must not be empty; ``flag`` is the command-line
    option that sets it (default ``--name-with-dashes``; ``""`` for none); ``help`` says what the setting does,
    once: the command-line options read it (``metadata["help"]``, as TRL's ``GRPOConfig`` fields carry theirs);
    ``more``: further rules kept beside these (``metadata["setting"]``) for a binder that reads them (rag-curriculum's
    ``renamed_from``).

    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Demo:
    ...     seed: int = rule(0, ge=0, help="Sampling seed.")
    >>> fields(Demo)[0].metadata["help"]
    'Sampling seed.'
    """
    if choices is not None and not callable(choices):
        choices = tuple(choices)
    meta = {"ge": ge, "le": le, "gt": gt, "choices": choices,
            "flag": flag, "empty": empty, **(more or {})}
    metadata: dict[str, Any] = {"setting": meta}
    if help is not None:
        metadata["help"] = help
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def ray_address_rule() -> Any:
    """The ``ray_address`` setting of every Ray path (generation, dense encoding, serving): the cluster
    ``connect_ray`` joins."""
    return rule(None, empty=False, help=(
        "--engine ray: the cluster to join (auto: the one `ray start --head` made here, HOST:6379 or "
        "ray://HOST:10001). Unset: $RAY_ADDRESS if set, else a local cluster, started here and shut down at the end."))


def suggest(value: Any, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest known name, or ``""``."""
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, getattr(
        tp, "__name__", str(tp)))


def _range_text(kind: str, ge: float | None, le: float | None, gt: float | None) -> str:
    def fmt(x: float) -> str:
        if x == MAX_SEED:
            return "2**63-1"
        if isinstance(x, int) and abs(x) >= 10**6:
            return f"{x:,}".replace(",", "_")
        return f"{x:g}" if isinstance(x, float) else str(x)

    if gt is not None and le is not None:
        return f"{kind} in ({fmt(gt)}, {fmt(le)}]"
    if ge is not None and le is not None:
        return f"{kind} in {fmt(ge)}..{fmt(le)}"
    if gt is not None:
        return f"{kind} > {fmt(gt)}"
    if ge is not None:
        return f"{kind} >= {fmt(ge)}"
    if le is not None:
        return f"{kind} <= {fmt(le)}"
    return kind


def choices_of(meta: dict[str, Any] | None) -> tuple[str, ...]:
    """The values a string setting may take (:func:`rule`'s ``choices``, called when it is a function); () when any
    string goes."""
    choices = (meta or {}).get("choices")
    if callable(choices):
        choices = choices()
    return tuple(choices or ())


def describe(tp: Any, meta: dict[str, Any] | None, optional: bool = False) -> str:
    """What a setting allows, in words (``an integer in 1..1024``, ``one of a, b``)."""
    meta = meta or {}
    if choices_of(meta):
        text = f"one of {', '.join(choices_of(meta))}"
    elif tp in (int, float):
        text = _range_text(_type_name(tp), meta.get("ge"), meta.get("le"), meta.get("gt"))
    else:
        text = _type_name(tp)
    return text + (" (or null)" if optional else "")


def _split_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(tp))
        return Any, True
    return tp, False


def check_value(name: str, value: Any, tp: Any, meta: dict[str, Any] | None = None, *,
                flag: str | None = None, error: Callable[..., Exception] = SettingError) -> None:
    """Raise :class:`SettingError` unless ``value`` has type ``tp`` (``int``, ``float``, ``str``, ``bool``,
    ``list[str]``, ``X | None``, ...) and lies in the range ``meta`` gives. ``error``: the class raised instead,
    called with :class:`SettingError`'s arguments (rag-curriculum's own)."""
    meta = meta or {}
    tp, optional = _split_optional(tp)
    if tp is Any:
        return
    if value is None:
        if optional:
            return
        raise error(name, value, describe(tp, meta), flag=flag)
    origin = typing.get_origin(tp)
    bad = error(name, value, describe(tp, meta, optional), flag=flag)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise bad
    elif tp is str:
        if not isinstance(value, str):
            raise bad
        if not meta.get("empty", True) and not value.strip():
            raise error(name, value, "a non-empty string", flag=flag)
        choices = choices_of(meta)
        if choices and value not in choices:
            raise error(name, value, describe(tp, meta) + suggest(value, choices), flag=flag)
        return
    elif origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            plural = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(item, "values")
            raise error(name, value, f"a list of {plural}", flag=flag)
        for i, v in enumerate(value):
            if item in (int, float, str, bool):
                check_value(f"{name}[{i}]", v, item, flag=None, error=error)
        return
    elif origin is dict:
        if not isinstance(value, dict):
            raise error(name, value, "a mapping", flag=flag)
        return
    elif isinstance(tp, type):
        if not isinstance(value, tp):
            raise error(name, value, f"a {tp.__name__}", flag=flag)
        return
    else:
        return
    ge, le, gt = meta.get("ge"), meta.get("le"), meta.get("gt")
    if (ge is not None and value < ge) or (le is not None and value > le) or (gt is not None and value <= gt):
        raise bad


def check_settings(obj: Any, *, prefix: str = "", flags: bool = True,
                   error: Callable[..., Exception] = SettingError) -> None:
    """Check every field of the dataclass ``obj`` against its annotation and :func:`rule` rules; nested
    config dataclasses are checked with ``prefix.`` names (``data.max_rows``); ``error`` as for :func:`check_value`."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        meta = f.metadata.get("setting")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_settings(value, prefix=f"{prefix}{f.name}.", flags=flags, error=error)
            continue
        name = f"{prefix}{f.name}"
        flag = None
        if flags:
            flag = (meta or {}).get("flag")
            if flag is None:
                flag = "--" + f.name.replace("_", "-")
            flag = flag or None
        check_value(name, value, hints.get(f.name, Any), meta, flag=flag, error=error)


# -- the reference table -------------------------------------------------------------------------------------------
def setting_flag(f: dataclasses.Field) -> str | None:
    """The command-line option that sets the config field ``f``: its ``flag`` (:func:`rule`), else
    ``--name-with-dashes``; None for a field no option sets (``flag=""``, or a positional argument such as
    ``SHARDS``)."""
    flag = (f.metadata.get("setting") or {}).get("flag")
    if flag is None:
        return "--" + f.name.replace("_", "-")
    return flag if flag.startswith("--") else None


def _type_text(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return re.sub(r"\b(?:[a-z_]+\.)+", "", str(tp).replace("typing.", ""))  # list[ModelSpec], dict[str, Any]


def _default_text(f: dataclasses.Field) -> str:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return "(section)"
    elif f.default is dataclasses.MISSING:
        return "(required)"
    else:
        value = f.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float | str) else repr(value)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def settings_rows(cls: type, *, prefix: str = "") -> list[dict[str, str]]:
    """Every field of the config dataclass ``cls`` (nested config sections as ``section.key``): its key, flag, type,
    allowed values, default and help, as written once on the dataclass (the rows of :func:`settings_table`)."""
    hints = typing.get_type_hints(cls)
    rows: list[dict[str, str]] = []
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name, Any)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows += settings_rows(tp, prefix=f"{prefix}{f.name}.")
            continue
        inner, optional = _split_optional(tp)
        meta = f.metadata.get("setting")
        plain = inner in (int, float, str, bool)
        flag = setting_flag(f) or (f.metadata.get("setting") or {}).get("flag") or ""  # SHARDS: an argument
        rows.append({"key": f"{prefix}{f.name}", "flag": flag, "type": _type_text(tp),
                     "allowed": describe(inner, meta, optional) if plain else "", "default": _default_text(f),
                     "help": str(f.metadata.get("help", ""))})
    return rows


def settings_table(cls: type, *, flags: bool = True) -> str:
    """A Markdown table of every setting of ``cls`` (key, flag, allowed values, default, what it does): the docs'
    reference tables, generated from the dataclass at build time (``docs/hooks.py``), so a new field appears there
    without being written again. ``flags=False`` leaves out the flag column (train: key=value overrides only).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     seed: int = rule(0, ge=0, help="Sampling seed.")
    >>> print(settings_table(Demo))
    | key | flag | allowed | default | what it does |
    |---|---|---|---|---|
    | `seed` | `--seed` | an integer >= 0 | `0` | Sampling seed. |
    """
    head = ["key", *(["flag"] if flags else []), "allowed", "default", "what it does"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in settings_rows(cls):
        cells = [f"`{r['key']}`", *([f"`{r['flag']}`" if r["flag"] else "(recipe key)"] if flags else []),
                 _cell(r["allowed"] or r["type"]), f"`{_cell(r['default'])}`", _cell(r["help"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bind(cls: type, data: Any, *, error: Callable[..., Exception] = UsageError) -> Any:
    """Plain data (a mapping of ``cls``'s fields) to the dataclass ``cls``: an unknown key is refused with a "did you
    mean", then ``cls`` checks the values itself (``__post_init__``). An instance is returned as it is."""
    from collections.abc import Mapping

    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise error(f"{cls.__name__} must be a mapping of options, got {data!r}")
    known = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in known:
            raise error(f"{cls.__name__}: unknown option {key!r}{suggest(key, known)}")
    try:
        return cls(**data)
    except TypeError as e:  # a required field left out
        raise error(f"{cls.__name__}: {e}") from None
