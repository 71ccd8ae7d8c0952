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


def server_url(args: Any) -> str:
    """The vLLM server a TRL run in ``vllm_mode=server`` connects to (as TRL's ``VLLMClient`` makes it)."""
    base = getattr(args, "vllm_server_base_url", None)
    if base:
        return str(base).rstrip("/")
    return f"http://{getattr(args, 'vllm_server_host', '0.0.0.0')}:{getattr(args, 'vllm_server_port', 8000)}"


def server_context(url: str, *, timeout: float = 3.0) -> tuple[int | None, str | None]:
    """The ``max_model_len`` a vLLM server (``trl vllm-serve`` or ``vllm serve``) reports at ``URL/v1/models``, or
    (None, why) when it cannot be read."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout) as r:  # noqa: S310 - the run's own server
            data = json.loads(r.read().decode("utf-8"))
        value = (data.get("data") or [{}])[0].get("max_model_len")
    except Exception as e:  # noqa: BLE001 - unreachable, not vLLM, not JSON: said, and the given limit checked
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(value, int) or value < 1:
        return None, f"{url}/v1/models reports no max_model_len"
    return value, None


def trl_limits(args: Any, model: str, *, revision: str | None = None, trust_remote_code: bool = False
               ) -> tuple[list[Limit], list[str]]:
    """The limits of a TRL run (a bound ``GRPOConfig``) and notes on what could not be read.

    * vLLM colocated: ``vllm_max_model_length`` (unset: the model's ``max_position_embeddings``, which vLLM then
      uses) must hold the prompt plus ``max_completion_length``; vLLM refuses a longer prompt and clips the
      completion of one that nearly fills it.
    * vLLM server: the same, with the server's ``max_model_len`` read from its ``/v1/models`` (``trl vllm-serve``
      runs vLLM's server, which reports it); a server not yet reachable (a dry run before it starts) is checked
      against ``grpo.vllm_max_model_length`` as the ``--max-model-len`` it will be started with, else against the
      model's ``max_position_embeddings`` (a server started without ``--max-model-len``), with a note.
    * ``max_prompt_length``, in TRLs that have it (TRL 1.x has none; older ones left-truncate prompts to it).
    """
    limits: list[Limit] = []
    notes: list[str] = []
    completion = int(getattr(args, "max_completion_length", 0) or 0)
    if getattr(args, "use_vllm", False):
        given = getattr(args, "vllm_max_model_length", None)
        if getattr(args, "vllm_mode", "colocate") == "colocate":
            value, setting, alias = given, "grpo.vllm_max_model_length", None
        else:
            url = server_url(args)
            value, why = server_context(url)
            setting, alias = "the vLLM server's max_model_len", f"trl vllm-serve --max-model-len, read from {url}"
            if value is not None and given and int(given) != value:
                notes.append(f"grpo.vllm_max_model_length={given} but the server at {url} runs with "
                             f"max_model_len={value}: the server's is checked")
            if value is None:
                notes.append(f"grpo.vllm_mode=server: could not read max_model_len from {url}/v1/models ({why}); "
                             "checked against " + ("grpo.vllm_max_model_length, the --max-model-len the server must "
                                                   "be started with" if given else
                                                   "the model's context (a server started without --max-model-len);"
                                                   " give grpo.vllm_max_model_length to check another"))
                value, alias = given, f"trl vllm-serve --max-model-len, not read from {url}"
                if given:
                    setting = "grpo.vllm_max_model_length"
        if value is None:
            value = model_context(model, revision=revision, trust_remote_code=trust_remote_code)
            setting = f"{setting} (unset: {model}'s max_position_embeddings)"
        if value:
            limits.append(Limit(setting, int(value), completion, "grpo.max_completion_length", alias=alias))
    max_prompt = getattr(args, "max_prompt_length", None)
    if max_prompt:
        limits.append(Limit("grpo.max_prompt_length", int(max_prompt)))
    return limits, notes


def _columns(dataset: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {c: dataset[c] for c in ("id", "level", "curriculum_index")}
    if PROMPT_TOKENS in dataset.column_names:
        columns[PROMPT_TOKENS] = dataset[PROMPT_TOKENS]
    columns["prompt"] = lambda: dataset["prompt"]
    return columns


def _template_kwargs(value: Any) -> Any:
    if isinstance(value, str):  # GRPOConfig takes them as a JSON string too
        import json

        value = json.loads(value)
    return value or None


def longest_rows(cfg: Any, dataset: Any, manifest: Mapping[str, Any], n: int) -> tuple[Any, dict[str, Any]]:
    """The ``n`` rows of ``dataset`` whose prompts are longest in the model's tokenizer (ties: the earlier row),
    kept in their curriculum order, and what ``train_plan.json`` records of them (``data.longest_rows``)."""
    lengths = lengths_from_columns(_columns(dataset), manifest, cfg.model.name_or_path, revision=cfg.model.revision,
                                   trust_remote_code=cfg.model.trust_remote_code,
                                   chat_template_kwargs=_template_kwargs(cfg.grpo.get("chat_template_kwargs")))
    top = sorted(range(len(lengths.tokens)), key=lambda i: (-lengths.tokens[i], i))[:n]
    keep = sorted(top)
    tokens = [lengths.tokens[i] for i in keep]
    levels = sorted({int(lengths.levels[i]) for i in keep})
    record = {"rows": len(keep), "curriculum_index": [int(lengths.indices[i]) for i in keep],
              "prompt_tokens": [min(tokens), max(tokens)] if tokens else None, "levels": levels,
              "source": lengths.source}
    log.info("data.longest_rows=%d: the %d rows with the longest prompts (%s to %s tokens, levels %s; %s), in "
             "curriculum order", n, len(keep), min(tokens, default=0), max(tokens, default=0), levels, lengths.source)
    return dataset.select(keep), record


def check_trl_lengths(cfg: Any, args: Any, dataset: Any, manifest: Mapping[str, Any], *,
                      say: bool = True) -> PromptLengths:
    """Refuse (:class:`PromptLengthError`) a TRL run whose limits do not hold every prompt of ``dataset`` plus the
    completion; log the longest prompt (``say``; a dry run prints it itself, with the completion). Loads the
    model's tokenizer when the shards lack the counts, never the model."""
    model = cfg.model.name_or_path
    kwargs = _template_kwargs(getattr(args, "chat_template_kwargs", None))
    lengths = lengths_from_columns(_columns(dataset), manifest, model, revision=cfg.model.revision,
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
        log.warning("%s (the longest prompt needs %d with the completion)", note, lengths.tokens[top] + completion)
    check_lengths(lengths, limits)
    return lengths
