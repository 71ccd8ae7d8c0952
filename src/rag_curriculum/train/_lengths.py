"""The prompt lengths of a TRL run checked against its limits (:mod:`rag_curriculum.lengths` counts and checks;
this module reads the limits from a bound ``GRPOConfig`` and the model's config), before any model is loaded."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..lengths import Limit, PromptLengths, check_lengths, lengths_from_columns
from ..shards import PROMPT_TOKENS

log = logging.getLogger(__name__)


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


def check_trl_lengths(cfg: Any, args: Any, dataset: Any, manifest: Mapping[str, Any], *,
                      say: bool = True) -> PromptLengths:
    """Refuse (:class:`PromptLengthError`) a TRL run whose limits do not hold every prompt of ``dataset`` plus the
    completion; log the longest prompt (``say``; a dry run prints it itself, with the completion). Loads the
    model's tokenizer when the shards lack the counts, never the model."""
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
    if say:
        log.info("longest prompt: %d tokens (%s), counted from %s", lengths.tokens[top], lengths.describe(top),
                 lengths.source)
    limits, notes = trl_limits(args, model, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code)
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    for note in notes:
        log.warning(note.format(need=lengths.tokens[top] + completion))
    check_lengths(lengths, limits)
    return lengths
