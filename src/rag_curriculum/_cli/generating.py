"""The options and helpers of the commands that generate with a model (`curriculum partition`, `curriculum profile`
and `curriculum eval`): the backend block, where generation runs (the engine block), and what a run is given."""

from __future__ import annotations

import inspect
import json
from typing import Annotated, Any

import typer

from .._plumbing import current_command
from ..generation import BACKENDS, check_backend_args, without_engine_options
from ..generation import EngineConfig as _Engine
from .common import EXIT_USAGE, aliases, config_options, console, fail, redacted, reported_errors


def parse_backend_args(items: list[str] | None) -> dict[str, Any]:
    """`--backend-arg KEY=VALUE` options to keyword arguments (values parsed as JSON where they parse)."""
    parsed: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--backend-arg must be KEY=VALUE, got {item!r}", code=EXIT_USAGE)
        try:
            parsed[key] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


def backend_args_for(backend: str, flags: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The constructor options of ``backend`` among the flags the user set (the others are reported and ignored);
    ``--backend-arg`` values are passed as they are."""
    with reported_errors():
        cls = BACKENDS.get(backend)
    params = inspect.signature(cls.__init__).parameters
    args: dict[str, Any] = {}
    for k, v in flags.items():
        if v is None:
            continue
        if k in params:
            args[k] = v
        else:
            console.print(f"[yellow]note:[/] --{k.replace('_', '-')} does not apply to the {backend} backend; "
                          "ignored")
    args.update(extra)
    with reported_errors():
        check_backend_args(backend, extra, cls)  # --backend-arg nosuch=1: refused now, in one line
    return args



# The backend's options (defined once).
MaxModelLen = Annotated[int | None, typer.Option(
    help="Context length (vllm, transformers). Prompts that do not fit (vllm: prompt + --max-tokens, since vLLM "
    "would cap the completion) are skipped and counted, never truncated.",
    show_default=False)]
TensorParallelSize = Annotated[int | None, typer.Option(
    "--tensor-parallel-size", "-tp", help="GPUs per model (vllm).", show_default=False)]
Dtype = Annotated[str | None, typer.Option(help="Model dtype: auto | bfloat16 | float16 | float32.",
                                           show_default=False)]
GpuMemoryUtilization = Annotated[float | None, typer.Option(help="vllm: GPU memory share. \\[default: 0.9]",
                                                            show_default=False)]
BatchSize = Annotated[int | None, typer.Option(help="transformers: prompts per generate call. \\[default: 16]",
                                               show_default=False)]
Device = Annotated[str | None, typer.Option(help="transformers: auto | cpu | cuda | cuda:N.", show_default=False)]
BaseUrl = Annotated[str | None, typer.Option(help="openai: server URL. \\[default: $OPENAI_BASE_URL or "
                                             "http://127.0.0.1:8000/v1]", show_default=False)]
ApiKey = Annotated[str | None, typer.Option(help="openai: API key (never written to the outputs). "
                                            "\\[default: $OPENAI_API_KEY or EMPTY]", show_default=False)]
Concurrency = Annotated[int | None, typer.Option(help="openai: requests in flight. \\[default: 32]",
                                                 show_default=False)]
BackendArg = Annotated[list[str] | None, typer.Option(
    "--backend-arg", help="Any other backend option as KEY=VALUE (JSON values), e.g. enforce_eager=true; openai: "
    "max_n_per_request=1 (servers that ignore or cap n), disable_server_defaults=false (servers that reject "
    "top_k/min_p/repetition_penalty), extra_body=JSON (more request fields). Repeatable.", show_default=False)]


# Where generation runs: EngineConfig's fields, never recorded.
ENGINE_OPTIONS = config_options(_Engine, panel="Where generation runs (not recorded)")
#: The parameters of those options (not fields of the commands' configs).
ENGINE_PARAMS = tuple(p.name for p in ENGINE_OPTIONS)
#: The backend option block (its values become the backend's arguments), declared once.
BACKEND_OPTIONS = aliases("Generation backend", max_model_len=MaxModelLen, tensor_parallel_size=TensorParallelSize,
                          dtype=Dtype, gpu_memory_utilization=GpuMemoryUtilization, batch_size=BatchSize,
                          device=Device, base_url=BaseUrl, api_key=ApiKey, concurrency=Concurrency,
                          backend_arg=BackendArg)
#: Its parameters that become the backend's arguments when the chosen backend takes them.
BACKEND_FLAGS = ("tensor_parallel_size", "max_model_len", "dtype", "gpu_memory_utilization", "batch_size", "device",
                 "base_url", "api_key", "concurrency")


#: The parameters of a generating command (partition, profile, eval) that say how this process runs, not fields of
#: its config: the progress bar, --print-config, and the backend and engine blocks.
GENERATION_ONLY = ("progress", "print_config", "backend_arg", *BACKEND_FLAGS, *ENGINE_PARAMS)


def engine_config(params: dict[str, Any]) -> _Engine | None:
    """The engine options the user gave, as an EngineConfig (None: none given, the local engine)."""
    given = {k: params[k] for k in ENGINE_PARAMS if params.get(k) is not None}
    return _Engine(**given) if given else None


def backend_options(backend: str, params: dict[str, Any]) -> dict[str, Any]:
    """The backend block's options the user gave (``params``: the command's), as ``backend``'s arguments
    (:func:`backend_args_for`: the ones it does not take reported and ignored, ``--backend-arg`` passed as given)."""
    return backend_args_for(backend, {k: params.get(k) for k in BACKEND_FLAGS},
                            parse_backend_args(params.get("backend_arg")))


def generation_run(params: dict[str, Any], progress: bool) -> dict[str, Any]:
    """How a generating command's run goes, from its parameters: the command line it records (secrets hidden, the
    engine options left out: they never change the outputs), the progress bar (on a terminal only) and the engine."""
    return {"command": redacted(without_engine_options(current_command())),
            "progress": progress and console.is_terminal, "engine": engine_config(params)}
