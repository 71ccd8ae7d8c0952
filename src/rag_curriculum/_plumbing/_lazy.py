"""Lazy package exports: a package's names load their submodule on first use (PEP 562 module ``__getattr__``),
so importing a config class for the command line does not import pyarrow, numpy or matplotlib. And what moved or was
renamed keeps working for a release, with a :class:`DeprecationWarning` naming the new place or name.

Each name is declared once, as an import in the package's ``if TYPE_CHECKING:`` block (which type checkers, IDEs and
the docs read): at run time that block is read from the package's source, on first need, as the map of what to
import where."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def type_checking_imports(source: str) -> dict[str, tuple[str, str]]:
    """name -> (module as written, relative dots included; the attribute it names) for every ``from M import A
    [as B]`` of the top-level ``if TYPE_CHECKING:`` blocks of ``source``."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    module = "." * imp.level + (imp.module or "")
                    out.update({a.asname or a.name: (module, a.name) for a in imp.names})
    return out


def lazy_exports(package: str, namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``namespace`` (its ``globals()``) is the module's: the names
    imported in its ``if TYPE_CHECKING:`` block are imported on first use and cached in ``namespace``."""
    exports: dict[str, tuple[str, str]] = {}

    def names() -> dict[str, tuple[str, str]]:
        if not exports:
            source = namespace["__loader__"].get_source(package)
            if source is None:  # installed without its .py files: the names cannot be read
                raise ImportError(f"{package}: its lazy names are read from its source, which is not installed")
            exports.update(type_checking_imports(source))
        return exports

    def __getattr__(name: str) -> Any:
        target = names().get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(target[0], package), target[1])
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names()))

    return __getattr__, __dir__


def moved_to(old: str, new: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of a module that moved: each name is looked up in module ``new`` and comes with a
    :class:`DeprecationWarning` naming the new place, so imports written against ``old`` keep working for a
    release."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        import warnings

        value = getattr(importlib.import_module(new), name)
        warnings.warn(f"{old}.{name} moved to {new}.{name}: import it from there ({old} goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        return value

    return __getattr__


def moved_names(old: str, where: Mapping[str, str],
                fallback: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package some of whose names moved: a name of ``where`` (name -> its new module)
    is looked up in its new module and comes with a :class:`DeprecationWarning` naming the new place; any other
    name goes to ``fallback`` (the package's own lazy names), or is an :class:`AttributeError`."""

    def __getattr__(name: str) -> Any:
        new = where.get(name)
        if new is None:
            if fallback is None:
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            return fallback(name)
        import warnings

        value = getattr(importlib.import_module(new), name)
        warnings.warn(f"{old}.{name} moved to {new}.{name}: import it from there ({old}.{name} goes in the next "
                      "release)", DeprecationWarning, stacklevel=2)
        return value

    return __getattr__


def renamed_keywords(**renamed: str) -> Callable[[Any], Any]:
    """A decorator for a class or function whose keyword arguments were renamed (``renamed``: old -> new; none
    given on a dataclass: its fields' ``renamed_from``, as recipes read them): a call with an old keyword sets the
    new one, with a :class:`DeprecationWarning` naming it; on a class the old attribute reads the new one too.

    >>> @renamed_keywords(topk="top_k")
    ... @dataclasses.dataclass
    ... class Demo:
    ...     top_k: int = 3
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     (Demo(topk=1).top_k, str(caught[0].message))
    (1, 'Demo(topk=...) is now called Demo(top_k=...): the old keyword is read until the next release')
    """

    def decorate(obj: Any) -> Any:
        names = renamed or {old: f.name for f in dataclasses.fields(obj)
                            if (old := (f.metadata.get("setting") or {}).get("renamed_from"))}
        target = obj.__init__ if isinstance(obj, type) else obj
        label = obj.__qualname__.removesuffix(".__init__")

        @functools.wraps(target)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in names.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{label}() got both {old!r} and its new name {new!r}: pass {new!r} only")
                    warnings.warn(f"{label}({old}=...) is now called {label}({new}=...): the old keyword is read "
                                  "until the next release", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return target(*args, **kwargs)

        if not isinstance(obj, type):
            return wrapper
        obj.__init__ = wrapper
        for old, new in names.items():
            if not hasattr(obj, old):
                setattr(obj, old, property(functools.partial(_old_attribute, label=label, old=old, new=new),
                                           doc=f"Renamed {new!r} (the old name, read until the next release)."))
        return obj

    return decorate


def _old_attribute(self: Any, *, label: str, old: str, new: str) -> Any:
    warnings.warn(f"{label}.{old} is now called {label}.{new}: the old name is read until the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(self, new)
