"""Where the generation of ``curriculum partition`` and ``curriculum eval`` runs: in this process (``local``, the
default) or on a pool of Ray actors (``ray``, :mod:`rag_curriculum.generation._ray_engine`).

The engine changes where the chunk runner's backend calls run, never what they make: the calls, their prompts and
their seeds are the runner's, the chunk files are written by this process in the same ``work/`` folder, so
resumption, ``partition-merge``, re-bucketing and the outputs are the same, byte for byte, whichever engine made
them. The engine's settings are therefore no part of a run's identity, of its recorded configuration or of the
recorded command (:func:`without_engine_options`).

Its settings (:class:`EngineConfig`) live in :mod:`rag_curriculum.generation._engine_config`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._base import get_backend
from ._engine_config import ENGINE_FLAGS, ENGINES, EngineConfig, without_engine_options
from ._ray_engine import RayEngine

__all__ = ["ENGINES", "ENGINE_FLAGS", "BackendSpec", "EngineConfig", "open_engine", "without_engine_options"]


@dataclass
class BackendSpec:
    """A picklable recipe for a backend (what a Ray worker builds): the registered name, the model, the options.

    >>> BackendSpec("scripted", None, {"script": {"q": "a"}})().name
    'scripted'
    """

    name: str
    model: str | None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        kwargs = dict(self.options)
        if self.model is not None:
            kwargs["model"] = self.model
        return get_backend(self.name, **kwargs)


class LocalEngine:
    """Generation in this process: the backend factory as it is."""

    name = "local"

    def wrap(self, factory: Callable[[], Any], *, backend: str | None = None,
             options: Mapping[str, Any] | None = None) -> Callable[[], Any]:
        return factory

    def close(self) -> None:
        pass


@contextlib.contextmanager
def open_engine(cfg: EngineConfig | None) -> Iterator[Any]:
    """The engine ``cfg`` names, for the duration of a command: ``engine.wrap(factory, backend=NAME,
    options=BACKEND_ARGS)`` turns a backend factory into one that runs on the engine. A Ray engine connects (or
    starts a local cluster) only when a pool is first built, i.e. only when something is left to generate, and
    on leaving (Ctrl-C included) kills its actors and shuts down a cluster it started.

    Args:
        cfg: the engine's settings (None: this process).

    Yields:
        The engine: ``engine.wrap(factory, backend=..., options=...)``.

    Examples:
        >>> from rag_curriculum.generation import BackendSpec, open_engine
        >>> with open_engine(None) as engine:   # local: the factory as it is
        ...     backend = engine.wrap(BackendSpec("scripted", None, {"script": {"q": "a"}}))()
        >>> backend.name
        'scripted'
    """
    if cfg is None or cfg.engine == "local":
        yield LocalEngine()
        return
    engine = RayEngine(cfg)
    try:
        yield engine
    finally:
        engine.close()
