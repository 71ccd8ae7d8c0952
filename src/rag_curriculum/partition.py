"""Accuracy-based partition (RAG-RL section 3.2 "Accuracy-Based Difficulty", 4.4.2, appendix A).

Sample ``k`` completions from the base model for every question (normally a ``--schedule max`` build, the
hardest level), parse each with the row's output format, score its final answer by answer F1 (maximum over the
gold aliases), and split the questions:

- ``answerable/``: some sample reaches F1 = 1 (max F1 = 1, pass@k = 1), *base-answerable*;
- ``unanswerable/``: none does, *base-unanswerable*; with ``balance`` both are clipped to the same size with the
  seed, as the paper does;
- ``learnable/``: ``0 < c < n``, the questions whose GRPO groups have a non-zero advantage;
- ``stats.parquet``: one row per question: ``n``, ``c``, every sample's F1, max / mean F1, pass@k for every
  k <= n (unbiased estimator), format validity, the parsed answers, the bucket.

Output directories are shard directories (manifest, data card with the pass-rate distribution) whose rows are the
input rows (builder schema) plus the statistics columns, in input order, with ``curriculum_index`` renumbered to
the position in the new set (``input_index`` keeps the old one).

Generation goes through :mod:`rag_curriculum.generation.runner`: chunked, flushed atomically to ``OUT/work``,
resumed by running the same command again, and split over processes with ``num_shards`` / ``shard_index``. Raw
completions are kept in ``work/`` so the buckets can be recomputed (another ``correct_f1``, ``strict_format``,
``balance``) without generating again: run the command again with the new options.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from ._secrets import mask_secrets, redact_command
from ._settings import MAX_COUNT, MAX_K, MAX_SAMPLES, MAX_SEED, check_model_ref, check_settings, rule
from .difficulty.accuracy import (
    ANSWERABLE,
    CORRECT_F1,
    LEARNABLE,
    UNANSWERABLE,
    balance,
    question_stats,
)
from .errors import CurriculumError, PartitionError  # noqa: F401  (re-exported)
from .generation.base import BACKENDS, GenerationBackend, SamplingConfig, get_backend
from .generation.base import backend_identity as _backend_identity
from .generation.runner import (
    BACKEND_FILE,
    IncompleteRunError,
    RunReport,
    WorkDir,
    read_backend,
    read_results,
    run_chunks,
)
from .shards import MANIFEST, read_manifest, read_table, write_json, write_shards

log = logging.getLogger(__name__)

__all__ = [
    "OUTPUTS", "STATS_FILE", "STATS_SCHEMA", "PartitionConfig", "PartitionError", "PartitionResult",
    "finalize_partition", "merge_partitions", "partition", "score_completions",
]

SUMMARY_FILE = "partition.json"
STATS_FILE = "stats.parquet"
RECORD_FILE = "partition_config.json"  # the resolved config and where the input is (for merges)
WORK = "work"
BUILT_INPUT = "input"
OUTPUTS = (ANSWERABLE, UNANSWERABLE, LEARNABLE)
PASS_RATE_PLOT = "pass_rate.png"
TASK_VERSION = 1

#: Statistics columns appended to the input rows in ``answerable/``, ``unanswerable/`` and ``learnable/``.
STAT_FIELDS: list[pa.Field] = [
    pa.field("input_index", pa.int64()),
    pa.field("n", pa.int32()),
    pa.field("c", pa.int32()),
    pa.field("sample_f1", pa.list_(pa.float64())),
    pa.field("max_f1", pa.float64()),
    pa.field("mean_f1", pa.float64()),
    pa.field("pass_rate", pa.float64()),
    pa.field("pass_at_k", pa.list_(pa.float64())),
    pa.field("num_valid_format", pa.int32()),
]
#: The raw completions, with ``keep_completions`` (not ``completions``: TRL passes that name to reward functions).
COMPLETIONS_FIELD = pa.field("base_completions", pa.list_(pa.string()))

#: One row per question in ``stats.parquet`` (``bucket`` is None for a skipped question); with ``keep_completions``
#: a last column ``base_completions`` follows.
STATS_SCHEMA = pa.schema([
    pa.field("position", pa.int64()),
    pa.field("id", pa.string()),
    pa.field("source_id", pa.string()),
    pa.field("data_source", pa.string()),
    pa.field("setting", pa.string()),
    pa.field("level", pa.int32()),
    pa.field("hops", pa.int32()),
    pa.field("seed", pa.int64()),
    pa.field("skipped", pa.string()),
    *STAT_FIELDS[1:],
    pa.field("sample_valid", pa.list_(pa.bool_())),
    pa.field("base_predictions", pa.list_(pa.string())),
    pa.field("bucket", pa.string()),
    pa.field("learnable", pa.bool_()),
    pa.field("kept", pa.bool_()),  # written to answerable/ or unanswerable/ (False when --balance dropped it)
])


@dataclass
class PartitionConfig:
    """Everything that determines a partition. Saved, resolved, in every manifest it writes."""

    shards: str | None = rule(None, flag="SHARDS", empty=False)  # a shard dir from `curriculum build` (--schedule max)
    dataset: str | None = rule(None, empty=False)  # or a dataset ...
    input: str | None = rule(None, empty=False)  # ... and its source file, built first at level K into OUT/input
    n: int | None = rule(None, ge=1, le=MAX_COUNT)  # with dataset/input: questions to sample (None: all)
    K: int | None = rule(None, ge=1, le=MAX_K)  # with dataset/input: the level (default: the dataset's K)
    out: str = rule("outputs/partition", empty=False)
    backend: str = rule("vllm", empty=False)  # vllm | openai | transformers | scripted
    model: str | None = rule(None, empty=False)  # model path / Hub id, or the served model's name for openai
    backend_args: dict[str, Any] = rule(default_factory=dict, flag="--backend-arg")  # backend options
    k: int = rule(8, ge=1, le=MAX_SAMPLES, flag="--pass-at")  # samples per question (pass@k, RAG-RL: 8)
    temperature: float = rule(1.0, ge=0, le=100)
    top_p: float = rule(1.0, gt=0, le=1)
    max_tokens: int = rule(800, ge=1, le=MAX_COUNT)
    seed: int = rule(0, ge=0, le=MAX_SEED)  # sampling (per-question seeds derive from it) and --balance
    correct_f1: float = rule(CORRECT_F1, gt=0, le=1)  # a sample is correct when its answer F1 reaches this
    strict_format: bool = False  # count only samples that keep the output format
    balance: bool = False  # clip answerable/ and unanswerable/ to the same size (RAG-RL appendix A)
    keep_completions: bool = False  # add the raw completions (`base_completions`) to the outputs
    chunk_size: int = rule(256, ge=1, le=MAX_COUNT)  # questions per resumable chunk (and the unit of sharding)
    chunks_per_call: int | None = rule(None, ge=1, le=MAX_COUNT)  # chunks per backend call (default: backend's)
    question_seeds: bool = True  # seed every question from (seed, id): exact resumes; off is faster on vLLM
    num_shards: int = rule(1, ge=1, le=MAX_COUNT)  # split the questions over this many processes ...
    shard_index: int = rule(0, ge=0, le=MAX_COUNT)  # ... of which this is one
    rows_per_shard: int = rule(10_000, ge=1, le=10_000_000, flag="")  # rows per Parquet file of the outputs
    overwrite: bool = False  # discard results of a run with other settings in OUT
    allow_identical_samples: bool = False  # do not stop when most questions get k identical samples (temperature > 0)

    def __post_init__(self) -> None:
        check_settings(self)  # types and ranges, whatever set them (flags or Python)

    def validate(self) -> None:
        check_settings(self)
        if self.shards and (self.dataset or self.input):
            raise ValueError("give either a shard directory or --dataset with --input FILE, not both")
        if not self.shards and not (self.dataset and self.input):
            raise ValueError("no questions: pass a shard directory made by `curriculum build --schedule max`, or "
                             "--dataset NAME --input FILE to build one at level K first")
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index must be in 0..num_shards-1, got {self.shard_index} of {self.num_shards}")
        if self.backend not in BACKENDS:
            BACKENDS.get(self.backend)  # raises with a "did you mean"
        if self.model is None and self.backend != "scripted":
            raise ValueError(f"the {self.backend} backend needs --model")
        self.sampling()  # validates the sampling settings

    def check_model(self) -> None:
        """Refuse a model that is neither a local path nor a valid Hub id before anything is loaded."""
        check_model_ref(self.model, backend=self.backend)

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(n=self.k, temperature=self.temperature, top_p=self.top_p,
                              max_tokens=self.max_tokens, seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PartitionResult:
    out: Path
    complete: bool  # every chunk is generated and the outputs are written
    run: RunReport | None  # what this process generated (None for a merge)
    summary: dict[str, Any] | None = None  # partition.json, when complete

    @property
    def counts(self) -> dict[str, Any]:
        return (self.summary or {}).get("counts", {})


# -- input ---------------------------------------------------------------------------------------------------------
def input_digest(manifest: Mapping[str, Any]) -> str:
    """The identity of a shard directory's content: its shards' hashes and row count."""
    h = hashlib.sha256()
    for s in manifest.get("shards", []):
        h.update(s["sha256"].encode())
    h.update(str(manifest.get("num_rows")).encode())
    return h.hexdigest()


def _resolve_input(cfg: PartitionConfig, out: Path, *, progress: bool) -> Path:
    if cfg.shards:
        d = Path(cfg.shards)
        check_output_set(d, read_manifest(d))  # a clear error when it is not a finished shard directory
        return d
    from .curricula import BuildConfig, SourceSpec, build_curriculum
    from .loaders import get_loader
    from .shards import ShardError, validate_shards

    built = out / BUILT_INPUT
    dataset = get_loader(cfg.dataset or "").name
    # Any split: the partition labels training questions, and dev questions too (the paper's evaluation subsets).
    build = BuildConfig(sources=[SourceSpec(dataset, cfg.input, cfg.n, K=cfg.K)], schedule="max",
                        seed=cfg.seed, out=str(built), overwrite=True, allow_split_mismatch=True)
    with WorkDir(out).lock():  # several shard processes may share OUT: one builds, the others reuse
        try:
            m = validate_shards(built)
            from .curricula.builder import same_build

            if same_build(m, build):
                return built
            if not cfg.overwrite:
                raise PartitionError(f"{built} was built with other options; pass --overwrite or another --out")
        except ShardError:
            pass
        log.info("building %s at level K from %s into %s", dataset, cfg.input, built)
        build_curriculum(build, command=f"curriculum build --dataset {dataset} --input {cfg.input} "
                         f"--schedule max --seed {cfg.seed}" + (f" --n {cfg.n}" if cfg.n else "")
                         + (f" --K {cfg.K}" if cfg.K else "") + f" --out {built}", progress=progress)
    return built


class _Prompts(Sequence):
    """The ``prompt`` column as chat messages, converted only when read."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self.column = column

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, i: Any) -> Any:
        return self.column[i].as_py()


def backend_identity(name: str, model: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """What the completions depend on, from the backend's settings (before building it): its name, the model,
    every constructor option that can change a completion (``extra_body``, ``disable_server_defaults``, dtype,
    engine options, ...; not concurrency, timeouts, retries or secrets) and a digest of a local model directory's
    config, tokenizer and chat template. See :func:`rag_curriculum.generation.base.backend_identity`."""
    return _backend_identity(name, model, args)


def build_backend(name: str, model: str | None, args: Mapping[str, Any]) -> GenerationBackend:
    kwargs = dict(args)
    if model is not None:
        kwargs["model"] = model
    return get_backend(name, **kwargs)


# -- scoring -------------------------------------------------------------------------------------------------------
def score_completions(completions: Sequence[str], answers: Sequence[str], *, template: str | None = None
                      ) -> tuple[list[float], list[bool], list[str]]:
    """Each completion's answer F1 (max over the gold aliases), format validity and parsed answer, using the
    parser of the row's output format (``template``; the RAG-RL parser when unknown).

    >>> score_completions(["<reasoning>r</reasoning><answer>Final answer: Paris\\nSupporting passages: A</answer>",
    ...                    "Final answer: Paris, France"], ["Paris"])
    ([1.0, 0.6666666666666666], [True, False], ['Paris', 'Paris, France'])
    """
    parse = _parser(template)
    from .rewards import answer_f1

    f1, valid, preds = [], [], []
    for text in completions:
        p = parse(text)
        preds.append(p.answer)
        valid.append(bool(p.valid))
        f1.append(float(answer_f1(p.answer, list(answers))))
    return f1, valid, preds


_PARSERS: dict[str | None, Callable[[str], Any]] = {}


def _parser(template: str | None) -> Callable[[str], Any]:
    if template not in _PARSERS:
        from .rewards import get_format, parse_completion

        try:
            _PARSERS[template] = get_format(template).parse if template else parse_completion
        except KeyError:
            log.warning("no output format registered as %r; parsing its completions as RAG-RL", template)
            _PARSERS[template] = parse_completion
    return _PARSERS[template]


# -- the command ---------------------------------------------------------------------------------------------------
def partition(cfg: PartitionConfig, *, backend: GenerationBackend | None = None, command: str | None = None,
              progress: bool = False, max_chunks: int | None = None) -> PartitionResult:
    """Generate this shard's missing chunks; when every chunk of every shard is done, write the outputs.

    ``backend`` overrides the one ``cfg`` names (tests, benchmarks); otherwise it is built only when something
    is left to generate. ``max_chunks`` stops after that many chunks (run again to continue)."""
    cfg.validate()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if command is None:
        from .curricula.builder import current_command

        command = current_command()
    input_dir = _resolve_input(cfg, out, progress=progress)
    manifest = read_manifest(input_dir)
    table = read_table(input_dir, columns=["id", "prompt"])
    ids = table.column("id").to_pylist()
    if len(set(ids)) != len(ids):
        raise PartitionError(f"{input_dir}: row ids repeat; a partition needs one row per question (a mixture of "
                             "levels of the same questions cannot be partitioned)")
    _check_levels(input_dir, manifest)
    digest = input_digest(manifest)
    if backend is not None:
        identity = backend.describe() if hasattr(backend, "describe") else {"backend": backend.name}
    else:
        identity = backend_identity(cfg.backend, cfg.model, cfg.backend_args)
    fingerprint = {"task": "partition", "version": TASK_VERSION, "input": digest, "generation": identity}
    if cfg.overwrite and cfg.num_shards == 1:
        _remove_outputs(out)
    _write_record(out, cfg, input_dir, digest)
    factory = backend if backend is not None else (lambda: build_backend(cfg.backend, cfg.model, cfg.backend_args))
    report = run_chunks(
        out / WORK, ids=ids, prompts=_Prompts(table.column("prompt")), backend=factory, sampling=cfg.sampling(),
        fingerprint=fingerprint, chunk_size=cfg.chunk_size, num_shards=cfg.num_shards,
        shard_index=cfg.shard_index, chunks_per_call=cfg.chunks_per_call, question_seeds=cfg.question_seeds,
        overwrite=cfg.overwrite, max_chunks=max_chunks, progress=progress,
        description="partition" + (f" {cfg.shard_index}/{cfg.num_shards}" if cfg.num_shards > 1 else ""),
        allow_identical_samples=cfg.allow_identical_samples)
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


def _check_levels(input_dir: Path, manifest: Mapping[str, Any]) -> None:
    cfg = manifest.get("config") or {}
    if manifest.get("kind") == "curriculum" and cfg.get("schedule") not in (None, "max"):
        log.warning("%s was built with the %r schedule; RAG-RL partitions questions at the hardest level "
                    "(`curriculum build --schedule max`)", input_dir, cfg.get("schedule"))


def _input_path(input_dir: Path, out: Path) -> str:
    """Where the input is, as records keep it: relative to OUT (absolute only across drives)."""
    try:
        return Path(os.path.relpath(input_dir.resolve(), out.resolve())).as_posix()
    except ValueError:
        return str(input_dir.resolve())


def _write_record(out: Path, cfg: PartitionConfig, input_dir: Path, digest: str) -> None:
    rec = {"config": _public_config(cfg), "input": {"path": _input_path(input_dir, out), "digest": digest}}
    p = out / RECORD_FILE
    if p.exists():
        try:
            if json.loads(p.read_text()) == rec:
                return
        except json.JSONDecodeError:
            pass
    write_json(p, rec)


def _remove_outputs(out: Path) -> None:
    """Retire a previous set of outputs: it stops reading as complete (``partition.json`` first, then each bucket's
    manifest is set aside) and ``stats.parquet`` goes; the buckets themselves are replaced when the new set is
    committed, which carries over the files the toolkit did not write (a user's notes in ``answerable/``)."""
    _invalidate(out)
    (out / STATS_FILE).unlink(missing_ok=True)


# -- the outputs as a set --------------------------------------------------------------------------------------------
#: Hidden folders inside OUT: the next set of outputs being written, and the previous set being replaced.
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".replaced-"
#: A bucket's manifest while its set is being moved into place (renamed to ``manifest.json`` just before
#: ``partition.json`` is written): until then the bucket does not read as a finished shard directory.
PENDING_MANIFEST = f".{MANIFEST}.pending"
#: A bucket's manifest while its set is being replaced: refused by readers (no ``manifest.json``), kept so that the
#: files the toolkit did not write (a user's notes in ``answerable/``) can be told apart and carried over.
REPLACED_MANIFEST = f".{MANIFEST}.replaced"


def _invalidate(out: Path) -> None:
    """The current set of outputs stops reading as complete: ``partition.json`` first, then each bucket's manifest."""
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    for name in OUTPUTS:
        if (out / name / MANIFEST).exists():
            os.replace(out / name / MANIFEST, out / name / REPLACED_MANIFEST)


def _bucket_record(d: Path) -> Path | None:
    """A bucket's manifest under whichever name a (possibly interrupted) commit left it."""
    return next((d / n for n in (MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST) if (d / n).is_file()), None)


def _check_replaceable(out: Path) -> None:
    """Refuse to replace a bucket folder that holds files but no record of what the toolkit wrote there (a folder
    the user made, or a bucket an older version left half removed): its files could not be told apart."""
    for name in OUTPUTS:
        d = out / name
        if d.is_dir() and any(d.iterdir()) and _bucket_record(d) is None:
            raise PartitionError(
                f"{d} holds files but no manifest, so the files the toolkit wrote cannot be told apart from yours; "
                f"move what you want to keep out of {d} (or remove it), then run the same command again")


def _carry_user_files(old: Path, new: Path) -> bool:
    """Move what the toolkit did not write from a replaced bucket ``old`` into its successor ``new`` (the
    ``--overwrite`` rule of :mod:`rag_curriculum.shards`: only the toolkit's files are replaced)."""
    from .shards import foreign_entries, toolkit_files

    record = _bucket_record(old)
    try:
        manifest = json.loads(record.read_text(encoding="utf-8")) if record is not None else None
        owned = (toolkit_files(old, manifest) | {MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST}
                 if isinstance(manifest, dict) else None)
    except (OSError, ValueError, CurriculumError):
        owned = None
    if owned is None:
        return True  # no record of what the toolkit wrote there (refused before the commit): nothing to move
    kept, stuck = [], []
    for entry in foreign_entries(old, owned):
        src, dst = old / entry.rstrip("/"), new / entry.rstrip("/")
        n = 0
        while dst.exists() or dst.is_symlink():  # the new set has a file of that name: keep the user's beside it
            n += 1
            dst = new / f"{entry.rstrip('/')}.kept{n if n > 1 else ''}"
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        except OSError as e:  # e.g. a read-only folder of the user's: left where it is, never deleted
            stuck.append(f"{entry} ({e.strerror or e})")
            continue
        kept.append(entry if dst.name == Path(entry.rstrip("/")).name else f"{entry} (as {dst.name})")
    if kept:
        log.warning("%s: kept %d file(s) the toolkit did not write: %s", new, len(kept), ", ".join(kept))
    if stuck:
        log.warning("%s: could not move %d file(s) the toolkit did not write into the new %s; they stay in %s: %s",
                    old.parent.parent, len(stuck), new.name, old, ", ".join(stuck))
    return not stuck


def _remove_leftovers(out: Path) -> None:
    """Staging and replaced folders an interrupted run left in OUT (the caller holds the work lock, so no live
    process is using them), and partial folders of older versions that wrote the buckets directly."""
    if not out.is_dir():
        return
    held: set[str] = set()
    for p in sorted(out.iterdir()):
        if p.name.startswith(TRASH_PREFIX) and p.is_dir():  # a user's files in a replaced bucket go back first
            for name in OUTPUTS:
                if (p / name).is_dir():
                    if not (out / name).exists():
                        os.replace(p / name, out / name)  # the old bucket, still refused (no manifest.json)
                    elif not _carry_user_files(p / name, out / name):
                        held.add(p.name)  # a user's file could not be moved out: the folder is kept
    for p in out.iterdir():
        if p.name in held:
            continue
        stale = p.name.startswith((STAGING_PREFIX, TRASH_PREFIX)) or any(
            p.name.startswith(f".{b}.partial-") for b in OUTPUTS)
        if stale and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _commit_step(name: str) -> None:
    """Called before each step of moving a finished set into place (tests patch it to crash there)."""


def _commit_outputs(stage: Path, out: Path) -> None:
    """Move a complete set from ``stage`` into ``out``, replacing the previous set.

    The order keeps one rule at every moment: a bucket reads as a finished shard directory only once every output
    of its set is in place, and ``partition.json`` (written last) marks the set complete. A crash part-way leaves
    buckets without a manifest (readers refuse them) and no ``partition.json``; running the same command again
    writes the whole set again (it is deterministic: the same bytes)."""
    trash = out / f"{TRASH_PREFIX}{os.getpid()}-{time.time_ns()}"
    _check_replaceable(out)
    keep_trash = False
    _commit_step("invalidate")
    _invalidate(out)
    for name in OUTPUTS:
        os.replace(stage / name / MANIFEST, stage / name / PENDING_MANIFEST)
    for name in (*OUTPUTS, STATS_FILE):
        _commit_step(name)
        if (out / name).exists():
            trash.mkdir(exist_ok=True)
            os.replace(out / name, trash / name)
        os.replace(stage / name, out / name)
        if name in OUTPUTS and (trash / name).is_dir():
            if not _carry_user_files(trash / name, out / name):
                keep_trash = True
    for name in OUTPUTS:
        _commit_step(f"{name}/{MANIFEST}")
        os.replace(out / name / PENDING_MANIFEST, out / name / MANIFEST)
        _fsync_dir(out / name)
    _commit_step(SUMMARY_FILE)
    os.replace(stage / SUMMARY_FILE, out / SUMMARY_FILE)
    _fsync_dir(out)
    if not keep_trash:
        shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)


def output_set_problem(directory: str | Path, manifest: Mapping[str, Any] | None = None) -> str | None:
    """Why a bucket directory of a partition (``OUT/answerable`` ...) must not be read, or None.

    A bucket still inside its partition's ``OUT`` (beside ``partition_config.json`` or ``work/``) is part of a set:
    it may be read only when ``OUT/partition.json`` is there and names the same set (an interrupted write leaves
    none). A bucket copied elsewhere is read on its own. Readers (``validate``, loaders) call this."""
    d = Path(directory)
    if manifest is None:
        try:
            manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    part = manifest.get("partition")
    if not isinstance(part, Mapping) or "set" not in part:
        return None
    parent = d.parent
    if not ((parent / RECORD_FILE).exists() or (parent / WORK).is_dir()):
        return None
    summary_path = parent / SUMMARY_FILE
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    if not isinstance(summary, Mapping) or summary.get("set") != part["set"]:
        what = "no partition.json" if summary is None else "partition.json belongs to another set of outputs"
        return (f"{d} is one output of a partition whose outputs were not all written ({what} in {parent}); run "
                "the same `curriculum partition` command again to write them")
    return None


def stats_set_problem(path: str | Path) -> str | None:
    """Why a partition's ``stats.parquet`` (or its ``OUT``) must not be read, or None: inside its partition's
    ``OUT`` it is read only once ``partition.json`` marks the set complete."""
    p = Path(path)
    parent = p if p.is_dir() else p.parent
    if not ((parent / RECORD_FILE).exists() or (parent / WORK).is_dir()):
        return None
    if not (parent / SUMMARY_FILE).is_file():
        return (f"{parent} is a partition whose outputs were not all written (no partition.json); run the same "
                "`curriculum partition` command again to write them")
    return None


def check_output_set(directory: str | Path, manifest: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`PartitionError` with :func:`output_set_problem`'s message when there is one."""
    problem = output_set_problem(directory, manifest)
    if problem:
        raise PartitionError(problem)


# -- outputs -------------------------------------------------------------------------------------------------------
def finalize_partition(out: str | Path, cfg: PartitionConfig, *, input_dir: str | Path | None = None,
                       command: str | None = None) -> dict[str, Any]:
    """Score every completion in ``OUT/work`` and write ``stats.parquet``, the three shard directories and
    ``partition.json`` (last). Deterministic: the same completions and options give byte-identical files."""
    out = Path(out)
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
        results = read_results(wd, ids=rows.column("id").to_pylist())
    except IncompleteRunError as e:
        raise PartitionError(f"{e}; run the missing shards (or `curriculum partition-merge` their directories)"
                             ) from None
    stats = _question_stats(rows, results, cfg)
    kept, balance_info = _select(stats, cfg)
    written = kept[ANSWERABLE] | kept[UNANSWERABLE]
    stats = stats.set_column(stats.schema.get_field_index("kept"), "kept",
                             pa.array([p in written for p in stats.column("position").to_pylist()], pa.bool_()))
    if cfg.keep_completions:
        stats = stats.append_column(COMPLETIONS_FIELD, results.column("completions"))
    counts = _counts(stats, run)
    generation = {"fingerprint": run["fingerprint"], "sampling": run["sampling"], "chunk_size": run["chunk_size"],
                  "question_seeds": run["question_seeds"]}
    resolved = read_backend(wd)
    if resolved is not None:  # the engine's settings as resolved (per-platform choices included)
        generation["backend"] = resolved
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
        "generation": generation,
    }
    # The whole set is written into a staging folder inside OUT, then moved into place (see _commit_outputs): a
    # full disk or a crash while writing leaves the previous set as it was, never part of a new one.
    _remove_leftovers(out)
    stage = out / f"{STAGING_PREFIX}{os.getpid()}-{time.time_ns()}"
    try:
        stage.mkdir()
        _write_table(stage / STATS_FILE, stats)
        base["set"] = _set_id(stage / STATS_FILE, base)
        plot = _plot_bytes(stage, stats, run["sampling"]["n"])
        outputs = {}
        for bucket in OUTPUTS:
            table = _bucket_rows(rows, stats, sorted(kept[bucket]), keep_completions=cfg.keep_completions,
                                 results=results)
            m = {k: v for k, v in base.items() if k != "set"}
            m["partition"] = {"bucket": bucket, "rule": _rule(bucket, cfg), "balance": balance_info,
                              "counts": counts, "set": base["set"]}
            m["counts"] = _row_counts(table)
            m["trainer_tail"] = _tail(manifest, table.num_rows)
            write_shards(table, stage / bucket, manifest=m, overwrite=True, rows_per_shard=cfg.rows_per_shard,
                         card=lambda d, mm, b=bucket: _write_card(d, mm, b, plot, stats))
            outputs[bucket] = {"path": bucket, "rows": table.num_rows}
        summary = {**base, "kind": "partition-summary", "counts": counts, "balance": balance_info,
                   "outputs": outputs, "stats": STATS_FILE}
        write_json(stage / SUMMARY_FILE, summary)
        _commit_outputs(stage, out)
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        where = f" ({e.filename})" if e.filename and stage.name not in str(e.filename) else ""
        raise PartitionError(f"cannot write the outputs into {out}: {e.strerror or e}{where}; nothing of them was "
                             f"written and the completions in {out / WORK} are kept. Free some space or fix the "
                             "permissions, then run the same command again") from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log.info("%s: %d answerable, %d unanswerable, %d learnable of %d questions", out, counts["answerable"],
             counts["unanswerable"], counts["learnable"], counts["questions"])
    return summary


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


def _public_config(cfg: PartitionConfig) -> dict[str, Any]:
    """The config as recorded in manifests and cards: without how this process ran, and without secrets (the
    toolkit's one rule, :mod:`rag_curriculum._secrets`)."""
    d = cfg.to_dict()
    for k in ("overwrite", "num_shards", "shard_index"):
        d.pop(k, None)
    return mask_secrets(d)


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


def _question_stats(rows: pa.Table, results: pa.Table, cfg: PartitionConfig) -> pa.Table:
    def col(name: str) -> list[Any]:
        return rows.column(name).to_pylist() if name in rows.schema.names else [None] * rows.num_rows

    answers, templates = col("answers"), col("template")
    recs: dict[str, list[Any]] = {f.name: [] for f in STATS_SCHEMA}
    meta = {k: col(k) for k in ("id", "source_id", "data_source", "setting", "level", "hops")}
    def samples() -> Any:  # a batch at a time: the completions of 40,000 questions never sit in Python at once
        for batch in results.select(["seed", "skipped", "completions"]).to_batches(max_chunksize=2048):
            yield from zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True)

    for p, (seed, skipped, comps) in enumerate(samples()):
        recs["position"].append(p)
        for k, v in meta.items():
            recs[k].append(v[p])
        recs["seed"].append(seed)
        recs["skipped"].append(skipped)
        if skipped is not None or comps is None:
            for k in ("n", "c", "sample_f1", "max_f1", "mean_f1", "pass_rate", "pass_at_k", "num_valid_format",
                      "sample_valid", "base_predictions", "bucket", "learnable"):
                recs[k].append(None)
        else:
            f1, valid, preds = score_completions(comps, answers[p] or [], template=templates[p])
            s = question_stats(f1, correct_f1=cfg.correct_f1, valid=valid if cfg.strict_format else None)
            recs["n"].append(s.n)
            recs["c"].append(s.c)
            recs["sample_f1"].append(list(s.f1))
            recs["max_f1"].append(s.max_f1)
            recs["mean_f1"].append(s.mean_f1)
            recs["pass_rate"].append(s.pass_rate)
            recs["pass_at_k"].append(list(s.pass_at_k))
            recs["num_valid_format"].append(sum(valid))
            recs["sample_valid"].append(valid)
            recs["base_predictions"].append(preds)
            recs["bucket"].append(s.bucket)
            recs["learnable"].append(s.learnable)
        recs["kept"].append(False)
    return pa.table(recs, schema=STATS_SCHEMA)


def _select(stats: pa.Table, cfg: PartitionConfig) -> tuple[dict[str, set[int]], dict[str, Any]]:
    pos = stats.column("position").to_pylist()
    bucket = stats.column("bucket").to_pylist()
    learn = stats.column("learnable").to_pylist()
    ans = [p for p, b in zip(pos, bucket, strict=True) if b == ANSWERABLE]
    una = [p for p, b in zip(pos, bucket, strict=True) if b == UNANSWERABLE]
    info: dict[str, Any] = {"enabled": cfg.balance, "answerable_before": len(ans), "unanswerable_before": len(una)}
    if cfg.balance:
        ans_k, una_k = balance(ans, una, seed=cfg.seed)
        info["size"] = len(ans_k)
        if not ans_k and (ans or una):
            none, some = ("answerable", "unanswerable") if not ans else ("unanswerable", "answerable")
            log.warning("--balance: no question is %s (%d are %s), so both sets are clipped to 0 and answerable/ "
                        "and unanswerable/ get 0 rows; run again without --balance to keep the %s questions",
                        none, len(ans) + len(una), some, some)
    else:
        ans_k, una_k = ans, una
    kept = {ANSWERABLE: set(ans_k), UNANSWERABLE: set(una_k),
            LEARNABLE: {p for p, lv in zip(pos, learn, strict=True) if lv}}
    return kept, info


def _counts(stats: pa.Table, run: Mapping[str, Any]) -> dict[str, Any]:
    n = run["sampling"]["n"]
    bucket = stats.column("bucket").to_pylist()
    scored = [b is not None for b in bucket]
    cs = [c for c in stats.column("c").to_pylist() if c is not None]
    hist = Counter(cs)
    pak = [v for v in stats.column("pass_at_k").to_pylist() if v is not None]
    mean_pak = {str(k + 1): (round(sum(v[k] for v in pak) / len(pak), 6) if pak else None) for k in range(n)}
    valid = sum(v or 0 for v in stats.column("num_valid_format").to_pylist())
    maxf = [v for v in stats.column("max_f1").to_pylist() if v is not None]
    return {
        "questions": stats.num_rows,
        "scored": sum(scored),
        "skipped": stats.num_rows - sum(scored),
        "samples_per_question": n,
        ANSWERABLE: bucket.count(ANSWERABLE),
        UNANSWERABLE: bucket.count(UNANSWERABLE),
        LEARNABLE: sum(1 for v in stats.column("learnable").to_pylist() if v),
        "correct_samples_histogram": {str(c): hist.get(c, 0) for c in range(n + 1)},
        "mean_pass_at_k": mean_pak,
        "mean_max_f1": round(sum(maxf) / len(maxf), 6) if maxf else None,
        "format_valid_rate": round(valid / (len(cs) * n), 6) if cs else None,
    }


def _rule(bucket: str, cfg: PartitionConfig) -> str:
    f = "" if cfg.correct_f1 == 1 else f" >= {cfg.correct_f1:g}"
    fmt = " (format-valid samples only)" if cfg.strict_format else ""
    return {ANSWERABLE: f"some sample has answer F1{f or ' = 1'}{fmt} (c > 0)",
            UNANSWERABLE: f"no sample has answer F1{f or ' = 1'}{fmt} (c = 0)",
            LEARNABLE: "0 < c < n: the samples disagree, so GRPO gets a non-zero advantage"}[bucket]


def _bucket_rows(rows: pa.Table, stats: pa.Table, positions: list[int], *, keep_completions: bool,
                 results: pa.Table) -> pa.Table:
    idx = pa.array(positions, pa.int64())
    base = rows.take(idx)
    ours = {f.name for f in STAT_FIELDS} | {COMPLETIONS_FIELD.name}
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
    for f in STAT_FIELDS[1:]:
        cols[f.name] = st.column(f.name)
    schema_fields = [base.schema.field(name) for name in base.schema.names] + STAT_FIELDS
    if keep_completions:
        cols[COMPLETIONS_FIELD.name] = results.column("completions").take(idx)
        schema_fields.append(COMPLETIONS_FIELD)
    schema = pa.schema(schema_fields)
    return pa.table([cols[f.name] for f in schema], schema=schema)


def _row_counts(table: pa.Table) -> dict[str, Any]:
    def counts(name: str) -> dict[str, int]:
        if name not in table.schema.names:
            return {}
        c = Counter(table.column(name).to_pylist())
        return {str(k): c[k] for k in sorted(c, key=lambda x: (x is None, x))}

    return {"levels": counts("level"), "hops": counts("hops"), "sources": counts("data_source"),
            "num_distractors": counts("num_distractors")}


def _tail(manifest: Mapping[str, Any], rows: int) -> dict[str, Any] | None:
    bp = (manifest.get("config") or {}).get("batch_prompts")
    if not bp:
        return None
    return {"batch_prompts": bp, "steps": rows // bp, "unseen_rows": rows % bp}


def _write_table(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd", compression_level=3, row_group_size=1 << 16)
    os.replace(tmp, path)


def _plot_bytes(out: Path, stats: pa.Table, n: int) -> bytes | None:
    rates = [v for v in stats.column("pass_rate").to_pylist() if v is not None]
    if not rates:
        return None
    from .cards import plot_histogram

    tmp = out / f".tmp-{os.getpid()}-{PASS_RATE_PLOT}"
    try:
        plot_histogram(rates, tmp, title=f"pass rate c/n over {len(rates):,} questions (n = {n})",
                       xlabel="pass rate c/n (pass@1)", bins=n + 1)
        return tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)


def _write_card(directory: Path, manifest: Mapping[str, Any], bucket: str, plot: bytes | None,
                stats: pa.Table) -> None:
    from .cards import front_matter, md_table

    part = manifest["partition"]
    counts = part["counts"]
    gen = manifest["generation"]
    g = gen["fingerprint"]["generation"]
    sampling = gen["sampling"]
    n = sampling["n"]
    sources = sorted(manifest["counts"]["sources"]) or [s["dataset"] for s in manifest.get("sources", [])]
    model = g.get("model") or "?"
    pretty = {ANSWERABLE: "base-answerable", UNANSWERABLE: "base-unanswerable", LEARNABLE: "learnable"}[bucket]
    title = f"RAG-RL {pretty} questions ({', '.join(sources) or '?'}, {Path(str(model)).name}, pass@{n})"
    lines = [front_matter(sources=sources, num_rows=manifest["num_rows"], pretty_name=title,
                          tags=("pass-at-k", "accuracy-based-difficulty")), f"# {title}", ""]
    lines += [
        f"{manifest['num_rows']:,} rows: the questions of `{manifest['input']['path']}` for which {part['rule']}. "
        f"Each question was answered {n} times by `{model}` ({g.get('backend')} backend; temperature "
        f"{sampling['temperature']}, top-p {sampling['top_p']}, at most {sampling['max_tokens']} tokens, seed "
        f"{sampling['seed']}); each final answer was scored by answer F1 against the gold answer and its aliases "
        "(RAG-RL section 3.2, appendix A). Rows keep the input's columns and order (`curriculum_index` is "
        "renumbered; `input_index` is the input position) and add `n`, `c` (samples with F1 = 1), `sample_f1`, "
        "`max_f1`, `mean_f1`, `pass_rate` (c/n), `pass_at_k` (unbiased pass@k for k = 1..n) and "
        "`num_valid_format`.", ""]
    bal = part["balance"]
    if bal["enabled"] and bucket != LEARNABLE:
        lines += [f"Balanced as in the paper: {bal['answerable_before']:,} answerable and "
                  f"{bal['unanswerable_before']:,} unanswerable questions were clipped to {bal['size']:,} each "
                  f"with seed {manifest['seed']}.", ""]
    lines += ["## How it was made", "", "```", str(manifest.get("command")), "```", ""]
    lines += ["## All partitioned questions", "", md_table(["", "questions"], [
        ["questions", f"{counts['questions']:,}"], ["skipped (prompt too long)", f"{counts['skipped']:,}"],
        ["base-answerable (c > 0)", f"{counts[ANSWERABLE]:,}"],
        ["base-unanswerable (c = 0)", f"{counts[UNANSWERABLE]:,}"],
        ["learnable (0 < c < n)", f"{counts[LEARNABLE]:,}"]]), ""]
    scored = max(counts["scored"], 1)
    lines += ["Distribution of pass rates (correct samples c out of n):", "", md_table(
        ["c", "pass rate c/n", "questions", "share"],
        [[c, f"{int(c) / n:.3f}", f"{q:,}", f"{q / scored:.1%}"]
         for c, q in counts["correct_samples_histogram"].items()]), ""]
    lines += ["Mean unbiased pass@k over the questions:", "", md_table(
        ["k", "pass@k"], [[k, "-" if v is None else f"{v:.4f}"] for k, v in counts["mean_pass_at_k"].items()]), ""]
    if counts.get("format_valid_rate") is not None:
        lines += [f"Samples that keep the output format: {counts['format_valid_rate']:.1%}. Mean max F1: "
                  f"{counts['mean_max_f1']:.4f}.", ""]
    if plot is not None:
        (directory / PASS_RATE_PLOT).write_bytes(plot)
        lines += [f"![distribution of pass rates]({PASS_RATE_PLOT})", ""]
    rc = manifest["counts"]
    lines += ["## This set", "", "Rows per hops:", "", md_table(["hops", "rows"], rc["hops"].items()), "",
              "Rows per level:", "", md_table(["level", "rows"], rc["levels"].items()), ""]
    if manifest.get("trainer_tail"):
        t = manifest["trainer_tail"]
        lines += [f"With {t['batch_prompts']} prompts per optimiser step a trainer runs {t['steps']} steps and "
                  f"never sees the last {t['unseen_rows']} row(s).", ""]
    lines += ["The per-question statistics of every partitioned question are in `../stats.parquet`.", ""]
    (directory / "README.md").write_text("\n".join(lines), encoding="utf-8")


# -- merge ---------------------------------------------------------------------------------------------------------
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
    it is no longer where the run recorded it."""
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
    target_dir = Path(out) if out is not None else srcs[0]
    cfg = PartitionConfig(**{**record["config"], **options, "out": str(target_dir)})
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
                tmp = target.path / f".{src.name}.tmp-{os.getpid()}"
                shutil.copyfile(src, tmp)
                os.replace(tmp, target.chunk_path(k))
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
        from .curricula.builder import current_command

        command = current_command()
    with target.lock():
        summary = finalize_partition(target_dir, cfg, input_dir=input_dir, command=command)
    return PartitionResult(target_dir, True, None, summary)
