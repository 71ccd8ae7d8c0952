"""Where the generation of ``curriculum partition`` and ``curriculum eval`` runs: in this process (``local``, the
default) or on a pool of Ray actors (``ray``, :mod:`rag_curriculum.generation._ray_engine`).

The engine changes where the chunk runner's backend calls run, never what they make: the calls, their prompts and
their seeds are the runner's, the chunk files are written by this process in the same ``work/`` folder, so
resumption, ``partition-merge``, re-bucketing and the outputs are the same, byte for byte, whichever engine made
them. The engine's settings are therefore no part of a run's identity, of its recorded configuration or of the
recorded command (:func:`without_engine_options`).

    >>> EngineConfig().engine, EngineConfig(engine="ray", num_workers=4).num_workers
    ('local', 4)
    >>> EngineConfig(engine="spark")
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.SettingError: engine (--engine) = 'spark': must be one of local, ray
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .._plumbing import AsDict, drop_options
from .._settings import MAX_COUNT, check_settings, ray_address_rule, rule
from ..errors import ConfigError, EngineError
from ._base import get_backend
from ._ray_engine import RAY_INSTALL_HINT, RayEngine

__all__ = ["ENGINES", "ENGINE_FLAGS", "BackendSpec", "EngineConfig", "open_engine", "without_engine_options"]

ENGINES = ("local", "ray")


@dataclass
class EngineConfig(AsDict):
    """How generation is spread out (not what it makes: no part of a run's identity). Each field's ``help`` is the
    text of its command-line option in ``curriculum partition`` and ``curriculum eval``.

    Examples:
        ```python
        from rag_curriculum import PartitionConfig, run_partition
        from rag_curriculum.generation import EngineConfig

        run_partition(PartitionConfig(shards="outputs/musique-max", model="Qwen/Qwen2.5-7B-Instruct"),
                      engine=EngineConfig(engine="ray", ray_address="auto", num_workers=8))
        ```
    """

    engine: str = rule("local", choices=ENGINES, help=(
        "Where generation runs: local (this process) | ray (a pool of Ray actors, one backend engine each, on a "
        "running cluster or a local one; outputs are identical to local)."))
    ray_address: str | None = ray_address_rule()
    num_workers: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "--engine ray: Ray actors, each holding one backend engine (the model is loaded once per worker). Unset: "
        "as many as the cluster's GPUs (or CPUs) fit, at most one per call to make (openai: 1)."))
    gpus_per_worker: float | None = rule(None, ge=0, le=1024, help=(
        "--engine ray: GPUs per worker (vllm: its --tensor-parallel-size). Unset: vllm its tensor-parallel size, "
        "transformers 1 when the cluster has GPUs, else 0."))
    cpus_per_worker: float = rule(1.0, ge=0, le=MAX_COUNT, help="--engine ray: CPUs per worker.")
    chunk_retries: int = rule(3, ge=0, le=1000, help=(
        "--engine ray: times a call's chunks are run again on another worker after its worker died or failed; "
        "past that the run stops, naming the chunks and the cause."))

    def __post_init__(self) -> None:
        check_settings(self)

    def validate(self, backend: str, backend_args: Mapping[str, Any]) -> None:
        """Refuse settings that contradict the backend's (a vLLM engine uses exactly its tensor-parallel GPUs).

        Args:
            backend: the backend's name.
            backend_args: the backend's options.

        Raises:
            EngineError: ``engine="ray"`` where Ray is not installed.
            ConfigError: Ray's options without ``engine="ray"``, or ``gpus_per_worker`` other than vLLM's
                tensor-parallel size.
        """
        self.__post_init__()
        if self.engine == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise EngineError("--engine ray needs Ray, which is not installed here",
                                  hint=f"{RAY_INSTALL_HINT}, or run with --engine local")
        else:
            given = [f"--{k.replace('_', '-')}" for k, v in asdict(self).items()
                     if k != "engine" and v != getattr(EngineConfig(), k)]
            if given:
                raise ConfigError(f"{', '.join(given)} only apply to --engine ray",
                                  hint="add --engine ray, or leave them out")
            return
        if backend == "vllm" and self.gpus_per_worker is not None:
            tp = int(backend_args.get("tensor_parallel_size") or 1)
            if self.gpus_per_worker != tp:
                raise ConfigError(
                    f"--gpus-per-worker {self.gpus_per_worker:g} but the vLLM engine's tensor-parallel size is {tp}: "
                    "a vLLM worker uses exactly its tensor-parallel GPUs",
                    hint=f"pass --tensor-parallel-size {self.gpus_per_worker:g} too (or leave --gpus-per-worker "
                    "out: it follows --tensor-parallel-size)")


#: The command-line options of :class:`EngineConfig` (left out of the recorded command).
ENGINE_FLAGS = tuple(f"--{k.replace('_', '-')}" for k in EngineConfig.__dataclass_fields__)


def without_engine_options(command: str | None) -> str | None:
    """The command line as outputs record it: without the engine options, which say where the work ran, not what
    it made (a Ray run and a local run write the same files).

    >>> without_engine_options("curriculum partition in --engine ray --num-workers=4 --pass-at 8 --ray-address auto")
    'curriculum partition in --pass-at 8'
    """
    return drop_options(command, ENGINE_FLAGS)


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
