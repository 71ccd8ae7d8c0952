"""``curriculum partition-merge``: join the work directories of shard runs made on separate machines."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._plumbing import RECORD_FILE, WORK, atomic_write_with, current_command
from ..config import read_renamed
from ..errors import PartitionError
from ..generation.runner import BACKEND_FILE, WorkDir, read_backend
from ..shards import read_manifest, write_json
from ._config import PartitionConfig, PartitionResult
from ._inputs import _read_record, _recorded_input, _write_record, input_digest
from ._outputs import finalize_partition

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


#: The options that only decide how finished completions become outputs (a merge may change them).
OUTPUT_OPTIONS = ("correct_f1", "strict_format", "balance", "keep_completions", "rows_per_shard")


def merge_partitions(sources: Sequence[str | Path], *, out: str | Path | None = None,
                     shards: str | Path | None = None, command: str | None = None,
                     **options: Any) -> PartitionResult:
    """Join the work directories of shard runs made on separate machines and write the outputs.

    Each source is a partition ``--out`` directory; they must come from one run (same input, model, sampling,
    chunk size). Chunks missing from ``out/work`` (default: the first source) are copied in atomically, then
    the outputs are written with the run's recorded configuration, in which ``options`` (any of
    :data:`OUTPUT_OPTIONS`, e.g. ``balance=True``) may change how completions become outputs, without generating
    again. With a single source this re-writes its outputs. ``shards`` points to the input shard directory when
    it is no longer where the run recorded it.

    ``curriculum partition-merge`` calls this.

    Args:
        sources: the ``--out`` directories of the shard runs (``--shard-index K --num-shards N``).
        out: where the merged outputs go (None: the first source).
        shards: the input shard directory, when it moved since the run.
        command: the command line recorded in the outputs.
        **options: output options to change (see above).

    Returns:
        The output folder, complete, with its summary (``counts``).

    Raises:
        PartitionError: no sources, an option a merge cannot change, a source that is not a partition or comes
            from another run, chunks that no source holds, or an input that cannot be found.
        ShardError: a ``shards`` that is not a shard directory.

    Examples:
        ```python
        from rag_curriculum.partition import merge_partitions

        res = merge_partitions(["/mnt/a/p", "/mnt/b/p"], out="outputs/p", balance=True)
        res.counts
        ```
    """
    if not sources:
        raise PartitionError("nothing to merge: give the --out directories of the shard runs")
    bad = sorted(set(options) - set(OUTPUT_OPTIONS))
    if bad:
        raise PartitionError(f"a merge can only change {OUTPUT_OPTIONS}, not {bad}")
    srcs = [Path(s) for s in sources]
    works = []
    for s in srcs:
        w = WorkDir(s / WORK)
        if w.read_run() is None:
            raise PartitionError(f"{s}: not a partition directory (no {WORK}/run.json)")
        works.append(w)
    run = works[0].read_run() or {}
    for s, w in zip(srcs[1:], works[1:], strict=True):
        if w.read_run() != run:
            raise PartitionError(f"{s} comes from another run than {srcs[0]} (other input, model, sampling or "
                                 "chunk size); only shards of one run can be merged")
    record = next((r for r in map(_read_record, srcs) if r), None)
    if record is None:
        raise PartitionError(f"{srcs[0]}: no {RECORD_FILE}; was it made by `curriculum partition`?")
    if shards is not None:
        read_manifest(Path(shards))  # a --shards that is not a shard directory stops here, before --out is made
    target_dir = Path(out) if out is not None else srcs[0]
    recorded = read_renamed(PartitionConfig, record["config"], "the recorded partition config")  # older names read
    cfg = PartitionConfig(**{**recorded, **options, "out": str(target_dir)})
    target = WorkDir(target_dir / WORK)
    target.open(run)
    n_chunks = -(-run["num_items"] // run["chunk_size"])
    have = target.done()
    copied = 0
    for k in range(n_chunks):
        if k in have:
            continue
        for w in works:
            src = w.chunk_path(k)
            if src.exists() and src.resolve() != target.chunk_path(k).resolve():
                atomic_write_with(target.chunk_path(k), lambda tmp, src=src: shutil.copyfile(src, tmp))
                copied += 1
                break
    if read_backend(target) is None:  # how the first source's engine resolved its settings
        resolved = next((b for b in map(read_backend, works) if b is not None), None)
        if resolved is not None:
            write_json(target.path / BACKEND_FILE, resolved)
    missing = [k for k in range(n_chunks) if k not in target.done()]
    if missing:
        raise PartitionError(f"{len(missing)} of {n_chunks} chunks are in none of the directories (e.g. chunk "
                             f"{missing[0]}; chunk k belongs to shard k % num_shards): run those shards first")
    if shards is None:
        for s in [target_dir, *srcs]:
            try:
                shards = _recorded_input(s, run)
                break
            except PartitionError:
                continue
        else:
            raise PartitionError("the input shard directory of these runs is not where they recorded it; pass it "
                                 "with --shards")
    input_dir = Path(shards)
    _write_record(target_dir, cfg, input_dir, input_digest(read_manifest(input_dir)))
    if copied:
        log.info("merged %d chunk(s) from %d director(ies) into %s", copied, len(srcs), target.path)
    if command is None:
        command = current_command()
    with target.lock():
        summary = finalize_partition(target_dir, cfg, input_dir=input_dir, command=command)
    return PartitionResult(target_dir, True, None, summary)
