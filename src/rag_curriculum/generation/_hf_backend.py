"""The transformers backend: batched ``model.generate`` on the CPU or a GPU, for small models and machines
without vLLM.

Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``), or, for a base model
without one, in the completion style of :func:`rag_curriculum.prompts.completion_prompt` (its response prefix
returned as the start of each completion); sorted by length so a
batch holds prompts of similar length (less padding), padded on the left, and generated ``batch_size`` prompts at
a time with ``num_return_sequences=n``. Every sampling setting is passed explicitly (temperature, top-p, and
top-k, min-p, typical-p, repetition penalty switched off), so a model's ``generation_config.json`` defaults (such
as Qwen2.5's top-k 20 and repetition penalty 1.05) never leak in; only its stop tokens are used.

Seeding: each batch seeds torch's generator from the seeds of the prompts in it, so the same prompts with the same
seeds and ``batch_size`` give the same completions, whatever ran before them.

torch and transformers are imported when the backend is built, never when this module is imported.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from .._plumbing import derive_seed
from ..errors import ConfigError, GenerationError, PromptTooLongError
from ..models import resolve_model
from ..prompts import completion_style
from ._base import (
    Messages,
    RenderedPrompt,
    SamplingConfig,
    backend_identity,
    finish_completion,
    has_chat_template,
    progress_listened,
    render_prompt,
    report_progress,
    report_working,
)

log = logging.getLogger(__name__)

_DTYPES = ("auto", "float32", "float16", "bfloat16")


def _mix(seeds: Sequence[int]) -> int:
    """One torch seed for a batch of per-prompt seeds."""
    return derive_seed(*seeds, sep=",", bits=63)


class DecodedStop:
    """A stopping criterion for ``model.generate`` that ends a row once the text of its new tokens (decoded from
    ``start``) holds one of ``stop``: what transformers' ``stop_strings`` does, for tokenizers whose vocabulary its
    ``StopStringCriteria`` cannot read (a WordLevel tokenizer: "substring not found"). It decodes each row's new
    tokens at every step, so it is slower; it is used only for such tokenizers."""

    def __init__(self, tokenizer: Any, stop: Sequence[str], start: int) -> None:
        self.tokenizer, self.stop, self.start = tokenizer, list(stop), start

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        texts = self.tokenizer.batch_decode(input_ids[:, self.start:], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stop) for t in texts], dtype=torch.bool,
                            device=input_ids.device)


class FinishedCount:
    """A stopping criterion for ``model.generate`` that reports progress as the batch generates: at each step it
    counts the rows that have ended (an end-of-sequence token among their new tokens from ``start``, or one of the
    ``inner`` criteria, the stop strings', saying so) and reports the newly ended ones as completions (``per_row``
    each: a greedy row stands for all ``n`` samples), so progress counts completions as they finish within a batch,
    not when the batch returns; and with ``max_new_tokens``, how far the unfinished rows are (their new tokens over
    that limit, :func:`report_working`), so a rate and a time left show from the first tokens. It stops what the
    ``inner`` criteria stop, nothing more (the end-of-sequence token is generate's own criterion). Rows that run to
    ``max_new_tokens`` are counted with the batch."""

    def __init__(self, source: Any, eos: Sequence[int], start: int, per_row: int = 1, *,
                 inner: Sequence[Any] = (), max_new_tokens: int | None = None) -> None:
        self.source, self.eos, self.start, self.per_row = source, list(eos), start, per_row
        self.inner, self.max_new_tokens = list(inner), max_new_tokens
        self.rows = 0  # rows counted so far
        self.ended: Any = None  # each row: ended already (a row stays ended: generate pads it from then on)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[:, self.start:]
        stop = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for criterion in self.inner:
            stop = stop | criterion(input_ids, scores, **kwargs).to(stop.device)
        ended = stop.clone()
        if self.eos:
            ended |= torch.isin(new, torch.tensor(self.eos, device=new.device)).any(dim=1)
        self.ended = ended if self.ended is None else self.ended | ended
        finished = int(self.ended.sum())
        if finished > self.rows:
            report_progress(self.source, 0, (finished - self.rows) * self.per_row)
            self.rows = finished
        if self.max_new_tokens:
            share = min(1.0, new.shape[1] / self.max_new_tokens)
            report_working(self.source, (input_ids.shape[0] - finished) * self.per_row * share)
        return stop


def _ids(eos: Any) -> list[int]:
    """An ``eos_token_id`` setting (one id, a list, or None) as a list."""
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def progress_criteria(source: Any, stopping: dict[str, Any], tokenizer: Any, *, eos: Sequence[int], start: int,
                      per_row: int, max_new_tokens: int) -> tuple[dict[str, Any], FinishedCount]:
    """``stopping`` (:func:`stop_kwargs`'s ``generate`` arguments) with its stop criteria moved inside a
    :class:`FinishedCount`, which stops what they stop and reports each row as it ends: the same completions, and
    progress from the first step."""
    from transformers import StoppingCriteriaList, StopStringCriteria

    out = dict(stopping)
    inner = list(out.pop("stopping_criteria", None) or [])
    if "stop_strings" in out:  # the criterion generate would make of them, made here to be seen
        inner.append(StopStringCriteria(out.pop("tokenizer", tokenizer), out.pop("stop_strings")))
    counter = FinishedCount(source, eos, start, per_row, inner=inner, max_new_tokens=max_new_tokens)
    out["stopping_criteria"] = StoppingCriteriaList([counter])
    return out, counter


_STOP_STRINGS_OK: dict[int, bool] = {}


def stop_kwargs(tokenizer: Any, stop: Sequence[str], start: int) -> dict[str, Any]:
    """The ``generate`` arguments that end a completion at ``stop`` (new tokens from position ``start``):
    transformers' ``stop_strings`` when its ``StopStringCriteria`` can read the tokenizer's vocabulary, else
    :class:`DecodedStop` (one warning per tokenizer says so)."""
    if not stop:
        return {}
    key = id(tokenizer)
    ok = _STOP_STRINGS_OK.get(key)
    if ok is None:
        from transformers import StopStringCriteria

        try:
            StopStringCriteria(tokenizer, list(stop))
            ok = True
        except (ValueError, KeyError, IndexError, TypeError) as e:
            ok = False
            log.warning("transformers' stop strings cannot read the vocabulary of %s (%s: %s); stopping on the "
                        "decoded text instead (slower, the same turns)", type(tokenizer).__name__,
                        type(e).__name__, e)
        _STOP_STRINGS_OK[key] = ok
    if ok:
        return {"stop_strings": list(stop), "tokenizer": tokenizer}
    from transformers import StoppingCriteriaList

    return {"stopping_criteria": StoppingCriteriaList([DecodedStop(tokenizer, stop, start)])}


class TransformersBackend:
    """``model.generate`` in batches of ``batch_size`` prompts (each expanded to ``n`` sequences).

    ``device``: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...;
    ``dtype``: ``"auto"`` (bfloat16 on a GPU that supports it, float32 on the CPU) or a torch dtype name;
    ``max_model_len``: the longest prompt accepted, in tokens (default: the model's ``max_position_embeddings``);
    longer prompts raise :class:`PromptTooLongError`.
    """

    name = "transformers"
    #: Constructor options that change the completions (recorded with results; the rest only change speed).
    output_options = ("dtype", "batch_size", "max_model_len")

    def __init__(self, model: str, *, device: str = "auto", dtype: str = "auto", batch_size: int = 16,
                 max_model_len: int | None = None, trust_remote_code: bool = False,
                 attn_implementation: str | None = None) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name = str(model)
        self.resolved = resolve_model(self.model_name)  # a .gguf file: its converted folder
        self.batch_size = int(batch_size)
        self.dtype_name = dtype
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if dtype == "auto":
            if self.device.type == "cuda":
                torch_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            else:
                torch_dtype = torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(self.resolved.path, trust_remote_code=trust_remote_code)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        self.model = AutoModelForCausalLM.from_pretrained(self.resolved.path, **kwargs).to(self.device)
        self.model.eval()
        gen_eos = self.model.generation_config.eos_token_id
        self.eos_token_id = gen_eos if gen_eos is not None else self.tokenizer.eos_token_id
        if self.eos_token_id is None:
            raise GenerationError(f"{self.model_name}: neither the generation config nor the tokenizer names an "
                                  "end-of-sequence token, so generation would never stop before max_tokens")
        self.max_model_len = int(max_model_len or getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self.prompt_tokens = 0  # counters for throughput reports
        self.generated_tokens = 0
        log.info("transformers backend: %s on %s (%s), batch %d", self.model_name, self.device, torch_dtype,
                 self.batch_size)

    def describe(self) -> dict[str, Any]:
        """What the completions depend on (:func:`~rag_curriculum.generation._base.backend_identity`): the model
        (and a digest of its local directory's config, tokenizer and chat template), device, dtype, batch size,
        context length, and the digest of the chat template the loaded tokenizer applies."""
        identity = backend_identity(type(self), self.model_name, {
            "device": str(self.device), "dtype": self.dtype_name, "batch_size": self.batch_size,
            "max_model_len": self.max_model_len})
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            text = template if isinstance(template, str) else repr(sorted(dict(template).items()))
            identity["chat_template"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        else:  # a base model: the completion-style rendering
            identity["prompt_style"] = completion_style()
        if self.resolved.converted:
            identity["model_file"] = self.resolved.record()
        return identity

    @property
    def prompt_style(self) -> str:
        """``chat`` (the tokenizer's chat template) or ``completion`` (a base model without one)."""
        return "chat" if has_chat_template(self.tokenizer) else "completion"

    def rendered(self, messages: Messages) -> RenderedPrompt:
        """The prompt as the model sees it (:func:`~rag_curriculum.generation._base.render_prompt`): the chat
        template with the generation prompt, a conversation ending with an assistant message continued (as a search
        agent's turns are); or a base model's completion-style text and response prefix."""
        return render_prompt(self.tokenizer, messages)

    def render(self, messages: Messages) -> list[int]:
        """The prompt's token ids (:meth:`rendered`)."""
        return self.rendered(messages).ids

    def _sampling_kwargs(self, sampling: SamplingConfig, n: int) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens, "num_beams": 1, "top_k": 0, "min_p": 0.0, "typical_p": 1.0,
            "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
            "num_return_sequences": n, "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": self.eos_token_id,
        }
        if sampling.temperature > 0:
            kw.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p)
        else:  # greedy: one sequence, copied n times by the caller
            kw.update(do_sample=False, temperature=1.0, top_p=1.0, num_return_sequences=1)
        return kw

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None, stop: Sequence[str] | None = None) -> list[list[str]]:
        """``stop``: strings that end a completion (kept in it; transformers' ``stop_strings``, and the text cut
        after the first of them, since a token may run past it)."""
        import torch

        if seeds is None:
            seeds = [sampling.seed + i for i in range(len(prompts))]
        if len(seeds) != len(prompts):
            raise ConfigError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        rendered = [self.rendered(p) for p in prompts]
        ids = [r.ids for r in rendered]
        own_stops = {s for r in rendered for s in r.stop}
        stops = list(dict.fromkeys([*(stop or ()), *sorted(own_stops)]))
        if self.max_model_len:
            too_long = [i for i, t in enumerate(ids) if len(t) > self.max_model_len]
            if too_long:
                raise PromptTooLongError(too_long, limit=self.max_model_len)
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        greedy = sampling.temperature == 0
        n_gen = 1 if greedy else sampling.n
        kwargs = self._sampling_kwargs(sampling, n_gen)
        out: list[list[str] | None] = [None] * len(ids)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                t = ids[i]
                input_ids[r, width - len(t):] = torch.tensor(t, dtype=torch.long)
                mask[r, width - len(t):] = 1
            torch.manual_seed(_mix([seeds[i] for i in batch]))
            stopping = stop_kwargs(self.tokenizer, stops, width)
            counter = None
            if progress_listened(self):  # completions as they finish, and the tokens of those that have not
                stopping, counter = progress_criteria(self, stopping, self.tokenizer, eos=_ids(self.eos_token_id),
                                                      start=width, per_row=sampling.n // n_gen,
                                                      max_new_tokens=sampling.max_tokens)
            with torch.no_grad():
                gen = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                                          **kwargs, **stopping)
            new_tokens = gen[:, width:]
            self.prompt_tokens += int(mask.sum()) * n_gen
            self.generated_tokens += int((new_tokens != pad).sum())
            texts = self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            for r, i in enumerate(batch):
                got = [finish_completion(g, rendered[i], stop) for g in texts[r * n_gen:(r + 1) * n_gen]]
                out[i] = got * sampling.n if greedy else got
            counted = counter.rows * counter.per_row if counter is not None else 0
            report_progress(self, len(batch), len(batch) * sampling.n - counted)
            report_working(self, 0.0)
        return [o if o is not None else [] for o in out]  # every slot is filled above

    def close(self) -> None:
        import gc

        self.model = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # pragma: no cover - best effort
            pass
