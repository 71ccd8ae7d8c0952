"""The one registry for everything users extend: datasets, schedules, templates, output formats, rewards,
generation backends and curriculum controllers. Entries, dotted paths resolved on first use, type checks, plug-ins
read from entry points (the groups: :data:`ENTRY_POINT_GROUPS`) and "did you mean" are :mod:`rag_plumbing._registry`'s
(written once for both distributions); here they raise the toolkit's errors.

**Methods.** A companion method is a package whose import registers its names (rewards, templates, formats, agent
templates) in the registries. Installed packages declare theirs as entry points of :data:`METHODS_GROUP`
(``my-method = "my_pkg.my_method"``); every registry imports them once, on its first need, before it reads its own group
(:func:`load_methods`); the toolkit's own methods are ``rag_curriculum.methods``, imported with the package.

>>> r = Registry("schedule")
>>> r.register("linear", len)
>>> r.get("liner")
Traceback (most recent call last):
...
rag_curriculum.errors.UnknownNameError: unknown schedule 'liner'; did you mean 'linear'? Known: linear
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
    """Named entries of one extension point (see the module docstring); its arguments (``kind``, ``check``,
    ``must_be``, ``group``) are :class:`rag_plumbing._registry.Registry`'s.

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
