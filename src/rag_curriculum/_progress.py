"""Progress bars with rates for long work (rich, on stderr); silent when disabled or not on a terminal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def make_progress(*, unit: str = "records", transient: bool = False):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import TaskProgressColumn as _Pct

    class Rate(TextColumn):
        def __init__(self) -> None:
            super().__init__("")

        def render(self, task):  # type: ignore[override]
            from rich.text import Text

            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} {unit}/s" if speed else f"- {unit}/s", style="cyan")

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), _Pct(), Rate(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=transient)


def track(items: Iterable[T], description: str, *, total: int | None = None, enabled: bool = True,
          unit: str = "records") -> Iterator[T]:
    if not enabled:
        yield from items
        return
    with make_progress(unit=unit) as progress:
        task = progress.add_task(description, total=total)
        for i, item in enumerate(items, 1):
            yield item
            if i % 256 == 0:
                progress.update(task, completed=i)
        progress.update(task, completed=i if total is None else total) if total else None


@contextlib.contextmanager
def maybe_progress(enabled: bool, *, unit: str = "records"):
    if not enabled:
        yield None
        return
    with make_progress(unit=unit) as p:
        yield p
