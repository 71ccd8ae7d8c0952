"""Rows that can be shown at any level: the storage of ``curriculum build --schedule adaptive`` and the renderer
that shows a stored row at level ``l`` exactly as ``curriculum build --schedule max --K l`` would (same seed).

Why it works: a row's documents come from :func:`~._render.select_documents`, a generator seeded by ``(build
seed, dataset, example id)`` that shuffles the positions of the question's distractor pool, takes the first ``d``
(kept in source order), and shuffles them with the gold documents. The distractors of level ``l`` are therefore a
subset of those of ``l + 1``, and the documents of any level follow from three things: the gold documents and the
pool in source order, the pool's size (which fixes how the generator's draws go), and the seed. An adaptive row is
rendered at the top level ``K`` (so the shards are also a valid ``max`` curriculum, and their ``prompt_tokens``
the longest prompt of every level), plus two columns:

* ``source_position`` (one per passage): where the passage stands among the question's gold documents (``0 ..
  j - 1``) then its distractor pool (``j ..``), in source order;
* ``pool_size``: the size ``k`` of the distractor pool (some of it may never be shown, when ``d_K < k``).

:func:`render_at_levels` rebuilds each question's :class:`~rag_curriculum.records.Example` from them (pool entries
never shown at ``K`` are never shown below it either, so a placeholder holds their place) and renders it with the
builder's one renderer, :func:`~._render.render_rows`, at the level asked: the same code, the same generator, the
same bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..difficulty.synthetic import num_distractors
from ..errors import ConfigError, ShardError
from ..records import Document, Example
from ._config import BuildConfig
from ._plan import PlannedRow
from ._render import POOL_SIZE, SOURCE_POSITION, level_columns, render_rows

#: The schedule name of an adaptive build (registered in :mod:`.schedules`: every row at the top level K).
ADAPTIVE = "adaptive"
COLUMNS = (SOURCE_POSITION, POOL_SIZE)
__all__ = ["ADAPTIVE", "COLUMNS", "POOL_SIZE", "SOURCE_POSITION", "LevelRenderer", "is_adaptive", "level_columns"]
#: Row columns that do not depend on the level: kept from the stored row.
_KEEP = ("curriculum_index",)


def is_adaptive(manifest: Mapping[str, Any]) -> bool:
    """Whether a shard directory's manifest is an adaptive build."""
    return (manifest.get("config") or {}).get("schedule") == ADAPTIVE


class LevelRenderer:
    """Renders stored adaptive rows at chosen levels, with the build's seed, template and ability (from its
    manifest) and the builder's :func:`~._render.render_rows`.

    ``K_of(row)`` is the top level of the row's source (the manifest's ``K``); a level above it is refused."""

    def __init__(self, manifest: Mapping[str, Any], *, where: str = "the shards") -> None:
        if not is_adaptive(manifest):
            schedule = (manifest.get("config") or {}).get("schedule")
            raise ShardError(
                f"{where} hold a {schedule!r} curriculum, not an adaptive one: its rows cannot be shown at other "
                "levels", hint="build them with `curriculum build ... --schedule adaptive` (recipe: "
                               "musique-adaptive), then train on that directory")
        # every setting the renderer reads (seed, template, ability, index_base, unanswerable_fraction,
        # abstention_answer, ...) as the build recorded it; the sources and paths are not needed
        recorded = manifest["config"]
        skip = {"sources", "eval_sets", "out", "tokenizer", "schedule", "pieces", "workers", "overwrite"}
        known = {f.name for f in dataclasses.fields(BuildConfig)} - skip
        self.cfg = BuildConfig(**{k: v for k, v in recorded.items() if k in known}, schedule="max")
        self.K = {str(k): int(v) for k, v in (manifest.get("K") or {}).items()}
        if not self.K:
            raise ShardError(f"{where}: the manifest records no K per dataset", hint="rebuild the shards")
        self.where = where

    @property
    def max_K(self) -> int:
        return max(self.K.values())

    def K_of(self, row: Mapping[str, Any]) -> int:
        try:
            return self.K[row["data_source"]]
        except KeyError:
            raise ShardError(f"{self.where}: row {row.get('id')!r} is from {row.get('data_source')!r}, a dataset "
                             f"the manifest has no K for (it has {sorted(self.K)})") from None

    def example(self, row: Mapping[str, Any]) -> Example:
        """The question of a stored row as the builder saw it: gold documents then the distractor pool, in source
        order (pool entries the row never shows are placeholders no level up to K selects)."""
        passages, positions = row.get("passages"), row.get(SOURCE_POSITION)
        if positions is None or row.get(POOL_SIZE) is None or passages is None:
            raise ShardError(f"{self.where}: row {row.get('id')!r} has no {SOURCE_POSITION} / {POOL_SIZE} / passages",
                             hint="rebuild the shards with --schedule adaptive")
        if len(positions) != len(passages):
            raise ShardError(f"{self.where}: row {row.get('id')!r} has {len(passages)} passages but "
                             f"{len(positions)} {SOURCE_POSITION} entries")
        answerable = row.get("answerable") is not False
        # an unanswerable row shows no gold passage: placeholders hold the gold places (never shown at any level)
        hops = sum(1 for p in passages if p["is_gold"]) if answerable else int(row["hops"])
        gold: list[Document] = [Document("\x00gold", str(n), True) for n in range(hops)]
        pool: list[Document] = [Document("\x00", str(n), False) for n in range(int(row[POOL_SIZE]))]
        for p, pos in zip(passages, positions, strict=True):
            doc = Document(p["title"], p["text"], bool(p["is_gold"]))
            if (pos < hops) != doc.is_gold or pos >= hops + len(pool):
                raise ShardError(f"{self.where}: row {row.get('id')!r}: {SOURCE_POSITION} {pos} does not fit a "
                                 f"{'gold' if doc.is_gold else 'distractor'} passage ({hops} gold, pool of "
                                 f"{len(pool)})")
            if doc.is_gold:
                gold[pos] = doc
            else:
                pool[pos - hops] = doc
        return Example(id=row["source_id"], source=row["data_source"], split=row.get("split"),
                       question=row["question"], answers=list(row["answers"]), documents=gold + pool,
                       qtype=row.get("qtype"))

    def render(self, rows: Sequence[Mapping[str, Any]], levels: Sequence[int]) -> list[dict[str, Any]]:
        """Each row at its level: every column as ``--schedule max --K level`` builds it for that question (the
        curriculum index and the adaptive columns kept; ``prompt_tokens``, which would need the tokenizer, None)."""
        plan = []
        for row, level in zip(rows, levels, strict=True):
            K = self.K_of(row)
            if not 1 <= level <= K:
                raise ConfigError(f"level {level} for row {row.get('id')!r}: outside 1..{K} (K of "
                                  f"{row['data_source']})")
            ex = self.example(row)
            plan.append(PlannedRow(ex, int(level), num_distractors(int(level), ex.hops, int(row[POOL_SIZE])),
                                   ex.hops, row.get("answerable") is not False))
        out = []
        for row, new in zip(rows, render_rows(plan, self.cfg).to_pylist(), strict=True):
            merged = dict(row)
            merged.update(new)
            for key in _KEEP:
                merged[key] = row[key]
            merged["extra_info"] = {**new["extra_info"], "index": (row.get("extra_info") or {}).get(
                "index", row["curriculum_index"])}
            if "prompt_tokens" in merged:
                merged["prompt_tokens"] = None
            out.append(merged)
        return out
