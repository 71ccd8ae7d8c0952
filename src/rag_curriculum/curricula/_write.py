"""Build stage 4, write: the manifest (the recorded config, the sources, the plan's counts and facts), then, in one
direction, the shards written through the render stage into a partial output folder
(:class:`~rag_curriculum.shards.ShardOutput`), the origin and prompt-length statistics read back from them, the
data card and the manifest, and the folder moved into place."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import cards
from .._plumbing import current_command, trainer_tail
from .._version import __version__
from ..difficulty import shown_level
from ..lengths import LengthStats, tokenizer_info
from ..loaders import get_loader
from ..shards import (
    PROMPT_TOKENS,
    ROW_SCHEMA,
    ShardOutput,
    portable_path,
    relative_path,
    row_schema,
    sha256_file,
)
from ._config import BuildConfig
from ._plan import BuildPlan, plan_summary, source_K
from ._render import ADAPTIVE_COLUMNS, write_plan
from ._sources import BuildSources, LoadedSource, _is_hub

log = logging.getLogger(__name__)


def origin_summary(directory: Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The origins of the shown passages, the BM25 ranks of the distractors and, in the retrieved setting, the
    distribution of recall@N, read back from the written shards (only those columns): what the manifest and the
    data card report for builds with an index."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    origins: Counter = Counter()
    ranks: Counter = Counter()
    recall: Counter = Counter()
    edges = np.array([5, 10, 20, 50])  # the upper ends of _RANK_BUCKETS but the last
    for e in entries:
        t = pq.ParquetFile(directory / e["file"]).read(columns=[
            "passages.list.element.is_gold", "passages.list.element.origin", "passages.list.element.bm25_rank",
            "gold_recall", "answerable"])
        p = pc.list_flatten(t.column("passages").combine_chunks())
        flat = pa.table({"is_gold": p.field("is_gold"), "origin": p.field("origin")})
        for row in flat.group_by(["is_gold", "origin"]).aggregate([("is_gold", "count")]).to_pylist():
            origins[f"{'gold' if row['is_gold'] else 'distractor'}:{row['origin']}"] += row["is_gold_count"]
        r = p.field("bm25_rank").filter(pc.and_(pc.invert(p.field("is_gold")), pc.is_valid(p.field("bm25_rank"))))
        counts = np.bincount(np.searchsorted(edges, r.to_numpy(zero_copy_only=False), side="left"), minlength=5)
        for bucket, c in zip(_RANK_BUCKETS, counts.tolist(), strict=True):
            ranks[bucket] += c
        rec = t.column("gold_recall").filter(pc.and_(pc.is_valid(t.column("gold_recall")), t.column("answerable")))
        for row in pc.value_counts(rec).to_pylist():
            recall[f"{row['values']:.2f}"] += row["counts"]
    out: dict[str, Any] = {"origins": dict(sorted(origins.items())),
                           "distractor_bm25_ranks": {k: ranks[k] for k in _RANK_BUCKETS if ranks[k]}}
    if recall:
        n = sum(recall.values())
        out["gold_recall"] = {"distribution": dict(sorted(recall.items())),
                              "mean": round(sum(float(k) * v for k, v in recall.items()) / n, 4),
                              "all": recall.get("1.00", 0), "none": recall.get("0.00", 0),
                              "some": n - recall.get("1.00", 0) - recall.get("0.00", 0)}
    return out


_RANK_BUCKETS = ("1-5", "6-10", "11-20", "21-50", "51+")


def _rank_bucket(rank: int) -> str:
    return "1-5" if rank <= 5 else "6-10" if rank <= 10 else "11-20" if rank <= 20 else "21-50" if rank <= 50 else "51+"


def _portable(path: str | None, out: str | Path) -> str | None:
    if path is None or _is_hub(path) or not Path(path).exists():
        return path  # a Hub id (or a name the loaders resolve), kept as given
    return portable_path(path, out)


def recorded_config(cfg: BuildConfig) -> dict[str, Any]:
    """The configuration as the manifest records it: local paths relative to the output where they lie inside
    or beside it, else file names (cards and manifests are published as they are; the sources' checksums
    identify the files)."""
    d = cfg.to_dict()
    out = cfg.out
    for s in d["sources"]:
        s["input"] = _portable(s["input"], out)
    d["eval_sets"] = [_portable(str(e), out) for e in d["eval_sets"]]
    if d.get("tokenizer"):
        d["tokenizer"] = _portable(d["tokenizer"], out)
    d["out"] = Path(out).name
    return json.loads(json.dumps(d))


def same_build(manifest: dict[str, Any], cfg: BuildConfig) -> bool:
    """Whether a shard directory was built by ``cfg``: the recorded configuration, and the checksum of every
    local input file (the configuration names a file by a portable path, which does not identify its content)."""
    if manifest.get("config") != recorded_config(cfg):
        return False
    recorded = {s.get("dataset"): s.get("sha256") for s in manifest.get("sources") or []}
    for spec in cfg.sources:
        if spec.input and not _is_hub(spec.input):
            name = get_loader(spec.dataset).name
            try:
                if recorded.get(name) != sha256_file(spec.input):
                    return False
            except OSError:
                return False
    return True


def _source_record(s: LoadedSource, out: str) -> dict[str, Any]:
    inp = s.spec.input
    local = bool(inp) and not _is_hub(inp)
    return {
        "dataset": s.dataset,
        "input": Path(inp).name if local else inp,  # the file name; the path is in `path` when portable
        "path": relative_path(inp, out) if local else None,  # relative to the output, when inside or beside it
        "split": s.examples[0].split if s.examples else None,
        "sha256": s.checksum,
        "hub": (inp[len("hf://"):] if _is_hub(inp) else None if inp else get_loader(s.dataset).hub_path),
        "records_loaded": len(s.examples) + sum(s.excluded.values()), "excluded": dict(s.excluded),
        "skipped": dict(s.report.counts), "license": get_loader(s.dataset).license,
    }




def build_manifest(cfg: BuildConfig, sources: BuildSources, plan: BuildPlan, *,
                   command: str | None = None) -> dict[str, Any]:
    """The manifest before the shards are written (:func:`write_build` completes it)."""
    rows, facts = plan.rows, plan.facts
    loaded = sources.loaded
    tail = trainer_tail(len(rows), cfg.batch_prompts) if cfg.setting == "curriculum" else None
    manifest: dict[str, Any] = {
        "kind": cfg.setting,
        "toolkit": {"name": "rag-curriculum", "version": __version__},
        "config": recorded_config(cfg),
        "seed": cfg.seed,
        "K": {s.dataset: (cfg.K or source_K(cfg, s.dataset)) for s in loaded},
        "command": command or current_command(),
        "sources": [{**_source_record(s, cfg.out), "sampled": facts["per_source"].get(s.dataset, 0)}
                    for s in loaded],
        "counts": plan_summary(rows, as_built=cfg.setting == "curriculum"),
        "trainer_tail": tail,
    }
    for k in ("n_up_to", "leakage", "tail_fit", "unanswerable", "row_order", "capped_levels", "short_rows", "profile"):
        if k in facts:
            manifest[k] = facts[k]
    if sources.index is not None:  # completed from the shards once they are written (origin_summary)
        manifest["distractors"] = {**sources.distractors.facts(), "index": sources.index.describe(cfg.out)}
    if "leakage" in manifest:
        manifest["leakage"]["eval_sets"] = recorded_config(cfg)["eval_sets"]
    if tail and tail["unseen_rows"]:
        log.warning("%s", tail_warning(tail, len(rows), cfg.tail))
    return manifest


def tail_warning(tail: dict[str, Any], rows: int, policy: str) -> str:
    """What the build says of the rows a trainer of ``tail["batch_prompts"]`` prompts a step never trains: the
    rows, the batch and the steps, and only the options not already given (``policy``: ``--tail``)."""
    batch, steps, unseen = tail["batch_prompts"], tail["steps"], tail["unseen_rows"]
    others = [f"--tail {o}" for o in ("trim", "pad") if o != policy and not (o == "trim" and steps == 0)]
    if steps == 0:
        return (f"this curriculum cannot train: its {rows} row(s) are fewer than one batch of --batch-prompts "
                f"{batch}, so a trainer that drops the last partial batch trains 0 steps and never sees any of them "
                f"(use {' or '.join([*others, f'more rows (--n {batch} or more)', f'--batch-prompts {rows}'])})")
    advice = f" (use {' or '.join(others)})" if others else ""
    return (f"a trainer with {batch} prompts per step drops the last partial batch: {steps} step(s), and {unseen} "
            f"row(s) of {rows} will never be trained on{advice}")


def write_build(cfg: BuildConfig, sources: BuildSources, plan: BuildPlan, manifest: dict[str, Any], *,
                tokenizer: Any = None, progress: bool = False, card: bool = True) -> dict[str, Any]:
    """Stage 4, in the order a reader relies on: render the rows into the shards of a partial output folder
    (:func:`~._render.write_plan`, forked writers), complete the manifest from them (origins and BM25 ranks with an
    index, prompt lengths with a tokenizer), write the data card (unless ``card`` is False), then the manifest, and
    move the folder into place at ``cfg.out`` (:class:`~rag_curriculum.shards.ShardOutput`); the final manifest."""
    rows = plan.rows
    adaptive = ADAPTIVE_COLUMNS if cfg.schedule == "adaptive" else ()
    extra = (PROMPT_TOKENS, *adaptive) if tokenizer is not None else adaptive
    schema = row_schema(*extra) if extra else ROW_SCHEMA
    with ShardOutput(cfg.out, overwrite=cfg.overwrite, rows_per_shard=cfg.rows_per_shard) as output:
        lengths: list[LengthStats] = []
        entries = write_plan(rows, cfg, output.path, progress=progress, tokenizer=tokenizer,
                             source=sources.distractors, lengths=lengths if tokenizer is not None else None)
        if sources.index is not None:
            manifest["distractors"].update(origin_summary(output.path, entries))
        if tokenizer is not None:
            manifest["prompt_tokens"] = _prompt_tokens(cfg, tokenizer, lengths)
        full = output.manifest(manifest, entries, columns=schema.names)
        if card:
            shown = ([shown_level(r.level, r.hops, r.d) if r.hops else r.level for r in rows]
                     if cfg.setting == "curriculum" else None)
            cards.write_build_card(output.path, full, [r.level for r in rows], retriever_text(full), shown)
        return output.commit(full)


def _prompt_tokens(cfg: BuildConfig, tokenizer: Any, per_shard: list[LengthStats]) -> dict[str, Any]:
    """The manifest's ``prompt_tokens`` record from the shards' prompt lengths, the longest prompt logged."""
    stats = per_shard[0]
    for s in per_shard[1:]:
        stats = stats.merge(s)
    record = stats.to_manifest(tokenizer_info(cfg.tokenizer, tokenizer))
    longest = record["longest"]
    log.info("longest prompt: %d tokens (row %s, curriculum_index %d, level %d) with %s's chat template",
             longest["tokens"], longest["id"], longest["curriculum_index"], longest["level"], cfg.tokenizer)
    return record


#: What a source that draws from the index's ranking gives (a kind's ``distractors`` left None).
RANKED = "each question's best-ranked passages that are neither a copy of a gold paragraph nor contain an answer"


def retriever_text(manifest: dict[str, Any]) -> dict[str, str] | None:
    """What the data card says of the index a build drew from, as its retriever kind declares it (its label, what
    its distractors are, its settings in one line); None for a build without an index."""
    record = manifest.get("distractors")
    if not record:
        return None
    from rag_retriever import get_kind  # the index a build drew from: rag-retriever is there

    ix = record["index"]
    kind = get_kind(ix.get("retriever", "bm25"))
    negatives = kind.negatives or f"{kind.title()} hard negatives"
    return {"label": kind.title(), "what": f"{negatives}: {RANKED}" if kind.distractors is None else negatives,
            "settings": kind.settings_line(ix)}
