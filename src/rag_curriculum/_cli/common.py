"""Options and helpers shared by the commands (defined once, used everywhere)."""

from __future__ import annotations

import inspect
import json
import shlex
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)
out = Console()


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    """Print an error (and what to do next) and exit with ``code``."""
    console.print(f"[bold red]error:[/] {message}")
    if hint:
        console.print(f"[yellow]hint:[/] {hint}")
    sys.stdout.flush()
    raise typer.Exit(code)


def parse_backend_args(items: list[str] | None) -> dict[str, Any]:
    """`--backend-arg KEY=VALUE` options to keyword arguments (values parsed as JSON where they parse)."""
    parsed: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--backend-arg must be KEY=VALUE, got {item!r}")
        try:
            parsed[key] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


def backend_args_for(backend: str, flags: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The constructor options of ``backend`` among the flags the user set (the others are reported and ignored);
    ``--backend-arg`` values are passed as they are."""
    from ..generation.base import BACKENDS

    try:
        cls = BACKENDS.get(backend)
    except KeyError as e:
        fail(str(e).strip('"'))
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
    return args


def redacted(command: str) -> str:
    """The command line with an --api-key value hidden (it is recorded in manifests and data cards)."""

    parts = shlex.split(command)
    for i, p in enumerate(parts):
        if p == "--api-key" and i + 1 < len(parts):
            parts[i + 1] = "***"
        elif p.startswith("--api-key="):
            parts[i] = "--api-key=***"
    return shlex.join(parts)


# Generation-backend options shared by `curriculum partition` and `curriculum eval` (defined once).
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
AllowIdenticalSamples = Annotated[bool, typer.Option(
    "--allow-identical-samples", help="Do not stop when most questions get identical samples at temperature > 0 "
    "(by default that stops the run: the server or backend most likely ignores the sampling parameters).")]
