"""The build configuration: typed dataclasses are the schema (each field's type, range and help); recipes (YAML)
and the command line fill them in, through :func:`rag_curriculum.config.resolve`.

A build recipe names one dataset at the top level (``dataset``, ``input``, ``n``, ``split``) or several under
``sources:``; :meth:`BuildConfig.from_dict` takes either.

>>> cfg = BuildConfig.from_dict({"dataset": "musique", "n": "all", "schedule": "linear"})
>>> cfg.sources, cfg.schedule
([SourceSpec(dataset='musique', input=None, n=None, split=None, K=None)], 'linear')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._settings import MAX_COUNT, MAX_K, MAX_SEED, check_settings, rule
from ..config import bind, given
from ..errors import ConfigError, SettingError
from ..loaders import questions_only
from ..prompts import ABSTENTION_ANSWER, get_template
from ..rewards import check_abstention_answer

#: K per dataset, as in RAG-RL section 4.4.
# search-r1: questions without passages, so every level is the same row (one level unless --K says otherwise)
DEFAULT_K = {"hotpotqa": 10, "musique": 20, "2wikimultihopqa": 10, "search-r1": 1}

ORDERS = ("level", "shuffled", "hops-level")
SETTINGS = ("curriculum", "distractor", "ideal", "retrieved")


#: rag-retriever's own kinds: the names --distractors takes where rag-retriever is not installed (then a build asked
#: for one says which extra to install, where it would read the index).
RETRIEVER_KINDS = ("bm25", "dense", "hybrid")


def kind_names() -> tuple[str, ...]:
    """The retriever kinds rag-retriever has registered (its own and any a package declares); without rag-retriever
    installed (the retrieval extra), its own kinds' names."""
    try:
        from rag_retriever import kind_names as registered
    except ModuleNotFoundError as e:
        if e.name != "rag_retriever":
            raise
        return RETRIEVER_KINDS
    return registered()


def distractor_choices() -> tuple[str, ...]:
    """``--distractors``: the dataset's own (``provided``), each retriever kind's ranking over the ``--index``
    (``bm25``, ``dense``, ``hybrid``, and any kind registered since: :mod:`rag_curriculum.retrieval`'s kinds), or
    provided and ranked alternately (``mixed``)."""
    return ("provided", *kind_names(), "mixed")

TAILS = ("keep", "trim", "pad")
LEAKAGE = ("refuse", "drop", "warn")

@dataclass
class SourceSpec:
    """One dataset in a build: where its records come from and how many questions to sample."""

    dataset: str = rule(flag="--dataset", empty=False, help="hotpotqa | musique | 2wikimultihopqa.")
    input: str | None = rule(None, empty=False, help=(
        "Local file (official release JSON/JSONL, Hub JSONL/Parquet). Without it the dataset is downloaded from "
        "the Hugging Face Hub."))
    n: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "Questions to sample without replacement (per dataset), or 'all'."))
    split: str | None = rule(None, empty=False, help=(
        "Split to read (train/dev); default: from the file name, or train (dev for evaluation sets)."))
    K: int | None = rule(None, ge=1, le=MAX_K, help="Top level K of this source; default: DEFAULT_K[dataset].")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass
class BuildConfig:
    """Everything that determines a build's rows. Saved, resolved, in the manifest.

    Each field's type and range is checked when the config is made, whatever set it (a :class:`SettingError`, a
    :class:`ConfigError`); :meth:`validate` checks the fields against each other. :meth:`from_dict` takes a
    recipe's mapping (one dataset at the top level, or ``sources``).

    Examples:
        >>> from rag_curriculum import BuildConfig
        >>> cfg = BuildConfig.from_dict({"dataset": "musique", "input": "musique_ans_v1.0_train.jsonl", "n": 1000,
        ...                              "schedule": "linear", "K": 4, "out": "outputs/musique-linear"})
        >>> cfg.sources[0].n, cfg.schedule, cfg.template
        (1000, 'linear', 'rag-rl')
        >>> BuildConfig(seed=-1)
        Traceback (most recent call last):
        ...
        rag_curriculum.errors.SettingError: seed (--seed) = -1: must be an integer in 0..2**63-1
    """

    sources: list[SourceSpec] = rule(default_factory=list, flag="--dataset", help=(
        "The datasets of the build, each {dataset, input, n, split, K}."))
    schedule: str = rule("min-max", empty=False, help=(
        "max | linear | min-max | piecewise (with pieces) | calibrated (with --profile) | adaptive | a registered "
        "schedule."))
    pieces: Any = rule(None, help=(
        "Piecewise schedule as LEVEL:FRACTION,... ('K' = the top level), e.g. 1:0.25,5:0.25,K:0.5."))
    order: str = rule("level", choices=ORDERS, help=(
        "level (schedule order) | shuffled | hops-level (the paper's Table 3)."))
    K: int | None = rule(None, ge=1, le=MAX_K, help="Top level K for every dataset (overrides the per-dataset K).")
    seed: int = rule(0, ge=0, le=MAX_SEED, help="Build seed: sampling, distractors, order.")
    setting: str = rule("curriculum", choices=SETTINGS, help=(
        "curriculum (training) | distractor | ideal | retrieved (evaluation sets from the dev split; retrieved: "
        "the --top-k best passages of a BM25 --index, gold not forced in)."))
    distractors: str = rule("provided", choices=distractor_choices, help=(
        "Where distractors come from: provided (the dataset's own, the paper's) | bm25 (the question's best "
        "non-gold BM25 passages from --index, never a gold copy nor a passage containing the answer) | dense | "
        "hybrid (the same from a dense or hybrid --index: dense near-misses) | another retriever kind's name (the "
        "same from an index of that kind) | mixed (provided and the index's alternately, provided first)."))
    index: str | None = rule(None, flag="--index", empty=False, help=(
        "An index directory (curriculum index) for --distractors KIND|mixed (bm25, dense, hybrid, ...) and "
        "--setting retrieved."))
    top_k: int = rule(10, ge=1, le=MAX_K, help="The retrieved setting: passages shown per question (recall@N).")
    max_distractors: int = rule(18, ge=0, le=MAX_K, help="Distractor-setting cap (RAG-RL 4.5: gold + up to 18).")
    template: str | None = rule(None, empty=False, help=(
        "Prompt / output format, looked up in rag_curriculum.prompts: rag-rl, CRAFT's craft-v1 ... craft-v5 "
        "(numbered documents), or a search agent's search-r1 | search-r1-original. Unset: the dataset's own, rag-rl "
        "for datasets with passages, search-r1-original (the file's own prompt) for Search-R1's files."))
    index_base: int | None = rule(None, ge=0, le=1, help=(
        "Numbered templates (craft-v1 ... craft-v5): the first passage's number, 1 (their default: the CRAFT "
        "paper's d_1..d_K) or 0. Passage and gold labels are these numbers."))
    ability: str = rule("multi-hop-qa", flag="", help="verl's `ability` column.")
    rows_per_shard: int = rule(10_000, ge=1, le=10_000_000, help="Rows per Parquet shard.")
    workers: int | None = rule(None, ge=1, le=1024, help=(
        "Processes that render and write shards (the output is the same); default: one per CPU from 3 CPUs and "
        "4,096 rows on, else this process renders while a thread writes."))
    batch_prompts: int | None = rule(None, ge=1, le=MAX_COUNT, help=(
        "The trainer's prompts per step (RAG-RL: 42): report the rows it would never see."))
    tail: str = rule("keep", choices=TAILS, help=(
        "keep | trim | pad the row count to a multiple of batch_prompts."))
    eval_sets: list[str] = rule(default_factory=list, flag="--eval-set", help=(
        "Evaluation shard directories to check for train/eval leakage."))
    leakage: str = rule("refuse", choices=LEAKAGE, help=(
        "refuse | drop | warn when training questions are in an evaluation set."))
    include_unanswerable: bool = rule(False, help="Keep MuSiQue-Full's unanswerable (answerable=false) questions.")
    unanswerable_fraction: float = rule(0.0, ge=0, le=1, help=(
        "Share of rows made unanswerable (seeded per question): every gold passage replaced by another distractor, "
        "the answer becomes --abstention-answer, gold_labels empty, answerable=false; the prompts of such a build "
        "say the model may abstain."))
    abstention_answer: str = rule(ABSTENTION_ANSWER, empty=False, help=(
        "The final answer that abstains on unanswerable rows; give the reward the same (rewards' abstention_answer)."))
    allow_split_mismatch: bool = rule(False, help=(
        "Allow a training curriculum from a dev/test file, or an evaluation set from a train file."))
    on_error: str = rule("raise", choices=("raise", "skip"), help=(
        "raise | skip bad source records (skips are counted and reported)."))
    out: str = rule("outputs/curriculum", empty=False, help="Output shard directory.")
    overwrite: bool = rule(False, help="Replace an existing output of this toolkit.")
    tokenizer: str | None = rule(None, empty=False, help=(
        "Tokenizer (Hub id or directory) of the model you will train: writes a prompt_tokens column (chat template "
        "applied) and the longest prompt into the manifest, so trainers can refuse prompts they would truncate. "
        "Needs the train extra."))
    questions_from: str | None = rule(None, empty=False, help=(
        "A shard directory whose questions the build keeps, before sampling: a partition's answerable/, "
        "unanswerable/ or learnable/ (the base model's split), or any build."))
    profile: str | None = rule(None, empty=False, help=(
        "A level profile (`curriculum profile --out`) of the model you will train: the build prints, and the card "
        "and manifest record, each schedule's expected informative fraction for it; --schedule calibrated reads it."))
    target: float | None = rule(None, ge=0, le=1, help=(
        "--schedule calibrated: the pass rate each question's level is chosen nearest to (default 0.5)."))
    band: Any = rule(None, help=(
        "--schedule calibrated, instead of --target: LO,HI (e.g. 0.3,0.7): each question at a level whose pass rate "
        "lies in [LO, HI], the one nearest the middle; with none inside, the level nearest the band (counted)."))
    n_up_to: bool = rule(False, flag="", help=(
        "Each source's n is a ceiling (RAG-RL's 'up to 40,000'): a source holding fewer questions gives every one "
        "(the manifest's n_up_to records how many it held); unset: fewer is refused."))
    target_informative: float | None = rule(None, ge=0, le=1, help=(
        "--schedule calibrated: each question at the level whose predicted share of informative GRPO groups (the "
        "profile's training reward) is nearest this (1: the most informative); ties by the pass rate --target."))
    group_size: int | None = rule(None, ge=1, le=1024, help=(
        "With --profile: the GRPO group size G of the predicted informative fraction (default: the profile's)."))

    def __post_init__(self) -> None:
        check_settings(self)  # types and ranges, whatever set them (flags, a recipe, Python)
        self.band = parse_band(self.band)
        self._resolve_template()

    def _resolve_template(self) -> None:
        """An unset template becomes the dataset's own: a search agent's prompt (search-r1-original, the file's own)
        for questions without passages, rag-rl otherwise."""
        if self.template is not None or not self.sources:
            return
        names = [s.dataset if isinstance(s, SourceSpec) else (s or {}).get("dataset") for s in self.sources]
        bare = all(isinstance(n, str) and questions_only(n) for n in names)
        self.template = "search-r1-original" if bare else "rag-rl"

    def validate(self) -> None:
        """Check the fields again (one may have been set after the config was made) and against each other.

        Raises:
            ConfigError: no dataset, or settings that contradict each other (``--pieces`` without the piecewise
                schedule, ``--distractors bm25`` without an ``--index``, an ``--index`` nothing reads, passages
                shown for questions that have none, ...).
        """
        check_settings(self)  # again: a field may have been set after binding
        for s in self.sources:
            if not isinstance(s, SourceSpec):
                raise ConfigError(f"sources: each entry must be a SourceSpec or a mapping, got {s!r}")
            check_settings(s)
        if not self.sources:
            raise ConfigError("no dataset given: pass --dataset NAME (and --input PATH), or a recipe")
        self._resolve_template()
        if self.tail != "keep" and not self.batch_prompts:
            raise ConfigError(f"tail={self.tail!r} needs batch_prompts (the trainer's prompts per step)")
        if self.index_base is not None:
            get_template(self.template).with_index_base(self.index_base)  # a numbered template, 0 or 1
        if self.unanswerable_fraction:
            check_abstention_answer(self.abstention_answer, name="--abstention-answer")
        if self.pieces and self.schedule != "piecewise":
            raise ConfigError(f"--pieces is for --schedule piecewise, not {self.schedule!r}")
        needs_index = self.distractors != "provided" or self.setting == "retrieved"
        if needs_index and not self.index:
            what = "--setting retrieved" if self.setting == "retrieved" else f"--distractors {self.distractors}"
            raise ConfigError(f"{what} needs an index", hint=(
                "build one with: curriculum index --dataset NAME --input FILE --out DIR, then pass --index DIR "
                "(recipes: index=DIR)"))
        if self.index and not needs_index:
            kinds = "|".join(kind_names())
            raise ConfigError(f"--index is read by --distractors {kinds}|mixed and --setting retrieved; with the "
                              "dataset's own distractors (--distractors provided) it would be ignored",
                              hint="drop --index, or pass --distractors bm25 (or mixed)")
        if self.distractors != "provided" and self.setting in ("ideal", "retrieved"):
            raise ConfigError(f"--distractors {self.distractors} does not apply to --setting {self.setting} (the "
                              "ideal setting has no distractors; the retrieved one shows what BM25 ranks)")
        self._check_questions_only()
        self._check_profile()
        if needs_index and self.schedule == "adaptive" and self.setting == "curriculum":
            raise ConfigError(f"--schedule adaptive re-renders rows at training time from the dataset's own "
                              f"distractors; it does not take --distractors {self.distractors}",
                              hint="use a fixed schedule (min-max, linear, ...) with BM25 distractors")

    def _check_profile(self) -> None:
        """--schedule calibrated places each question by a profile; --target is its; a profile scores a curriculum."""
        calibrated = self.schedule == "calibrated"
        if calibrated and not self.profile:
            raise ConfigError("--schedule calibrated places each question by its measured pass rate: it needs "
                              "--profile", hint="make one with `curriculum profile ... --out DIR`, then pass "
                              "--profile DIR")
        self.band = parse_band(self.band)
        if self.target is not None and self.band is not None:
            raise ConfigError(f"--target {self.target:g} and --band {self.band[0]:g},{self.band[1]:g} both choose "
                              "the calibrated level; keep one: --target (the level nearest it) or --band (a level "
                              "inside it)", hint="drop --target or --band")
        if self.band is not None and not calibrated:
            raise ConfigError(f"--band is for --schedule calibrated, not {self.schedule!r}",
                              hint="drop --band, or pass --schedule calibrated")
        if self.target is not None and not calibrated:
            raise ConfigError(f"--target is for --schedule calibrated, not {self.schedule!r}",
                              hint="drop --target, or pass --schedule calibrated")
        if self.target_informative is not None and not calibrated:
            raise ConfigError(f"--target-informative is for --schedule calibrated, not {self.schedule!r}",
                              hint="drop --target-informative, or pass --schedule calibrated")
        if self.target_informative is not None and self.band is not None:
            raise ConfigError("--target-informative and --band both choose the calibrated level; keep one",
                              hint="drop --target-informative or --band")
        if (self.profile or self.group_size) and self.setting != "curriculum":
            raise ConfigError(f"--profile scores a curriculum's schedule; --setting {self.setting} has none",
                              hint="drop --profile")
        if self.group_size and not self.profile:
            raise ConfigError("--group-size is the profile's informative fraction's G: it needs --profile")
        if calibrated and self.order == "hops-level":
            raise ConfigError("--schedule calibrated orders the rows by the model's pass rate; --order hops-level "
                              "would replace it", hint="use --order level (easiest first) or shuffled")

    def _check_questions_only(self) -> None:
        """Sources of questions without passages (Search-R1's data files) make rows for search agents: a search
        agent's prompt, no distractors, no unanswerable rows; a template that shows passages is the other way
        round (a passage-free source under it would show none)."""
        bare = [s.dataset for s in self.sources if questions_only(s.dataset)]
        shows = get_template(self.template).shows_passages
        if not bare:
            if not shows:
                raise ConfigError(f"--template {self.template} is a search agent's prompt (no passages shown); the "
                                  f"{self.sources[0].dataset} rows would lose their passages",
                                  hint="build closed-context rows with --template rag-rl (or craft-v*); search "
                                       "agents replace the prompt themselves (agent.template)")
            return
        hint = ("rows of questions without passages are for search agents: curriculum build --dataset search-r1 "
                "--input train.parquet --template search-r1-original (or search-r1)")
        if len(bare) != len(self.sources):
            raise ConfigError(f"{bare[0]} (questions without passages) mixed with datasets that have passages",
                              hint="build them apart")
        if shows:
            raise ConfigError(f"--template {self.template} shows passages, and {bare[0]}'s questions have none",
                              hint=hint)
        if self.setting != "curriculum" or self.distractors != "provided" or self.unanswerable_fraction \
                or self.schedule == "adaptive":
            raise ConfigError(f"{bare[0]}'s questions have no passages: no --setting ideal|distractor|retrieved, "
                              "--distractors bm25|mixed, --unanswerable-fraction or --schedule adaptive",
                              hint=hint + "; search difficulty is the agent's (agent.difficulty in training)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("tokenizer", "index_base", "profile", "target", "band", "target_informative", "group_size",
                    "questions_from"):  # unset: as always
            if d[key] is None:
                del d[key]
        if not d["n_up_to"]:  # as before the setting
            del d["n_up_to"]
        if not d["unanswerable_fraction"]:  # likewise a build without unanswerable rows
            del d["unanswerable_fraction"], d["abstention_answer"]
        if d["distractors"] == "provided" and d["setting"] != "retrieved":  # and one without an index
            del d["distractors"]
            if d["index"] is None:
                del d["index"]
        if d["setting"] != "retrieved":
            del d["top_k"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BuildConfig:
        """Bind a recipe (one dataset at the top level, or ``sources:`` for a mixture), refusing unknown keys with
        a "did you mean"."""
        return bind(cls, _with_sources(d))


#: A recipe's single-dataset keys, gathered into ``sources``.
SINGLE_SOURCE_KEYS = ("dataset", "input", "n", "split")


def parse_band(value: Any) -> list[float] | None:
    """``--band`` / ``band=``: ``"LO,HI"`` or a pair, as ``[LO, HI]`` with ``0 <= LO <= HI <= 1`` (None: unset).

    >>> parse_band("0.3, 0.7"), parse_band([0.2, 0.2]), parse_band(None)
    ([0.3, 0.7], [0.2, 0.2], None)

    Raises:
        SettingError: not two numbers, a bound outside 0..1, or LO above HI; the message names --band and the value.
    """
    if value is None:
        return None
    shown = value if isinstance(value, str) else ",".join(map(str, value)) if isinstance(value, (list, tuple)) \
        else repr(value)
    allowed = "LO,HI with 0 <= LO <= HI <= 1, e.g. 0.3,0.7"
    parts = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
    try:
        if parts is None or len(parts) != 2 or any(isinstance(x, bool) for x in parts):
            raise ValueError
        lo, hi = (float(x.strip()) if isinstance(x, str) else float(x) for x in parts)
    except (TypeError, ValueError):
        raise SettingError("band", value, allowed, flag="--band",
                           message=f"--band {shown}: not two numbers LO,HI (e.g. 0.3,0.7)") from None
    for name, x in (("LO", lo), ("HI", hi)):
        if not 0.0 <= x <= 1.0:  # also NaN
            raise SettingError("band", value, allowed, flag="--band",
                               message=f"--band {shown}: {name} {x:g} is outside 0..1 (a pass rate)")
    if lo > hi:
        raise SettingError("band", value, allowed, flag="--band",
                           message=f"--band {shown}: LO {lo:g} is above HI {hi:g} (give LO,HI low first)")
    return [lo, hi]


def parse_n(value: Any) -> Any:
    """``--n`` / ``n=``: a count, or 'all'. Anything that is not a string is left to the config's type check."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("all", "none", "null")):
        return None
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            raise SettingError("n", value, "an integer >= 1, or 'all'", flag="--n") from None
    return value


def _with_sources(d: Mapping[str, Any]) -> dict[str, Any]:
    """The flat single-dataset form (``dataset``, ``input``, ``n``, ``split``) as one entry of ``sources``; each
    source's ``n`` may be 'all'."""
    d = dict(d)
    single = {k: d.pop(k, None) for k in SINGLE_SOURCE_KEYS}
    if not d.get("sources") and single["dataset"]:
        d["sources"] = [SourceSpec(single["dataset"], single["input"], parse_n(single["n"]), single["split"])]
    elif "sources" in d:
        sources = d["sources"] or []
        if not isinstance(sources, list) or not all(isinstance(s, dict | SourceSpec) for s in sources):
            raise ConfigError(f"sources = {sources!r}: must be a list of {{dataset, input, n, split, K}} mappings")
        d["sources"] = [s if isinstance(s, SourceSpec) else {**s, "n": parse_n(s.get("n"))} for s in sources]
    return d


def merge_build_flags(data: Mapping[str, Any] | None, flags: Mapping[str, Any], *,
                      note: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """``curriculum build``'s flags on top of a recipe's data (None: no recipe). Flags are named after the fields,
    None when not given; ``dataset`` is a list of ``NAME`` or ``NAME:N`` (a quota), paired in order with
    ``input``; ``n`` and ``split`` apply to every source. Without a recipe, ``out`` defaults to
    ``outputs/DATASETS-SCHEDULE`` (or ``-SETTING`` for evaluation sets). Returns the data :func:`~rag_curriculum.config.bind`
    takes (one dataset at the top level gathered into ``sources``)."""
    recipe = data is not None
    mapping: dict[str, Any] = dict(data) if data is not None else {"n": None}
    flags = given(flags)
    dataset, inputs = flags.pop("dataset", None), flags.pop("input", None)
    n, split = flags.pop("n", None), flags.pop("split", None)
    if dataset:
        if len(inputs or []) not in (0, len(dataset)):
            raise ConfigError(f"{len(dataset)} --dataset but {len(inputs or [])} --input",
                              hint="give one --input per --dataset, in order")
        specs = []
        for i, d in enumerate(dataset):
            name, _, quota = d.partition(":")
            specs.append({"dataset": name, "input": (inputs or [None] * len(dataset))[i],
                          "n": quota or (n if n is not None else mapping.get("n")), "split": split})
        recipe_dataset = mapping.pop("dataset", None)
        mapping.pop("input", None)
        mapping["sources"] = specs
        if recipe and "K" not in flags and mapping.get("K") is not None and {s["dataset"] for s in specs} != {
                recipe_dataset}:
            # the recipe's K belongs to its dataset: the paper's K of each --dataset applies instead
            note(f"recipe K={mapping['K']} is for {recipe_dataset}; using each --dataset's own K (pass --K to set one)")
            mapping["K"] = None
    elif inputs:
        if len(inputs) != 1 or mapping.get("sources"):
            raise ConfigError("--input without --dataset", hint="pass --dataset NAME for each --input")
        mapping["input"] = inputs[0]
    for key, value in (("n", n), ("split", split)):
        if value is not None and not dataset:
            mapping[key] = value
            for src in mapping.get("sources") or []:  # a recipe's mixture: --n and --split are per dataset
                src[key] = value
    mapping.update(flags)
    if not mapping.get("dataset") and not mapping.get("sources"):
        raise ConfigError("no dataset given", hint="pass --dataset NAME --input PATH, or recipe=NAME (e.g. "
                          "recipe=musique-min-max)")
    if not recipe and "out" not in flags:
        names = "+".join(s["dataset"] for s in mapping["sources"]) if mapping.get("sources") else mapping["dataset"]
        setting = mapping.get("setting") or "curriculum"
        what = (mapping.get("schedule") or "min-max") if setting == "curriculum" else setting
        mapping["out"] = f"outputs/{names}-{what}"
    return _with_sources(mapping)
