"""Options and helpers shared by the commands (defined once, used everywhere)."""

from __future__ import annotations

import sys
from typing import NoReturn

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
