"""The partition's input: a shard directory, or one built at level K from a dataset file; its digest, the backend
that answers it, and the record (``partition_config.json``) of where it is."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._plumbing import RECORD_FILE, mask_secrets, shards_digest
from ..curricula import BuildConfig, SourceSpec, build_rows, same_build
from ..errors import PartitionError
from ..generation.runner import WorkDir
from ..loaders import get_loader, questions_only
from ..shards import (
    MANIFEST,
    ShardError,
    portable,
    read_manifest,
    validate_shards,
    write_json,
)
from ._config import BUILT_INPUT, PartitionConfig
from ._set import check_output_set

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


def input_digest(manifest: Mapping[str, Any]) -> str:
    """The identity of a shard directory's content: its shards' hashes and row count."""
    return shards_digest(manifest, str(manifest.get("num_rows")))


def _resolve_input(cfg: PartitionConfig, out: Path, *, progress: bool) -> Path:
    if cfg.shards:
        d = Path(cfg.shards)
        check_output_set(d, read_manifest(d))  # a clear error when it is not a finished shard directory
        return d
    built = out / BUILT_INPUT
    dataset = get_loader(cfg.dataset or "").name
    # Any split: the partition labels training questions, and dev questions too (the paper's evaluation subsets).
    # questions without passages (Search-R1's data files): a search agent's rows, its prompt (replaced by the
    # agent's template when asked, as every row's is)
    extra = {"template": "search-r1"} if questions_only(dataset) else {}
    # n is "up to" (RAG-RL appendix A): a file holding fewer questions gives all of them (partition.json's sample)
    build = BuildConfig(sources=[SourceSpec(dataset, cfg.input, cfg.n, K=cfg.K)], schedule="max",
                        seed=cfg.seed, out=str(built), overwrite=True, allow_split_mismatch=True, n_up_to=True,
                        **extra)
    # an input built before n meant "up to" took exactly n, as the same build with n_up_to does
    return build_input(build, out, what="at level K", error=PartitionError, overwrite=cfg.overwrite,
                       progress=progress, template=extra.get("template"),
                       alike=(dataclasses.replace(build, n_up_to=False),))


def build_input(build: BuildConfig, out: Path, *, what: str, error: type[Exception], overwrite: bool, progress: bool,
                template: str | None = None, alike: Sequence[BuildConfig] = ()) -> Path:
    """The input a run builds from a dataset file (``build``: one source, into ``build.out``), built once under
    ``out``'s lock (several shard processes may share OUT: one builds, the others reuse): a directory already built
    with ``build``'s options, or one of ``alike``, is reused; one built with others is refused (``error``) unless
    ``overwrite``. ``what`` describes the build in the log; ``template``: the --template the build was given, for
    the command its manifest records."""
    built = Path(build.out)
    src = build.sources[0]
    with WorkDir(out).lock():
        try:
            m = validate_shards(built)
            if any(same_build(m, b) for b in (build, *alike)):
                return built
            if not overwrite:
                raise error(f"{built} was built with other options; pass --overwrite or another --out")
        except ShardError:
            pass
        log.info("building %s %s from %s into %s", src.dataset, what, src.input, built)
        build_rows(build, command=f"curriculum build --dataset {src.dataset} --input {src.input} --schedule "
                   f"{build.schedule} --seed {build.seed}" + (f" --template {template}" if template else "")
                   + (f" --n {src.n}" if src.n else "") + (f" --K {src.K}" if src.K else "") + f" --out {built}",
                   progress=progress)
    return built


class _Prompts(Sequence):
    """The ``prompt`` column as chat messages, converted only when read."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self.column = column

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, i: Any) -> Any:
        return self.column[i].as_py()


def _check_levels(input_dir: Path, manifest: Mapping[str, Any]) -> None:
    cfg = manifest.get("config") or {}
    # an adaptive build is stored at level K: the hardest level too
    if manifest.get("kind") == "curriculum" and cfg.get("schedule") not in (None, "max", "adaptive"):
        log.warning("%s was built with the %r schedule; RAG-RL partitions questions at the hardest level "
                    "(`curriculum build --schedule max`)", input_dir, cfg.get("schedule"))


def _input_path(input_dir: Path, out: Path) -> str:
    """Where the input is, as records keep it: relative to OUT (absolute only across drives)."""
    try:
        return Path(os.path.relpath(input_dir.resolve(), out.resolve())).as_posix()
    except ValueError:
        return str(input_dir.resolve())


def _public_config(cfg: PartitionConfig) -> dict[str, Any]:
    """The config as recorded in manifests and cards: without how this process ran, and without secrets (the
    toolkit's one rule, :mod:`rag_plumbing._secrets`)."""
    d = cfg.to_dict()
    for k in ("overwrite", "num_shards", "shard_index"):
        d.pop(k, None)
    return mask_secrets(d)


def _write_record(out: Path, cfg: PartitionConfig, input_dir: Path, digest: str) -> None:
    rec = {"config": portable(_public_config(cfg), out),  # no absolute path (out, shards, model), as the manifests
           "input": {"path": _input_path(input_dir, out), "digest": digest}}
    p = out / RECORD_FILE
    if p.exists():
        try:
            if json.loads(p.read_text()) == rec:
                return
        except json.JSONDecodeError:
            pass
    write_json(p, rec)


def _read_record(out: Path) -> dict[str, Any] | None:
    p = out / RECORD_FILE
    try:
        return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
    except json.JSONDecodeError:
        return None


def _recorded_input(out: Path, run: Mapping[str, Any]) -> Path:
    rec = _read_record(out)
    candidates = []
    if rec:
        candidates.append(out / rec["input"]["path"])  # relative to OUT (absolute in older records)
    candidates.append(out / BUILT_INPUT)
    for c in candidates:
        if (c / MANIFEST).exists() and input_digest(read_manifest(c)) == run["fingerprint"].get("input"):
            return c
    raise PartitionError(f"{out}: the input shard directory is not where the run recorded it "
                         f"({', '.join(map(str, candidates))}); pass it with --shards")
