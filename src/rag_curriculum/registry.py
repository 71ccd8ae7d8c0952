"""The one registry for everything users extend: datasets, schedules, templates, output formats, rewards,
generation backends, curriculum controllers and retriever kinds.

Entries may be objects or dotted paths (``"pkg.module:attr"``) resolved on first use, so registering a backend never
imports its heavy library. Names are collision-checked and typos get a "did you mean".

**Type checks.** A registry made with ``check`` checks every entry: an object when it is registered, a dotted path
when it is first resolved; an entry of the wrong type is refused (:class:`~rag_curriculum.errors.ConfigError` naming
the entry and what it must be), never found broken later deep inside a run.

**Plug-ins.** A registry made with ``group`` also reads the entries installed packages declare as entry points of
that group (``[project.entry-points."rag_curriculum.rewards"]`` ``my_reward = "my_pkg.rewards:MyReward"``), once, on
first need (a name it does not know, or :meth:`Registry.names`). A name already registered keeps its entry; a
plug-in that cannot be imported, or is of the wrong type, is refused when it is asked for by name and left out, with
a warning naming it, when every entry is listed. The groups are :data:`ENTRY_POINT_GROUPS`.

**Methods.** A companion method is a package whose import registers its names (rewards, templates, formats, agent
templates) in the registries. Installed packages declare theirs as entry points of :data:`METHODS_GROUP`
(``my-method = "my_pkg.my_method"``); every registry imports them once, on its first need, before it reads its own group
(:func:`load_methods`); the toolkit's own methods are ``rag_curriculum.methods``, imported with the package.

>>> r = Registry("schedule")
>>> r.register("linear", len)
>>> r.get("linear") is len
True
>>> r.get("liner")
Traceback (most recent call last):
...
rag_curriculum.errors.UnknownNameError: unknown schedule 'liner'; did you mean 'linear'? Known: linear
>>> Registry("reward", check=callable).register("bad", 42)
Traceback (most recent call last):
...
rag_curriculum.errors.ConfigError: reward 'bad' is registered as 42 (int): it must be callable

An unknown name is an :class:`~rag_curriculum.errors.UnknownNameError` (a :class:`KeyError`); registering a taken
name without ``overwrite=True`` a :class:`~rag_curriculum.errors.ConfigError` (a :class:`ValueError`).
"""

from __future__ import annotations

import importlib
import logging
from typing import TypeVar

from rag_plumbing import _registry as _shared
from rag_plumbing._registry import import_dotted

from .errors import ConfigError, UnknownNameError

T = TypeVar("T")
log = logging.getLogger(__name__)
__all__ = ["ENTRY_POINT_GROUPS", "METHODS_GROUP", "Registry", "import_dotted", "load_methods"]

#: The entry-point group of each extension point (kind of registry -> group), for packages that plug into it.
ENTRY_POINT_GROUPS = {
    "dataset": "rag_curriculum.datasets",
    "schedule": "rag_curriculum.schedules",
    "template": "rag_curriculum.templates",
    "output format": "rag_curriculum.formats",
    "reward": "rag_curriculum.rewards",
    "generation backend": "rag_curriculum.backends",
    "curriculum controller": "rag_curriculum.controllers",
    "retriever kind": "rag_curriculum.retriever_kinds",
}


#: The entry-point group of companion methods: each entry names a module whose import registers the method.
METHODS_GROUP = "rag_curriculum.methods"
_methods_loaded = False


def load_methods() -> None:
    """Import the methods installed packages declare as entry points of :data:`METHODS_GROUP` (once): each one's
    import registers its names. A method that cannot be imported is left out with a warning naming it."""
    global _methods_loaded
    if _methods_loaded:
        return
    _methods_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=METHODS_GROUP):
        try:
            importlib.import_module(ep.value.partition(":")[0])
        except Exception as e:  # a broken plug-in must not break the toolkit: it is named and left out
            log.warning("method %r (entry point of %s) left out: %r cannot be imported (%s: %s)", ep.name,
                        METHODS_GROUP, ep.value, type(e).__name__, e)


class Registry(_shared.Registry[T]):
    """Named entries of one extension point (see the module docstring).

    Args:
        kind: what an entry is, in words (``"reward"``); names the registry in messages.
        check: what every entry must be: a type (or tuple of types) it must be an instance of, or a predicate
            (``callable``); None checks nothing.
        must_be: the words for ``check`` in a refusal ("a subclass of DatasetLoader"); derived from a type when
            not given.
        group: the entry-point group installed packages declare entries in (default: :data:`ENTRY_POINT_GROUPS`'
            for ``kind``; ``""`` for none).

    The plumbing's registry (:class:`rag_plumbing._registry.Registry`, written once for both
    distributions) with the toolkit's errors and entry-point groups, and the installed methods read first.
    """

    config_error = ConfigError
    unknown_error = UnknownNameError
    groups = ENTRY_POINT_GROUPS

    def discover(self) -> None:
        """Read the entry points installed packages declare for this registry (once; a name already registered
        keeps its entry); the installed methods first (:func:`load_methods`), which register into any registry."""
        load_methods()
        super().discover()
