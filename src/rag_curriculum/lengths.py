"""Prompt lengths in tokens, counted as the trainers count them, and checked against the limits of a run before any
model is loaded: what a build records (``curriculum build --tokenizer``), what TRL's wing checks before training
(:mod:`rag_curriculum.train`) and what verl's launch scripts check (``python -m rag_curriculum.verl
check-lengths``), in one place below all three.

**Counting.** A prompt is its ``prompt`` messages with the tokenizer's chat template applied
(``add_generation_prompt=True``) and tokenized without adding special tokens, which is what
``tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True)`` does and what TRL's
``GRPOTrainer`` and verl's ``RLHFDataset`` feed the model (:func:`count_prompt_tokens`). ``curriculum build
--tokenizer NAME_OR_PATH`` writes these counts as the ``prompt_tokens`` column and the longest prompt into the
manifest (:class:`LengthStats`).

**No prompt is truncated silently.** An engine handed a prompt longer than its limit truncates it (verl 0.9.1 cuts
it from the left, with a warning only, even under ``data.truncation=error``; vLLM clips the completion of a prompt
that nearly fills ``max_model_len``) or drops it (verl's ``data.filter_overlong_prompts=True``). In a curriculum
the longest prompts are those of the hardest levels, so it is the top of the curriculum that goes, and with it the
system prompt and the first passages. A run's limits (:class:`Limit`) are therefore checked against every prompt
(:func:`check_lengths`), naming the rows, their levels and the setting to change. The counts come from the shards'
``prompt_tokens`` column when it was made with the model's tokenizer; otherwise the prompts are tokenized with
``AutoTokenizer`` of the model (seconds for thousands of rows, and far cheaper than loading the model).

transformers is imported only when a tokenizer is loaded.

>>> lengths = PromptLengths(tokens=[10, 50, 40], ids=["a", "b", "c"], levels=[1, 20, 20], indices=[0, 1, 2],
...                         source="example")
>>> check_lengths(lengths, [Limit("grpo.vllm_max_model_length", 60, completion=15,
...                               completion_setting="grpo.max_completion_length")])
Traceback (most recent call last):
...
rag_curriculum.errors.PromptLengthError: 1 of 3 prompts do not fit: grpo.vllm_max_model_length=60 must hold a prompt plus 15 completion tokens (grpo.max_completion_length), so a prompt may have at most 45 tokens, and the longest has 50 (row b, curriculum_index 1, level 20). Rows over the limit, by level: level 20: 1. First rows: b (level 20, 50 tokens). Set grpo.vllm_max_model_length >= 65, or lower grpo.max_completion_length, or rebuild the curriculum with shorter prompts (a lower K). Nothing was truncated, and no model was loaded.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CurriculumError, PromptLengthError, TokenizerError
from .models import is_gguf, resolve_model
from .prompts import completion_prompt, completion_style
from .shards import PROMPT_TOKENS, read_manifest, read_parquet_file, shard_files

__all__ = ["Limit", "LengthStats", "PromptLengths", "check_lengths", "count_prompt_tokens", "lengths_from_columns",
           "load_tokenizer", "read_lengths", "template_fingerprint", "tokenizer_info", "uses_column"]

TRAIN_EXTRA = "pip install 'rag-curriculum[train]'"
#: Prompts per ``apply_chat_template`` call: large enough for the fast tokenizer's batch encoder to pay off.
BATCH = 256
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(name_or_path: str, *, revision: str | None = None, trust_remote_code: bool = False,
                   option: str = "--tokenizer") -> Any:
    """``AutoTokenizer.from_pretrained(name_or_path)``, with one-line errors: transformers missing, a path that is
    not a tokenizer, a Hub id that cannot be reached. A ``.gguf`` model file is read from the folder it is converted
    into (:func:`rag_curriculum.models.resolve_model`). A tokenizer without a chat template (a base model's) is
    used as it is: its prompts are counted in the completion style the backends and the trainer give it
    (:func:`rag_curriculum.prompts.completion_prompt`)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerError(f"{option} needs transformers, which is not installed: {TRAIN_EXTRA}") from None
    if is_gguf(name_or_path):
        name_or_path = resolve_model(str(name_or_path)).path
    path = Path(str(name_or_path)).expanduser()
    if path.is_file():
        raise TokenizerError(f"{option} {name_or_path}: a file, not a tokenizer; give a tokenizer (or model) "
                             "directory, or a Hugging Face Hub model id")
    if path.is_dir() and not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise TokenizerError(f"{option} {name_or_path}: not a tokenizer directory (none of "
                             f"{', '.join(_TOKENIZER_FILES)} in it)")
    looks_like_path = str(name_or_path).startswith(("/", "./", "../", "~")) or str(name_or_path).count("/") > 1
    if looks_like_path and not path.exists():
        raise TokenizerError(f"{option} {name_or_path}: no such directory")
    kwargs: dict[str, Any] = {}
    if revision:
        kwargs["revision"] = revision
    if trust_remote_code:
        kwargs["trust_remote_code"] = True
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)
    except Exception as e:  # OSError (not found, offline), ValueError (no backend), ...
        raise TokenizerError(f"{option} {name_or_path}: could not load a tokenizer ({_first_line(e)})") from None
    return tok


def template_fingerprint(tok: Any) -> str:
    """SHA-256 of the tokenizer's chat template (a change of template changes every prompt's length); for a
    tokenizer without one, of the completion-style rendering's record (:func:`~rag_curriculum.prompts.completion_style`)."""
    template = getattr(tok, "chat_template", None)
    if not template:
        template = json.dumps(completion_style(), sort_keys=True)
    elif not isinstance(template, str):
        template = json.dumps(template, sort_keys=True)
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def tokenizer_info(name: str, tok: Any) -> dict[str, Any]:
    """What the manifest records about the tokenizer that counted the prompts."""
    return {"tokenizer": str(name), "tokenizer_class": type(tok).__name__, "vocab_size": len(tok),
            "chat_template_sha256": template_fingerprint(tok), "add_generation_prompt": True,
            "prompt_style": "chat" if getattr(tok, "chat_template", None) else "completion"}


def count_prompt_tokens(tok: Any, prompts: Iterable[Sequence[Mapping[str, str]]], *, batch_size: int = BATCH,
                        chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The length in tokens of each prompt (a list of chat messages), as
    ``len(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True))``, in batches; for a tokenizer
    without a chat template, the tokens of its completion-style text (the response prefix included)."""
    if not getattr(tok, "chat_template", None):
        return [len(tok(completion_prompt(p).text)["input_ids"]) for p in prompts]
    kw = dict(chat_template_kwargs or {})
    out: list[int] = []
    batch: list[list[dict[str, str]]] = []

    def flush() -> None:
        if batch:
            enc = tok.apply_chat_template(batch, add_generation_prompt=True, tokenize=True, return_dict=True, **kw)
            out.extend(len(ids) for ids in enc["input_ids"])
            batch.clear()

    for p in prompts:
        batch.append([{"role": m["role"], "content": m["content"]} for m in p])
        if len(batch) >= batch_size:
            flush()
    flush()
    return out


@dataclass
class LengthStats:
    """Prompt lengths of a run of rows: the longest (first in curriculum order on ties), the longest per level,
    and the total (for the mean). Stats of consecutive runs combine with :meth:`merge`."""

    rows: int = 0
    total: int = 0
    longest: int = -1
    longest_index: int | None = None
    longest_id: str | None = None
    longest_level: int | None = None
    max_by_level: dict[int, int] | None = None

    @classmethod
    def of(cls, tokens: Sequence[int], ids: Sequence[str], levels: Sequence[int], indices: Sequence[int]
           ) -> LengthStats:
        s = cls(max_by_level={})
        for t, i, lv, ix in zip(tokens, ids, levels, indices, strict=True):
            s.rows += 1
            s.total += t
            if t > s.longest:
                s.longest, s.longest_index, s.longest_id, s.longest_level = t, ix, i, lv
            if t > s.max_by_level.get(lv, -1):
                s.max_by_level[lv] = t
        return s

    def merge(self, other: LengthStats) -> LengthStats:
        """Combine with the stats of rows that come after these in the curriculum."""
        out = LengthStats(rows=self.rows + other.rows, total=self.total + other.total,
                          max_by_level=dict(self.max_by_level or {}))
        best = self if self.longest >= other.longest else other  # ties: the earlier row
        out.longest, out.longest_index, out.longest_id, out.longest_level = (
            best.longest, best.longest_index, best.longest_id, best.longest_level)
        for lv, t in (other.max_by_level or {}).items():
            out.max_by_level[lv] = max(out.max_by_level.get(lv, -1), t)  # type: ignore[index]
        return out

    def to_manifest(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest's ``prompt_tokens`` record: the tokenizer, the longest prompt, the longest per level."""
        return {
            **info,
            "longest": {"tokens": self.longest, "id": self.longest_id, "curriculum_index": self.longest_index,
                        "level": self.longest_level},
            "mean": round(self.total / self.rows, 1) if self.rows else 0,
            "max_by_level": {str(lv): t for lv, t in sorted((self.max_by_level or {}).items())},
        }


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0].strip() if text else type(e).__name__


# --- a run's limits -------------------------------------------------------------------------------------------------

#: Rows named in a refusal.
SHOW_ROWS = 5


@dataclass
class PromptLengths:
    """The prompt length in tokens of every row, with the row's id, level and curriculum index, and where the
    counts come from."""

    tokens: list[int]
    ids: list[str]
    levels: list[int]
    indices: list[int]
    source: str

    def longest(self) -> int:
        """Position of the longest prompt (the first one, on ties)."""
        return max(range(len(self.tokens)), key=lambda i: (self.tokens[i], -i)) if self.tokens else -1

    def describe(self, i: int) -> str:
        return f"row {self.ids[i]}, curriculum_index {self.indices[i]}, level {self.levels[i]}"

    @property
    def max_tokens(self) -> int:
        return self.tokens[self.longest()] if self.tokens else 0


@dataclass(frozen=True)
class Limit:
    """A limit of the run: a prompt plus ``completion`` tokens must fit in ``value`` (``setting``)."""

    setting: str
    value: int
    completion: int = 0
    completion_setting: str | None = None
    alias: str | None = None  # what sets it in a launcher (an environment variable of the verl script)

    @property
    def max_prompt(self) -> int:
        return self.value - self.completion


def uses_column(manifest: Mapping[str, Any], model: str | None, *, chat_template_kwargs: Mapping | None = None
                ) -> bool:
    """Whether the shards' ``prompt_tokens`` count the prompts as ``model``'s tokenizer would: the column was made
    with the tokenizer of that name (``model`` None: any), and no extra chat-template arguments change them."""
    record = manifest.get("prompt_tokens")
    if not record or PROMPT_TOKENS not in (manifest.get("columns") or []):
        return False
    if chat_template_kwargs:
        return False
    if model is None or str(record.get("tokenizer")) == str(model):
        return True
    # a local tokenizer is recorded by its folder's name (manifests hold no local paths): the same folder name, the
    # same chat template and vocabulary count as the same tokenizer
    local = Path(str(model))
    if not (local.is_dir() and local.name == Path(str(record.get("tokenizer"))).name):
        return False
    try:
        tok = load_tokenizer(str(local))
    except CurriculumError:
        return False
    return (template_fingerprint(tok) == record.get("chat_template_sha256")
            and len(tok) == record.get("vocab_size"))


def lengths_from_columns(columns: Mapping[str, Sequence[Any]], manifest: Mapping[str, Any], model: str | None, *,
                         revision: str | None = None, trust_remote_code: bool = False,
                         chat_template_kwargs: Mapping[str, Any] | None = None, tokenizer: Any = None
                         ) -> PromptLengths:
    """Prompt lengths of rows given as columns (``id``, ``level``, ``curriculum_index``, and ``prompt_tokens`` or
    ``prompt``): the column when it was made with ``model``'s tokenizer, else ``model``'s tokenizer applied to
    the prompts (``columns["prompt"]`` may be a callable returning them, so they are read only then)."""
    ids, levels, indices = list(columns["id"]), list(columns["level"]), list(columns["curriculum_index"])
    if uses_column(manifest, model, chat_template_kwargs=chat_template_kwargs) and PROMPT_TOKENS in columns:
        record = manifest["prompt_tokens"]
        return PromptLengths([int(t) for t in columns[PROMPT_TOKENS]], ids, levels, indices,
                             f"the shards' prompt_tokens ({record['tokenizer']}'s chat template)")
    if model is None:
        raise PromptLengthError("these shards have no prompt_tokens column (built without --tokenizer): name the "
                                "model whose tokenizer counts the prompts")
    if tokenizer is None:
        tokenizer = load_tokenizer(model, revision=revision, trust_remote_code=trust_remote_code,
                                   option="the model's tokenizer")
    prompts = columns["prompt"]
    prompts = prompts() if callable(prompts) else prompts
    tokens = count_prompt_tokens(tokenizer, prompts, chat_template_kwargs=chat_template_kwargs)
    why = ("built without --tokenizer" if not manifest.get("prompt_tokens")
           else f"prompt_tokens were counted with {manifest['prompt_tokens'].get('tokenizer')}")
    how = ("chat template applied here" if getattr(tokenizer, "chat_template", None)
           else "tokenizer on the completion-style prompts (a base model)")
    return PromptLengths(tokens, ids, levels, indices, f"{model}'s {how} ({why})")


def read_lengths(directory: str | Path, model: str | None = None, **kw: Any) -> PromptLengths:
    """Prompt lengths of a shard directory (every row, in curriculum order); see :func:`lengths_from_columns`."""
    import pyarrow as pa

    manifest = read_manifest(directory)
    files = shard_files(directory)
    base = ["id", "level", "curriculum_index"]
    use = uses_column(manifest, model, chat_template_kwargs=kw.get("chat_template_kwargs"))
    extra = [PROMPT_TOKENS] if use else []
    table = pa.concat_tables([read_parquet_file(f, base + extra) for f in files])
    columns: dict[str, Any] = {c: table.column(c).to_pylist() for c in base + extra}
    if not use:
        columns["prompt"] = lambda: [p for f in files for p in read_parquet_file(f, ["prompt"])
                                     .column("prompt").to_pylist()]
    return lengths_from_columns(columns, manifest, model, **kw)


def check_lengths(lengths: PromptLengths, limits: Iterable[Limit], *,
                  what: str = "Nothing was truncated, and no model was loaded.") -> None:
    """Raise :class:`PromptLengthError` when a prompt plus its completion exceeds a limit, naming the rows (the
    first few), the levels they are at, and the setting to change."""
    problems = []
    n = len(lengths.tokens)
    for lim in limits:
        over = [i for i, t in enumerate(lengths.tokens) if t > lim.max_prompt]
        if not over:
            continue
        top = lengths.longest()
        by_level = Counter(lengths.levels[i] for i in over)
        levels = ", ".join(f"level {lv}: {c}" for lv, c in sorted(by_level.items()))
        first = ", ".join(f"{lengths.ids[i]} (level {lengths.levels[i]}, {lengths.tokens[i]} tokens)"
                          for i in over[:SHOW_ROWS])
        setting = f"{lim.setting} ({lim.alias})" if lim.alias else lim.setting
        if lim.completion:
            need = (f"{lim.setting}={lim.value} must hold a prompt plus {lim.completion} completion tokens "
                    f"({lim.completion_setting}), so a prompt may have at most {lim.max_prompt} tokens")
            fix = (f"Set {setting} >= {lengths.tokens[top] + lim.completion}, or lower {lim.completion_setting}, "
                   "or rebuild the curriculum with shorter prompts (a lower K)")
        else:
            need = f"{lim.setting}={lim.value} is the longest prompt allowed"
            fix = f"Set {setting} >= {lengths.tokens[top]}, or rebuild the curriculum with shorter prompts (a lower K)"
        problems.append(
            f"{len(over)} of {n} prompts do not fit: {need}, and the longest has {lengths.tokens[top]} "
            f"({lengths.describe(top)}). Rows over the limit, by level: {levels}. First rows: {first}"
            f"{', ...' if len(over) > SHOW_ROWS else ''}. {fix}.")
    if problems:
        raise PromptLengthError(" Also: ".join(problems) + f" {what}")
