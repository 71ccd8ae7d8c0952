"""The builder: examples -> rows of controlled difficulty in curriculum order -> shards + manifest + data card.

Reproduces RAG-RL's construction (sections 3.2, 4.4, appendix A): questions are sampled without replacement
with the build seed; the schedule maps each row index ``i`` to a level ``l``; a row of level ``l`` holds every
gold document and ``d = min(max(l + 2 - j, 0), k)`` distractors. Which distractors, and the order in which the
documents are shown, come from a random generator seeded by ``(build seed, dataset, example id)`` only, so a row
never changes when other rows are added, and the distractors of level ``l`` are a subset of those of ``l + 1``.

Unanswerable rows (``--unanswerable-fraction P``): whether a row is one is decided by ``(build seed, dataset,
example id)`` alone (:func:`is_unanswerable`), so a row's status never changes when other rows are added. Such a row
shows no gold passage: each is replaced by the next unused distractor of the row's own seeded order (the
replacement takes the gold passage's place, so the passage count holds and a row of level ``l`` still shows a
subset of level ``l + 1``'s passages); its answer is the abstention answer, its ``gold_labels`` empty, its
``answerable`` false. When the row's distractors run out (the dataset's are all shown already, as at the top
levels of HotpotQA and in the distractor setting) the row shows the distractors it has: fewer passages, counted
in the manifest (``unanswerable.short_rows``, ``missing_passages``) and warned about.

The build runs in four stages, each a module with one typed hand-off: sources (:mod:`._sources`, the examples and
the distractor source: :class:`BuildSources`) -> plan (:mod:`._plan`, levels and documents per row:
:class:`BuildPlan`) -> render (:mod:`._render`, rows as Arrow columns, forked shard writers: the shards' entries)
-> write (:mod:`._write`, shards, manifest and card). This module runs them in order: :func:`build_curriculum`, and
:func:`build_rows` (the same build without its data card, for the partition's own copy of its input).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._commit import check_output
from .._plumbing import gc_paused
from ..cards import pyplot
from ..errors import BuildError
from ..lengths import load_tokenizer
from ..loaders import get_loader
from ._calibrated import load_profile
from ._config import BuildConfig
from ._plan import make_plan, no_rows_error
from ._sources import gather_sources
from ._write import build_manifest, write_build

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    """What :func:`build_curriculum` wrote.

    Attributes:
        out: the shard folder.
        manifest: its ``manifest.json``, as written (the resolved config, the shards, the level counts, ...).
        rows: the number of rows written.
    """

    out: Path
    manifest: dict[str, Any]
    rows: int


def build_curriculum(cfg: BuildConfig, *, command: str | None = None, progress: bool = False) -> BuildResult:
    """Load, sample, order, render and write a curriculum (or an evaluation set) as described by ``cfg``.

    The output folder gets the Parquet shards in curriculum order, ``manifest.json`` and the data card
    (``README.md``, with its plot); ``curriculum build`` calls this.

    Args:
        cfg: the build's settings (sources, schedule, setting, distractors, seed, ``out``, ...).
        command: the command line to record in the manifest and card (None: none recorded).
        progress: show progress bars while loading, rendering and writing.

    Returns:
        The output folder, its manifest and the number of rows.

    Raises:
        ConfigError: settings that cannot be used together (no dataset, ``--distractors bm25`` without an index,
            ...), or a value out of range.
        ShardError: ``cfg.out`` exists and is not an output of this toolkit, or is not empty and
            ``cfg.overwrite`` is False.
        DataError: a source record that cannot be read (with ``on_error="raise"``); a
            :class:`~rag_curriculum.WrongDatasetError` for a file of another dataset.
        BuildError: a build that cannot be made as asked: a dataset twice in the mixture, no rows, more questions
            asked for than the source has, training questions found in an evaluation set (``leakage="refuse"``).
        UnknownNameError: an unknown dataset, schedule or template name.

    Examples:
        ```python
        from rag_curriculum import BuildConfig, build_curriculum

        cfg = BuildConfig.from_dict({"dataset": "musique", "input": "musique_ans_v1.0_train.jsonl", "n": 1000,
                                     "schedule": "min-max", "out": "outputs/musique-min-max"})
        result = build_curriculum(cfg)
        result.rows, result.manifest["counts"]   # rows written; rows per level, hops and source
        ```
    """
    pyplot()  # for the card, imported here: its import would keep the build's frame, and its rows, alive
    with gc_paused():
        return _build(cfg, command=command, progress=progress, card=True)


def build_rows(cfg: BuildConfig, *, command: str, progress: bool = False) -> dict[str, Any]:
    """The build of ``cfg`` without its data card and plot (the partition's own copy of its input is read, not
    published: no matplotlib, no figure): the shards and the manifest's record of them are those
    :func:`build_curriculum` writes for the same config, so a build of either kind is reused
    (:func:`~._write.same_build`).

    Args:
        cfg: the build's settings.
        command: the command line recorded in the manifest.
        progress: show progress bars.

    Returns:
        The manifest written (``manifest.json``).

    Raises:
        CurriculumError: what :func:`build_curriculum` raises, for the same reasons.
    """
    with gc_paused():
        return _build(cfg, command=command, progress=progress, card=False).manifest


def _build(cfg: BuildConfig, *, command: str | None, progress: bool, card: bool) -> BuildResult:
    check_output(cfg.out, overwrite=cfg.overwrite)  # fail before loading anything, not after
    cfg.validate()
    if cfg.profile:  # a profile of other questions or another model fails before anything is loaded
        load_profile(cfg, [get_loader(s.dataset).name for s in cfg.sources])
    tokenizer = load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None  # fail before loading the data, too
    for s in cfg.sources:
        s.dataset = get_loader(s.dataset).name
        s.input = str(s.input) if s.input is not None else None
    cfg.eval_sets = [str(e) for e in cfg.eval_sets]
    cfg.out = str(cfg.out)
    names = [s.dataset for s in cfg.sources]
    if len(set(names)) != len(names):
        raise BuildError(f"a dataset appears twice in the mixture: {names}")
    t0 = time.perf_counter()
    sources = gather_sources(cfg, progress=progress)  # 1. sources
    t1 = time.perf_counter()
    plan = make_plan(cfg, sources, progress=progress)  # 2. plan
    log.debug("loaded %d question(s) in %.2fs, planned %d row(s) in %.2fs",
              sum(len(s.examples) for s in sources.loaded), t1 - t0, len(plan.rows), time.perf_counter() - t1)
    if not plan.rows:
        raise no_rows_error(sources)
    manifest = build_manifest(cfg, sources, plan, command=command)
    t2 = time.perf_counter()
    manifest = write_build(cfg, sources, plan, manifest, tokenizer=tokenizer, progress=progress,  # 3. render, 4. write
                           card=card)
    log.debug("rendered and wrote %d shard(s) with the card in %.2fs", len(manifest["shards"]),
              time.perf_counter() - t2)
    return BuildResult(Path(cfg.out), manifest, len(plan.rows))
