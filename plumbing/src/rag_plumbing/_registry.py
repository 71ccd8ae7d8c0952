"""The one registry for everything users extend (rag-curriculum: datasets, schedules, templates, output formats,
rewards, generation backends, curriculum controllers; rag-retriever: retriever kinds).

Entries may be objects or dotted paths (``"pkg.module:attr"``) resolved on first use, so registering a backend never
imports its heavy library. Names are collision-checked and typos get a "did you mean".

**Type checks.** A registry made with ``check`` checks every entry: an object when it is registered, a dotted path
when it is first resolved; an entry of the wrong type is refused (:class:`~rag_plumbing._errors.ConfigError` naming
the entry and what it must be), never found broken later deep inside a run.

**Plug-ins.** A registry made with ``group`` also reads the entries installed packages declare as entry points of
that group (``[project.entry-points."rag_curriculum.rewards"]`` ``my_reward = "my_pkg.rewards:MyReward"``), once, on
first need (a name it does not know, or :meth:`Registry.names`). A name already registered keeps its entry; a
plug-in that cannot be imported, or is of the wrong type, is refused when it is asked for by name and left out, with
a warning naming it, when every entry is listed. The groups are :data:`ENTRY_POINT_GROUPS`.

>>> r = Registry("schedule")
>>> r.register("linear", len)
>>> r.get("linear") is len
True
>>> r.get("liner")
Traceback (most recent call last):
...
rag_plumbing._errors.UnknownNameError: unknown schedule 'liner'; did you mean 'linear'? Known: linear
>>> Registry("reward", check=callable).register("bad", 42)
Traceback (most recent call last):
...
rag_plumbing._errors.ConfigError: reward 'bad' is registered as 42 (int): it must be callable

An unknown name is an :class:`~rag_plumbing._errors.UnknownNameError` (a :class:`KeyError`); registering a taken
name without ``overwrite=True`` a :class:`~rag_plumbing._errors.ConfigError` (a :class:`ValueError`).
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ._errors import ConfigError, UnknownNameError

T = TypeVar("T")
log = logging.getLogger(__name__)

#: The entry-point group of each extension point (kind of registry -> group), for packages that plug into it.
ENTRY_POINT_GROUPS: dict[str, str] = {}


def import_dotted(path: str) -> Any:
    """Import ``"pkg.module:attr"`` (or ``"pkg.module.attr"``)."""
    if ":" in path:
        mod, _, attr = path.partition(":")
    else:
        mod, _, attr = path.rpartition(".")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _show(obj: Any) -> str:
    text = repr(obj)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(obj).__name__})"


class Registry(Generic[T]):
    """Named entries of one extension point (see the module docstring).

    Args:
        kind: what an entry is, in words (``"reward"``); names the registry in messages.
        check: what every entry must be: a type (or tuple of types) it must be an instance of, or a predicate
            (``callable``); None checks nothing.
        must_be: the words for ``check`` in a refusal ("a subclass of DatasetLoader"); derived from a type when
            not given.
        group: the entry-point group installed packages declare entries in (default: :data:`ENTRY_POINT_GROUPS`'
            for ``kind``; ``""`` for none).

    A subclass names its own errors and groups in the class attributes :attr:`config_error`,
    :attr:`unknown_error` and :attr:`groups` (rag-curriculum's registries do).
    """

    #: The error for an entry that cannot be registered or imported, and for an unknown name.
    config_error: type[Exception] = ConfigError
    unknown_error: type[Exception] = UnknownNameError
    #: The entry-point group of each kind of registry (``group`` left out).
    groups: dict[str, str] = ENTRY_POINT_GROUPS

    def __init__(self, kind: str, *, check: type | tuple[type, ...] | Callable[[Any], bool] | None = None,
                 must_be: str | None = None, group: str | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._check = check
        if must_be is None and isinstance(check, (type, tuple)):
            names = [t.__name__ for t in (check if isinstance(check, tuple) else (check,))]
            must_be = "a " + " or a ".join(names)
        self._must_be = must_be or ("callable" if check is callable else "of the right type")
        self.group = self.groups.get(kind, "") if group is None else group
        self._discovered = not self.group
        self._plugins: set[str] = set()

    # -- checks ----------------------------------------------------------------------------------------------------
    def problem(self, obj: Any) -> str | None:
        """Why ``obj`` cannot be an entry (None when it can, or when the registry checks nothing)."""
        c = self._check
        if c is None:
            return None
        ok = isinstance(obj, c) if isinstance(c, (type, tuple)) else bool(c(obj))
        return None if ok else f"it must be {self._must_be}"

    def _refuse(self, name: str, obj: Any, why: str, where: str = "") -> Exception:
        return self.config_error(f"{self.kind} {name!r}{where} is registered as {_show(obj)}: {why}",
                           hint=f"register {self._must_be} under {name!r}")

    # -- registering and looking up --------------------------------------------------------------------------------
    def register(self, name: str, obj: T | str | None = None, *, overwrite: bool = False) -> Any:
        """Register ``obj`` (or a dotted path to it) under ``name``; usable as a decorator when ``obj`` is None."""

        def deco(o: Any) -> Any:
            if name in self._entries and not overwrite and name not in self._plugins:
                raise self.config_error(f"{self.kind} {name!r} is already registered",
                                  hint="pass overwrite=True to replace it, or register it under another name")
            if not isinstance(o, str) and (why := self.problem(o)) is not None:
                raise self._refuse(name, o, why)
            self._entries[name] = o
            self._plugins.discard(name)
            return o

        if obj is None:
            return deco
        deco(obj)
        return None

    def discover(self) -> None:
        """Read the entry points installed packages declare for this registry (once; a name already registered
        keeps its entry)."""
        if self._discovered:
            return
        self._discovered = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            if ep.name not in self._entries and self.accepts_plugin(ep.name):
                self._entries[ep.name] = ep.value
                self._plugins.add(ep.name)

    def accepts_plugin(self, name: str) -> bool:
        """Whether an installed package's entry point may take ``name`` (a subclass refuses reserved names)."""
        return True

    def get(self, name: str) -> T:
        if name not in self._entries:
            self.discover()
        try:
            entry = self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.unknown_error(f"unknown {self.kind} {name!r}{hint} Known: {', '.join(sorted(self._entries))}"
                                   ) from None
        if isinstance(entry, str):
            where = f" (entry point of {self.group})" if name in self._plugins else ""
            try:
                obj = import_dotted(entry)
            except (ImportError, AttributeError) as e:
                raise self.config_error(f"{self.kind} {name!r}{where}: {entry!r} cannot be imported ({type(e).__name__}: "
                                  f"{e})", hint="install the package that provides it, or fix the dotted path"
                                  ) from None
            if (why := self.problem(obj)) is not None:
                raise self._refuse(name, obj, why, where)
            self._entries[name] = entry = obj
        return entry

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def loaded(self) -> dict[str, T]:
        """Every entry, imported (name -> entry). An installed package's entry that cannot be imported or is of
        the wrong type is left out with a warning naming it (and forgotten); the toolkit's own always load."""
        out: dict[str, T] = {}
        for name in list(self.names()):
            try:
                out[name] = self.get(name)
            except self.config_error as e:
                if name not in self._plugins:
                    raise
                self._entries.pop(name, None)
                log.warning("%s %r left out: %s", self.kind, name, e)
        return out

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            self.discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
