"""The progress line people watch (:func:`rag_plumbing._progress.make_progress`, the toolkit's too), rendered by rich at a
terminal's width: at 80 columns every number is whole (done/total, rate, elapsed, eta); wider, the percentage and
the rate's unit come back."""

from __future__ import annotations

import io

import pytest


def line(monkeypatch, width: int, *, done: int, speed: float | None) -> str:
    import rich.console

    from rag_curriculum._plumbing import make_progress

    buf = io.StringIO()
    real = rich.console.Console
    monkeypatch.setattr(rich.console, "Console",
                        lambda stderr=True: real(file=buf, width=width, color_system=None))
    p = make_progress(unit="completions")
    t = p.add_task("generating completions", total=4800)
    p.update(t, completed=done)
    if speed is not None:
        monkeypatch.setattr(type(p.tasks[0]), "speed", property(lambda task: speed))
    p.console.print(p.make_tasks_table(p.tasks))
    return buf.getvalue().rstrip("\n")


@pytest.mark.parametrize("width", [70, 80, 99])
def test_a_narrow_terminal_keeps_every_number_whole(monkeypatch, width):
    text = line(monkeypatch, width, done=1234, speed=0.0314)
    # 3566 completions left at 0.0314 a second: 113,567 s (rich rounds up)
    assert len(text) <= width and text.endswith("1234/4800 0.0314/s 0:00:00 eta 31:32:47"), text


def test_a_wide_terminal_shows_the_percentage_and_the_rates_unit(monkeypatch):
    text = line(monkeypatch, 120, done=1234, speed=2.5)
    assert "1234/4800" in text and " 26% " in text and "2.5 completions/s" in text and text.endswith("eta 0:23:47")


@pytest.mark.parametrize("width", [80, 120])
def test_the_generation_bar_keeps_its_counts_whole_at_80_columns(monkeypatch, width):
    """Partition's and eval's bar (questions done, completions a second, time left) on an 80-column terminal."""
    import rich.console

    from rag_curriculum.generation import runner

    buf = io.StringIO()
    real = rich.console.Console
    monkeypatch.setattr(rich.console, "Console", lambda stderr=True: real(file=buf, width=width, color_system=None))
    bar = runner._Bar(True, "partition · musique-max · chunk 3/15", total_questions=3000, done_questions=1200,
                      todo_completions=24000)
    try:
        bar.advance(10, 80)
        monkeypatch.setattr(type(bar.progress.tasks[0]), "speed", property(lambda task: 0.0314))
        table = bar.progress.make_tasks_table(bar.progress.tasks)
    finally:
        bar.progress.stop()
    buf.seek(0)
    buf.truncate()
    bar.progress.console.print(table)
    text = buf.getvalue().rstrip("\n")
    assert len(text) <= width, text
    if width == 80:
        assert text.endswith("1,210/3,000 0.0314/s 0:00:00 eta 211:36:24"), text  # 23,920 completions left
    else:
        assert "1,210/3,000 questions" in text and "0.0314 completions/s" in text, text
