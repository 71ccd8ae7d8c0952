"""Parquet shards with a manifest written last: the on-disk form of every curriculum, partition and eval set.

A shard directory holds ``part-00000.parquet``, ... (rows in curriculum order, fixed rows per shard, zstd),
a data card ``README.md`` and ``manifest.json``. Everything is written into a hidden temporary directory beside
the target and renamed into place at the end, and the manifest is the last file written, so an interrupted
write never leaves a directory that passes :func:`validate_shards`.

``datasets.load_dataset("parquet", data_files=shard_files(d))`` reads the shards as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CurriculumError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_ROWS_PER_SHARD = 10_000
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
PASSAGE = pa.struct([("label", pa.string()), ("title", pa.string()), ("text", pa.string()),
                     ("is_gold", pa.bool_())])
GROUND_TRUTH = pa.struct([("answers", pa.list_(pa.string())), ("gold_labels", pa.list_(pa.string()))])
EXTRA_INFO = pa.struct([
    ("index", pa.int64()), ("split", pa.string()), ("id", pa.string()), ("source", pa.string()),
    ("level", pa.int32()), ("hops", pa.int32()), ("labels", pa.list_(pa.string())),
])

#: The row schema every shard shares (DESIGN.md): one file serves TRL's GRPOTrainer and verl's RLHFDataset.
ROW_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("data_source", pa.string(), nullable=False),
    pa.field("ability", pa.string()),
    pa.field("prompt", pa.list_(MESSAGE), nullable=False),
    pa.field("question", pa.string()),
    pa.field("answers", pa.list_(pa.string())),
    pa.field("passages", pa.list_(PASSAGE)),
    pa.field("gold_labels", pa.list_(pa.string())),
    pa.field("level", pa.int32()),
    pa.field("num_distractors", pa.int32()),
    pa.field("hops", pa.int32()),
    pa.field("curriculum_index", pa.int64()),
    pa.field("reward_model", pa.struct([("style", pa.string()), ("ground_truth", GROUND_TRUTH)])),
    pa.field("extra_info", EXTRA_INFO),
    pa.field("source_id", pa.string()),
    pa.field("split", pa.string()),
    pa.field("qtype", pa.string()),
    pa.field("setting", pa.string()),
    pa.field("template", pa.string()),
]
ROW_SCHEMA = pa.schema(ROW_FIELDS)

#: Columns a shard may carry after the required ones, checked for their type when present: ``prompt_tokens``, the
#: length of ``prompt`` with the chat template applied (``curriculum build --tokenizer``).
OPTIONAL_FIELDS: list[pa.Field] = [
    pa.field("prompt_tokens", pa.int32()),
]
PROMPT_TOKENS = "prompt_tokens"


def row_schema(*optional: str) -> pa.Schema:
    """The row schema with the named optional columns appended (in :data:`OPTIONAL_FIELDS` order)."""
    unknown = set(optional) - {f.name for f in OPTIONAL_FIELDS}
    if unknown:
        raise ValueError(f"unknown optional column(s) {sorted(unknown)}")
    return pa.schema(ROW_FIELDS + [f for f in OPTIONAL_FIELDS if f.name in optional])


class ShardError(CurriculumError):
    """A shard directory that is missing, incomplete, or does not match its manifest."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def shard_files(directory: str | Path) -> list[Path]:
    """The shard files of a directory, in order (as the manifest lists them when there is one)."""
    d = Path(directory)
    mpath = d / MANIFEST
    if mpath.exists():
        return [d / s["file"] for s in json.loads(mpath.read_text())["shards"]]
    return sorted(d.glob("part-*.parquet"))


def rows_to_table(rows: Sequence[dict[str, Any]], schema: pa.Schema = ROW_SCHEMA) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (temporary name, then rename), with sorted keys so it is byte-stable."""
    _atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())


def check_output(out_dir: str | Path, *, overwrite: bool) -> Path:
    """Refuse an output that exists, unless ``overwrite`` and it is one of the toolkit's outputs (a directory
    holding a ``manifest.json``) or empty: ``--overwrite`` never deletes a directory of anything else."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ShardError(f"--out {out} is a file, not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ShardError(f"{out} already exists and is not empty; pass --overwrite (overwrite=True) to replace "
                             "it, or choose another --out")
        if not (out / MANIFEST).is_file():
            raise ShardError(f"{out} exists and is not an output of this toolkit (no {MANIFEST}); --overwrite only "
                             "replaces earlier outputs. Choose another --out, or remove it yourself")
    return out


def prepare_output(out_dir: str | Path, *, overwrite: bool) -> Path:
    """Check the output (see :func:`check_output`); return a hidden temporary directory beside it to write into."""
    out = check_output(out_dir, overwrite=overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ShardError(f"cannot create {out}: a parent path is a file; choose another --out") from None
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}-{time.time_ns()}"
    tmp.mkdir()
    return tmp


def commit_output(tmp: Path, out_dir: str | Path, *, overwrite: bool = True) -> Path:
    """Move a finished temporary directory into place (replacing an old one only now, at the very end).

    The existence check is made again here, so of two builds racing to one output without ``overwrite`` the
    second fails instead of replacing the first."""
    out = Path(out_dir)
    if out.exists():
        check_output(out, overwrite=overwrite)
        if not any(out.iterdir()):
            out.rmdir()
    if out.exists():
        trash = out.parent / f".{out.name}.old-{os.getpid()}-{time.time_ns()}"
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.rename(tmp, out)
        except OSError:
            raise ShardError(f"{out} appeared while this output was being written (another run?); nothing was "
                             "replaced. Pass --overwrite to replace it") from None
    return out


ROW_GROUP_SIZE = 1024


def write_one_shard(part: pa.Table, directory: Path, k: int) -> dict[str, Any]:
    """Write ``part-{k:05d}.parquet`` (zstd, fixed row groups) and return its manifest entry."""
    name = f"part-{k:05d}.parquet"
    path = directory / name
    pq.write_table(part, path, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL,
                   row_group_size=ROW_GROUP_SIZE, write_statistics=True, use_dictionary=True)
    return {"file": name, "rows": part.num_rows, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def write_shard_files(table: pa.Table, directory: Path, *, rows_per_shard: int = DEFAULT_ROWS_PER_SHARD
                      ) -> list[dict[str, Any]]:
    """Write ``part-NNNNN.parquet`` files (fixed rows per shard, zstd) and return their manifest entries."""
    if rows_per_shard < 1:
        raise ValueError("rows_per_shard must be >= 1")
    n = table.num_rows
    starts = range(0, n, rows_per_shard) if n else [0]
    return [write_one_shard(table.slice(start, rows_per_shard), directory, k) for k, start in enumerate(starts)]


ShardWriter = Callable[[Path], list[dict[str, Any]]]


def write_shards(
    table: pa.Table | Sequence[dict[str, Any]] | ShardWriter,
    out_dir: str | Path,
    *,
    manifest: dict[str, Any],
    overwrite: bool = False,
    rows_per_shard: int = DEFAULT_ROWS_PER_SHARD,
    card: Callable[[Path, dict[str, Any]], None] | None = None,
    extra_files: dict[str, bytes] | None = None,
    schema: pa.Schema = ROW_SCHEMA,
) -> dict[str, Any]:
    """Write a complete shard directory atomically; return the manifest.

    ``manifest`` holds what made the rows (config, seed, sources, counts); this adds the schema version, the
    shard list with a content hash per shard, and the row count. ``card(tmp_dir, manifest)`` writes the data card
    (and plots) before the manifest; ``extra_files`` are written as they are. The manifest is written last.

    ``table`` may also be a writer ``f(directory) -> shard entries`` that writes the ``part-*.parquet`` files
    itself (in ``schema``; the builder uses this to write shards in parallel worker processes).
    """
    if callable(table):
        writer: ShardWriter = table
        columns = schema.names
    else:
        if not isinstance(table, pa.Table):
            table = rows_to_table(table, schema)
        missing = [f.name for f in ROW_FIELDS if f.name not in table.schema.names]
        if missing:
            raise ShardError(f"rows lack the required columns {missing}")
        columns = table.schema.names
        tbl = table

        def writer(d: Path) -> list[dict[str, Any]]:
            return write_shard_files(tbl, d, rows_per_shard=rows_per_shard)

    tmp = prepare_output(out_dir, overwrite=overwrite)
    try:
        entries = writer(tmp)
        full = dict(manifest)
        full.update({
            "schema_version": SCHEMA_VERSION,
            "num_rows": sum(e["rows"] for e in entries),
            "rows_per_shard": rows_per_shard,
            "columns": columns,
            "shards": entries,
        })
        for name, data in (extra_files or {}).items():
            _atomic_write_bytes(tmp / name, data)
        if card is not None:
            card(tmp, full)
        write_json(tmp / MANIFEST, full)
        commit_output(tmp, out_dir, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return full


def read_manifest(directory: str | Path) -> dict[str, Any]:
    d = Path(directory)
    if not d.is_dir():
        raise ShardError(f"{d}: no such shard directory")
    mpath = d / MANIFEST
    if not mpath.exists():
        raise ShardError(f"{d}: no {MANIFEST}, so the write that made it did not finish; build it again")
    try:
        return json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise ShardError(f"{mpath}: invalid JSON ({e})") from None


def validate_shards(directory: str | Path, *, check_hashes: bool = True) -> dict[str, Any]:
    """Check a shard directory against its manifest (files, row counts, content hashes, schema); return the
    manifest, or raise :class:`ShardError` listing every problem found."""
    d = Path(directory)
    manifest = read_manifest(d)
    problems: list[str] = []
    if manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version {manifest.get('schema_version')!r} (this toolkit reads {SCHEMA_VERSION})")
    total = 0
    listed = set()
    for entry in manifest.get("shards", []):
        p = d / entry["file"]
        listed.add(entry["file"])
        if not p.exists():
            problems.append(f"{entry['file']}: missing")
            continue
        if check_hashes and sha256_file(p) != entry["sha256"]:
            problems.append(f"{entry['file']}: content hash differs from the manifest (file changed or corrupt)")
            continue
        try:
            meta = pq.read_metadata(p)
            schema = pq.read_schema(p)
        except Exception as e:
            problems.append(f"{entry['file']}: unreadable Parquet ({e})")
            continue
        if meta.num_rows != entry["rows"]:
            problems.append(f"{entry['file']}: {meta.num_rows} rows, manifest says {entry['rows']}")
        total += meta.num_rows
        for f in ROW_FIELDS:
            if f.name not in schema.names:
                problems.append(f"{entry['file']}: column {f.name!r} missing")
            elif not schema.field(f.name).type.equals(f.type):
                problems.append(f"{entry['file']}: column {f.name!r} has type {schema.field(f.name).type}, "
                                f"expected {f.type}")
        for f in OPTIONAL_FIELDS:
            if f.name in schema.names and not schema.field(f.name).type.equals(f.type):
                problems.append(f"{entry['file']}: optional column {f.name!r} has type "
                                f"{schema.field(f.name).type}, expected {f.type}")
    extra = sorted(p.name for p in d.glob("part-*.parquet") if p.name not in listed)
    if extra:
        problems.append(f"shard files not in the manifest: {extra}")
    if not problems and total != manifest.get("num_rows"):
        problems.append(f"{total} rows in the shards, manifest says {manifest.get('num_rows')}")
    if problems:
        raise ShardError(f"{d}: " + "; ".join(problems))
    return manifest


def read_table(directory: str | Path, *, columns: Iterable[str] | None = None, verify: bool = True) -> pa.Table:
    """All rows of a shard directory as one Arrow table, in order (verifying the manifest first)."""
    if verify:
        validate_shards(directory)
    files = shard_files(directory)
    tables = [pq.read_table(f, columns=list(columns) if columns else None) for f in files]
    return pa.concat_tables(tables) if tables else ROW_SCHEMA.empty_table()


def read_rows(directory: str | Path, **kw: Any) -> list[dict[str, Any]]:
    return read_table(directory, **kw).to_pylist()


def load_hf_dataset(directory: str | Path, *, split: str = "train", verify: bool = True):
    """The shards as a ``datasets.Dataset``, rows in curriculum order (what a training script does)."""
    import datasets

    if verify:
        validate_shards(directory)
    files = [str(f) for f in shard_files(directory)]
    return datasets.load_dataset("parquet", data_files={split: files}, split=split)
