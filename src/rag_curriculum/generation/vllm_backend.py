"""The vLLM backend: offline ``LLM.chat`` with explicit ``SamplingParams``, the default on a GPU.

- Sampling is always explicit: ``SamplingParams(n, temperature, top_p, max_tokens, seed)`` per prompt, so the
  model's ``generation_config.json`` defaults (which vLLM applies only when no params are given) never apply.
- One ``LLM.chat`` call gets many prompts (the runner sends ``call_size`` prompts at a time): the engine schedules
  them together and its prefix cache (on, explicitly) shares the system prompt across prompts and the whole prompt
  across a question's ``n`` samples.
- ``seeds[i]`` seeds prompt ``i`` (vLLM's per-request generator), so a question's samples do not depend on what it
  is batched with. Per-request generators cost some sampler time; pass ``seeds=None`` (``--no-question-seeds``)
  to use the engine's generator instead, faster but not reproducible across runs.
- Several GPUs: ``tensor_parallel_size`` splits one model over GPUs; for data parallelism run one process per GPU
  on its own shard of the questions (``--num-shards``/``--shard-index`` with ``CUDA_VISIBLE_DEVICES``).
- Prompts longer than ``max_model_len`` raise :class:`PromptTooLongError` before anything is generated.

vLLM is imported when the backend is built, never when this module is imported.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from typing import Any

from .base import GenerationError, Messages, PromptTooLongError, SamplingConfig

log = logging.getLogger(__name__)

#: Slack for the tokens a chat template adds around the messages' text (role headers, special tokens).
_TEMPLATE_SLACK = 256


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class VLLMBackend:
    """``vllm.LLM`` built once; :meth:`generate` calls ``LLM.chat`` on all the prompts it is given."""

    name = "vllm"
    output_options = ("dtype", "max_model_len", "quantization")
    call_size = 2048

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.9, enable_prefix_caching: bool = True,
                 trust_remote_code: bool = False, enforce_eager: bool = False, quantization: str | None = None,
                 seed: int = 0, call_size: int | None = None, show_progress: bool = False,
                 **engine_kwargs: Any) -> None:
        try:
            from vllm import LLM
        except ImportError as e:
            raise GenerationError(
                "the vllm backend needs vLLM: pip install 'rag-curriculum[vllm]' on a machine with a CUDA GPU "
                f"(or use --backend transformers / openai) [{e}]") from e
        self.model_name = str(model)
        self.dtype = dtype
        self.quantization = quantization
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.show_progress = show_progress
        if call_size is not None:
            if call_size < 1:
                raise ValueError(f"call_size must be >= 1, got {call_size}")
            self.call_size = int(call_size)
        kwargs: dict[str, Any] = dict(
            model=self.model_name, tensor_parallel_size=self.tensor_parallel_size, dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
            trust_remote_code=trust_remote_code, enforce_eager=enforce_eager, seed=seed, **engine_kwargs)
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        if quantization is not None:
            kwargs["quantization"] = quantization
        log.info("vllm backend: loading %s (tensor parallel %d)", self.model_name, self.tensor_parallel_size)
        self.llm = LLM(**kwargs)
        self.max_model_len = self._engine_max_len(max_model_len)
        self._tokenizer = None

    def _engine_max_len(self, asked: int | None) -> int | None:
        for get in (lambda: self.llm.llm_engine.model_config.max_model_len,
                    lambda: self.llm.model_config.max_model_len):
            try:
                return int(get())
            except Exception:
                continue
        return asked

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_name, "dtype": self.dtype,
                "max_model_len": self.max_model_len, "quantization": self.quantization}

    def sampling_params(self, sampling: SamplingConfig, seed: int | None) -> Any:
        """The explicit ``SamplingParams`` of one prompt (never the model's defaults)."""
        from vllm import SamplingParams

        return SamplingParams(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                              max_tokens=sampling.max_tokens, seed=seed)

    def _too_long(self, prompts: Sequence[Messages]) -> list[int]:
        """Prompts over ``max_model_len`` tokens; only prompts whose text could be that long (more UTF-8 bytes
        than the limit, less some slack for the chat template) are tokenized."""
        if not self.max_model_len:
            return []
        limit = self.max_model_len
        # a token covers at least one UTF-8 byte (byte-level BPE, SentencePiece byte fallback), not one character:
        # a CJK character can be 3 tokens, so bound by bytes
        suspects = [i for i, p in enumerate(prompts)
                    if sum(_utf8_len(m.get("content") or "") for m in p) + _TEMPLATE_SLACK > limit]
        if not suspects:
            return []
        if self._tokenizer is None:
            self._tokenizer = self.llm.get_tokenizer()
        out = []
        for i in suspects:
            text = self._tokenizer.apply_chat_template(list(prompts[i]), add_generation_prompt=True, tokenize=False)
            if len(self._tokenizer(text, add_special_tokens=False)["input_ids"]) > limit:
                out.append(i)
        return out

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None) -> list[list[str]]:
        if not prompts:
            return []
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        too_long = self._too_long(prompts)
        if too_long:
            raise PromptTooLongError(too_long, limit=self.max_model_len)
        if seeds is None:
            params: Any = self.sampling_params(sampling, None)
        else:
            params = [self.sampling_params(sampling, int(s)) for s in seeds]
        outputs = self.llm.chat([list(p) for p in prompts], params, use_tqdm=self.show_progress)
        if len(outputs) != len(prompts):
            raise GenerationError(f"vLLM returned {len(outputs)} results for {len(prompts)} prompts")
        result = []
        for o in outputs:
            texts = [c.text for c in sorted(o.outputs, key=lambda c: c.index)]
            if len(texts) != sampling.n:
                raise GenerationError(f"vLLM returned {len(texts)} completions where n={sampling.n} were asked")
            result.append(texts)
        return result

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        del llm
        gc.collect()
        try:  # free the GPU for whatever runs next in this process
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:  # pragma: no cover - depends on the vLLM version
            pass
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # pragma: no cover
            pass
