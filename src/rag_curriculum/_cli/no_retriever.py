"""``curriculum index`` and ``curriculum serve`` where rag-retriever (the ``retrieval`` and ``serve`` extras) is not
installed: each is listed, says what to install and exits 1, whatever it is given."""

from __future__ import annotations

from typing import Any

import typer

from .common import fail

#: What to install, from the package index or from a clone of this repository.
INSTALL = ("pip install 'rag-curriculum[retrieval]' ([serve] to serve); from a clone of this repository: "
           "pip install -e ./retriever")

WHAT = {"index": "Index a dataset's paragraphs and/or a corpus (BM25, dense, hybrid)",
        "serve": "Serve an index over HTTP with Search-R1's retriever protocol"}


def _missing(name: str) -> Any:
    def command(ctx: typer.Context) -> None:
        fail(f"curriculum {name} needs rag-retriever (the retriever, its own distribution), which is not installed",
             INSTALL)

    shown = INSTALL.replace("[", "\\[")  # rich markup would read [retrieval] as a tag
    command.__doc__ = f"{WHAT[name]}: needs rag-retriever, not installed here ({shown})."
    return command


def register(app: typer.Typer) -> None:
    for name in WHAT:
        app.command(name, context_settings={"help_option_names": ["-h", "--help"], "ignore_unknown_options": True,
                                            "allow_extra_args": True})(_missing(name))
