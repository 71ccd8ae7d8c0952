"""The outputs as a set: a partition's buckets, ``stats.parquet`` and ``partition.json``, committed together through
the commit module's :class:`~rag_curriculum._commit.OutputSet` protocol (the set staged inside ``OUT``, then moved
in whole, ``partition.json`` last; the files a user put in a bucket carried over); readers ask
:func:`output_set_problem` before reading a bucket."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._commit import OutputSet
from .._plumbing import SUMMARY_FILE, output_set_problem
from ..errors import PartitionError
from ._config import ALL_OUTPUTS, STATS_FILE

#: A partition's set: the buckets of either kind of partition (a search agent's has its own), ``stats.parquet``
#: beside them, ``partition.json`` last.
PARTITION_SET = OutputSet(members=ALL_OUTPUTS, files=(STATS_FILE,), summary=SUMMARY_FILE, error=PartitionError)


def check_output_set(directory: str | Path, manifest: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`PartitionError` with :func:`output_set_problem`'s message when there is one."""
    problem = output_set_problem(directory, manifest)
    if problem:
        raise PartitionError(problem)
