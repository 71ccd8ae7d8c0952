"""The command line a run records (a build's manifest, ``partition.json``, an index's manifest): the process's own
arguments, the program named ``curriculum`` whatever started it (the console script, ``cli.py`` or a package's
``__main__.py``). Its secrets are masked by the writer (:func:`~rag_curriculum._plumbing.redact_command`)."""

from __future__ import annotations

import shlex
import sys


def current_command() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("curriculum", "cli.py", "__main__.py")):
        argv[0] = "curriculum"
    return shlex.join(argv)
