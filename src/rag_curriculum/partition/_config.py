"""The partition's settings (:class:`PartitionConfig`), its result, and the names of the files it writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._settings import MAX_COUNT, MAX_K, MAX_SAMPLES, MAX_SEED, check_model_ref, check_settings, rule
from ..difficulty.accuracy import ANSWERABLE, CORRECT_F1, LEARNABLE, UNANSWERABLE
from ..generation.base import BACKENDS, SamplingConfig
from ..generation.runner import RunReport

SUMMARY_FILE = "partition.json"
STATS_FILE = "stats.parquet"
RECORD_FILE = "partition_config.json"  # the resolved config and where the input is (for merges)
WORK = "work"
BUILT_INPUT = "input"
OUTPUTS = (ANSWERABLE, UNANSWERABLE, LEARNABLE)
PASS_RATE_PLOT = "pass_rate.png"
TASK_VERSION = 1


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
