"""Running the `curriculum` command in process, as the command-line tests do: one invocation, and the one
``error:`` line a refused command prints."""

from __future__ import annotations

import logging
from pathlib import Path

from typer.testing import CliRunner

from rag_curriculum.cli import app


def run(*args):
    """``curriculum ARGS`` in this process (every argument made a string)."""
    root = logging.getLogger()  # the CLI's handler of an earlier in-process run writes to that run's closed stream
    for h in [h for h in root.handlers if getattr(getattr(h, "stream", None), "closed", False)]:
        root.removeHandler(h)
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(r, code: int = 1) -> str:
    """The one ``error:`` line of a refused command (no traceback), after checking its exit status."""
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    return errors[0]


def tree(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` (relative path -> bytes)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
