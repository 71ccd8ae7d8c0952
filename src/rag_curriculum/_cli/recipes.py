"""`curriculum recipes [KIND]`: the shipped recipes of every command (build, partition, train, eval), each with
the first line of its header comment (what it is for); the header's next lines give its launch command."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..config import KINDS, list_recipes, recipe_summary, recipes_root
from .common import out, reported_errors


def print_recipes(kind: str) -> None:
    """One table: the recipes of ``kind`` and what each is for."""
    table = Table(title=f"{kind} recipes in {recipes_root() / kind}", title_justify="left")
    table.add_column("recipe", style="bold")
    table.add_column("what")
    for name in list_recipes(kind):
        table.add_row(name, escape(recipe_summary(kind, name)))
    out.print(table)


def recipes(
    kind: Annotated[str | None, typer.Argument(help="build | partition | train | eval (default: every kind).",
                                               show_default=False)] = None,
) -> None:
    """List the shipped recipes: run one with `curriculum KIND recipe=NAME \\[key=value ...]` (its header shows how)."""
    with reported_errors():
        kinds = [kind] if kind else [k for k in KINDS if list_recipes(k)]
        for k in kinds:
            print_recipes(k)


def register(app: typer.Typer) -> None:
    app.command("recipes")(recipes)
