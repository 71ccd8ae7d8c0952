"""No prompt is truncated silently: the prompt lengths of a curriculum checked against the limits of a run, before
any model is loaded.

An engine handed a prompt longer than its limit truncates it (verl 0.9.1 cuts it from the left, with a warning
only, even under ``data.truncation=error``; vLLM clips the completion of a prompt that nearly fills
``max_model_len``) or drops it (verl's ``data.filter_overlong_prompts=True``). In a curriculum the longest prompts
are those of the hardest levels, so it is the top of the curriculum that goes, and with it the system prompt and
the first passages. The toolkit therefore counts every prompt's tokens as the trainer will (the chat template of
the model's tokenizer applied, generation prompt included) and refuses a run whose limits do not hold them,
naming the rows, their levels and the setting to change.

The counts come from the shards' ``prompt_tokens`` column when it was made with the model's tokenizer
(``curriculum build --tokenizer MODEL``); otherwise the prompts are tokenized with ``AutoTokenizer`` of the model
(seconds for thousands of rows, and far cheaper than loading the model).

>>> lengths = PromptLengths(tokens=[10, 50, 40], ids=["a", "b", "c"], levels=[1, 20, 20], indices=[0, 1, 2],
...                         source="example")
>>> check_lengths(lengths, [Limit("grpo.vllm_max_model_length", 60, completion=15,
...                               completion_setting="grpo.max_completion_length")])
Traceback (most recent call last):
...
rag_curriculum.errors.PromptLengthError: 1 of 3 prompts do not fit: grpo.vllm_max_model_length=60 must hold a prompt plus 15 completion tokens (grpo.max_completion_length), so a prompt may have at most 45 tokens, and the longest has 50 (row b, curriculum_index 1, level 20). Rows over the limit, by level: level 20: 1. First rows: b (level 20, 50 tokens). Set grpo.vllm_max_model_length >= 65, or lower grpo.max_completion_length, or rebuild the curriculum with shorter prompts (a lower K). Nothing was truncated, and no model was loaded.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..curricula._lengths import count_prompt_tokens, load_tokenizer, template_fingerprint
from ..errors import CurriculumError, PromptLengthError  # noqa: F401  (re-exported)
from ..shards import PROMPT_TOKENS, read_manifest, shard_files

log = logging.getLogger(__name__)

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
    return PromptLengths(tokens, ids, levels, indices, f"{model}'s chat template applied here ({why})")


def read_lengths(directory: str | Path, model: str | None = None, **kw: Any) -> PromptLengths:
    """Prompt lengths of a shard directory (every row, in curriculum order); see :func:`lengths_from_columns`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest = read_manifest(directory)
    files = shard_files(directory)
    base = ["id", "level", "curriculum_index"]
    use = uses_column(manifest, model, chat_template_kwargs=kw.get("chat_template_kwargs"))
    extra = [PROMPT_TOKENS] if use else []
    table = pa.concat_tables([pq.read_table(f, columns=base + extra) for f in files])
    columns: dict[str, Any] = {c: table.column(c).to_pylist() for c in base + extra}
    if not use:
        columns["prompt"] = lambda: [p for f in files for p in pq.read_table(f, columns=["prompt"])
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


# --- TRL -----------------------------------------------------------------------------------------------------------

def model_context(model: str, *, revision: str | None = None, trust_remote_code: bool = False) -> int | None:
    """The model's ``max_position_embeddings`` (what vLLM takes as ``max_model_len`` when none is given), from its
    config file only; None when it cannot be read."""
    try:
        from transformers import AutoConfig

        kw: dict[str, Any] = {"trust_remote_code": True} if trust_remote_code else {}
        if revision:
            kw["revision"] = revision
        config = AutoConfig.from_pretrained(model, **kw)
    except Exception as e:  # noqa: BLE001 - the limit is then unknown, and said so
        log.warning("could not read %s's config (%s): its context length is not checked", model, e)
        return None
    config = getattr(config, "text_config", None) or config
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if value else None


def trl_limits(args: Any, model: str, *, revision: str | None = None, trust_remote_code: bool = False
               ) -> tuple[list[Limit], list[str]]:
    """The limits of a TRL run (a bound ``GRPOConfig``) and notes on those it cannot check.

    * vLLM colocated: ``vllm_max_model_length`` (unset: the model's ``max_position_embeddings``, which vLLM then
      uses) must hold the prompt plus ``max_completion_length``; vLLM refuses a longer prompt and clips the
      completion of one that nearly fills it.
    * vLLM server: the server's ``--max-model-len`` is not known here; a note says what it must be.
    * ``max_prompt_length``, in TRLs that have it (TRL 1.x has none; older ones left-truncate prompts to it).
    """
    limits: list[Limit] = []
    notes: list[str] = []
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    if getattr(args, "use_vllm", False):
        if getattr(args, "vllm_mode", "colocate") == "colocate":
            value = getattr(args, "vllm_max_model_length", None)
            setting = "grpo.vllm_max_model_length"
            if value is None:
                value = model_context(model, revision=revision, trust_remote_code=trust_remote_code)
                setting = f"grpo.vllm_max_model_length (unset: {model}'s max_position_embeddings)"
            if value:
                limits.append(Limit(setting, int(value), completion, "grpo.max_completion_length"))
        else:
            notes.append("grpo.vllm_mode=server: start the vLLM server (trl vllm-serve) with --max-model-len at least "
                         "{need} (the longest prompt plus grpo.max_completion_length); this run cannot check it")
    max_prompt = getattr(args, "max_prompt_length", None)
    if max_prompt:
        limits.append(Limit("grpo.max_prompt_length", int(max_prompt)))
    return limits, notes


def check_trl_lengths(cfg: Any, args: Any, dataset: Any, manifest: Mapping[str, Any]) -> PromptLengths:
    """Refuse (:class:`PromptLengthError`) a TRL run whose limits do not hold every prompt of ``dataset`` plus the
    completion; log the longest prompt. Loads the model's tokenizer when the shards lack the counts, never the
    model."""
    model = cfg.model.name_or_path
    kwargs = getattr(args, "chat_template_kwargs", None) or None
    if isinstance(kwargs, str):  # GRPOConfig takes them as a JSON string too
        import json

        kwargs = json.loads(kwargs) or None
    columns: dict[str, Any] = {c: dataset[c] for c in ("id", "level", "curriculum_index")}
    if PROMPT_TOKENS in dataset.column_names:
        columns[PROMPT_TOKENS] = dataset[PROMPT_TOKENS]
    columns["prompt"] = lambda: dataset["prompt"]
    lengths = lengths_from_columns(columns, manifest, model, revision=cfg.model.revision,
                                   trust_remote_code=cfg.model.trust_remote_code, chat_template_kwargs=kwargs)
    if not lengths.tokens:
        return lengths
    top = lengths.longest()
    log.info("longest prompt: %d tokens (%s), counted from %s", lengths.tokens[top], lengths.describe(top),
             lengths.source)
    limits, notes = trl_limits(args, model, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code)
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    for note in notes:
        log.warning(note.format(need=lengths.tokens[top] + completion))
    check_lengths(lengths, limits)
    return lengths
