"""Accuracy-based partition (RAG-RL section 3.2 "Accuracy-Based Difficulty", 4.4.2, appendix A).

Sample ``k`` completions from the base model for every question (normally a ``--schedule max`` build, the
hardest level), parse each with the row's output format, score its final answer by answer F1 (maximum over the
gold aliases), and split the questions:

- ``answerable/``: some sample reaches F1 = 1 (max F1 = 1, pass@k = 1), *base-answerable*;
- ``unanswerable/``: none does, *base-unanswerable*; with ``balance`` both are clipped to the same size with the
  seed, as the paper does;
- ``learnable/``: ``0 < c < k`` (c correct of the k = ``--pass-at`` samples), the questions whose GRPO groups have a non-zero advantage;
- ``stats.parquet``: one row per question: ``n``, ``c``, every sample's F1, max / mean F1, pass@k for every
  k <= n (unbiased estimator), format validity, the parsed answers, the bucket.

Output directories are shard directories (manifest, data card with the pass-rate distribution) whose rows are the
input rows (builder schema) plus the statistics columns, in input order, with ``curriculum_index`` renumbered to
the position in the new set (``input_index`` keeps the old one).

Generation goes through :mod:`rag_curriculum.generation.runner`: chunked, flushed atomically to ``OUT/work``,
resumed by running the same command again, and split over processes with ``num_shards`` / ``shard_index``. Raw
completions are kept in ``work/`` so the buckets can be recomputed (another ``correct_f1``, ``strict_format``,
``balance``) without generating again: run the command again with the new options.

The package's modules, in the order a run goes through them: ``_config`` (:class:`PartitionConfig`, the file
names), ``_inputs`` (the input shard directory, its digest, the backend), ``_run`` (:func:`partition`), ``_stats``
(scoring, ``stats.parquet``, the buckets), ``_outputs`` (:func:`finalize_partition`: the buckets, their data cards,
``partition.json``), ``_set`` (the outputs appear as a set) and ``_merge`` (:func:`merge_partitions`); beside
them, ``_profile`` (:func:`profile`, ``curriculum profile``) samples the same questions at several levels through
the same runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports

# The names imported under TYPE_CHECKING below load on first use (the command line reads PartitionConfig's help
# without importing pyarrow). ``output_set_problem`` is the check every reader of a bucket makes (defined below
# ``shards``, which applies it, in :mod:`rag_curriculum._plumbing`).
__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from .._plumbing import output_set_problem
    from ..errors import PartitionError
    from ._config import OUTPUTS, STATS_FILE, PartitionConfig, PartitionResult
    from ._merge import merge_partitions
    from ._outputs import finalize_partition
    from ._profile import PROFILE_SCHEMA, ProfileConfig, ProfileResult, finalize_profile, profile
    from ._run import partition
    from ._stats import STATS_SCHEMA, score_completions

__all__ = [
    "OUTPUTS", "STATS_FILE", "STATS_SCHEMA", "PartitionConfig", "PartitionError", "PartitionResult",
    "finalize_partition", "merge_partitions", "output_set_problem", "partition", "score_completions",
    "PROFILE_SCHEMA", "ProfileConfig", "ProfileResult", "finalize_profile", "profile",
]
