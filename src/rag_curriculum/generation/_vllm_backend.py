"""The vLLM backend: offline generation with explicit ``SamplingParams``, the default of ``curriculum partition``.

- **The engine's own rendering, checked before generating.** Each prompt is rendered with the engine's tokenizer
  and chat template (``LLM.get_tokenizer()``; what ``LLM.chat`` does: the template as text, then tokens without
  added special tokens) and handed to ``LLM.generate`` as token ids, so the length check and the generation see
  the very same tokens. A prompt whose tokens plus ``max_tokens`` exceed ``max_model_len`` is refused
  (:class:`PromptTooLongError`, the others are still generated): vLLM itself rejects only prompts longer than the
  context and silently *caps* a completion that runs into it (``FINISHED_LENGTH_CAPPED``), which would give
  long prompts a smaller completion budget than short ones. Nothing is ever truncated.
- **Base models** (a tokenizer without a chat template): the completion-style prompt of
  :func:`rag_curriculum.prompts.completion_prompt`, its response prefix returned as the start of each completion and
  its template's stop strings added to the call's (recorded as ``prompt_style``). A ``.gguf`` model file is read from
  the folder it is converted into once (:mod:`rag_curriculum.models`).
- Sampling is always explicit: ``SamplingParams(n, temperature, top_p, max_tokens, seed)`` per prompt, so the
  model's ``generation_config.json`` defaults (which vLLM applies only when no params are given) never apply.
- One ``LLM.generate`` call gets many prompts (the runner sends ``call_size`` prompts at a time): the engine
  schedules them together and its prefix cache (on, explicitly) shares the system prompt across prompts and the
  whole prompt across a question's ``n`` samples.
- ``seeds[i]`` seeds prompt ``i`` (vLLM's per-request generator), so a question's samples do not depend on what it
  is batched with. Per-request generators cost some sampler time; pass ``seeds=None`` (``--no-question-seeds``)
  to use the engine's generator instead, faster but not reproducible across runs.
- **Per-platform defaults** (:func:`platform_defaults`), recorded by :meth:`describe`: on vLLM's CPU build,
  chunked prefill is off, because its CPU sampler cannot advance a seeded per-request generator across prefill
  chunks (``RuntimeError: CPU Generator does not use offset``); on GPUs vLLM's own default (on) is kept. An explicit
  ``enable_chunked_prefill`` wins, except the CPU combination that would crash, which is refused up front.
- ``in_process_engine=True`` (``--backend-arg in_process_engine=true``; one device): the engine runs in the calling
  process (vLLM's ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` while it starts; a value you set yourself wins), which saves
  two processes' imports at each start, half a small CPU run. One in-process engine a process: a second made while
  the first lives runs in vLLM's own processes.
- Several GPUs: ``tensor_parallel_size`` splits one model over GPUs; for data parallelism run one process per GPU
  on its own shard of the questions (``--num-shards``/``--shard-index`` with ``CUDA_VISIBLE_DEVICES``).

vLLM is imported when the backend is built, never when this module is imported. A script that builds the
backend must run its code under ``if __name__ == "__main__":`` (vLLM spawns its engine core as a process).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import time
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

from ..errors import ConfigError, GenerationError, PromptTooLongError
from ..models import resolve_model
from ..prompts import completion_style
from ._base import (
    Messages,
    RenderedPrompt,
    SamplingConfig,
    finish_completion,
    has_chat_template,
    progress_listened,
    render_prompt,
    report_progress,
)

log = logging.getLogger(__name__)

#: Engine options whose resolved values :meth:`VLLMBackend.describe` records (they can change the numerics).
_ENGINE_FIELDS = (("scheduler_config", "enable_chunked_prefill"), ("scheduler_config", "max_num_batched_tokens"),
                  ("cache_config", "enable_prefix_caching"), ("cache_config", "cache_dtype"),
                  ("model_config", "enforce_eager"), ("parallel_config", "tensor_parallel_size"))


def platform_defaults(platform: Any = None, *, cpu_flags: set[str] | None = None) -> dict[str, Any]:
    """The engine options the toolkit sets on this platform unless the user sets them (``platform``: vLLM's
    ``current_platform``, imported when not given; ``cpu_flags``: the CPU's feature flags, read from
    ``/proc/cpuinfo`` when not given).

    >>> class Cpu:
    ...     def is_cpu(self): return True
    >>> platform_defaults(Cpu(), cpu_flags={"avx2", "fma"})
    {'enable_chunked_prefill': False, 'dtype': 'float32'}
    >>> platform_defaults(Cpu(), cpu_flags={"avx512f", "avx512_bf16"})
    {'enable_chunked_prefill': False}
    """
    if platform is None:
        from vllm.platforms import current_platform as platform
    if _is_cpu(platform):
        out: dict[str, Any] = {"enable_chunked_prefill": False}
        flags = cpu_flags if cpu_flags is not None else _cpu_flags()
        if flags and not flags & _BF16_FLAGS:  # vLLM's "auto" would run a float32 model in bf16, emulated
            out["dtype"] = "float32"
        return out
    return {}


#: vLLM's switch between an engine core in its own process (its default) and one in the caller's process
#: (``in_process_engine=True``, one device): the engine core's and its worker's processes each import torch and vLLM
#: again, about 60 of a CPU partition run's 135 s on 2 cores (the same outputs, byte for byte).
_MULTIPROCESSING_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"

#: The backends of this process whose engine runs in process. One at a time: two engines in one process share vLLM's
#: process-wide parallel state, and the second one's teardown leaves the first without it ("pipeline model parallel
#: group is not initialized"), so while one lives, the next runs in vLLM's own processes. An in-process engine is
#: for a process that makes one engine (a ``curriculum`` command), hence an option, not the default.
_IN_PROCESS: weakref.WeakSet = weakref.WeakSet()


def _read_vllm_environment_afresh() -> None:
    """Empty vLLM's cache of its environment variables, so the next engine reads them as they are now.

    An engine core started in this process turns the cache on (``vllm.envs.enable_envs_cache``) while
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set; cached, that value made every later engine of the process an
    in-process one too, sharing the parallel state the comment above ``_IN_PROCESS`` warns about. The cache stays on
    when it was (emptied, it fills again from the environment)."""
    try:
        from vllm import envs
    except ImportError:  # pragma: no cover - a vLLM build without the module
        return
    cached = getattr(envs, "_is_envs_cache_enabled", lambda: False)()
    disable, enable = getattr(envs, "disable_envs_cache", None), getattr(envs, "enable_envs_cache", None)
    if cached and callable(disable) and callable(enable):
        disable()
        enable()


#: CPU feature flags of native bfloat16 arithmetic (x86: AVX512-BF16, AMX; Arm: BF16). Without one, vLLM's CPU
#: build still runs a float32 checkpoint in bfloat16 under ``dtype="auto"``, emulated: Gemma 3 270M generated
#: nothing in 16 minutes where float32 served the same 160 completions in about a minute (2-core AMD EPYC, AVX2).
_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def _cpu_flags() -> set[str]:
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:  # not Linux: vLLM's own choice stands
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return set()


def _is_cpu(platform: Any) -> bool:
    try:
        return bool(platform.is_cpu())
    except Exception:  # pragma: no cover - an unusual platform object
        return str(getattr(platform, "device_type", "")) == "cpu"


class _Reported:
    """The progress bars vLLM's ``LLM.generate(use_tqdm=factory)`` makes, drawing nothing. The one over the engine's
    steps (``update(n)`` per finished request, ``n`` its completions; ``format_dict["elapsed"]`` and ``postfix`` for
    its speed line) sends each finished request to :func:`~rag_curriculum.generation._base.report_progress`, which
    the runner's bar shows; one wrapped around an iterable (vLLM's ``maybe_tqdm``: rendering the prompts) only
    passes its items through."""

    def __init__(self, source: Any, iterable: Any = None, *args: Any, total: int | None = None,
                 **kwargs: Any) -> None:
        self.source = source
        self.iterable = iterable
        self.total = total
        self.n = 0
        self.postfix: Any = None
        self._start = time.perf_counter()

    @property
    def format_dict(self) -> dict[str, Any]:
        return {"n": self.n, "total": self.total, "elapsed": max(time.perf_counter() - self._start, 1e-6)}

    def __iter__(self) -> Any:
        return iter(self.iterable if self.iterable is not None else ())

    def __len__(self) -> int:
        return len(self.iterable)

    def update(self, n: int = 1) -> None:
        self.n += n
        report_progress(self.source, 1, n)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class VLLMBackend:
    """A ``vllm.LLM`` built once; :meth:`generate` renders the prompts and calls ``LLM.generate`` on all of them."""

    name = "vllm"
    output_options = ("dtype", "max_model_len", "quantization")
    call_size = 2048

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, max_model_len: int | None = None,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.9, enable_prefix_caching: bool = True,
                 trust_remote_code: bool = False, enforce_eager: bool = False, quantization: str | None = None,
                 seed: int = 0, call_size: int | None = None, show_progress: bool = False,
                 enable_chunked_prefill: bool | None = None, in_process_engine: bool = False,
                 **engine_kwargs: Any) -> None:
        try:
            import vllm
            from vllm import LLM
        except ImportError as e:
            raise GenerationError(
                "the vllm backend needs vLLM: pip install 'rag-curriculum\\[vllm]' on a CUDA machine, or vLLM's CPU "
                f"build (see docs/partition.md, 'Without a GPU'); or use --backend transformers / openai [{e}]") from e
        self.model_name = str(model)
        self.resolved = resolve_model(self.model_name)
        self.dtype = dtype
        self.quantization = quantization
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.show_progress = show_progress
        self.vllm_version = getattr(vllm, "__version__", "?")
        if call_size is not None:
            if call_size < 1:
                raise ConfigError(f"call_size must be >= 1, got {call_size}")
            self.call_size = int(call_size)
        from vllm.platforms import current_platform

        self.platform = str(getattr(current_platform, "device_type", "") or "?")
        self.on_cpu = _is_cpu(current_platform)
        defaults = platform_defaults(current_platform)
        in_process = bool(in_process_engine) and self.tensor_parallel_size == 1 and _MULTIPROCESSING_ENV not in \
            os.environ
        if in_process and len(_IN_PROCESS):
            log.warning("vllm backend: another engine of this process runs in process; %s runs in vLLM's own "
                        "processes", self.model_name)
            in_process = False
        self.in_process_engine = in_process
        self.chosen = {k: v for k, v in defaults.items() if (k != "enable_chunked_prefill"
                       or enable_chunked_prefill is None) and (k != "dtype" or dtype == "auto")}
        if enable_chunked_prefill is None:
            enable_chunked_prefill = defaults.get("enable_chunked_prefill")
        if dtype == "auto" and "dtype" in defaults:
            dtype = defaults["dtype"]
        self.dtype = dtype
        kwargs: dict[str, Any] = dict(
            model=self.resolved.path, tensor_parallel_size=self.tensor_parallel_size, dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
            trust_remote_code=trust_remote_code, enforce_eager=enforce_eager, seed=seed, **engine_kwargs)
        if enable_chunked_prefill is not None:
            kwargs["enable_chunked_prefill"] = bool(enable_chunked_prefill)
        if max_model_len is not None:
            kwargs["max_model_len"] = int(max_model_len)
        if quantization is not None:
            kwargs["quantization"] = quantization
        self._chunked_prefill_asked = enable_chunked_prefill
        log.info("vllm backend: loading %s on %s (tensor parallel %d%s%s)", self.model_name, self.platform,
                 self.tensor_parallel_size, "".join(f", {k}={v}" for k, v in self.chosen.items()),
                 ", in process" if in_process else "")
        _read_vllm_environment_afresh()
        if in_process:  # read by vLLM when the engine is made; the process's own setting is put back after
            os.environ[_MULTIPROCESSING_ENV] = "0"
            try:
                self.llm = LLM(**kwargs)
            finally:
                os.environ.pop(_MULTIPROCESSING_ENV, None)
                _read_vllm_environment_afresh()
            _IN_PROCESS.add(self)
        else:
            self.llm = LLM(**kwargs)
        self.max_model_len = self._engine_max_len(max_model_len)
        self.engine = self._engine_settings()
        self._tokenizer: Any = None
        self._template_sha: str | None = None

    def _engine_max_len(self, asked: int | None) -> int | None:
        for get in (lambda: self.llm.llm_engine.model_config.max_model_len,
                    lambda: self.llm.model_config.max_model_len):
            try:
                return int(get())
            except Exception:
                continue
        return asked

    def _engine_settings(self) -> dict[str, Any]:
        """The engine options as the engine resolved them (not as asked)."""
        out: dict[str, Any] = {}
        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)
        for section, field in _ENGINE_FIELDS:
            value = getattr(getattr(config, section, None), field, None)
            if value is not None:
                out[field] = value if isinstance(value, (bool, int, float)) else str(value)
        return out

    @property
    def tokenizer(self) -> Any:
        """The engine's own tokenizer (the one ``LLM.chat`` renders with)."""
        if self._tokenizer is None:
            self._tokenizer = self.llm.get_tokenizer()
        return self._tokenizer

    def chat_template_sha256(self) -> str | None:
        if self._template_sha is None:
            template = getattr(self.tokenizer, "chat_template", None)
            if isinstance(template, str):
                self._template_sha = hashlib.sha256(template.encode("utf-8")).hexdigest()
        return self._template_sha

    def describe(self) -> dict[str, Any]:
        """What the completions depend on, as resolved here: the model, dtype, context, the platform, the
        engine's resolved options (with the per-platform choices in ``platform_defaults``), the chat template's
        digest and vLLM's version."""
        out = {"backend": self.name, "model": self.model_name, "dtype": self.dtype,
               "max_model_len": self.max_model_len, "quantization": self.quantization,
               "vllm_version": self.vllm_version, "platform": self.platform, "engine": dict(self.engine),
               "platform_defaults": dict(self.chosen), "chat_template_sha256": self.chat_template_sha256()}
        if not has_chat_template(self.tokenizer):
            out["prompt_style"] = completion_style()
        if self.resolved.converted:
            out["model_file"] = self.resolved.record()
        return out

    def sampling_params(self, sampling: SamplingConfig, seed: int | None, stop: Sequence[str] | None = None) -> Any:
        """The explicit ``SamplingParams`` of one prompt (never the model's defaults); ``stop`` strings end a
        completion and are kept in it (``include_stop_str_in_output``)."""
        from vllm import SamplingParams

        extra: dict[str, Any] = {"stop": list(stop), "include_stop_str_in_output": True} if stop else {}
        return SamplingParams(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                              max_tokens=sampling.max_tokens, seed=seed, **extra)

    def rendered(self, prompts: Sequence[Messages]) -> list[RenderedPrompt]:
        """The prompts as the engine generates from them (:func:`~rag_curriculum.generation._base.render_prompt`
        with the engine's own tokenizer): the chat template with the generation prompt (a conversation ending with
        an assistant message continued, as ``LLM.chat(continue_final_message=True)`` does), tokenized without added
        special tokens, as ``LLM.chat`` does; or a base model's completion-style text and response prefix."""
        tok = self.tokenizer
        return [render_prompt(tok, p) for p in prompts]

    def render(self, prompts: Sequence[Messages]) -> list[list[int]]:
        """The token ids the engine generates from (:meth:`rendered`)."""
        return [r.ids for r in self.rendered(prompts)]

    def too_long(self, token_ids: Sequence[Sequence[int]], max_tokens: int) -> list[int]:
        """Positions whose prompt plus ``max_tokens`` do not fit ``max_model_len``."""
        if not self.max_model_len:
            return []
        return [i for i, t in enumerate(token_ids) if len(t) + max_tokens > self.max_model_len]

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None, stop: Sequence[str] | None = None) -> list[list[str]]:
        if not prompts:
            return []
        if seeds is not None and len(seeds) != len(prompts):
            raise ConfigError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        if seeds is not None and self.on_cpu and self.engine.get("enable_chunked_prefill"):
            raise GenerationError(
                "vLLM's CPU build cannot use per-question seeds with chunked prefill (its CPU generator has no "
                "offset: 'CPU Generator does not use offset'); leave enable_chunked_prefill unset (the toolkit "
                "turns it off on CPU) or pass --no-question-seeds")
        rendered = self.rendered(prompts)
        token_ids = [r.ids for r in rendered]
        bad = self.too_long(token_ids, sampling.max_tokens)
        keep = [i for i in range(len(prompts)) if i not in set(bad)]
        results: list[list[str] | None] = [None] * len(prompts)
        if keep:
            own = [[*(stop or ()), *(s for s in rendered[i].stop if s not in (stop or ()))] for i in keep]
            if seeds is None and all(o == own[0] for o in own):
                params: Any = self.sampling_params(sampling, None, own[0])
            else:
                params = [self.sampling_params(sampling, None if seeds is None else int(seeds[i]), o)
                          for i, o in zip(keep, own, strict=True)]
            # vLLM's own tqdm bar with show_progress; else, while the runner's bar is on, each finished request
            # is reported to it (vLLM's use_tqdm takes a bar factory; _Reported draws nothing)
            use_tqdm: Any = self.show_progress or (partial(_Reported, self) if progress_listened(self) else False)
            outputs = self.llm.generate([{"prompt_token_ids": token_ids[i]} for i in keep], params,
                                        use_tqdm=use_tqdm)
            if len(outputs) != len(keep):
                raise GenerationError(f"vLLM returned {len(outputs)} results for {len(keep)} prompts")
            for i, o in zip(keep, outputs, strict=True):
                texts = [finish_completion(c.text, rendered[i], stop)
                         for c in sorted(o.outputs, key=lambda c: c.index)]
                if len(texts) != sampling.n:
                    raise GenerationError(f"vLLM returned {len(texts)} completions where n={sampling.n} were asked")
                results[i] = texts
        if bad:
            longest = max(len(token_ids[i]) for i in bad)
            raise PromptTooLongError(
                bad, limit=self.max_model_len, results=results,
                detail=f"prompt + max_tokens ({sampling.max_tokens}) > max_model_len; the longest prompt has "
                       f"{longest} tokens (raise --max-model-len to include them)")
        return results  # type: ignore[return-value]

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        _IN_PROCESS.discard(self)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None),
                                                                    "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:  # pragma: no cover - depends on the vLLM version
                    pass
        del llm
        gc.collect()
        if not _IN_PROCESS:  # else the process's parallel groups are a living in-process engine's: left to it
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
