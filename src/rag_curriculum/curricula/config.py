"""The build configuration: typed dataclasses are the schema; recipes (YAML) and the command line override it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: K per dataset, as in RAG-RL section 4.4.
DEFAULT_K = {"hotpotqa": 10, "musique": 20, "2wikimultihopqa": 10}

ORDERS = ("level", "shuffled", "hops-level")
SETTINGS = ("curriculum", "distractor", "ideal")
TAILS = ("keep", "trim", "pad")
LEAKAGE = ("refuse", "drop", "warn")


@dataclass
class SourceSpec:
    """One dataset in a build: where its records come from and how many questions to sample."""

    dataset: str  # hotpotqa | musique | 2wikimultihopqa
    input: str | None = None  # a local file in any layout the loaders accept; None downloads from the Hub
    n: int | None = None  # questions to sample without replacement; None uses every question
    split: str | None = None  # train / dev; default: from the file name, or train (dev for eval settings)
    K: int | None = None  # maximum level for this source; default DEFAULT_K[dataset]


@dataclass
class BuildConfig:
    """Everything that determines a build's rows. Saved, resolved, in the manifest."""

    sources: list[SourceSpec] = field(default_factory=list)
    schedule: str = "min-max"  # max | linear | min-max | piecewise | any registered name
    pieces: Any = None  # piecewise schedule: "1:0.5,K:0.5" or [[1, 0.5], ["K", 0.5]]
    order: str = "level"  # level (schedule order) | shuffled | hops-level (sort by hops, then level)
    K: int | None = None  # one K for every source (overrides the per-dataset defaults)
    seed: int = 0
    setting: str = "curriculum"  # curriculum (a training curriculum) | distractor | ideal (evaluation sets)
    max_distractors: int = 18  # distractor-setting cap (RAG-RL 4.5: all gold + up to 18 distractors)
    template: str = "rag-rl"  # prompt/output format, looked up in rag_curriculum.prompts.TEMPLATES
    ability: str = "multi-hop-qa"  # verl's `ability` column
    rows_per_shard: int = 10_000
    workers: int | None = None  # processes that render and write shards (None: one per CPU); output is identical
    batch_prompts: int | None = None  # prompts per optimiser step of the trainer (RAG-RL: 42)
    tail: str = "keep"  # keep | trim | pad: fit the row count to a multiple of batch_prompts
    eval_sets: list[str] = field(default_factory=list)  # shard directories checked for train/eval leakage
    leakage: str = "refuse"  # refuse | drop (exclude leaked questions before sampling) | warn
    include_unanswerable: bool = False  # MuSiQue-Full's answerable=false questions
    allow_split_mismatch: bool = False  # allow curricula from dev/test files and evaluation sets from train files
    on_error: str = "raise"  # raise | skip (bad records are counted and reported)
    out: str = "outputs/curriculum"
    overwrite: bool = False
    tokenizer: str | None = None  # Hub id or directory: count each prompt's tokens (chat template applied)

    def validate(self) -> None:
        if not self.sources:
            raise ValueError("no dataset given: pass --dataset NAME (and --input PATH), or a recipe")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.setting not in SETTINGS:
            raise ValueError(f"setting must be one of {SETTINGS}, got {self.setting!r}")
        if self.tail not in TAILS:
            raise ValueError(f"tail must be one of {TAILS}, got {self.tail!r}")
        if self.leakage not in LEAKAGE:
            raise ValueError(f"leakage must be one of {LEAKAGE}, got {self.leakage!r}")
        if self.tail != "keep" and not self.batch_prompts:
            raise ValueError(f"tail={self.tail!r} needs batch_prompts (the trainer's prompts per step)")
        if self.batch_prompts is not None and self.batch_prompts < 1:
            raise ValueError("batch_prompts must be >= 1")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.K is not None and self.K < 1:
            raise ValueError("K must be >= 1")
        if self.pieces and self.schedule != "piecewise":
            raise ValueError(f"--pieces is for --schedule piecewise, not {self.schedule!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        for s in self.sources:
            if s.n is not None and s.n < 1:
                raise ValueError(f"{s.dataset}: n must be >= 1 (or omitted / 'all' for every question)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["tokenizer"] is None:  # a build without --tokenizer records the config it always did
            del d["tokenizer"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildConfig:
        d = dict(d)
        d["sources"] = [s if isinstance(s, SourceSpec) else SourceSpec(**s) for s in d.get("sources") or []]
        d["eval_sets"] = list(d.get("eval_sets") or [])
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown build option(s) {unknown}; known: {sorted(known)}")
        return cls(**d)
