"""The evaluation configuration: typed dataclasses are the schema (each field's type, range and help); a recipe
(``recipes/eval/``, e.g. the paper's ``rag-rl``) and the command line fill them in, through
:func:`rag_curriculum.config.resolve`."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any

from .._settings import MAX_COUNT, MAX_SAMPLES, MAX_SEED, check_settings, rule
from ..config import bind
from ..errors import ConfigError, UsageError
from ..generation import BACKENDS, check_backend_model, is_secret_option
from ..prompts import get_template
from ..rewards import FORMATS

__all__ = ["EvalConfig", "ModelSpec"]

_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def public_backend_args(args: dict[str, Any], *, mask: bool) -> dict[str, Any]:
    """``args`` without secrets (masked as ``"***"`` with ``mask``, else dropped); secrets are the option names
    :func:`rag_curriculum.generation._base.is_secret_option` names (``api_key``, ``hf_token``, ``password``, ...).

    >>> public_backend_args({"api_key": "sk-1", "hf_token": "hf_x", "base_url": "u"}, mask=True)
    {'api_key': '***', 'hf_token': '***', 'base_url': 'u'}
    """
    return {k: ("***" if mask else None) if is_secret_option(k) else v for k, v in args.items()
            if mask or not is_secret_option(k)}


@dataclass(frozen=True)
class ModelSpec:
    """A model to evaluate: its display name (row label, results folder) and what the backend loads (a local
    path or checkpoint, a Hub id, or the model name an OpenAI-compatible server serves)."""

    name: str
    path: str

    def __post_init__(self) -> None:
        if not _NAME_OK.match(self.name):
            raise ConfigError(f"model name {self.name!r}: use letters, digits and . _ + - only (it names a folder); "
                             "give one as NAME=PATH")

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """``NAME=PATH``, or ``PATH`` alone (the name is then its last component; ``checkpoint-N`` folders
        are named after their run too).

        >>> ModelSpec.parse("min-max=outputs/mm/checkpoint-120")
        ModelSpec(name='min-max', path='outputs/mm/checkpoint-120')
        >>> ModelSpec.parse("Qwen/Qwen2.5-7B-Instruct").name, ModelSpec.parse("runs/mm/checkpoint-120/").name
        ('Qwen2.5-7B-Instruct', 'mm-checkpoint-120')
        """
        name, sep, path = spec.partition("=")
        if sep and name and "/" not in name and path:
            return cls(name, path)
        return cls(default_name(spec), spec)


def default_name(path: str) -> str:
    parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in ("/", ".", "..")]
    if not parts:
        raise ConfigError(f"cannot name the model {path!r}; give one as NAME=PATH")
    name = parts[-1]
    if re.fullmatch(r"(checkpoint|step|global_step)[-_]?\d+", name) and len(parts) > 1:
        name = f"{parts[-2]}-{name}"
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-.") or "model"
    return name


@dataclass
class EvalConfig:
    """Everything that determines an evaluation run. Saved, resolved, as ``eval_config.json`` in ``out``.

    Each field's type and range is checked when the config is made (a :class:`SettingError`, a
    :class:`ConfigError`); :meth:`validate` checks the fields against each other.

    Examples:
        >>> from rag_curriculum import EvalConfig
        >>> cfg = EvalConfig.from_dict({"models": ["min-max=outputs/train/rag-rl-musique-min-max"],
        ...                             "data": ["eval/musique-distractor"], "m": 3})
        >>> cfg.models, cfg.backend
        ([ModelSpec(name='min-max', path='outputs/train/rag-rl-musique-min-max')], 'vllm')
    """

    models: list[ModelSpec] = rule(default_factory=list, flag="--model", help=(
        "Models to evaluate, each on every evaluation set: PATH or NAME=PATH (a local model or checkpoint, a Hub "
        "id, or the name an OpenAI-compatible server serves); NAME labels its row."))
    data: list[str] = rule(default_factory=list, flag="--data", help=(
        "Evaluation shard directories (`curriculum build --setting distractor|ideal|retrieved`); dataset, setting "
        "and abstention answer come from each one's manifest and rows."))
    out: str = rule("outputs/eval", empty=False, help="Output directory: results/, summary.json, table.md, plots/.")
    backend: str = rule("vllm", empty=False, help=(
        "Generation backend: vllm (GPU, the paper's; as in partition) | openai (a server such as `vllm serve`) | "
        "transformers (the CPU choice; GPU too) | scripted."))
    backend_args: dict[str, Any] = rule(default_factory=dict, flag="--backend-arg", help=(
        "Other backend options (constructor arguments of the backend)."))
    m: int = rule(3, ge=1, le=MAX_SAMPLES, flag="--samples", help="Samples per question, averaged (RAG-RL: 3).")
    temperature: float = rule(1.0, ge=0, le=100, help=(
        "Sampling temperature (passed explicitly, never the model's generation config)."))
    top_p: float = rule(1.0, gt=0, le=1, help="Nucleus sampling top-p.")
    max_tokens: int = rule(800, ge=1, le=MAX_COUNT, help="Most tokens per completion (RAG-RL: 800).")
    seed: int = rule(0, ge=0, le=MAX_SEED, help=(
        "Sampling seed (each question's seed derives from it and the question id)."))
    limit: int | None = rule(None, ge=1, le=MAX_COUNT, help="Evaluate only the first N questions of each set.")
    stats: list[str] = rule(default_factory=list, help=(
        "Partition stats.parquet files (or their directories): add the base-answerable / base-unanswerable "
        "breakdown."))
    strict_format: bool = rule(False, help=(
        "Score completions that break the output format as 0 (default: score what the parser extracts)."))
    templates: list[str] = rule(default_factory=list, flag="--template", help=(
        "Evaluate every set re-rendered in this output format (repeatable: each is evaluated, e.g. craft-v1 ... "
        "craft-v5 for CRAFT's trace formats, reported in a Table 2 layout); default: the rows' own template."))
    index_base: int | None = rule(None, ge=0, le=1, help=(
        "With --template craft-v*: number the passages from 0 or 1 (default 1)."))
    judge: str | None = rule(None, empty=False, help=(
        "The faithfulness judge as BACKEND:MODEL. CRAFT's (e.g. openai:Qwen3-Max, the paper's; transformers:PATH; "
        "scripted:FILE.json) audits every CRAFT trace with Algorithm 1's checks; with --agent ... --faithfulness "
        "veritas, VERITAS's judges Info-Think and Think-Search (openai:veritas-rm behind vllm serve; "
        "scripted:rag_curriculum.methods.veritas:lexical_judge, a word-overlap stand-in for CPU runs). Cached on disk."))
    judge_args: dict[str, Any] = rule(default_factory=dict, flag="--judge-arg", help=(
        "Judge options KEY=VALUE: cache_dir, prompt (a template file), citation_check (judge|rule), max_tokens; "
        "any other key goes to the judge's backend (base_url, api_key, ...)."))
    chunk_size: int = rule(64, ge=1, le=MAX_COUNT, help="Questions per resumable generation chunk.")
    plots: bool = rule(True, help="Write PNG plots.")
    overwrite: bool = rule(False, help=(
        "Generate again where out holds results made with other generation settings (default: refuse)."))
    allow_identical_samples: bool = rule(False, help=(
        "Do not stop when most questions get identical samples at temperature > 0 (by default that stops the run: "
        "the server or backend most likely ignores the sampling parameters)."))

    def __post_init__(self) -> None:
        check_settings(self)  # types and ranges, whatever set them (flags or Python)
        for i, mspec in enumerate(self.models):
            if not isinstance(mspec, ModelSpec):
                raise ConfigError(f"models[{i}] = {mspec!r}: must be a ModelSpec (ModelSpec.parse('NAME=PATH'))")

    def validate(self) -> None:
        """Check the fields again and against each other.

        Raises:
            ConfigError: no model or evaluation set (a :class:`UsageError`), two models of one name, or options
                that contradict each other.
            UnknownNameError: an unknown backend or template.
        """
        self.__post_init__()
        if not self.models:
            raise UsageError("no model given: pass --model PATH (or NAME=PATH), once per model")
        if not self.data:
            raise UsageError("no evaluation set given: pass --data DIR (made by `curriculum build --setting "
                            "distractor|ideal|retrieved`), once per set")
        names = [m.name for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"two models share the name(s) {dup}; name them apart with --model NAME=PATH")
        if self.backend not in BACKENDS:
            BACKENDS.get(self.backend)  # raises, with a "did you mean"
        self._validate_craft()

    def _validate_craft(self) -> None:
        for t in self.templates:
            FORMATS.get(t)  # a format with a parser (raises, with a "did you mean")
            if self.index_base is not None:
                get_template(t).with_index_base(self.index_base)
        if len(set(self.templates)) != len(self.templates):
            raise ConfigError(f"--template repeats a template: {self.templates}")
        if self.index_base is not None and not self.templates:
            raise ConfigError("--index-base re-numbers passages of a --template: give --template craft-vN too")
        if self.judge is not None:
            backend = self.judge.partition(":")[0]
            if backend not in BACKENDS:
                BACKENDS.get(backend)

    def check_models(self) -> None:
        """Refuse a model that is neither a local path nor a valid Hub id before anything is loaded."""
        for mspec in self.models:
            check_backend_model(mspec.path, self.backend, label=f"model {mspec.name}")

    def to_dict(self) -> dict[str, Any]:
        """The config as saved with the outputs: secrets in ``backend_args`` (``api_key``) are masked."""
        d = asdict(self)
        d["backend_args"] = public_backend_args(self.backend_args, mask=True)
        d["judge_args"] = public_backend_args(self.judge_args, mask=True)
        for key, unset in (("templates", []), ("index_base", None), ("judge", None), ("judge_args", {})):
            if d[key] == unset:  # unset: the config recorded as it always was
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalConfig:
        """Bind plain data (a composed recipe; models as ``NAME=PATH`` strings or ``{name, path}``), refusing
        unknown keys with a "did you mean"."""
        return bind(cls, d)
