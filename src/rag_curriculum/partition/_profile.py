"""``curriculum profile``: a model's pass rate on the same questions at several synthetic levels.

Each question of an adaptive build (its rows render at any level, :class:`~rag_curriculum.curricula.adaptive.
LevelRenderer`) is asked at each profiled level (default 1, 2, 4, 8 and K), ``samples`` each, through the
partition's chunk runner and engines (:func:`~rag_curriculum.generation.runner.run_chunks`: resumable, any backend,
local or Ray); one item is a (question, level) pair, its id ``ROW_ID@LLEVEL`` (its sampling seed follows from it).
Each sample is scored with the training reward (a train recipe's ``rewards``, composed as ``curriculum train``
composes it, or ``--reward NAME[:WEIGHT],...``; default the RAG-RL total of ``_base.yaml``), its components as the
reward logs them (``rag_rl/answer``, ...), and as the partition scores it (answer F1 of the parsed final answer,
correct at ``correct_f1``: the pass rate). The sampling defaults (temperature, top-p, max tokens, G, the dynamic
sampler's ``max_spread``) are the recipe's too.

``OUT`` gets ``input/`` (the adaptive build, when made from ``--dataset``), ``work/`` (the chunks), then
``profile.parquet`` (one line per question and level: the samples, each reward and its components, each F1, the
predictions, ``c``, the pass rate), ``profile.png`` and ``profile.json`` (last: per level the mean pass rate and
reward, the change from the first level and the expected informative fraction for the group size, of the reward, of
each component alone and of the pass rate, each with a paired bootstrap 95% interval), each written atomically.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from .. import config
from .._commit import check_resumable, resumable_output
from .._plots import COLORS, pyplot, save_png
from .._plumbing import (
    WORK,
    atomic_write_with,
    current_command,
    file_sha256,
    mask_secrets,
    redact_command,
    renamed_keywords,
)
from .._settings import (
    MAX_COUNT,
    MAX_K,
    MAX_SAMPLES,
    MAX_SEED,
    check_settings,
    rule,
)
from .._version import __version__
from ..curricula import DEFAULT_K, BuildConfig, SourceSpec
from ..curricula.adaptive import POOL_SIZE, LevelRenderer, is_adaptive
from ..difficulty import num_distractors, question_stats
from ..difficulty.accuracy import CORRECT_F1
from ..difficulty.profile import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    DEFAULT_GROUP_SIZE,
    DEFAULT_LEVELS,
    PROFILE_PLOT,
    PROFILE_SUMMARY,
    PROFILE_TABLE,
    level_intervals,
    parse_levels,
    spread_probability,
)
from ..errors import ConfigError, ProfileError, UsageError
from ..generation import (
    BACKENDS,
    BackendSpec,
    EngineConfig,
    GenerationBackend,
    SamplingConfig,
    backend_identity,
    check_backend_model,
    open_engine,
)
from ..generation.runner import RunReport, WorkDir, read_backend, read_completions, run_chunks
from ..loaders import get_loader
from ..models import model_settings, resolve_model
from ..rewards import get_reward, parse_reward_spec, reward_entries, reward_identity, with_model_tokenizer
from ..shards import MANIFEST, portable, read_manifest, read_table, validate_shards, write_json
from ._inputs import build_input, input_digest
from ._stats import check_templates, score_completions

log = logging.getLogger("rag_curriculum.partition")

#: The train recipe whose rewards and sampling a profile uses unless told (its rewards: ``_base.yaml``'s RAG-RL total).
DEFAULT_TRAIN_RECIPE = config.KINDS["train"].default or "rag-rl-min-max"
#: TRL's GRPOConfig defaults, for a recipe that leaves a sampling key out.
TRL_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_completion_length": 256, "num_generations": 8}
#: The components whose informative fraction alone the summary reports (a logged ``NAME/term`` ending in one of
#: these; with several reward functions, each function's own value too).
COMPONENT_TERMS = ("answer", "citation", "format")
TASK = "level-profile"
TASK_VERSION = 1
BUILT_INPUT = "input"
RUN_LOCK = ".profile.lock"
#: Which level of its question an item is, in its id: ``musique-2hop__1@L4``.
LEVEL_MARK = "@L"

#: ``profile.parquet``: one line per question and level.
PROFILE_SCHEMA = pa.schema([
    pa.field("position", pa.int64()),  # the item's position in the run (question-major: every level of a question)
    pa.field("question", pa.int64()),  # the question's position in the input
    pa.field("id", pa.string()),
    pa.field("source_id", pa.string()),
    pa.field("data_source", pa.string()),
    pa.field("level", pa.int32()),
    pa.field("num_distractors", pa.int32()),
    pa.field("hops", pa.int32()),
    pa.field("seed", pa.int64()),
    pa.field("skipped", pa.string()),
    pa.field("n", pa.int32()),
    pa.field("c", pa.int32()),
    pa.field("pass_rate", pa.float64()),
    pa.field("sample_f1", pa.list_(pa.float64())),
    pa.field("sample_valid", pa.list_(pa.bool_())),
    pa.field("predictions", pa.list_(pa.string())),
    pa.field("completions", pa.list_(pa.string())),
    pa.field("sample_reward", pa.list_(pa.float64())),  # each sample's weighted training reward (TRL's nansum)
    pa.field("sample_components", pa.map_(pa.string(), pa.list_(pa.float64()))),  # logged term -> each sample's
    pa.field("reward", pa.float64()),  # the samples' mean reward
    pa.field("informative", pa.float64()),  # P(a group of G is informative) from the samples' rewards
])


@renamed_keywords()
@dataclass
class ProfileConfig:
    """Everything that determines a level profile. Recorded, resolved, in ``profile.json``.

    >>> ProfileConfig(dataset="musique", input="train.jsonl", model="m").levels
    '1,2,4,8,K'
    """

    shards: str | None = rule(None, flag="SHARDS", empty=False, help=(
        "An adaptive shard directory (`curriculum build --schedule adaptive`: rows that render at any level). Or "
        "give --dataset and --input to build one first."))
    dataset: str | None = rule(None, empty=False, help="Build from a dataset file first: hotpotqa | musique | "
                               "2wikimultihopqa.")
    input: str | None = rule(None, empty=False, help="The --dataset's source file; built adaptive at level K into "
                             "OUT/input.")
    n: int | None = rule(None, ge=1, le=MAX_COUNT, help="With --input: questions to sample; unset: all of them.")
    K: int | None = rule(None, ge=1, le=MAX_K, help="With --input: the top level; unset: the dataset's K.")
    levels: str = rule(DEFAULT_LEVELS, empty=False, help=(
        "The levels to profile, comma-separated (K: the top level); levels of the default above K are dropped."))
    out: str = rule("outputs/profile", empty=False, help=(
        "Output directory: profile.parquet, profile.json, profile.png; work/ holds the resumable generation."))
    backend: str = rule("vllm", empty=False, help=(
        "Generation backend: vllm | openai (a server) | transformers (the CPU choice) | scripted."))
    model: str | None = rule(None, empty=False, help="The model to profile: a local path, a .gguf file or a Hub id.")
    backend_args: dict[str, Any] = rule(default_factory=dict, flag="--backend-arg", help=(
        "Backend options (dtype, base_url, ...), part of the run's identity as in the partition."))
    samples: int = rule(8, ge=1, le=MAX_SAMPLES, renamed_from="k", help="Samples per question and level.")
    recipe: str | None = rule(None, empty=False, help=(
        "The train recipe (name or YAML file) whose rewards score each sample and whose sampling is the default "
        f"(grpo.temperature, top_p, max_completion_length, num_generations, dynamic.max_spread); unset: "
        f"{DEFAULT_TRAIN_RECIPE} (the RAG-RL total of _base.yaml)."))
    reward: str | None = rule(None, empty=False, help=(
        "Score with these registered rewards instead of the recipe's: NAME[:WEIGHT],... (e.g. "
        "rag-rl-answer:1,rag-rl-citation:1)."))
    temperature: float | None = rule(None, ge=0, le=100, help="Sampling temperature; unset: the recipe's.")
    top_p: float | None = rule(None, gt=0, le=1, help="Nucleus sampling top-p; unset: the recipe's.")
    max_tokens: int | None = rule(None, ge=1, le=MAX_COUNT, help="Most tokens per completion; unset: the recipe's.")
    seed: int = rule(0, ge=0, le=MAX_SEED, help="Seed: the build, and each item's sampling seed with its id.")
    correct_f1: float = rule(CORRECT_F1, gt=0, le=1, help="A sample is correct when its answer F1 reaches this.")
    group_size: int | None = rule(None, ge=1, le=MAX_SAMPLES, help=(
        "The GRPO group size G whose expected informative fraction is reported; unset: the recipe's "
        "num_generations (RAG-RL: 7)."))
    max_spread: float | None = rule(None, ge=0, le=1e6, help=(
        "A group is informative when its rewards' spread (max - min) is above this; unset: the recipe's "
        "dynamic.max_spread when dynamic sampling is on, else 0 (not all equal)."))
    chunk_size: int = rule(64, ge=1, le=MAX_COUNT, help="Items (question x level) per resumable chunk.")
    chunks_per_call: int | None = rule(None, ge=1, le=MAX_COUNT, help="Chunks per backend call; unset: the "
                                       "backend's choice.")
    question_seeds: bool = rule(True, help="Seed each item from (--seed, its id): resumed runs draw the same samples.")
    overwrite: bool = rule(False, help="Discard what --out holds from a run with other settings.")
    allow_identical_samples: bool = rule(False, help=(
        "Do not stop when most questions get identical samples at temperature > 0."))

    def __post_init__(self) -> None:
        check_settings(self)

    def validate(self) -> None:
        """The fields against each other (no input, both inputs, no model, --recipe with --reward), and the recipe's
        rewards and sampling resolved (:meth:`resolve`)."""
        check_settings(self)
        if self.shards and (self.dataset or self.input):
            raise UsageError("give either a shard directory or --dataset with --input FILE, not both")
        if not self.shards and not (self.dataset and self.input):
            raise UsageError("no questions", hint="pass an adaptive shard directory (curriculum build --schedule "
                             "adaptive), or --dataset NAME --input FILE to build one first")
        if self.backend not in BACKENDS:
            BACKENDS.get(self.backend)
        if self.model is None and self.backend != "scripted":
            raise UsageError(f"the {self.backend} backend needs --model")
        self.resolve()
        self.sampling()

    def resolve(self) -> ProfileConfig:
        """Fill the sampling left unset from the recipe (composed as ``curriculum train`` composes it) and read the
        rewards (``--reward``, else the recipe's); a setting that differs from the recipe's is announced. Returns
        itself.

        Raises:
            RecipeError: a recipe that cannot be found or composed.
            UnknownNameError: an unknown reward. ConfigError: a weight that is not a finite number in -1e6..1e6
                (NaN, an infinity, a sum that would overflow: refused, never scored as 0), kwargs a reward refuses;
                each naming the recipe (or ``--reward``) and the key.
        """
        data = _train_recipe(self.recipe or DEFAULT_TRAIN_RECIPE)
        grpo, dynamic = data.get("grpo") or {}, data.get("dynamic") or {}
        recipe = {"temperature": float(grpo.get("temperature", TRL_SAMPLING["temperature"])),
                  "top_p": float(grpo.get("top_p", TRL_SAMPLING["top_p"])),
                  "max_tokens": int(grpo.get("max_completion_length", TRL_SAMPLING["max_completion_length"])),
                  "group_size": int(grpo.get("num_generations", TRL_SAMPLING["num_generations"])),
                  "max_spread": float(dynamic.get("max_spread") or 0.0) if dynamic.get("enabled") else 0.0}
        for key, value in recipe.items():
            mine = getattr(self, key)
            if mine is None:
                setattr(self, key, value)
            elif float(mine) != value and (key, mine) not in self._announced:
                self._announced.add((key, mine))
                log.warning("profiling with %s %s; recipe %s trains with %s: the profile predicts that setting, "
                            "not the recipe's", key, mine, self.recipe or DEFAULT_TRAIN_RECIPE, value)
        self._recipe_sampling = recipe
        if self.reward:
            try:
                self._rewards = parse_reward_spec(self.reward)
            except ConfigError as e:
                raise UsageError(str(e), hint=e.hint) from None
            self._reward_source = f"--reward {self.reward}"
        else:
            self._reward_source = f"recipe {self.recipe or DEFAULT_TRAIN_RECIPE}"
            try:
                self._rewards = [{"name": n, "weight": w, "kwargs": k} for n, w, k in reward_entries(
                    data.get("rewards") or ["rag-rl"], where=self._reward_source)]
            except ConfigError as e:  # a value the setting cannot take: a usage error, as --reward's
                raise UsageError(str(e), hint=e.hint) from None
        try:
            self._identity = reward_identity(self._rewards)
        except ConfigError as e:  # kwargs a reward refuses: said with where they came from
            raise UsageError(f"{self._reward_source}: {e}", hint=getattr(e, "hint", None)) from None
        return self

    def reward_record(self) -> dict[str, Any]:
        """The summary's ``reward``: where it came from, the rewards as a recipe lists them, their identity
        (:func:`~rag_curriculum.rewards.reward_identity`) and, where a reward decodes with one, the tokenizer."""
        if not hasattr(self, "_identity"):
            self.resolve()
        tokenizers = reward_tokenizers(self.reward_funcs()[0])
        return {"source": self._reward_source, "rewards": self._rewards, "identity": self._identity,
                **({"tokenizer": tokenizers[0] if len(tokenizers) == 1 else tokenizers} if tokenizers else {})}

    def reward_funcs(self) -> tuple[list[Callable], list[float]]:
        """The reward functions and their weights, built as ``curriculum train`` builds them: a reward that decodes
        as the trainer does (``search-r1``) with the profiled model's tokenizer, as training hands it the trained
        model's (:func:`~rag_curriculum.rewards.with_model_tokenizer`; a .gguf file's converted folder; none with the
        scripted backend, whose ``--model`` is a script)."""
        if not hasattr(self, "_identity"):
            self.resolve()
        funcs = [get_reward(r["name"], **r["kwargs"]) for r in self._rewards]
        if self.model is not None and self.backend != "scripted":
            if getattr(self, "_model_path", None) is None:
                self._model_path = resolve_model(str(self.model)).path
            funcs = with_model_tokenizer(funcs, self._model_path)
        return funcs, [float(r["weight"]) for r in self._rewards]

    def check_reward_tokenizer(self) -> None:
        """Refuse, before anything is generated, a reward that decodes with a tokenizer that does not load (the
        profiled model's, or the one its recipe names)."""
        for f in self.reward_funcs()[0]:
            for name in reward_tokenizers([f]):
                try:
                    load_tokenizer(name)
                except Exception as e:  # whatever the loader raises (OSError, ValueError, ...), said in one line
                    why = " ".join(str(e).split()) or type(e).__name__
                    why = why if len(why) <= 240 else why[:240] + "..."
                    raise UsageError(
                        f"{self._reward_source}: the {getattr(f, '__name__', type(f).__name__)} reward decodes with "
                        f"the model's tokenizer, as training does, and {name!r} has none that loads ({why})",
                        hint="profile a model folder or Hub id that holds its tokenizer (the one training loads), or "
                        "name one in the recipe's reward kwargs (tokenizer: PATH)") from None

    def check_model(self) -> None:
        """Refuse a model that is neither a local path nor a Hub id before anything is loaded."""
        check_backend_model(self.model, self.backend)

    #: The settings already announced as differing from their recipe's (said once per process).
    _announced: ClassVar[set[tuple[str, Any]]] = set()

    def sampling(self) -> SamplingConfig:
        if self.temperature is None or self.top_p is None or self.max_tokens is None:
            self.resolve()
        return SamplingConfig(n=self.samples, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                              seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


@lru_cache(maxsize=8)
def _composed(recipe: str) -> str:
    return json.dumps(config.compose("train", recipe, resolve=True))


def reward_tokenizers(funcs: Sequence[Callable]) -> list[str]:
    """The tokenizers (names or paths) the reward functions decode with, in order, each once."""
    out: list[str] = []
    for f in funcs:
        name = getattr(f, "tokenizer", None)
        if isinstance(name, str) and name not in out:
            out.append(name)
    return out


def load_tokenizer(name: str) -> Any:
    """The tokenizer ``AutoTokenizer`` loads from ``name`` (as the rewards load it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _train_recipe(recipe: str) -> dict[str, Any]:
    """A train recipe composed as ``curriculum train`` composes it (Hydra defaults list), as plain data."""
    return json.loads(_composed(recipe))


@dataclass
class ProfileResult:
    """What :func:`profile` left in ``out``: whether it is complete, what this process generated, the summary."""

    out: Path
    complete: bool
    run: RunReport | None
    summary: dict[str, Any] | None = None


def _source_K(cfg: ProfileConfig) -> int:
    """The input's one top level K, read before anything is written."""
    if cfg.dataset:
        return cfg.K or DEFAULT_K[get_loader(cfg.dataset).name]
    manifest = read_manifest(Path(cfg.shards or ""))
    if not is_adaptive(manifest):
        LevelRenderer(manifest, where=str(cfg.shards))  # raises, naming the schedule and what to build instead
    Ks = {int(v) for v in (manifest.get("K") or {}).values()}
    if len(Ks) != 1:
        raise UsageError(f"{cfg.shards}: its datasets have different K ({manifest.get('K')}); a profile compares "
                         "the same levels over its questions", hint="profile each dataset apart")
    return Ks.pop()


def profile(cfg: ProfileConfig, *, backend: GenerationBackend | None = None, command: str | None = None,
            progress: bool = False, max_chunks: int | None = None,
            engine: EngineConfig | None = None) -> ProfileResult:
    """Sample every question at every profiled level, score the samples, and write the profile.

    Args:
        cfg: the settings (input, levels, backend, model, samples, group size, ``out``).
        backend: overrides the one ``cfg`` names (tests); otherwise built only when something is left to generate.
        command: the command line recorded in the summary (None: this process's).
        progress: show a progress bar.
        max_chunks: stop after that many chunks (run again to continue).
        engine: where generation runs (None: here; ``EngineConfig(engine="ray")``: a pool of Ray actors).

    Returns:
        The output folder, whether the profile is complete, and its summary when it is.

    Raises:
        UsageError: no input, a level outside ``1..K``, an empty level in ``--levels``, an input that is not adaptive.
        ProfileError: ``--out`` holds files that are not a profile's, or another run holds its lock.
        RunMismatchError: ``--out`` holds samples of another model, input or sampling.
    """
    cfg.validate()
    if engine is not None:
        engine.validate(cfg.backend, cfg.backend_args)
    cfg.check_reward_tokenizer()
    K = _source_K(cfg)
    try:
        levels = parse_levels(cfg.levels, K)
    except ConfigError as e:
        raise UsageError(str(e), hint=e.hint) from None
    out = Path(cfg.out)
    if cfg.shards:
        src, dst = Path(cfg.shards).resolve(), out.resolve()
        if dst == src or src in dst.parents:
            raise UsageError(f"--out {out} is inside the input {cfg.shards}", hint="choose an --out outside it")
    check_resumable(out, written=lambda o, entries: any(e in entries for e in (WORK, BUILT_INPUT, PROFILE_SUMMARY)),
                    what="a level profile's output", error=ProfileError, ignore=(".lock",))
    started = lambda: bool(WorkDir(out / WORK).done()) or (out / BUILT_INPUT / MANIFEST).exists()  # noqa: E731
    with resumable_output(out, Path(WORK) / RUN_LOCK, "profile", ProfileError, started=started):
        return _profile(cfg, out, levels, backend=backend, command=command, progress=progress,
                        max_chunks=max_chunks, engine=engine)


def _resolve_input(cfg: ProfileConfig, out: Path, *, progress: bool) -> Path:
    if cfg.shards:
        validate_shards(Path(cfg.shards))
        return Path(cfg.shards)
    built = out / BUILT_INPUT
    dataset = get_loader(cfg.dataset or "").name
    build = BuildConfig(sources=[SourceSpec(dataset, cfg.input, cfg.n, K=cfg.K)], schedule="adaptive",
                        seed=cfg.seed, out=str(built), overwrite=True, allow_split_mismatch=True)
    return build_input(build, out, what="(adaptive, level K)", error=ProfileError, overwrite=cfg.overwrite,
                       progress=progress)


class _LevelPrompts(Sequence):
    """Item ``p``'s prompt: question ``p // L`` rendered at level ``levels[p % L]``, rendered when read (the levels
    of one question at once, the last question kept)."""

    def __init__(self, rows: pa.Table, renderer: LevelRenderer, levels: Sequence[int]) -> None:
        self.rows, self.renderer, self.levels = rows, renderer, list(levels)
        self._cached: tuple[int, list[Any]] | None = None

    def __len__(self) -> int:
        return self.rows.num_rows * len(self.levels)

    def __getitem__(self, p: Any) -> Any:
        q, li = divmod(int(p), len(self.levels))
        if self._cached is None or self._cached[0] != q:
            row = self.rows.slice(q, 1).to_pylist()[0]
            rendered = self.renderer.render([row] * len(self.levels), self.levels)
            self._cached = (q, [r["prompt"] for r in rendered])
        return self._cached[1][li]


def _profile(cfg: ProfileConfig, out: Path, levels: list[int], *, backend: GenerationBackend | None,
             command: str | None, progress: bool, max_chunks: int | None,
             engine: EngineConfig | None) -> ProfileResult:
    command = command if command is not None else current_command()
    input_dir = _resolve_input(cfg, out, progress=progress)
    manifest = read_manifest(input_dir)
    renderer = LevelRenderer(manifest, where=str(input_dir))
    rows = read_table(input_dir)
    row_ids = rows.column("id").to_pylist()
    if len(set(row_ids)) != len(row_ids):
        raise ProfileError(f"{input_dir}: row ids repeat; a profile needs one row per question")
    check_templates(rows.column("template").unique().to_pylist())
    ids = [f"{rid}{LEVEL_MARK}{lv}" for rid in row_ids for lv in levels]
    if backend is not None:
        identity = backend.describe() if hasattr(backend, "describe") else {"backend": backend.name}
    else:
        identity = backend_identity(cfg.backend, cfg.model, cfg.backend_args)
    fingerprint = {"task": TASK, "version": TASK_VERSION, "input": input_digest(manifest), "levels": levels,
                   "generation": identity}
    with open_engine(engine) as eng:
        if backend is None:
            factory: Any = eng.wrap(BackendSpec(cfg.backend, cfg.model, cfg.backend_args), backend=cfg.backend,
                                    options=cfg.backend_args)
        else:
            factory = backend if eng.name == "local" else eng.wrap(partial(_same, backend), backend=backend.name,
                                                                    options={})
        report = run_chunks(
            out / WORK, ids=ids, prompts=_LevelPrompts(rows, renderer, levels), backend=factory,
            sampling=cfg.sampling(), fingerprint=fingerprint, chunk_size=cfg.chunk_size,
            chunks_per_call=cfg.chunks_per_call, question_seeds=cfg.question_seeds, overwrite=cfg.overwrite,
            max_chunks=max_chunks, progress=progress, description="profile",
            allow_identical_samples=cfg.allow_identical_samples)
    if not report.complete:
        log.info("%s: stopped with %d chunk(s) left; run the same command again to continue", out,
                 len(report.remaining))
        return ProfileResult(out, False, report)
    with WorkDir(out / WORK).lock():
        summary = finalize_profile(out, cfg, input_dir, rows, levels, command=command)
    return ProfileResult(out, True, report, summary)


def _same(backend: GenerationBackend) -> GenerationBackend:
    return backend


def score_rewards(funcs: Sequence[Callable], weights: Sequence[float], row: Mapping[str, Any],
                  completions: Sequence[str]) -> tuple[list[float], dict[str, list[float]]]:
    """Each completion of ``row`` (rendered at its level) scored as TRL scores it in training: every reward function
    called with the completion and the row's columns (conversational when the prompt is a chat), the total the
    weighted sum (a None counting 0, TRL's ``nansum``); with what each function logs through ``log_metric`` (its
    components, e.g. ``rag_rl/answer``) and, with several functions, each one's own value. One completion per call,
    so a logged batch mean is that completion's term."""
    columns = {k: [v] for k, v in row.items() if k != "prompt"}
    prompt = row.get("prompt")
    chat = isinstance(prompt, list)
    totals: list[float] = []
    terms: dict[str, list[float]] = {}
    for j, text in enumerate(completions):
        completion: Any = [{"role": "assistant", "content": text}] if chat else text
        total = 0.0
        for f, w in zip(funcs, weights, strict=True):
            logged: dict[str, float] = {}
            value = f(completions=[completion], prompts=[prompt], log_metric=logged.__setitem__, **columns)[0]
            value = math.nan if value is None else float(value)
            if not math.isnan(value):
                total += w * value
            if len(funcs) > 1:
                logged[getattr(f, "__name__", type(f).__name__)] = value
            for key, v in logged.items():
                terms.setdefault(key, [math.nan] * len(completions))[j] = float(v)
        totals.append(total)
    return totals, terms


def summary_components(names: Sequence[str], funcs: Sequence[Callable]) -> list[str]:
    """The recorded terms whose informative fraction alone the summary reports: the logged ``NAME/answer``,
    ``NAME/citation``, ``NAME/format`` (:data:`COMPONENT_TERMS`) and, with several functions, each function's own."""
    own = {getattr(f, "__name__", type(f).__name__) for f in funcs} if len(funcs) > 1 else set()
    return sorted(n for n in names if n in own or n.rsplit("/", 1)[-1] in COMPONENT_TERMS)


def profile_table(rows: pa.Table, results: pa.Table, levels: Sequence[int], cfg: ProfileConfig,
                  renderer: LevelRenderer | None = None) -> pa.Table:
    """``profile.parquet``: every item's samples scored with the training reward (each question rendered at the
    item's level, as training shows it; ``renderer`` None: the rows as they are) and as the partition scores
    them."""
    meta = {k: rows.column(k).to_pylist() for k in ("id", "source_id", "data_source", "hops", "answers", "template")}
    pools = rows.column(POOL_SIZE).to_pylist()
    funcs, weights = cfg.reward_funcs()
    g, spread = int(cfg.group_size or DEFAULT_GROUP_SIZE), float(cfg.max_spread or 0.0)
    recs: dict[str, list[Any]] = {f.name: [] for f in PROFILE_SCHEMA}
    L = len(levels)
    rendered: tuple[int, list[dict[str, Any]]] | None = None
    cols = [results.column(c).to_pylist() for c in ("position", "seed", "skipped", "completions")]
    for pos, seed, skipped, comps in zip(*cols, strict=True):
        q, li = divmod(pos, L)
        level, hops = levels[li], int(meta["hops"][q])
        recs["position"].append(pos)
        recs["question"].append(q)
        for k in ("id", "source_id", "data_source"):
            recs[k].append(meta[k][q])
        recs["level"].append(level)
        recs["num_distractors"].append(num_distractors(level, hops, int(pools[q])))
        recs["hops"].append(hops)
        recs["seed"].append(seed)
        recs["skipped"].append(skipped)
        if skipped is not None or comps is None:
            for k in ("n", "c", "pass_rate", "sample_f1", "sample_valid", "predictions", "completions",
                      "sample_reward", "sample_components", "reward", "informative"):
                recs[k].append(None)
            continue
        f1, valid, preds = score_completions(comps, meta["answers"][q] or [], template=meta["template"][q])
        s = question_stats(f1, correct_f1=cfg.correct_f1)
        recs["n"].append(s.n)
        recs["c"].append(s.c)
        recs["pass_rate"].append(s.pass_rate)
        recs["sample_f1"].append(list(s.f1))
        recs["sample_valid"].append(valid)
        recs["predictions"].append(preds)
        recs["completions"].append(list(comps))
        if renderer is None:
            row = rows.slice(q, 1).to_pylist()[0]
        else:
            if rendered is None or rendered[0] != q:
                rendered = (q, renderer.render([rows.slice(q, 1).to_pylist()[0]] * L, levels))
            row = rendered[1][li]
        totals, terms = score_rewards(funcs, weights, row, comps)
        recs["sample_reward"].append(totals)
        recs["sample_components"].append(sorted(terms.items()))
        recs["reward"].append(sum(totals) / len(totals) if totals else None)
        recs["informative"].append(spread_probability(totals, g, spread))
    return pa.table(recs, schema=PROFILE_SCHEMA)


def level_summary(table: pa.Table, levels: Sequence[int], group_size: int, max_spread: float = 0.0,
                  components: Sequence[str] = ()) -> dict[str, Any]:
    """The summary's per-level figures: over the questions scored at every level (paired), each level's mean pass
    rate and reward, its change from the first level and its expected informative fraction (of the reward, of each
    of ``components`` alone, of the pass rate), with bootstrap intervals; the distractors shown and the questions
    scored at each level."""
    by_q: dict[int, dict[int, tuple[float, list[float], dict[str, list[float]]]]] = {}
    shown: dict[int, list[int]] = {lv: [] for lv in levels}
    scored = dict.fromkeys(levels, 0)
    names = ("question", "level", "pass_rate", "skipped", "num_distractors", "sample_reward", "sample_components")
    for q, lv, rate, skipped, d, rewards, terms in zip(*(table.column(c).to_pylist() for c in names), strict=True):
        shown[lv].append(d)
        if skipped is None and rate is not None:
            by_q.setdefault(q, {})[lv] = (rate, rewards, dict(terms or []))
            scored[lv] += 1
    paired = sorted(q for q, v in by_q.items() if len(v) == len(levels))
    rates = {lv: [by_q[q][lv][0] for q in paired] for lv in levels}
    rewards = {lv: [by_q[q][lv][1] for q in paired] for lv in levels}
    terms = {name: {lv: [by_q[q][lv][2].get(name, []) for q in paired] for lv in levels} for name in components}
    per_level = level_intervals(rates, group_size, rewards=rewards, max_spread=max_spread, components=terms,
                                resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
    for lv in levels:
        per_level[str(lv)]["scored"] = scored[lv]
        per_level[str(lv)]["mean_distractors"] = round(sum(shown[lv]) / len(shown[lv]), 3) if shown[lv] else None
    return {"paired_questions": len(paired), "per_level": per_level}


def finalize_profile(out: Path, cfg: ProfileConfig, input_dir: Path, rows: pa.Table, levels: Sequence[int], *,
                     command: str | None) -> dict[str, Any]:
    """Score every item in ``OUT/work`` and write ``profile.parquet``, ``profile.png`` and ``profile.json`` (last),
    each atomically; the same samples and settings give the same files."""
    wd = WorkDir(out / WORK)
    run = wd.read_run() or {}
    results = read_completions(wd, ids=[f"{rid}{LEVEL_MARK}{lv}" for rid in rows.column("id").to_pylist()
                                        for lv in levels])
    manifest = read_manifest(input_dir)
    table = profile_table(rows, results, levels, cfg, LevelRenderer(manifest, where=str(input_dir)))
    recorded = sorted({name for terms in table.column("sample_components").to_pylist() for name, _ in terms or []})
    components = summary_components(recorded, cfg.reward_funcs()[0])
    g, spread = int(cfg.group_size or DEFAULT_GROUP_SIZE), float(cfg.max_spread or 0.0)
    figures = level_summary(table, levels, g, spread, components)
    generation = {"fingerprint": run.get("fingerprint"), "sampling": run.get("sampling"),
                  "chunk_size": run.get("chunk_size")}
    if (resolved := read_backend(wd)) is not None:
        generation["backend"] = resolved
    public = mask_secrets({k: v for k, v in cfg.to_dict().items() if k != "overwrite"})
    summary = {
        "kind": "level-profile",
        "toolkit": {"name": "rag-curriculum", "version": __version__},
        "command": redact_command(command),
        "config": public,
        "input": {"path": str(input_dir), "digest": input_digest(manifest), "num_rows": manifest.get("num_rows")},
        "datasets": sorted(set(rows.column("data_source").to_pylist())),
        "K": manifest.get("K"),
        "levels": list(levels),
        "group_size": g,
        "reward": {**cfg.reward_record(), "components": components, "recorded": recorded},
        "sampling": {"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": cfg.max_tokens,
                     "group_size": g, "max_spread": spread,
                     "template": sorted(set(rows.column("template").to_pylist())),
                     "recipe": cfg.recipe or DEFAULT_TRAIN_RECIPE, "recipe_sampling": cfg._recipe_sampling},
        "samples_per_question": cfg.samples,
        "questions": rows.num_rows,
        "skipped": sum(1 for s in table.column("skipped").to_pylist() if s is not None),
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "paired_over": "questions"},
        "generation": generation,
        "model_settings": model_settings(cfg.model) if cfg.model else None,
        **figures,
        "table": PROFILE_TABLE,
        "plot": PROFILE_PLOT,
    }
    atomic_write_with(out / PROFILE_TABLE, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    summary["table_sha256"] = file_sha256(out / PROFILE_TABLE)  # a table changed after it was written is refused
    model = (identity_model(run) or "the model")
    plot_level_profile(figures["per_level"], out / PROFILE_PLOT, group_size=g,
                       title=f"{Path(model).name} on {', '.join(summary['datasets'])}: "
                             f"{figures['paired_questions']} questions x {cfg.samples} samples")
    write_json(out / PROFILE_SUMMARY, portable(summary, out))
    return summary


def plot_level_profile(per_level: Mapping[str, Mapping[str, Any]], path: Path, *, group_size: int,
                       title: str) -> Path:
    """Each level's mean pass rate and expected informative fraction (group size ``group_size``; of the reward, and
    of the pass rate alone), with their 95% intervals, against the level."""
    plt = pyplot()
    levels = sorted(int(lv) for lv, v in per_level.items() if v.get("pass_rate") is not None)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
    series = [("pass_rate", "pass rate", COLORS[0]),
              ("informative", f"informative groups (G = {group_size}), expected", COLORS[1])]
    if all("informative_pass_rate" in per_level[str(lv)] for lv in levels):
        series.append(("informative_pass_rate", "informative if only the pass rate counted", COLORS[2]))
    for key, label, color in series:
        ys = [per_level[str(lv)][key] for lv in levels]
        lo = [y - per_level[str(lv)][f"{key}_ci"][0] for lv, y in zip(levels, ys, strict=True)]
        hi = [per_level[str(lv)][f"{key}_ci"][1] - y for lv, y in zip(levels, ys, strict=True)]
        ax.errorbar(levels, ys, yerr=[lo, hi], marker="o", capsize=3, color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(lv) for lv in levels])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("level (log scale)")
    ax.set_ylabel("share (95% paired bootstrap)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


def identity_model(run: Mapping[str, Any]) -> str | None:
    """The model a run's fingerprint names."""
    return ((run.get("fingerprint") or {}).get("generation") or {}).get("model")


__all__ = ["PROFILE_SCHEMA", "ProfileConfig", "ProfileResult", "finalize_profile", "profile"]
