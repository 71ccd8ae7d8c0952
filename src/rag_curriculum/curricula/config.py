"""The build configuration: typed dataclasses are the schema; recipes (YAML) and the command line override it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .._settings import MAX_COUNT, MAX_K, MAX_SEED, check_settings, rule, suggest

#: K per dataset, as in RAG-RL section 4.4.
DEFAULT_K = {"hotpotqa": 10, "musique": 20, "2wikimultihopqa": 10}

ORDERS = ("level", "shuffled", "hops-level")
SETTINGS = ("curriculum", "distractor", "ideal")
TAILS = ("keep", "trim", "pad")
LEAKAGE = ("refuse", "drop", "warn")


@dataclass
class SourceSpec:
    """One dataset in a build: where its records come from and how many questions to sample."""

    dataset: str = rule(flag="--dataset", empty=False)  # hotpotqa | musique | 2wikimultihopqa
    input: str | None = rule(None, empty=False)  # a local file in any layout the loaders accept; None: the Hub
    n: int | None = rule(None, ge=1, le=MAX_COUNT)  # questions to sample without replacement; None: every one
    split: str | None = rule(None, empty=False)  # train / dev; default: from the file name, or train (dev for eval)
    K: int | None = rule(None, ge=1, le=MAX_K)  # maximum level for this source; default DEFAULT_K[dataset]

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass
class BuildConfig:
    """Everything that determines a build's rows. Saved, resolved, in the manifest."""

    sources: list[SourceSpec] = rule(default_factory=list, flag="--dataset")
    schedule: str = rule("min-max", empty=False)  # max | linear | min-max | piecewise | any registered name
    pieces: Any = None  # piecewise schedule: "1:0.5,K:0.5" or [[1, 0.5], ["K", 0.5]]
    order: str = rule("level", choices=ORDERS)  # level (schedule order) | shuffled | hops-level
    K: int | None = rule(None, ge=1, le=MAX_K)  # one K for every source (overrides the per-dataset defaults)
    seed: int = rule(0, ge=0, le=MAX_SEED)
    setting: str = rule("curriculum", choices=SETTINGS)  # curriculum (training) | distractor | ideal (eval sets)
    max_distractors: int = rule(18, ge=0, le=MAX_K)  # distractor-setting cap (RAG-RL 4.5: gold + up to 18)
    template: str = rule("rag-rl", empty=False)  # prompt/output format, looked up in rag_curriculum.prompts
    ability: str = rule("multi-hop-qa", flag="")  # verl's `ability` column
    rows_per_shard: int = rule(10_000, ge=1, le=10_000_000)
    workers: int | None = rule(None, ge=1, le=1024)  # processes that render and write shards (None: one per CPU)
    batch_prompts: int | None = rule(None, ge=1, le=MAX_COUNT)  # prompts per optimiser step of the trainer
    tail: str = rule("keep", choices=TAILS)  # keep | trim | pad: fit the row count to a multiple of batch_prompts
    eval_sets: list[str] = rule(default_factory=list, flag="--eval-set")  # shard dirs checked for leakage
    leakage: str = rule("refuse", choices=LEAKAGE)  # refuse | drop (exclude leaked questions) | warn
    include_unanswerable: bool = False  # MuSiQue-Full's answerable=false questions
    allow_split_mismatch: bool = False  # allow curricula from dev/test files and evaluation sets from train files
    on_error: str = rule("raise", choices=("raise", "skip"))  # raise | skip (bad records counted and reported)
    out: str = rule("outputs/curriculum", empty=False)
    overwrite: bool = False
    tokenizer: str | None = rule(None, empty=False)  # Hub id or directory: count each prompt's tokens

    def __post_init__(self) -> None:
        check_settings(self)  # types and ranges, whatever set them (flags, a recipe, Python)

    def validate(self) -> None:
        check_settings(self)  # again: a field may have been set after binding
        for s in self.sources:
            if not isinstance(s, SourceSpec):
                raise ValueError(f"sources: each entry must be a SourceSpec or a mapping, got {s!r}")
            check_settings(s)
        if not self.sources:
            raise ValueError("no dataset given: pass --dataset NAME (and --input PATH), or a recipe")
        if self.tail != "keep" and not self.batch_prompts:
            raise ValueError(f"tail={self.tail!r} needs batch_prompts (the trainer's prompts per step)")
        if self.pieces and self.schedule != "piecewise":
            raise ValueError(f"--pieces is for --schedule piecewise, not {self.schedule!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["tokenizer"] is None:  # a build without --tokenizer records the config it always did
            del d["tokenizer"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BuildConfig:
        d = dict(d)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown build option {unknown[0]!r}{suggest(unknown[0], sorted(known))} Known: "
                             f"{', '.join(sorted(known))}")
        sources = d.get("sources") or []
        if not isinstance(sources, list):
            raise ValueError(f"sources = {sources!r}: must be a list of {{dataset, input, n, split, K}} mappings")
        d["sources"] = [s if isinstance(s, SourceSpec) else _source(s) for s in sources]
        eval_sets = d.get("eval_sets") or []
        d["eval_sets"] = list(eval_sets) if isinstance(eval_sets, list | tuple) else eval_sets
        return cls(**d)


def _source(s: Any) -> SourceSpec:
    if not isinstance(s, dict):
        raise ValueError(f"sources: each entry must be a mapping {{dataset, input, n, split, K}}, got {s!r}")
    known = sorted(SourceSpec.__dataclass_fields__)
    unknown = sorted(set(s) - set(known))
    if unknown:
        raise ValueError(f"unknown source option {unknown[0]!r}{suggest(unknown[0], known)} Known: {', '.join(known)}")
    if "dataset" not in s:
        raise ValueError(f"a source needs a dataset: {s!r}")
    return SourceSpec(**s)
