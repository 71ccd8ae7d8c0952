"""The partition's settings (:class:`PartitionConfig`), its result, and the names of the files it writes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._plumbing import renamed_keywords
from .._settings import (
    MAX_COUNT,
    MAX_K,
    MAX_SAMPLES,
    MAX_SEED,
    check_settings,
    retriever_retries_rule,
    retriever_rule,
    retriever_timeout_rule,
    rule,
)
from ..agents import AGENT_PROTOCOLS, RolloutConfig, SearchDifficulty, agent_protocol_names
from ..difficulty.accuracy import ANSWERABLE, CORRECT_F1, LEARNABLE, UNANSWERABLE
from ..errors import ConfigError, UsageError
from ..generation import BACKENDS, SamplingConfig, check_backend_model
from ..loaders import questions_only

if TYPE_CHECKING:  # for the annotation only
    from ..generation.runner import RunReport

STATS_FILE = "stats.parquet"
BUILT_INPUT = "input"
OUTPUTS = (ANSWERABLE, UNANSWERABLE, LEARNABLE)
#: The buckets of a search agent's partition (``--agent search-r1``): answerable without a search, answerable only
#: with one, neither; and ``learnable`` (0 < c < k) as in the closed-context partition (see ``_agent``).
NO_SEARCH = "answerable-without-search"
WITH_SEARCH = "answerable-with-search"
AGENT_OUTPUTS = (NO_SEARCH, WITH_SEARCH, UNANSWERABLE, LEARNABLE)
#: Every bucket name either kind of partition writes (a set is retired or swept whatever its kind).
ALL_OUTPUTS = tuple(dict.fromkeys((*OUTPUTS, *AGENT_OUTPUTS)))
PASS_RATE_PLOT = "pass_rate.png"
TASK_VERSION = 1
#: Held in OUT/work while a partition runs (filelock): a second run on the same OUT is refused at once.
RUN_LOCK = ".partition.lock"


@renamed_keywords()
@dataclass
class PartitionConfig:
    """Everything that determines a partition. Saved, resolved, in every manifest it writes. Each field's ``help``
    is the one text the command line (``curriculum partition --help``) and the recipes' documentation read.

    Each field's type and range is checked when the config is made (a :class:`SettingError`, a
    :class:`ConfigError`); :meth:`validate` checks the fields against each other.

    Examples:
        >>> from rag_curriculum import PartitionConfig
        >>> cfg = PartitionConfig(shards="outputs/musique-max", model="Qwen/Qwen2.5-7B-Instruct", samples=8)
        >>> cfg.backend, cfg.out
        ('vllm', 'outputs/partition')
        >>> PartitionConfig(shards="outputs/musique-max", samples=0)
        Traceback (most recent call last):
        ...
        rag_curriculum.errors.SettingError: samples (--pass-at) = 0: must be an integer in 1..1024
    """

    shards: str | None = rule(None, flag="SHARDS", empty=False, help=(
        "A shard directory made by `curriculum build` (normally --schedule max: the hardest level). Or give "
        "--dataset and --input to build one first."))
    dataset: str | None = rule(None, empty=False, help=(
        "Build from a dataset file first: hotpotqa | musique | 2wikimultihopqa."))
    input: str | None = rule(None, empty=False, help=(
        "The --dataset's source file; built at level K (--schedule max) into OUT/input."))
    n: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "With --input: questions to sample, at most (RAG-RL: up to 40,000): a file holding fewer gives every one "
        "(partition.json's sample says how many); unset: all of them."))
    K: int | None = rule(None, ge=1, le=MAX_K, help="With --input: the level; unset: the dataset's K.")
    out: str = rule("outputs/partition", empty=False, help=(
        "Output directory: answerable/, unanswerable/, learnable/, stats.parquet, partition.json; work/ holds the "
        "resumable generation."))
    backend: str = rule("vllm", empty=False, help=(
        "Generation backend: vllm (GPU, the paper's) | openai (a server such as `vllm serve`) | transformers (the "
        "CPU choice; GPU too) | scripted."))
    model: str | None = rule(None, empty=False, help=(
        "Base model: a local path or Hub id; for --backend openai the served model's name; for scripted a JSON "
        "file or module:attr."))
    backend_args: dict[str, Any] = rule(default_factory=dict, flag="--backend-arg", help=(
        "Backend options (dtype, tensor_parallel_size, base_url, ...): every option that can change a completion "
        "is part of the run's identity; secrets are never written."))
    samples: int = rule(8, ge=1, le=MAX_SAMPLES, flag="--pass-at", renamed_from="k", help=(
        "Samples per question, k (RAG-RL: 8; at most 1024); pass@j is stored for every j <= k."))
    temperature: float = rule(1.0, ge=0, le=100, help="Sampling temperature (use the rollout temperature).")
    top_p: float = rule(1.0, gt=0, le=1, help="Nucleus sampling top-p.")
    max_tokens: int = rule(800, ge=1, le=MAX_COUNT, help=(
        "Most tokens per completion (800: the completion cap of the RAG-RL authors' training configuration)."))
    seed: int = rule(0, ge=0, le=MAX_SEED, help=(
        "Seed: every question is sampled with a seed derived from it and the question id; also the --balance "
        "draw."))
    correct_f1: float = rule(CORRECT_F1, gt=0, le=1, help=(
        "A sample is correct when its answer F1 reaches this (RAG-RL: 1)."))
    strict_format: bool = rule(False, help="Count only samples that keep the output format.")
    balance: bool = rule(False, help=(
        "Clip answerable/ and unanswerable/ to the same size with --seed (RAG-RL appendix A)."))
    keep_completions: bool = rule(False, help=(
        "Add the raw completions (`base_completions`) to the outputs and stats.parquet."))
    chunk_size: int = rule(256, ge=1, le=MAX_COUNT, help=(
        "Questions per resumable chunk (also the unit of sharding)."))
    chunks_per_call: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Chunks per backend call; unset: the backend's choice (vllm 2048 prompts per call, transformers 1 chunk)."))
    question_seeds: bool = rule(True, help=(
        "Seed each question from (--seed, id) so resumed and sharded runs draw the same samples. "
        "--no-question-seeds is faster on vLLM but not reproducible."))
    num_shards: int = rule(1, ge=1, le=MAX_COUNT, help=(
        "Split the questions over N processes (one per GPU or node)."))
    shard_index: int = rule(0, ge=0, le=MAX_COUNT, help="Which of the --num-shards this process runs (0-based).")
    rows_per_shard: int = rule(10_000, ge=1, le=10_000_000, flag="", help="Rows per Parquet file of the outputs.")
    overwrite: bool = rule(False, help=(
        "Discard what --out holds from a run with other settings (without --num-shards, also start the same run "
        "again; a shard never discards the chunks other shards of its run wrote)."))
    allow_identical_samples: bool = rule(False, help=(
        "Do not stop when most questions get identical samples at temperature > 0 (by default that stops the run: "
        "the server or backend most likely ignores the sampling parameters)."))
    agent: str | None = rule(None, choices=agent_protocol_names, help=(
        "Partition a search agent: k trajectories per question through the search environment, split into "
        "answerable-without-search / answerable-with-search / unanswerable; needs --retriever. The protocol: "
        "search-r1 (Search-R1's tags) | react (ReAct's Thought / Action / Observation)."))
    retriever: str | None = retriever_rule("With --agent: ")
    retriever_timeout: float = retriever_timeout_rule()
    retriever_retries: int = retriever_retries_rule()
    template: str = rule("search-r1", empty=False, help=(
        "With --agent: the agent's prompt, search-r1 (VERITAS appendix A) | search-r1-original (Search-R1's "
        "make_prefix); with --agent react, react (its default), a template registered for ReAct, or a copy of "
        "ReAct's prompts_naive.json (its few-shot prompt, exactly)."))
    top_k: int = rule(3, ge=1, le=100, renamed_from="topk", help="With --agent: passages per search (Search-R1: 3).")
    max_turns: int = rule(4, ge=1, le=64, help=(
        "With --agent: model turns per trajectory, the answering one included (--max-tokens bounds one turn)."))
    max_context_tokens: int = rule(8192, ge=1, le=10_000_000, help=(
        "With --agent: prompt plus trajectory, in the backend's tokens (characters / 4 without a tokenizer)."))
    search_difficulty: str = rule("none", choices=("none", "hard-negatives", "withhold"), help=(
        "With --agent: what a row's level does to its search results: none | hard-negatives (RAG-RL's d "
        "distractors above the gold) | withhold (gold removed with probability --withhold-p, ZeroSearch)."))
    withhold_p: float = rule(0.0, ge=0.0, le=1.0, help="With --search-difficulty withhold: the probability p.")
    react_sentences: int = rule(5, ge=1, le=1000, flag="", help=(
        "With --agent react: sentences of the page a ReAct Search shows (the paper: the first 5)."))

    def __post_init__(self) -> None:
        check_settings(self)  # types and ranges, whatever set them (flags or Python)

    def validate(self) -> None:
        """Check the fields again and against each other.

        Raises:
            ConfigError: no input, both shards and a dataset file, no model for a backend that needs one, or an
                option of another mode (a :class:`UsageError`).
            UnknownNameError: an unknown backend.
        """
        check_settings(self)
        if self.shards and (self.dataset or self.input):
            raise ConfigError("give either a shard directory or --dataset with --input FILE, not both")
        if not self.shards and not (self.dataset and self.input):
            raise ConfigError("no questions", hint="pass a shard directory made by `curriculum build --schedule "
                              "max`, or --dataset NAME --input FILE (dataset=NAME input=FILE) to build one at level K "
                              "first")
        if not 0 <= self.shard_index < self.num_shards:
            raise UsageError(f"shard_index must be in 0..num_shards-1, got {self.shard_index} of {self.num_shards}")
        if self.backend not in BACKENDS:
            BACKENDS.get(self.backend)  # raises with a "did you mean"
        if self.model is None and self.backend != "scripted":
            raise ConfigError(f"the {self.backend} backend needs --model")
        self.sampling()  # validates the sampling settings
        if self.agent is None:
            defaults = {f.name: f.default for f in fields(self)}
            agent_only = [n for n in ("retriever", "retriever_timeout", "retriever_retries", "template", "top_k", "max_turns",
                                      "max_context_tokens", "search_difficulty", "withhold_p", "react_sentences")
                          if getattr(self, n) != defaults[n]]
            if agent_only:
                raise UsageError(f"--{agent_only[0].replace('_', '-')} is for a search agent's partition",
                                 hint="add --agent search-r1 (with --retriever), or drop it")
        if self.withhold_p and self.search_difficulty != "withhold":
            raise UsageError(f"--withhold-p {self.withhold_p} does nothing without --search-difficulty withhold",
                             hint="add --search-difficulty withhold, or drop --withhold-p")
        if self.agent is None and self.dataset and questions_only(self.dataset):
            raise UsageError(f"{self.dataset}'s questions have no passages, so a closed-context partition has "
                             "nothing to show the model", hint="partition them as a search agent: add --agent "
                             "search-r1 --retriever DIR|URL")
        if self.agent is not None:
            check_agent_config(self)

    def check_model(self) -> None:
        """Refuse a model that is neither a local path nor a valid Hub id before anything is loaded."""
        check_backend_model(self.model, self.backend)

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(n=self.samples, temperature=self.temperature, top_p=self.top_p,
                              max_tokens=self.max_tokens, seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_agent_config(cfg: PartitionConfig) -> None:
    """A search agent's settings (``--agent``), before anything is read or loaded (usage errors, exit 2)."""
    if not cfg.retriever:
        raise UsageError(
            "--agent needs --retriever: an index directory or a server URL",
            hint="curriculum index ... --out DIR, then --retriever DIR (or curriculum serve)",
        )
    if cfg.balance:
        raise UsageError(
            "--balance clips two buckets to one size; a search agent's partition has three",
            hint="drop --balance (the buckets' sizes are in partition.json), or sample from them",
        )
    for part in AGENT_PROTOCOLS.loaded().values():  # each protocol refuses its own settings given without it
        part.check(cfg)
    rollout_config(cfg)
    search_difficulty(cfg)


def agent_settings(cfg: PartitionConfig) -> dict[str, Any]:
    """The agent protocol's own settings the partition has (``react_sentences`` for ReAct), for the fingerprint."""
    return {k: getattr(cfg, k) for k in AGENT_PROTOCOLS.get(cfg.agent).settings if hasattr(cfg, k)}


def turn_format(cfg: PartitionConfig) -> Any:
    """The rollout loop's turn format of the agent protocol (None: Search-R1's tags)."""
    return AGENT_PROTOCOLS.get(cfg.agent).turn_format(cfg)


def rollout_config(cfg: PartitionConfig) -> RolloutConfig:
    """The rollout settings of a search agent's partition."""
    return RolloutConfig(
        template=AGENT_PROTOCOLS.get(cfg.agent or "search-r1").template(cfg),
        top_k=cfg.top_k,
        max_turns=cfg.max_turns,
        max_context_tokens=cfg.max_context_tokens,
        seed=cfg.seed,
    )


def search_difficulty(cfg: PartitionConfig) -> SearchDifficulty:
    """What a row's level does to a search agent's search results."""
    return SearchDifficulty(mode=cfg.search_difficulty, p=cfg.withhold_p, seed=cfg.seed)


@dataclass
class PartitionResult:
    """What :func:`partition` (or :func:`merge_partitions`) left in the output folder.

    Attributes:
        out: the output folder.
        complete: every chunk is generated and the outputs are written.
        run: what this process generated (None for a merge).
        summary: ``partition.json``, when complete.
    """

    out: Path
    complete: bool  # every chunk is generated and the outputs are written
    run: RunReport | None  # what this process generated (None for a merge)
    summary: dict[str, Any] | None = None  # partition.json, when complete

    @property
    def counts(self) -> dict[str, Any]:
        """The summary's counts (questions, answerable, unanswerable, learnable, mean pass@k); empty until the
        run is complete."""
        return (self.summary or {}).get("counts", {})
