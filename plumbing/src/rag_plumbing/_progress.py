"""Progress bars with rates for long work (rich, on stderr); silent when disabled or not on a terminal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def rate_text(per_second: float | None, unit: str) -> str:
    """A rate as people read it: three significant digits below 100 a second (a slow CPU's 0.031 completions/s is
    not 0.0), whole numbers above; ``-`` before there is one.

    >>> rate_text(0.031416, "completions"), rate_text(2.5, "completions"), rate_text(1234.5, "rows"), rate_text(0, "x")
    ('0.0314 completions/s', '2.5 completions/s', '1,234 rows/s', '- x/s')
    """
    if not per_second or per_second <= 0:
        return f"- {unit}/s"
    return f"{per_second:,.0f} {unit}/s" if per_second >= 100 else f"{per_second:.3g} {unit}/s"


def duration_text(seconds: float | None) -> str:
    """A duration in the largest units that matter: ``45 s``, ``4 min 10 s``, ``2 h 05 min``; ``-`` when unknown.

    >>> duration_text(45.2), duration_text(250), duration_text(7500), duration_text(None)
    ('45 s', '4 min 10 s', '2 h 05 min', '-')
    """
    if seconds is None or seconds != seconds or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


#: Below this many columns a progress line leaves out the percentage and the rate's unit (``3.99/s``): at 80
#: columns the full line (description, bar, done/total, %, rate, elapsed, eta) cut its last numbers.
NARROW_COLUMNS = 100


def make_progress(*, unit: str = "records", transient: bool = False):
    """A rich progress display on stderr: what, a bar, done/total, %, rate, elapsed and eta. On a narrow terminal
    (under :data:`NARROW_COLUMNS`) the percentage and the rate's unit go and the bar shrinks; the numbers are never
    cut."""
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
    from rich.table import Column

    console = Console(stderr=True)
    narrow = console.width < NARROW_COLUMNS

    def whole() -> Column:  # a column of numbers: kept whole
        return Column(no_wrap=True)

    class Rate(TextColumn):
        def __init__(self) -> None:
            super().__init__("", table_column=whole())

        def render(self, task):  # type: ignore[override]
            from rich.text import Text

            text = rate_text(task.finished_speed or task.speed, unit)
            return Text(text.replace(f" {unit}/s", "/s") if narrow else text, style="cyan")

    columns = [TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis",
                                                                          max_width=28 if narrow else None)),
               BarColumn(bar_width=10 if narrow else 40), MofNCompleteColumn(table_column=whole()),
               *(() if narrow else (_Pct(table_column=whole()),)), Rate(),
               TimeElapsedColumn(table_column=whole()), TextColumn("eta", table_column=whole()),
               TimeRemainingColumn(table_column=whole())]
    return Progress(*columns, console=console, transient=transient)


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
