"""Parquet shards with a manifest written last: the on-disk form of every curriculum, partition and eval set.

A shard directory has the Hugging Face dataset layout: ``data/part-00000.parquet``, ... (rows in curriculum
order, fixed rows per shard, zstd) under ``data/``, and the data card ``README.md``, its plots and
``manifest.json`` at the top, so ``pyarrow.parquet.read_table(d / "data")``, ``pandas.read_parquet``, polars and
``datasets.load_dataset(d)`` read it as a dataset. Directories written before (shards at the top) are read by
following the manifest, whose shard paths are relative.

**Reading** (``__all__``): :func:`read_manifest` (the manifest, checked to be one), :func:`validate_shards` (every
shard there, its content hash, ``curriculum_index`` increasing across the shards in manifest order, and the checks
registered for the manifest's sections with :func:`register_set_check`), :func:`shard_files` (the files in
curriculum order), :func:`read_table` / :func:`read_rows` (the rows, older layouts upgraded to
:data:`ROW_SCHEMA`), :func:`load_hf_dataset` (a ``datasets.Dataset`` in curriculum order) and :func:`sha256_file`.
``datasets.load_dataset("parquet", data_files=shard_files(d))`` reads the shards as they are.

**Writing**: :func:`write_shards` writes a whole directory (:class:`ShardOutput`: the shards, the card, the
manifest last, for a writer of its own such as the builder's), through the commit protocol of
:mod:`rag_curriculum._commit` (a private module: a hidden temporary folder beside the target, moved into place whole;
``--overwrite`` replaces only the toolkit's own outputs and files; what dead writers left is removed), so an
interrupted write never leaves a directory that passes :func:`validate_shards`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rag_plumbing._text import (  # noqa: F401 (relative_path: curricula reads it here)
    portable_command,
    portable_path,
    relative_path,
)

from ._commit import FILE_DIGESTS, REPLACING, commit_output, files_under, listed_shards, prepare_output
from ._plumbing import MANIFEST, atomic_write_bytes, file_sha256, output_set_problem
from .errors import ConfigError, ShardError

__all__ = [
    "DATA_DIR", "MANIFEST", "OPTIONAL_FIELDS", "PROMPT_TOKENS", "ROW_FIELDS", "ROW_SCHEMA", "SCHEMA_VERSION",
    "ShardError", "load_hf_dataset", "read_manifest", "read_parquet_file", "read_rows", "read_table",
    "register_set_check", "row_schema", "sha256_file", "shard_files", "validate_shards", "write_shards",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DATA_DIR = "data"  # the shards' folder (the Hugging Face layout)
DEFAULT_ROWS_PER_SHARD = 10_000
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
#: A passage shown in a row. ``origin``: ``"provided"`` (shipped with the dataset: gold or distractor) or ``"bm25"``
#: (drawn from a corpus index, :mod:`rag_curriculum.retrieval`); ``bm25_rank``: the 1-based rank of the passage in
#: the question's BM25 ranking over the index, null when the passage was not ranked.
PASSAGE = pa.struct([("label", pa.string()), ("title", pa.string()), ("text", pa.string()),
                     ("is_gold", pa.bool_()), ("origin", pa.string()), ("bm25_rank", pa.int32())])
#: ``answerable`` is false only on unanswerable rows (no gold passage shown; the answer is the abstention answer).
#: ``target``: the gold answers as Search-R1's data scripts write them (``{"target": golden_answers}``), the key its
#: reward (``qa_em.compute_score_em``) and verl's ``search_r1_like_qa_em`` read: the ``answers`` of a row, or a
#: Search-R1 data file's own ``target`` as it was.
GROUND_TRUTH = pa.struct([("answers", pa.list_(pa.string())), ("gold_labels", pa.list_(pa.string())),
                          ("answerable", pa.bool_()), ("target", pa.list_(pa.string()))])
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
    pa.field("answerable", pa.bool_()),  # false only on unanswerable rows
    pa.field("gold_recall", pa.float64()),  # the retrieved setting: share of the gold passages shown (recall@N)
]
ROW_SCHEMA = pa.schema(ROW_FIELDS)

#: The row schema before ``origin``/``bm25_rank``, ``answerable``, ``gold_recall`` and ``ground_truth.target`` were
#: added (same ``schema_version``: the changes are additive). Shards written then are still valid and are read with
#: the new fields filled in (:func:`upgrade_table`): every passage was provided, no row was unanswerable or
#: retrieved, and the ``target`` is the row's answers.
LEGACY_PASSAGE = pa.struct([("label", pa.string()), ("title", pa.string()), ("text", pa.string()),
                            ("is_gold", pa.bool_())])
LEGACY_GROUND_TRUTH = pa.struct([("answers", pa.list_(pa.string())), ("gold_labels", pa.list_(pa.string()))])
#: ``ground_truth`` before ``target``.
LEGACY_GROUND_TRUTH_2 = pa.struct([("answers", pa.list_(pa.string())), ("gold_labels", pa.list_(pa.string())),
                                   ("answerable", pa.bool_())])
_LEGACY_TYPES: dict[str, tuple[pa.DataType, ...]] = {
    "passages": (pa.list_(LEGACY_PASSAGE),),
    "reward_model": tuple(pa.struct([("style", pa.string()), ("ground_truth", gt)])
                          for gt in (LEGACY_GROUND_TRUTH, LEGACY_GROUND_TRUTH_2)),
}
_ADDED_FIELDS = ("answerable", "gold_recall")

#: Columns a shard may carry after the required ones, checked for their type when present: ``prompt_tokens``, the
#: length of ``prompt`` with the chat template applied (``curriculum build --tokenizer``).
OPTIONAL_FIELDS: list[pa.Field] = [
    pa.field("prompt_tokens", pa.int32()),
    # an adaptive build (--schedule adaptive, curricula/adaptive.py): where each passage stands among the gold
    # documents then the distractor pool in source order, and the pool's size: the row at any level from these
    pa.field("source_position", pa.list_(pa.int32())),
    pa.field("pool_size", pa.int32()),
]
PROMPT_TOKENS = "prompt_tokens"


def row_schema(*optional: str) -> pa.Schema:
    """The row schema with the named optional columns appended (in :data:`OPTIONAL_FIELDS` order)."""
    unknown = set(optional) - {f.name for f in OPTIONAL_FIELDS}
    if unknown:
        raise ConfigError(f"unknown optional column(s) {sorted(unknown)}")
    return pa.schema(ROW_FIELDS + [f for f in OPTIONAL_FIELDS if f.name in optional])


#: The SHA-256 (hex) of a file's bytes (the shards' content hashes): the toolkit's one file digest.
sha256_file = file_sha256


def shard_name(k: int) -> str:
    """The manifest path of shard ``k``, relative to the directory: ``data/part-0000k.parquet``."""
    return f"{DATA_DIR}/part-{k:05d}.parquet"




def read_parquet_file(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file as a table (``columns``: those only, in that order). ``pyarrow.parquet.read_table`` reads a
    file through ``pyarrow.dataset``, whose import imports pandas (about 0.7 s of CPU, 2 s before the bytecode is
    cached): `curriculum inspect` and `validate` read through this instead."""
    with pq.ParquetFile(path) as f:
        return f.read(columns=list(columns) if columns is not None else None)


def shard_files(directory: str | Path, *, check_order: bool = True) -> list[Path]:
    """The shard files of a directory, in order: as the manifest lists them when there is one (then, with
    ``check_order``, after checking that ``curriculum_index`` increases across them), else ``data/part-*.parquet``
    (or, in the layout written before, ``part-*.parquet``) sorted.

    Args:
        directory: a shard directory.
        check_order: check that ``curriculum_index`` increases across the listed shards.

    Returns:
        The Parquet files, in curriculum order (what verl's ``data.train_files`` takes).

    Raises:
        ShardError: an unreadable manifest, or shards out of curriculum order.

    Examples:
        ```python
        files = shard_files("outputs/musique-min-max")   # [.../data/part-00000.parquet, ...]
        ```
    """
    d = Path(directory)
    mpath = d / MANIFEST
    if mpath.exists():
        listed = listed_shards(d, read_manifest(d))
        if check_order:
            problems = order_problems(listed)
            if problems:
                raise ShardError(f"{d}: " + "; ".join(problems))
        return [p for _, p in listed]
    return sorted(d.glob(f"{DATA_DIR}/part-*.parquet")) or sorted(d.glob("part-*.parquet"))


def _index_range(path: Path) -> tuple[int, int] | None:
    """(first, last) ``curriculum_index`` of a shard from its Parquet statistics (the column itself when a row
    group has none); None for an empty shard or one without the column. Checks the row groups' own order."""
    meta = pq.read_metadata(path)
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if "curriculum_index" not in names:
        return None
    col = names.index("curriculum_index")
    lo = hi = None
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if rg.num_rows == 0:
            continue
        st = rg.column(col).statistics
        if st is None or not st.has_min_max:
            values = read_parquet_file(path, ["curriculum_index"]).column(0)
            return None if len(values) == 0 else (int(pc.min(values).as_py()), int(pc.max(values).as_py()))
        if hi is not None and st.min <= hi:
            raise ShardError(f"{path.name}: curriculum_index decreases inside the file (row group {g})")
        lo = st.min if lo is None else lo
        hi = st.max
    return None if lo is None else (int(lo), int(hi))


def order_problems(listed: Sequence[tuple[str, Path]]) -> list[str]:
    """Where ``curriculum_index`` does not increase across the shards in manifest order (a reordered manifest
    would hand a trainer rows out of curriculum order). Reads only the files' footers."""
    problems: list[str] = []
    prev: tuple[str, int, int] | None = None
    for name, p in listed:
        try:
            rng = _index_range(p)
        except ShardError as e:
            problems.append(str(e))
            continue
        except (OSError, pa.ArrowException):
            continue  # missing or unreadable: reported by validate_shards, or by the reader that opens it
        if rng is None:
            continue
        if prev is not None and rng[0] <= prev[2]:
            problems.append(f"shards out of curriculum order: {name} (curriculum_index {rng[0]}..{rng[1]}) is "
                            f"listed after {prev[0]} ({prev[1]}..{prev[2]}); the manifest's shard list was "
                            "reordered or edited. Restore it, or build the directory again")
        prev = (name, *rng)
    return problems


def _legacy_ok(field: pa.Field, schema: pa.Schema) -> bool:
    """Whether a shard column (or its absence) is what the schema before the additive change wrote."""
    if field.name not in schema.names:
        return field.name in _ADDED_FIELDS
    return any(schema.field(field.name).type.equals(t) for t in _LEGACY_TYPES.get(field.name, ()))


def upgrade_table(table: pa.Table) -> pa.Table:
    """A table read from shards written before the additive schema change, in the current schema: passages get
    ``origin="provided"`` and a null ``bm25_rank``, ``reward_model.ground_truth`` and the rows get
    ``answerable=true``, ``ground_truth.target`` is the ground truth's answers, and ``gold_recall`` is null. Tables already in the current schema are returned as they
    are; columns not in the table are not added except the two new row columns (when the row has the others)."""
    names = table.schema.names
    if "passages" in names and table.schema.field("passages").type.equals(_LEGACY_TYPES["passages"][0]):
        col = table.column("passages").combine_chunks()
        flat = col.flatten()
        n = len(flat)
        inner = pa.StructArray.from_arrays(
            [flat.field(i) for i in range(flat.type.num_fields)]
            + [pa.array(["provided"] * n, pa.string()), pa.nulls(n, pa.int32())],
            fields=list(PASSAGE))
        upgraded = pa.ListArray.from_arrays(col.offsets, inner, mask=col.is_null() if col.null_count else None)
        table = table.set_column(names.index("passages"), "passages", upgraded)
    if "reward_model" in names and any(table.schema.field("reward_model").type.equals(t)
                                       for t in _LEGACY_TYPES["reward_model"]):
        rm = table.column("reward_model").combine_chunks()
        gt = rm.field("ground_truth")
        n = len(gt)
        has = {gt.type.field(i).name for i in range(gt.type.num_fields)}
        answers = gt.field("answers")
        new_gt = pa.StructArray.from_arrays(
            [answers, gt.field("gold_labels"),
             gt.field("answerable") if "answerable" in has else pa.array([True] * n, pa.bool_()), answers],
            fields=list(GROUND_TRUTH))
        new_rm = pa.StructArray.from_arrays([rm.field(0), new_gt], fields=list(ROW_SCHEMA.field("reward_model").type))
        table = table.set_column(names.index("reward_model"), "reward_model", new_rm)
    if "template" in names and "answerable" not in names:  # a full row written before: add the row columns
        n = table.num_rows
        at = names.index("template") + 1
        table = table.add_column(at, ROW_SCHEMA.field("answerable"), pa.array([True] * n, pa.bool_()))
        table = table.add_column(at + 1, ROW_SCHEMA.field("gold_recall"), pa.nulls(n, pa.float64()))
    return table


def rows_to_table(rows: Sequence[dict[str, Any]], schema: pa.Schema = ROW_SCHEMA) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=schema)




def _key_order(key: Any) -> tuple[int, int, str]:
    """Keys that are whole numbers (levels, hops, counts) first, as numbers; the others by their text."""
    text = str(key)
    return (0, int(text), text) if re.fullmatch(r"-?[0-9]+", text) else (1, 0, text)


def sorted_keys(obj: Any) -> Any:
    """``obj`` with every mapping's keys sorted as :func:`write_json` writes them: whole numbers as numbers ("1",
    "2", "10": levels sort as numbers in every manifest), then the others by their text.

    >>> sorted_keys({"10": 1, "b": {"2": 0, "1": 0}, "2": 1, "a": [{"z": 0, "y": 0}]})
    {'2': 1, '10': 1, 'a': [{'y': 0, 'z': 0}], 'b': {'1': 0, '2': 0}}
    """
    if isinstance(obj, Mapping):
        return {k: sorted_keys(obj[k]) for k in sorted(obj, key=_key_order)}
    if isinstance(obj, list | tuple):
        return [sorted_keys(x) for x in obj]
    return obj


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (temporary name, fsync, then rename), with its keys sorted (:func:`sorted_keys`) so it
    is byte-stable."""
    atomic_write_bytes(path, (json.dumps(sorted_keys(obj), indent=2, ensure_ascii=False) + "\n").encode())


# -- paths in published records --------------------------------------------------------------------------------
# relative_path, portable_path and portable_command are the plumbing's (rag_plumbing._text, written once
# for both distributions): relative to ``base`` (the output) when inside or beside it (``../other-output``), else
# only the file name; a command line's absolute paths (``/x/y``, ``--out=/x``, ``input=/x``) made portable.


#: Manifest keys whose values are left as they are by :func:`portable` (none: a local tokenizer the prompt lengths
#: were counted with is recorded by its folder's name too; ``lengths.uses_column`` matches it by name, chat
#: template and vocabulary).
PORTABLE_EXEMPT: tuple[str, ...] = ()


def portable(obj: Any, base: str | Path, *, key: str | None = None) -> Any:
    """``obj`` (a manifest) with every absolute local path made portable (:func:`portable_path`); a ``command``
    has its paths replaced token by token."""
    if isinstance(obj, dict):
        return {k: (v if k in PORTABLE_EXEMPT else portable(v, base, key=k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, base, key=key) for v in obj]
    if isinstance(obj, str):
        if key == "command":
            return portable_command(obj, base)
        if os.path.isabs(obj) and obj != "/" and "\n" not in obj:
            return portable_path(obj, base)
    return obj



def shared_path(path: str | os.PathLike[str] | None) -> str | None:
    """A path as a record meant to be shared names it (a trained model's card, ``warm_start.json``,
    ``train_plan.json``): relative to the working folder when it lies inside it, else under ``~`` when it lies in
    the home folder, else relative to the working folder when it lies beside it (``../data``), else its name alone.
    A relative path (as the user gave it, from where the command ran), a path under ``~`` and anything that is not
    a local path (a Hub id) are kept as given. None stays None.

    >>> shared_path("outputs/warm"), shared_path("Qwen/Qwen2.5-0.5B-Instruct"), shared_path("~/models/m.gguf")
    ('outputs/warm', 'Qwen/Qwen2.5-0.5B-Instruct', '~/models/m.gguf')
    >>> shared_path(os.path.join(os.getcwd(), "outputs", "warm")), shared_path(Path.home() / "m.gguf")
    ('outputs/warm', '~/m.gguf')
    >>> shared_path("/nowhere/else/models/m.gguf") if Path.home() != Path("/") else "m.gguf"
    'm.gguf'
    """
    if path is None:
        return None
    text = os.fspath(path)
    if not os.path.isabs(text) or text == "/":
        return text
    here = relative_path(text, os.getcwd())
    if here is not None and not here.startswith("../"):
        return here
    home = Path.home()
    try:
        inside = Path(os.path.abspath(text)).relative_to(home)
    except ValueError:
        inside = None
    if inside is not None and home != Path(home.anchor):
        return "~" if not inside.parts else f"~/{inside.as_posix()}"
    return here if here is not None else Path(os.path.abspath(text)).name


def shareable(obj: Any, *, key: str | None = None) -> Any:
    """``obj`` (a record meant to be shared: an evaluation's summary) with every absolute local path as
    :func:`shared_path` names it; a ``command`` token by token (``--out=/x``, ``base=/x``: the value).

    >>> shareable({"command": f"curriculum eval --model base={Path.home() / 'm.gguf'}", "n": 1})
    {'command': 'curriculum eval --model base=~/m.gguf', 'n': 1}
    """
    if isinstance(obj, dict):
        return {k: shareable(v, key=k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shareable(v, key=key) for v in obj]
    if isinstance(obj, str):
        if key == "command":
            return _shareable_command(obj)
        if os.path.isabs(obj) and obj != "/" and "\n" not in obj:
            return shared_path(obj)
    return obj


def _shareable_command(command: str) -> str:
    import shlex

    try:
        tokens = shlex.split(command)
    except ValueError:
        return command
    new = []
    for token in tokens:
        name, eq, value = token.rpartition("=")
        if eq and name and os.path.isabs(value):
            new.append(f"{name}={shared_path(value)}")
        else:
            new.append(shared_path(token) if os.path.isabs(token) and token != "/" else token)
    if new == tokens:
        return command
    return " ".join(x if re.fullmatch(r"[\w@%+=:,./~-]+", x) else shlex.quote(x) for x in new)


ROW_GROUP_SIZE = 1024


def write_one_shard(part: pa.Table, directory: Path, k: int) -> dict[str, Any]:
    """Write ``data/part-{k:05d}.parquet`` (zstd, fixed row groups) and return its manifest entry."""
    name = shard_name(k)
    path = directory / name
    path.parent.mkdir(exist_ok=True)
    if part.num_rows == 0:  # no row group at all: one of 0 rows stops `datasets` ("BatchSize must be greater than 0")
        pq.ParquetWriter(path, part.schema, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL,
                         write_statistics=True, use_dictionary=True).close()
    else:
        pq.write_table(part, path, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL,
                       row_group_size=ROW_GROUP_SIZE, write_statistics=True, use_dictionary=True)
    return {"file": name, "rows": part.num_rows, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def write_shard_files(table: pa.Table, directory: Path, *, rows_per_shard: int = DEFAULT_ROWS_PER_SHARD
                      ) -> list[dict[str, Any]]:
    """Write ``data/part-NNNNN.parquet`` files (fixed rows per shard, zstd) and return their manifest entries."""
    if rows_per_shard < 1:
        raise ConfigError("rows_per_shard must be >= 1")
    n = table.num_rows
    starts = range(0, n, rows_per_shard) if n else [0]
    return [write_one_shard(table.slice(start, rows_per_shard), directory, k) for k, start in enumerate(starts)]


class ShardOutput:
    """A shard directory being written, in the order its readers rely on: the shards (``data/``), then what
    describes them (the data card, its plots), then the manifest, last; in a partial folder beside ``out`` that the
    commit protocol (:mod:`rag_curriculum._commit`) moves into place whole (``--overwrite``'s rule, one writer).
    Leaving the ``with`` block by an error removes the partial folder. The builder writes its shards into
    :attr:`path` from forked workers, and :func:`write_shards` writes a table the same way::

        with ShardOutput(out, overwrite=False) as o:
            entries = write_shard_files(table, o.path)
            manifest = o.manifest(record, entries, columns=table.schema.names)
            ...  # the card, into o.path
            o.commit(manifest)
    """

    def __init__(self, out: str | Path, *, overwrite: bool = False,
                 rows_per_shard: int = DEFAULT_ROWS_PER_SHARD) -> None:
        self.out = out
        self.overwrite = overwrite
        self.rows_per_shard = rows_per_shard
        self.path = prepare_output(out, overwrite=overwrite)

    def __enter__(self) -> ShardOutput:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)

    def manifest(self, record: Mapping[str, Any], entries: list[dict[str, Any]], *,
                 columns: Sequence[str]) -> dict[str, Any]:
        """The manifest of the shards written (``entries``): ``record`` (what made the rows: config, seed, sources,
        counts) with every absolute local path in it made portable (:func:`portable`), and the schema version, the
        row count, the columns and the shard list with a content hash per shard."""
        full = portable(dict(record), self.out)
        full.update({
            "schema_version": SCHEMA_VERSION,
            "num_rows": sum(e["rows"] for e in entries),
            "rows_per_shard": self.rows_per_shard,
            "columns": list(columns),
            "shards": entries,
        })
        return full

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Record the other files written (``files``: what a later ``--overwrite`` may remove), write the manifest
        (last) and move the folder into place; the manifest."""
        shards = {e["file"] for e in manifest["shards"]}
        manifest["files"] = [f for f in files_under(self.path) if f not in shards and f != MANIFEST]
        # what a later --overwrite checks before removing one: only a file as the toolkit wrote it is removed
        manifest[FILE_DIGESTS] = {f: sha256_file(self.path / f) for f in manifest["files"]}
        write_json(self.path / MANIFEST, manifest)
        commit_output(self.path, self.out, overwrite=self.overwrite)
        return manifest


def write_shards(
    table: pa.Table | Sequence[dict[str, Any]],
    out_dir: str | Path,
    *,
    manifest: dict[str, Any],
    overwrite: bool = False,
    rows_per_shard: int = DEFAULT_ROWS_PER_SHARD,
    card: Callable[[Path, dict[str, Any]], None] | None = None,
    schema: pa.Schema = ROW_SCHEMA,
) -> dict[str, Any]:
    """Write a complete shard directory of ``table`` (or rows, in ``schema``) atomically (:class:`ShardOutput`);
    return the manifest: ``manifest`` (what made the rows) completed with the shards' record. ``card(directory,
    manifest)`` writes the data card (and plots) before the manifest, which is written last.

    Args:
        table: the rows, in curriculum order: an Arrow table, or dicts converted with ``schema``.
        out_dir: the shard directory to write.
        manifest: what made the rows (kind, config, counts, ...), completed here with the shards' record.
        overwrite: replace an existing output of this toolkit.
        rows_per_shard: rows per Parquet file.
        card: ``card(directory, manifest)`` writes the data card before the manifest (None: no card).
        schema: the schema of dict rows (:data:`ROW_SCHEMA`, or :func:`row_schema` with optional columns).

    Returns:
        The manifest as written (``manifest.json``).

    Raises:
        ShardError: rows without a required column, or an ``out_dir`` that is not an output of this toolkit or is
            not empty (without ``overwrite``).
    """
    if not isinstance(table, pa.Table):
        table = rows_to_table(table, schema)
    missing = [f.name for f in ROW_FIELDS if f.name not in table.schema.names]
    if missing:
        raise ShardError(f"rows lack the required columns {missing}")
    with ShardOutput(out_dir, overwrite=overwrite, rows_per_shard=rows_per_shard) as o:
        entries = write_shard_files(table, o.path, rows_per_shard=rows_per_shard)
        full = o.manifest(manifest, entries, columns=table.schema.names)
        if card is not None:
            card(o.path, full)
        return o.commit(full)


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """A shard directory's ``manifest.json`` (not checked against the shards: :func:`validate_shards` does that).

    Args:
        directory: a shard directory (``curriculum build``, a partition's bucket).

    Returns:
        The manifest: ``kind``, the resolved ``config``, ``counts``, ``shards``, ``num_rows``, ...

    Raises:
        ShardError: no such directory, no manifest (a write that did not finish, or not a shard directory), or a
            manifest that is not a JSON object.

    Examples:
        ```python
        manifest = read_manifest("outputs/musique-min-max")
        manifest["counts"]["levels"]   # rows per level
        ```
    """
    d = Path(directory)
    if not d.is_dir():
        raise ShardError(f"{d}: no such shard directory")
    mpath = d / MANIFEST
    if not mpath.exists():
        if (d / REPLACING).is_file():
            raise ShardError(f"{d}: an --overwrite that was replacing this output did not finish, so it holds a "
                             "mix of old and new files and no manifest",
                             hint="run the same command again with --overwrite (the files you added are kept)")
        if any(d.glob("part-*.parquet")) or any(d.glob(f"{DATA_DIR}/part-*.parquet")):
            raise ShardError(f"{d}: no {MANIFEST}, so the write that made it did not finish; build it again")
        raise ShardError(f"{d}: not a shard directory (no {MANIFEST})",
                         hint="pass a directory made by `curriculum build` or `curriculum partition`")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise ShardError(f"{mpath}: invalid JSON ({e})", hint="build the directory again") from None
    if not isinstance(manifest, dict):
        raise ShardError(f"{mpath}: a JSON {type(manifest).__name__}, not a manifest (an object)",
                         hint="build the directory again")
    if manifest.get("kind") in ("index", "bm25-index"):  # `curriculum index`'s output where rows are expected
        raise ShardError(f"{d} is an index (made by `curriculum index`: passages to search), not a shard directory "
                         "of rows", hint="give a directory made by `curriculum build` or `curriculum partition` "
                         "here; an index goes to --retriever (agent.retriever=, --distractors bm25 --index)")
    return manifest


#: A check of the set of outputs a shard directory belongs to: ``(directory, manifest) -> problem or None``. The
#: buckets of a partition are written as one set (``OUT/partition.json`` last) and a bucket inside its ``OUT`` is
#: read only once its set is complete. Its check (``_plumbing.output_set_problem``, which needs only the
#: file names of the set) sits below this module and is applied by default, in every process, whether or not the
#: partition package was imported; another set's check is handed down with :func:`register_set_check`, or passed
#: to :func:`validate_shards` by a reader. This module never imports the commands above it.
SetCheck = Callable[[Path, Mapping[str, Any]], "str | None"]
_SET_CHECKS: dict[str, SetCheck] = {"partition": output_set_problem}


def register_set_check(section: str, check: SetCheck) -> None:
    """Have :func:`validate_shards` ask ``check`` about every shard directory whose manifest holds a ``section``
    object (``"partition"``: a bucket of a partition); registering the same section again replaces its check."""
    _SET_CHECKS[section] = check


def set_checks(manifest: Mapping[str, Any]) -> list[SetCheck]:
    """The registered checks that apply to a directory with this manifest (one per section it holds)."""
    return [check for section, check in _SET_CHECKS.items() if isinstance(manifest.get(section), Mapping)]


def validate_shards(directory: str | Path, *, check_hashes: bool = True, set_check: SetCheck | None = None
                    ) -> dict[str, Any]:
    """Check a shard directory against its manifest (files, row counts, content hashes, schema, and that
    ``curriculum_index`` increases across the shards in manifest order); return the manifest, or raise
    :class:`ShardError` listing every problem found.

    ``set_check``: the check of the set of outputs the directory belongs to (see :data:`SetCheck`); by default,
    the checks registered for the sections its manifest holds (:func:`register_set_check`).

    Args:
        directory: a shard directory.
        check_hashes: compare each shard's SHA-256 with the manifest's (reads every byte).
        set_check: see above.

    Returns:
        The manifest.

    Raises:
        ShardError: the directory's problems, every one of them in one message.
    """
    d = Path(directory)
    manifest = read_manifest(d)
    problems: list[str] = []
    if "schema_version" not in manifest:
        problems.append(f"{MANIFEST} has no schema_version (this toolkit reads {SCHEMA_VERSION}): it is damaged, or "
                        "this toolkit did not write it")
    elif manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version {manifest.get('schema_version')!r} (this toolkit reads {SCHEMA_VERSION})")
    total = 0
    listed = listed_shards(d, manifest)
    entries = [e for e in manifest.get("shards") or []]
    readable: list[tuple[str, Path]] = []
    for (name, p), entry in zip(listed, entries, strict=True):
        if not p.exists():
            problems.append(f"{name}: missing")
            continue
        if check_hashes and sha256_file(p) != entry["sha256"]:
            problems.append(f"{name}: content hash differs from the manifest (file changed or corrupt)")
            continue
        try:
            meta = pq.read_metadata(p)
            schema = pq.read_schema(p)
        except Exception as e:
            problems.append(f"{name}: unreadable Parquet ({e})")
            continue
        readable.append((name, p))
        if meta.num_rows != entry["rows"]:
            problems.append(f"{name}: {meta.num_rows} rows, manifest says {entry['rows']}")
        total += meta.num_rows
        for f in ROW_FIELDS:
            if _legacy_ok(f, schema):
                continue
            if f.name not in schema.names:
                problems.append(f"{name}: column {f.name!r} missing")
            elif not schema.field(f.name).type.equals(f.type):
                problems.append(f"{name}: column {f.name!r} has type {schema.field(f.name).type}, "
                                f"expected {f.type}")
        for f in OPTIONAL_FIELDS:
            if f.name in schema.names and not schema.field(f.name).type.equals(f.type):
                problems.append(f"{name}: optional column {f.name!r} has type "
                                f"{schema.field(f.name).type}, expected {f.type}")
    problems += order_problems(readable)
    for check in [set_check] if set_check is not None else set_checks(manifest):  # e.g. a partition's bucket:
        if (problem := check(d, manifest)) is not None:  # only a complete set is read
            problems.append(problem)
    names = {name for name, _ in listed}
    on_disk = [p.relative_to(d).as_posix() for p in (*d.glob("part-*.parquet"), *d.glob(f"{DATA_DIR}/part-*.parquet"))]
    extra = sorted(n for n in on_disk if n not in names)
    if extra:
        problems.append(f"shard files not in the manifest: {extra}")
    if not problems and total != manifest.get("num_rows"):
        problems.append(f"{total} rows in the shards, manifest says {manifest.get('num_rows')}")
    if problems:
        raise ShardError(f"{d}: " + "; ".join(problems))
    return manifest


def read_table(directory: str | Path, *, columns: Iterable[str] | None = None, verify: bool = True) -> pa.Table:
    """All rows of a shard directory as one Arrow table, in order (verifying the manifest first; without
    ``verify`` the shard order is still checked).

    Args:
        directory: a shard directory.
        columns: the columns to read (None: all); a column added to the schema since the shards were written
            is filled in.
        verify: check the directory against its manifest first (:func:`validate_shards`).

    Returns:
        The rows, in curriculum order.

    Raises:
        ShardError: a directory that does not match its manifest, or shards out of order.
    """
    if verify:
        validate_shards(directory)
    files = shard_files(directory, check_order=not verify)
    wanted = list(columns) if columns else None
    tables = []
    for f in files:
        if wanted is None:
            tables.append(upgrade_table(read_parquet_file(f)))
            continue
        present = pq.read_schema(f).names
        # a column added since the shard was written is filled in by upgrade_table; any other missing one raises
        t = read_parquet_file(f, [c for c in wanted if c in present or c not in _ADDED_FIELDS])
        for c in wanted:
            if c not in t.schema.names:  # one of _ADDED_FIELDS
                fld = ROW_SCHEMA.field(c)
                t = t.append_column(fld, pa.array([True] * t.num_rows, pa.bool_()) if c == "answerable"
                                    else pa.nulls(t.num_rows, fld.type))
        tables.append(upgrade_table(t).select(wanted))
    return pa.concat_tables(tables) if tables else ROW_SCHEMA.empty_table()


def read_rows(directory: str | Path, **kw: Any) -> list[dict[str, Any]]:
    """All rows of a shard directory as dicts, in curriculum order (:func:`read_table`'s rows).

    Args:
        directory: a shard directory.
        **kw: :func:`read_table`'s ``columns`` and ``verify``.

    Returns:
        One dict per row: ``id``, ``question``, ``answers``, ``passages`` (label, title, text, gold), ``prompt``
        (chat messages), ``level``, ``curriculum_index``, ``gold_labels``, ...

    Raises:
        ShardError: a directory that does not match its manifest, or shards out of order.

    Examples:
        A one-question curriculum, built and read back:

        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from rag_curriculum import BuildConfig, build_curriculum
        >>> from rag_curriculum.shards import read_rows
        >>> record = {"id": "2hop__1_2", "question": "Who founded the city where Ada was born?",
        ...           "answer": "Romulus", "answer_aliases": [], "answerable": True, "paragraphs": [
        ...     {"idx": 0, "title": "Ada", "paragraph_text": "Ada was born in Rome.", "is_supporting": True},
        ...     {"idx": 1, "title": "Rome", "paragraph_text": "Rome was founded by Romulus.", "is_supporting": True},
        ...     {"idx": 2, "title": "Paris", "paragraph_text": "Paris is in France.", "is_supporting": False}]}
        >>> tmp = tempfile.TemporaryDirectory()
        >>> source = Path(tmp.name) / "musique_ans_v1.0_train.jsonl"
        >>> _ = source.write_text(json.dumps(record) + "\\n")
        >>> cfg = BuildConfig.from_dict({"dataset": "musique", "input": str(source), "schedule": "max", "K": 1,
        ...                              "out": f"{tmp.name}/curriculum"})
        >>> build_curriculum(cfg).rows
        1
        >>> row = read_rows(f"{tmp.name}/curriculum")[0]
        >>> row["curriculum_index"], row["level"], row["answers"], sorted(row["gold_labels"])
        (0, 1, ['Romulus'], ['Ada', 'Rome'])
        >>> tmp.cleanup()
    """
    return read_table(directory, **kw).to_pylist()


def load_hf_dataset(directory: str | Path, *, split: str = "train", verify: bool = True) -> Any:
    """The shards as a ``datasets.Dataset``, rows in curriculum order (what a training script does); without
    ``verify`` the shard order is still checked.

    Args:
        directory: a shard directory.
        split: the split's name in the dataset.
        verify: check the directory against its manifest first (:func:`validate_shards`).

    Returns:
        A ``datasets.Dataset`` of the rows, in curriculum order: do not shuffle it.

    Raises:
        ShardError: a directory that does not match its manifest, or shards out of order.

    Examples:
        ```python
        rows = load_hf_dataset("outputs/musique-min-max")   # CurriculumGRPOTrainer(..., train_dataset=rows)
        ```
    """
    import datasets

    if verify:
        validate_shards(directory)
    files = [str(f) for f in shard_files(directory, check_order=not verify)]
    if all(pq.read_metadata(f).num_rows == 0 for f in files):  # an empty partition bucket: `datasets` builds no
        # split of 0 rows ("corresponds to no data"), so the empty table goes in directly, columns and types kept
        table = pq.read_table(files[0]) if files else pa.table({})
        return datasets.Dataset.from_dict({name: [] for name in table.column_names},
                                          features=datasets.Features.from_arrow_schema(table.schema),
                                          split=datasets.Split(split))
    return datasets.load_dataset("parquet", data_files={split: files}, split=split)
