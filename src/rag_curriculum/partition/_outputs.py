"""Writing a finished partition: ``stats.parquet``, the three bucket shard directories with their data cards and
the pass-rate plot, and ``partition.json`` (last)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._commit import commit_set, prepare_set
from .._plumbing import SUMMARY_FILE, WORK, atomic_write_with, redact_command
from .._version import __version__
from ..cards import plot_histogram, write_partition_card
from ..errors import PartitionError
from ..generation.runner import IncompleteRunError, WorkDir, read_backend, read_completions
from ..models import model_settings
from ..shards import portable, read_manifest, read_table, write_json, write_shards
from ._agent import AGENT_SCORING, AGENT_STAT_FIELDS
from ._config import PASS_RATE_PLOT, STATS_FILE, PartitionConfig
from ._inputs import _input_path, _public_config, _recorded_input, input_digest
from ._set import PARTITION_SET
from ._stats import (
    COMPLETIONS_FIELD,
    PASS_AT_K,
    STAT_FIELDS,
    Scoring,
    _row_counts,
    _tail,
)

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


def scoring_for(cfg: PartitionConfig) -> Scoring:
    """The partition ``cfg`` asks for: a search agent's with ``agent`` set, else the closed-context pass@k one."""
    return AGENT_SCORING if getattr(cfg, "agent", None) else PASS_AT_K


def finalize_partition(out: str | Path, cfg: PartitionConfig, *, input_dir: str | Path | None = None,
                       command: str | None = None) -> dict[str, Any]:
    """Score every completion in ``OUT/work`` and write ``stats.parquet``, the three shard directories and
    ``partition.json`` (last). Deterministic: the same completions and options give byte-identical files."""
    out = Path(out)
    wd, run, input_dir, manifest, rows, results = _completed_run(out, input_dir)
    scoring = scoring_for(cfg)  # the closed-context pass@k partition, or a search agent's (--agent)
    stats = scoring.question_stats(rows, results, cfg)
    kept, balance_info = scoring.select(stats, cfg)
    written = set().union(*(kept[b] for b in scoring.kept))
    stats = stats.set_column(stats.schema.get_field_index("kept"), "kept",
                             pa.array([p in written for p in stats.column("position").to_pylist()], pa.bool_()))
    if cfg.keep_completions:
        stats = stats.append_column(COMPLETIONS_FIELD, results.column("completions"))
    counts = scoring.counts(stats, run)
    base = {
        "kind": manifest.get("kind", "curriculum"),
        "toolkit": {"name": "rag-curriculum", "version": __version__},
        "command": redact_command(command),
        "config": _public_config(cfg),
        "seed": cfg.seed,
        "input": {"path": _input_path(input_dir, out), "digest": input_digest(manifest), "kind": manifest.get("kind"),
                  "num_rows": manifest.get("num_rows"), "config": manifest.get("config")},
        "sources": manifest.get("sources", []),
        "K": manifest.get("K"),
        "generation": _generation_record(wd, run),
        "model_settings": model_settings(cfg.model) if cfg.model else None,
    }
    if cfg.input and not cfg.shards:  # built from the file: how many of "up to n" questions it gave
        held = (manifest.get("n_up_to") or {}).values()
        base["sample"] = {"n": cfg.n, "questions": manifest.get("num_rows"),
                          "all_of_file": cfg.n is None or any(True for _ in held),
                          "available": next((h["available"] for h in held), None)}
    # The whole set is written into a staging folder inside OUT, then moved into place (_commit.commit_set): a
    # full disk or a crash while writing leaves the previous set as it was, never part of a new one.
    stage = prepare_set(out, PARTITION_SET)
    try:
        stage.mkdir()
        _write_table(stage / STATS_FILE, stats)
        base["set"] = _set_id(stage / STATS_FILE, base)
        plot = _plot_bytes(stage, stats, run["sampling"]["n"])
        outputs = {}
        for bucket in scoring.outputs:
            table = _bucket_rows(rows, stats, sorted(kept[bucket]), keep_completions=cfg.keep_completions,
                                 results=results, stat_fields=scoring.stat_fields)
            m = {k: v for k, v in base.items() if k != "set"}
            m["partition"] = {"bucket": bucket, "rule": scoring.rule(bucket, cfg), "balance": balance_info,
                              "counts": counts, "set": base["set"]}
            m["counts"] = _row_counts(table)
            m["trainer_tail"] = _tail(manifest, table.num_rows)
            write_shards(table, stage / bucket, manifest=m, overwrite=True, rows_per_shard=cfg.rows_per_shard,
                         card=lambda d, mm, b=bucket: _write_card(d, mm, b, plot, scoring.card))
            outputs[bucket] = {"path": bucket, "rows": table.num_rows}
        summary = {**base, "kind": "partition-summary", "counts": counts, "balance": balance_info,
                   "outputs": outputs, "stats": STATS_FILE}
        write_json(stage / SUMMARY_FILE, portable(summary, out))  # no absolute path, as the manifests
        commit_set(stage, out, scoring.outputs, PARTITION_SET)
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        where = f" ({e.filename})" if e.filename and stage.name not in str(e.filename) else ""
        raise PartitionError(f"cannot write the outputs into {out}: {e.strerror or e}{where}; nothing of them was "
                             f"written and the completions in {out / WORK} are kept. Free some space or fix the "
                             "permissions, then run the same command again") from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log.info("%s: %s of %d questions", out, ", ".join(f"{counts[b]} {b}" for b in scoring.outputs),
             counts["questions"])
    return summary


def _completed_run(out: Path, input_dir: str | Path | None
                   ) -> tuple[WorkDir, dict[str, Any], Path, dict[str, Any], pa.Table, pa.Table]:
    """What a finished generation in ``OUT/work`` scores: its work folder and run record, the input shard
    directory (the recorded one unless given) and its manifest, the input rows and every question's completions;
    refused when the input is not the one the completions were generated from, or a chunk is missing."""
    wd = WorkDir(out / WORK)
    run = wd.read_run()
    if run is None:
        raise PartitionError(f"{out}: no {WORK}/run.json; run `curriculum partition` first")
    if input_dir is None:
        input_dir = _recorded_input(out, run)
    input_dir = Path(input_dir)
    manifest = read_manifest(input_dir)
    if input_digest(manifest) != run["fingerprint"].get("input"):
        raise PartitionError(f"{input_dir} is not the input these completions were generated from (content "
                             "differs); pass the original shard directory")
    rows = read_table(input_dir)
    try:
        results = read_completions(wd, ids=rows.column("id").to_pylist())
    except IncompleteRunError as e:
        raise PartitionError(f"{e}; run the missing shards (or `curriculum partition-merge` their directories)"
                             ) from None
    return wd, run, input_dir, manifest, rows, results


def _generation_record(wd: WorkDir, run: Mapping[str, Any]) -> dict[str, Any]:
    """How the completions were generated, as the outputs record it: the run's fingerprint, sampling, chunks and
    seeds, and the engine's settings as it resolved them (per-platform choices included)."""
    generation = {"fingerprint": run["fingerprint"], "sampling": run["sampling"], "chunk_size": run["chunk_size"],
                  "question_seeds": run["question_seeds"]}
    resolved = read_backend(wd)
    if resolved is not None:
        generation["backend"] = resolved
    return generation


def _set_id(stats_file: Path, base: Mapping[str, Any]) -> str:
    """The identity of one set of outputs (its statistics and what made them), shared by ``partition.json`` and the
    buckets' manifests, so a reader can tell that a bucket belongs to the ``partition.json`` beside it."""
    h = hashlib.sha256()
    with open(stats_file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    what = {**base, "config": {k: v for k, v in (base.get("config") or {}).items() if k != "out"}}
    h.update(json.dumps(what, sort_keys=True, default=str).encode())  # not where it is: a copy is the same set
    return h.hexdigest()[:20]


def _bucket_rows(rows: pa.Table, stats: pa.Table, positions: list[int], *, keep_completions: bool,
                 results: pa.Table, stat_fields: list[pa.Field] = STAT_FIELDS) -> pa.Table:
    idx = pa.array(positions, pa.int64())
    base = rows.take(idx)
    ours = {f.name for f in (*STAT_FIELDS, *AGENT_STAT_FIELDS)} | {COMPLETIONS_FIELD.name}
    base = base.drop_columns([c for c in base.schema.names if c in ours])  # re-partitioning a partition's output
    # renumber the training position; keep the input's in `input_index`
    n = len(positions)
    new_index = pa.array(range(n), pa.int64())
    cols = {name: base.column(name) for name in base.schema.names}
    cols["curriculum_index"] = new_index
    if "extra_info" in cols:
        ei = cols["extra_info"].combine_chunks()
        if isinstance(ei, pa.StructArray) and ei.type.get_field_index("index") >= 0:
            fields = [ei.type.field(i) for i in range(ei.type.num_fields)]
            arrays = [new_index if f.name == "index" else ei.field(i) for i, f in enumerate(fields)]
            cols["extra_info"] = pa.StructArray.from_arrays(arrays, fields=fields, mask=ei.is_null())
    st = stats.take(idx)
    cols["input_index"] = idx
    for f in stat_fields[1:]:
        cols[f.name] = st.column(f.name)
    schema_fields = [base.schema.field(name) for name in base.schema.names] + stat_fields
    if keep_completions:
        cols[COMPLETIONS_FIELD.name] = results.column("completions").take(idx)
        schema_fields.append(COMPLETIONS_FIELD)
    schema = pa.schema(schema_fields)
    return pa.table([cols[f.name] for f in schema], schema=schema)


def _write_table(path: Path, table: pa.Table) -> None:
    atomic_write_with(path, lambda tmp: pq.write_table(table, tmp, compression="zstd", compression_level=3,
                                                       row_group_size=1 << 16))


def _plot_bytes(out: Path, stats: pa.Table, n: int) -> bytes | None:
    rates = [v for v in stats.column("pass_rate").to_pylist() if v is not None]
    if not rates:
        return None
    tmp = out / f".tmp-{os.getpid()}-{PASS_RATE_PLOT}"
    try:
        plot_histogram(rates, tmp, title=f"pass rate c/k over {len(rates):,} questions (k = {n} samples each)",
                       xlabel="pass rate c/k (pass@1)", bins=n + 1)
        return tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)


def _write_card(directory: Path, manifest: Mapping[str, Any], bucket: str, plot: bytes | None,
                card: Any = None) -> None:
    """A bucket's data card (``data_cards/partition.md``, written by ``card``: the scoring's) and the pass-rate plot
    beside it."""
    if plot is not None:
        (directory / PASS_RATE_PLOT).write_bytes(plot)
    (card or write_partition_card)(directory, manifest, bucket, plot=PASS_RATE_PLOT if plot is not None else None)
