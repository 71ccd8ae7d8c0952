"""How generation is spread out: :class:`EngineConfig` (``--engine local|ray`` and Ray's options), shared by the
in-process engine (:mod:`rag_curriculum.generation._engine`) and the Ray one
(:mod:`rag_curriculum.generation._ray_engine`), neither of which imports the other for it.

The engine changes where the chunk runner's backend calls run, never what they make, so its settings are no part of
a run's identity, of its recorded configuration or of the recorded command (:func:`without_engine_options`).

    >>> EngineConfig().engine, EngineConfig(engine="ray", num_workers=4).num_workers
    ('local', 4)
    >>> EngineConfig(engine="spark")
    Traceback (most recent call last):
    ...
    rag_curriculum.errors.SettingError: engine (--engine) = 'spark': must be one of local, ray
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._plumbing import AsDict, drop_options
from .._settings import MAX_COUNT, check_settings, ray_address_rule, rule
from ..errors import ConfigError, EngineError

__all__ = ["ENGINES", "ENGINE_FLAGS", "RAY_INSTALL_HINT", "EngineConfig", "without_engine_options"]

#: The pip extra that installs Ray (``--engine ray``).
RAY_INSTALL_HINT = "pip install 'rag-curriculum[ray]'"

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
