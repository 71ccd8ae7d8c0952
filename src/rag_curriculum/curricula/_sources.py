"""Build stage 1, sources: each dataset's examples (loaded, de-duplicated, filtered, checksummed) and the
distractor source the rows draw from. Hands :class:`BuildSources` to the plan stage (:mod:`._plan`)."""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._plumbing import track
from ..errors import BuildError, SkipReport
from ..loaders import guess_split, load_examples
from ..records import Example
from ..shards import sha256_file
from ._config import BuildConfig, SourceSpec
from .distractors import DistractorSource, make_source

log = logging.getLogger(__name__)

TRAIN_SPLITS = {"train"}
EVAL_SPLITS = {"dev", "validation", "test"}


@dataclass
class LoadedSource:
    """One dataset of the build: its examples (duplicates, unanswerable and gold-less questions excluded and
    counted), the loader's skip report and the input file's SHA-256 (None for the Hub)."""

    spec: SourceSpec
    examples: list[Example]
    report: SkipReport
    excluded: Counter = field(default_factory=Counter)
    checksum: str | None = None

    @property
    def dataset(self) -> str:
        return self.spec.dataset


@dataclass
class BuildSources:
    """The sources stage's hand-off: every dataset's examples, in the config's order, the distractor source the
    rows draw from, and the BM25 index behind it (None without ``--index``)."""

    loaded: list[LoadedSource]
    distractors: DistractorSource
    index: Any = None


def _is_hub(path: str | None) -> bool:
    return bool(path) and str(path).startswith("hf://")


def _default_split(cfg: BuildConfig, spec: SourceSpec) -> str | None:
    if spec.split:
        return spec.split
    if spec.input:
        return None  # from the file name
    return "train" if cfg.setting == "curriculum" else "dev"


def check_split(cfg: BuildConfig, spec: SourceSpec) -> None:
    """Refuse a training curriculum made from a dev/test file, or an evaluation set made from a train file (the
    likeliest way evaluation questions leak into training), and a --split that contradicts the file's name."""
    if cfg.allow_split_mismatch:
        return
    named = guess_split(Path(spec.input)) if spec.input and not _is_hub(spec.input) else None
    hint = "pass --allow-split-mismatch (recipes: allow_split_mismatch=true) if this is intended"
    if spec.split and named and spec.split != named and {spec.split, named} != {"dev", "validation"}:
        raise BuildError(f"{spec.dataset}: --split {spec.split} contradicts the file name {Path(spec.input).name} "
                         f"({named}); for a local file --split only labels the rows. {hint}")
    split = spec.split or named
    if split is None:
        return
    if cfg.setting == "curriculum" and split in EVAL_SPLITS:
        raise BuildError(f"{spec.dataset}: a training curriculum from the {split} split ({spec.input}); build "
                         f"curricula from train files and evaluation sets from dev files, or {hint}")
    if cfg.setting != "curriculum" and split in TRAIN_SPLITS:
        raise BuildError(f"{spec.dataset}: a {cfg.setting} evaluation set from the train split ({spec.input}); "
                         f"evaluation sets come from dev files, or {hint}")


def load_source(cfg: BuildConfig, spec: SourceSpec, *, progress: bool = False) -> LoadedSource:
    check_split(cfg, spec)
    report = SkipReport()
    # The checksum is computed in a thread while the records are parsed (hashlib and file reads release the GIL).
    hasher = ThreadPoolExecutor(max_workers=1) if spec.input and not _is_hub(spec.input) else None
    checksum_future = hasher.submit(sha256_file, spec.input) if hasher else None
    stream = load_examples(spec.dataset, spec.input, split=_default_split(cfg, spec), on_error=cfg.on_error,
                           report=report)
    spec.dataset = stream.dataset
    examples: list[Example] = []
    excluded: Counter = Counter()
    seen: set[str] = set()
    no_passages = bool(getattr(stream.loader, "questions_only", False))  # Search-R1's rows: no gold to count
    for ex in track(stream, f"loading {spec.dataset}", enabled=progress):
        if ex.id in seen:  # the same question twice (a duplicated record, or identical Hub rows without an id)
            excluded["duplicate_id"] += 1
            continue
        seen.add(ex.id)
        if ex.extra.get("answerable") is False and not cfg.include_unanswerable:
            excluded["unanswerable"] += 1
            continue
        if ex.hops == 0 and not no_passages:
            excluded["no_gold"] += 1
            continue
        examples.append(ex)
    checksum = checksum_future.result() if checksum_future else None
    if hasher:
        hasher.shutdown()
    if excluded:
        log.warning("%s: excluded %s", spec.dataset, dict(excluded))
    return LoadedSource(spec, examples, report, excluded, checksum)


def open_distractors(cfg: BuildConfig) -> tuple[DistractorSource, Any]:
    """The build's distractor source, and the BM25 index it reads (None without ``--index``)."""
    index = None
    if cfg.index:
        from rag_retriever import load_index  # optional (the retrieval extra): a ModuleNotFoundError names it

        index = load_index(cfg.index)
        cfg.index = str(cfg.index)
        if cfg.setting == "retrieved" and cfg.top_k > index.depth:
            # the rows would show only the index's depth of passages while their gold_recall claims recall@top_k
            raise BuildError(f"--top-k {cfg.top_k}: the index {cfg.index} ranks {index.depth} passages per question, "
                             f"so no row can show {cfg.top_k}; lower --top-k to {index.depth} or less, or rebuild "
                             f"the index with `curriculum index ... --depth {cfg.top_k}`")
    kind = "retrieved" if cfg.setting == "retrieved" else cfg.distractors
    return make_source(kind, seed=cfg.seed, index=index, top_k=cfg.top_k), index


def gather_sources(cfg: BuildConfig, *, progress: bool = False) -> BuildSources:
    """Stage 1: open the distractor source (and its index), then load every dataset of ``cfg``."""
    distractors, index = open_distractors(cfg)
    loaded = [load_source(cfg, s, progress=progress) for s in cfg.sources]
    return BuildSources(loaded, distractors, index)
