"""Options and helpers shared by the commands (defined once, used everywhere)."""

from __future__ import annotations

import inspect
import json
import shlex
import sys
from typing import Any, NoReturn

from rich.console import Console

console = Console(stderr=True)
out = Console()


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    """Print an error (and what to do next) and exit with ``code``."""
    import typer

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
