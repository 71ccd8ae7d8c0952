"""The command: generate this shard's missing chunks, and write the outputs when every chunk is done."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

from .._commit import check_resumable, invalidate_set, resumable_output
from .._plumbing import RECORD_FILE, SUMMARY_FILE, WORK, current_command
from ..agents import open_retriever
from ..errors import PartitionError, UsageError
from ..generation import BackendSpec, EngineConfig, GenerationBackend, backend_identity, open_engine
from ..generation.runner import WorkDir, run_chunks
from ..shards import MANIFEST, read_manifest, read_table
from ._agent import agent_setup
from ._config import (
    BUILT_INPUT,
    RUN_LOCK,
    STATS_FILE,
    TASK_VERSION,
    PartitionConfig,
    PartitionResult,
)
from ._inputs import (
    _check_levels,
    _Prompts,
    _resolve_input,
    _write_record,
    input_digest,
)
from ._outputs import finalize_partition
from ._set import PARTITION_SET
from ._stats import check_templates

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


def partition(cfg: PartitionConfig, *, backend: GenerationBackend | None = None, command: str | None = None,
              progress: bool = False, max_chunks: int | None = None,
              engine: EngineConfig | None = None) -> PartitionResult:
    """Generate this shard's missing chunks; when every chunk of every shard is done, write the outputs.

    ``curriculum partition`` calls this (exported as ``rag_curriculum.run_partition``). A run is resumable: the
    chunks already generated under ``cfg.out`` are kept, and a run with other settings is refused.

    Args:
        cfg: the partition's settings (input shards or dataset file, backend, model, ``k``, ``out``, ...).
        backend: overrides the one ``cfg`` names (tests, benchmarks); otherwise it is built only when something
            is left to generate.
        command: the command line recorded in the outputs (None: this process's).
        progress: show a progress bar.
        max_chunks: stop after that many chunks (run again to continue); None: every chunk.
        engine: where generation runs (None: this process; ``EngineConfig(engine="ray")``: a pool of Ray actors,
            one backend each, writing the same chunk files and outputs).

    Returns:
        The output folder, whether it is complete (``counts``: the buckets' sizes, once it is), and what this
        process generated.

    Raises:
        ConfigError: settings that cannot be used together, or a value out of range (a :class:`UsageError`
            for an ``--out`` inside the input, an option of another mode).
        PartitionError: ``cfg.out`` holds files that are not a partition's, another run holds its lock, or the
            input's row ids repeat.
        RunMismatchError: ``cfg.out`` holds chunks generated with other settings (model, sampling, input).
        ShardError: input shards that are missing or do not match their manifest.
        GenerationError: a backend that cannot generate as asked (a :class:`PromptTooLongError` for prompts
            longer than the model's context, an :class:`IdenticalSamplesError` for a server that ignores the
            sampling settings, an :class:`EngineError` from the Ray engine).

    Examples:
        ```python
        from rag_curriculum import PartitionConfig, run_partition

        res = run_partition(PartitionConfig(shards="outputs/musique-max", out="outputs/p", backend="vllm",
                                            model="Qwen/Qwen2.5-7B-Instruct", samples=8, balance=True), progress=True)
        res.complete, res.counts   # True, {'questions': ..., 'answerable': ..., 'learnable': ..., ...}
        ```
    """
    cfg.validate()
    if engine is not None:
        engine.validate(cfg.backend, cfg.backend_args)
    out = Path(cfg.out)
    check_partition_out(cfg, out)
    if cfg.agent:  # a retriever that cannot answer fails before anything is built or written
        probe = open_retriever(cfg.retriever, timeout=cfg.retriever_timeout, retries=cfg.retriever_retries)
        getattr(probe, "probe", lambda: None)()
    shard = f" (shard {cfg.shard_index} of {cfg.num_shards})" if cfg.num_shards > 1 else ""
    # a run that failed before its first chunk leaves no OUT
    started = lambda: bool(WorkDir(out / WORK).done()) or (out / BUILT_INPUT / MANIFEST).exists()  # noqa: E731
    with resumable_output(out, Path(WORK) / run_lock_name(cfg.shard_index, cfg.num_shards), "partition",
                          PartitionError, started=started, note=shard):
        return _partition(cfg, out, backend=backend, command=command, progress=progress, max_chunks=max_chunks,
                          engine=engine)


def run_lock_name(shard_index: int, num_shards: int) -> str:
    """The lock file a run holds in OUT/work while it works: a second run of the same shard is refused at once
    (the shards of one run share OUT, each holding its own)."""
    return RUN_LOCK if num_shards == 1 else f".partition-{shard_index}-of-{num_shards}.lock"


def check_partition_out(cfg: PartitionConfig, out: Path) -> None:
    """Refuse an --out that is the input shard directory or inside it, a file, or a folder that holds files and
    is not a partition's (with or without --overwrite): the toolkit writes only into folders it made."""
    if cfg.shards:
        src, dst = Path(cfg.shards).resolve(), out.resolve()
        if dst == src or src in dst.parents:
            where = "is" if dst == src else "is inside"
            raise UsageError(f"--out {out} {where} the input shard directory {cfg.shards}: the partition would "
                             "write into its own input", hint="choose an --out outside the input")
    check_resumable(out, written=_partition_wrote, what=f"the output of a partition (no {RECORD_FILE})",
                    error=PartitionError, ignore=(".lock",),
                    more=" (--overwrite only replaces a partition)" if cfg.overwrite else "")


def _partition_wrote(out: Path, entries: list[str]) -> bool:
    # a run that stopped while building its input (--dataset) has only that input
    return any(n in entries for n in (RECORD_FILE, SUMMARY_FILE, WORK)) or (
        BUILT_INPUT in entries and (out / BUILT_INPUT / MANIFEST).exists())


def _partition(cfg: PartitionConfig, out: Path, *, backend: GenerationBackend | None, command: str | None,
               progress: bool, max_chunks: int | None, engine: EngineConfig | None) -> PartitionResult:
    if command is None:
        command = current_command()
    input_dir = _resolve_input(cfg, out, progress=progress)
    manifest = read_manifest(input_dir)
    table = read_table(input_dir, columns=["id", "prompt", "template"])
    ids = table.column("id").to_pylist()
    if len(set(ids)) != len(ids):
        raise PartitionError(f"{input_dir}: row ids repeat; a partition needs one row per question (a mixture of "
                             "levels of the same questions cannot be partitioned)")
    _check_levels(input_dir, manifest)
    check_templates(table.column("template").unique().to_pylist())  # scorable, before anything is generated
    digest = input_digest(manifest)
    if backend is not None:
        identity = backend.describe() if hasattr(backend, "describe") else {"backend": backend.name}
    else:
        identity = backend_identity(cfg.backend, cfg.model, cfg.backend_args)
    fingerprint = {"task": "partition", "version": TASK_VERSION, "input": digest, "generation": identity}
    prompts: Any = _Prompts(table.column("prompt"))
    wrap_agent = None
    if cfg.agent:  # a search agent: each "completion" is a trajectory of the search environment (see _agent)
        if engine is not None and engine.engine != "local":
            raise UsageError("--agent runs its rollouts in this process; --engine ray is not supported with it",
                             hint="drop --engine, or split the questions with --num-shards / --shard-index")
        fingerprint["task"] = "partition-agent"
        fingerprint["agent"], prompts, wrap_agent = agent_setup(cfg, input_dir)
    if cfg.overwrite and cfg.num_shards == 1:
        _remove_outputs(out)
    with open_engine(engine) as eng:
        if backend is None:
            factory: Any = eng.wrap(BackendSpec(cfg.backend, cfg.model, cfg.backend_args), backend=cfg.backend,
                                    options=cfg.backend_args)
        else:  # a given backend: used as it is here, copied to each Ray worker
            factory = backend if eng.name == "local" else eng.wrap(partial(_same, backend), backend=backend.name,
                                                                    options={})
        if wrap_agent is not None:
            factory = wrap_agent(factory)
        report = run_chunks(
            out / WORK, ids=ids, prompts=prompts, backend=factory, sampling=cfg.sampling(),
            fingerprint=fingerprint, chunk_size=cfg.chunk_size, num_shards=cfg.num_shards,
            shard_index=cfg.shard_index, chunks_per_call=cfg.chunks_per_call, question_seeds=cfg.question_seeds,
            overwrite=cfg.overwrite, max_chunks=max_chunks, progress=progress,
            description="partition" + (f" {cfg.shard_index}/{cfg.num_shards}" if cfg.num_shards > 1 else ""),
            allow_identical_samples=cfg.allow_identical_samples,
            on_open=partial(_write_record, out, cfg, input_dir, digest))  # once the work folder took this run
    del table
    if not report.complete:
        if report.remaining:
            log.info("%s: stopped with %d chunk(s) of this shard left; run the same command again to continue",
                     out, len(report.remaining))
        else:
            log.info("%s: shard %d of %d done; the outputs are written when every shard is done (run "
                     "`curriculum partition-merge` to join directories of other machines)", out, cfg.shard_index,
                     cfg.num_shards)
        return PartitionResult(out, False, report)
    with WorkDir(out / WORK).lock():  # shards sharing OUT: whoever completes the set writes, one at a time
        summary = finalize_partition(out, cfg, input_dir=input_dir, command=command)
    return PartitionResult(out, True, report, summary)


def _same(backend: GenerationBackend) -> GenerationBackend:
    return backend


def _remove_outputs(out: Path) -> None:
    """Retire a previous set of outputs: it stops reading as complete (``partition.json`` first, then each bucket's
    manifest is set aside) and ``stats.parquet`` goes; the buckets themselves are replaced when the new set is
    committed, which carries over the files the toolkit did not write (a user's notes in ``answerable/``)."""
    invalidate_set(out, PARTITION_SET)
    (out / STATS_FILE).unlink(missing_ok=True)
