"""Datasets whose paragraphs and questions an index may hold besides a corpus (``--dataset NAME --input FILE``).

The retriever reads no dataset format itself: a *dataset reader* does, registered in Python
(:func:`register_dataset_reader`) or declared by an installed package as an entry point of the group
:data:`ENTRY_POINTS` (rag-curriculum declares its loaders: hotpotqa, musique, 2wikimultihopqa, ...). A reader has

* ``name(dataset)``: the dataset's canonical name (an unknown one raises, naming the known ones);
* ``read(dataset, path, *, on_error, report)``: the file's examples, each with ``id``, ``question`` and
  ``documents`` (each with ``title``, ``text`` and ``is_gold``), in file order; a bad record raises an error naming
  the file, the record and the field, or with ``on_error="skip"`` is left out and added to ``report`` (its
  ``add(error)``);
* ``loggers``: the names of the loggers reading says what it skipped through (kept quiet on a second reading).
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

#: The entry-point group of installed dataset readers.
ENTRY_POINTS = "rag_retriever.dataset_readers"

_READERS: list[Any] = []


def register_dataset_reader(reader: Any) -> None:
    """Use ``reader`` for ``--dataset`` (the most recently registered first)."""
    if reader not in _READERS:
        _READERS.insert(0, reader)


def dataset_reader() -> Any:
    """The dataset reader: the one registered last, else the first an installed package declares.

    Raises:
        ConfigError: none is registered or installed.
    """
    if not _READERS:
        from importlib.metadata import entry_points

        for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
            _READERS.append(ep.load())
    if not _READERS:
        raise ConfigError("--dataset needs a dataset reader, and none is installed",
                          hint="index a corpus alone (--corpus FILE.jsonl), or install rag-curriculum, whose "
                               "loaders read hotpotqa, musique and 2wikimultihopqa files")
    return _READERS[0]
