"""The dataset reader the retriever reads ``--dataset NAME --input FILE`` with: the toolkit's loaders (every
registered dataset: hotpotqa, musique, 2wikimultihopqa, and a user's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..loaders import get_loader, load_examples


class LoaderReader:
    """:mod:`rag_retriever._datasets`'s reader interface over :mod:`rag_curriculum.loaders`."""

    #: The loggers the loaders report skipped records through.
    loggers = ("rag_curriculum.loaders",)

    def name(self, dataset: str) -> str:
        """The dataset's canonical name (``2wiki`` is ``2wikimultihopqa``); an unknown one raises
        :class:`~rag_curriculum.errors.UnknownNameError`."""
        return get_loader(dataset).name

    def read(self, dataset: str, path: str | Path, *, on_error: str = "raise", report: Any = None) -> Any:
        """The file's examples, as the toolkit's loader reads them (a stream with the dataset's ``dataset``)."""
        return load_examples(dataset, path, on_error=on_error, report=report)  # type: ignore[arg-type]


READER = LoaderReader()
