"""The rules every typed setting obeys (:mod:`rag_plumbing._settings`, written once for both distributions), with
the toolkit's :class:`SettingError`, a setting's ``renamed_from``, the search agent's settings and the model checks.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     samples: int = rule(8, ge=1, le=64)
>>> check_settings(Demo(samples=0))
Traceback (most recent call last):
...
rag_curriculum.errors.SettingError: samples (--samples) = 0: must be an integer in 1..64
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from rag_plumbing import _settings as _shared
from rag_plumbing._settings import (
    MAX_COUNT,
    MAX_K,
    MAX_SAMPLES,
    MAX_SEED,
    choices_of,
    describe,
    ray_address_rule,
    setting_flag,
    settings_rows,
    settings_table,
    suggest,
)

from .errors import SettingError

# The rules and their checks are the plumbing's (rag_plumbing._settings, written once for both
# distributions): this module names them with the toolkit's SettingError and a setting's renamed_from, and adds the
# search agent's settings and the model checks.
__all__ = ["MAX_COUNT", "MAX_K", "MAX_SAMPLES", "MAX_SEED", "MODEL_PATH_BACKENDS", "check_model_ref", "check_settings",
           "check_value", "choices_of", "describe", "hub_offline", "in_hub_cache", "is_hub_id", "ray_address_rule",
           "retriever_retries_rule", "retriever_rule", "retriever_timeout_rule", "rule", "setting_flag", "settings_rows", "settings_table",
           "suggest"]


def rule(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, ge: float | None = None,
            le: float | None = None, gt: float | None = None,
            choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
            flag: str | None = None, empty: bool = True, help: str | None = None,
            renamed_from: str | None = None) -> Any:
    """A dataclass field with its allowed values and what it is for (:func:`rag_plumbing._settings.rule`:
    ``ge`` / ``le`` / ``gt`` bounds for numbers, ``choices`` for strings or a function returning them, ``empty``,
    ``flag``, ``help``); ``renamed_from`` is the field's old name, still read in recipes and ``key=value`` overrides
    for one release with a warning naming the new one (:func:`rag_curriculum.config.bind`).

    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Demo:
    ...     samples: int = rule(8, ge=1, help="Samples per question.", renamed_from="k")
    >>> fields(Demo)[0].metadata["setting"]["renamed_from"], fields(Demo)[0].metadata["help"]
    ('k', 'Samples per question.')
    """
    return _shared.rule(default, default_factory=default_factory, ge=ge, le=le, gt=gt, choices=choices, flag=flag,
                           empty=empty, help=help, more={"renamed_from": renamed_from})


def retriever_rule(when: str = "") -> Any:
    """The ``retriever`` setting of a search agent (partition's, eval's and train's): an index or a server URL.
    ``when`` starts its help (for example ``"With --agent: "``)."""
    what = ("what the agent's searches call: an index directory (`curriculum index`) or a server URL "
            "(`curriculum serve`, or any server speaking Search-R1's POST /retrieve).")
    return rule(None, empty=False, help=when + what if when else what[0].upper() + what[1:])


def retriever_timeout_rule() -> Any:
    """The ``retriever_timeout`` setting of a search agent (partition's, eval's and train's)."""
    return rule(30.0, gt=0, le=86_400, help=(
        "Seconds a retriever server may take to answer a request (tried twice): a server that accepts and never "
        "answers stops the run in one line naming it."))


def retriever_retries_rule() -> Any:
    """The ``retriever_retries`` setting of a search agent (partition's, eval's, train's and the warm start's)."""
    return rule(5, ge=0, le=100, help=(
        "Times a request to a retriever server is sent again after a connection error or a 502, 503 or 504 "
        "answer, waiting 0, 1, 2, 4, 8, ... s (at most 120) before each (5: a server down for about 15 s is "
        "waited for; 0: the first failure stops the run). A server that never answers is asked twice whatever "
        "this says (--retriever-timeout)."))


def check_value(name: str, value: Any, tp: Any, meta: dict[str, Any] | None = None, *,
                flag: str | None = None) -> None:
    """Raise :class:`SettingError` unless ``value`` has type ``tp`` (``int``, ``float``, ``str``, ``bool``,
    ``list[str]``, ``X | None``, ...) and lies in the range ``meta`` gives."""
    _shared.check_value(name, value, tp, meta, flag=flag, error=SettingError)


def check_settings(obj: Any, *, prefix: str = "", flags: bool = True) -> None:
    """Check every field of the dataclass ``obj`` against its annotation and :func:`rule` rules; nested
    config dataclasses are checked with ``prefix.`` names (``data.max_rows``)."""
    _shared.check_settings(obj, prefix=prefix, flags=flags, error=SettingError)


# -- models --------------------------------------------------------------------------------------------------------
_REPO_ID = re.compile(r"^(?:[\w.-]{1,96}/)?[\w.-]{1,96}$")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the form of a Hugging Face Hub repository id (``name`` or ``namespace/name``)."""
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # pragma: no cover - huggingface_hub comes with datasets
        return bool(_REPO_ID.match(name)) and "--" not in name and ".." not in name
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


#: Backends whose ``model`` is a local directory or a Hub id (openai: a served name; scripted: a script).
MODEL_PATH_BACKENDS = ("vllm", "transformers")


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off for this process (``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE``)."""
    on = {"1", "ON", "YES", "TRUE"}
    return any(os.environ.get(k, "").upper() in on for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def in_hub_cache(repo_id: str) -> bool:
    """Whether a Hub model ``repo_id`` has a config in this machine's Hugging Face cache (what an offline load
    reads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with datasets
        return True
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a name the cache cannot hold: not there
        return False


def check_model_ref(model: str | None, *, backend: str | None = None, label: str = "model",
                    loads: bool = False) -> None:
    """Refuse, before anything is loaded, a model that is neither an existing local path nor a valid Hub id (a
    mistyped path would otherwise end deep in a loader's traceback). ``loads``: the command loads the model
    straight away (eval, partition), so a Hub id that cannot be had, offline and not in the cache, is refused too,
    as the missing folder it most likely is."""
    if model is None or (backend is not None and backend not in MODEL_PATH_BACKENDS):
        return
    text = str(model)
    if os.path.exists(os.path.expanduser(text)):
        return
    looks_local = text.startswith(("/", "./", "../", "~", "\\")) or text in (".", "..")
    head = text.split("/", 1)[0]
    # "outputs/tiny-model" is a valid Hub id, but when ./outputs exists it is surely this machine's folder
    beside = "/" in text and head not in ("", ".", "..") and os.path.isdir(head)
    if not looks_local and not beside and is_hub_id(text):
        if loads and hub_offline() and not in_hub_cache(text):
            e = SettingError(label, text, "a local directory or a Hub id", message=(
                f"{label} {text!r}: no such folder ({os.path.abspath(os.path.expanduser(text))}), and no Hub model "
                "of that name in this machine's cache (the Hub is off: HF_HUB_OFFLINE)"))
            e.hint = ("check the path (relative paths start from the current directory); a Hub model is downloaded "
                      "once with the network on (huggingface-cli download NAME)")
            raise e
        return
    if looks_local or beside:
        e = SettingError(label, text, "a local directory or a Hub id", message=(
            f"{label} {text!r}: no such folder ({os.path.abspath(os.path.expanduser(text))})"))
        e.hint = ("make it first (the README's walkthrough makes outputs/gemma-warm with curriculum warm-start), or "
                  "check the path: relative paths start from the current directory")
        raise e
    raise SettingError(label, text, "a local directory or a Hub id", message=(
        f"{label} {text!r}: not a local directory and not a valid Hub id (name or namespace/name); check the "
        "path (relative paths start from the current directory)"))
