"""The OpenAI-compatible backend: a shared server such as ``vllm serve``, reached over HTTP.

- One ``/v1/chat/completions`` request per prompt with ``n`` samples (``max_n_per_request`` splits ``n`` for
  servers that cap it), explicit ``temperature``, ``top_p``, ``max_tokens`` and, when given, a per-prompt
  ``seed`` (vLLM's server honours it, seeding sample ``j`` with ``seed + j``; a split request's parts start at
  ``seed + samples so far``, so they draw the samples of one unsplit request).
- A server fills the sampling fields a request leaves out from the model's ``generation_config.json`` (vLLM does:
  Qwen2.5-Instruct's top-k 20 and repetition penalty 1.05). So, by default, the requests also carry
  ``top_k=-1, min_p=0, repetition_penalty=1`` (vLLM / SGLang extensions); ``disable_server_defaults=False``
  leaves them out, for servers that reject unknown fields.
- ``concurrency`` requests in flight at once (threads); :meth:`generate_iter` yields each prompt's completions
  as soon as its request finishes, so the runner can flush chunks while later requests are still running.
- Retries with exponential backoff and jitter (honouring ``Retry-After``) on connection errors, timeouts,
  HTTP 408/409/429 and 5xx; other errors fail at once with what the server said. A 400 saying the prompt exceeds
  the context length marks that prompt as too long (:class:`PromptTooLongError`) instead of failing the run.

``base_url`` defaults to ``$OPENAI_BASE_URL`` or ``http://127.0.0.1:8000/v1`` (``vllm serve``'s default);
``api_key`` to ``$OPENAI_API_KEY`` or ``"EMPTY"``. The ``openai`` package is imported when the backend is built.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from .base import GenerationError, Messages, PromptTooLongError, SamplingConfig

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
_CONTEXT_MARKERS = ("context length", "context_length", "maximum context", "too long", "max_model_len",
                    "longer than the maximum")
_RETRY_STATUS = {408, 409, 429}
_SEED_RANGE = 1 << 63  # vLLM's server accepts int64 seeds
#: Sampling extensions sent so that a server's generation_config defaults cannot change the samples.
_NEUTRAL = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
_jitter = random.Random()  # timing only; never affects completions


class _PromptTooLong(Exception):
    pass


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server, ``concurrency`` requests at a time."""

    name = "openai"
    output_options = ("max_n_per_request",)

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 32, max_retries: int = 6, timeout: float = 600.0, backoff: float = 1.0,
                 max_backoff: float = 60.0, max_n_per_request: int | None = None,
                 disable_server_defaults: bool = True, extra_body: dict[str, Any] | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_n_per_request is not None and max_n_per_request < 1:
            raise ValueError(f"max_n_per_request must be >= 1, got {max_n_per_request}")
        try:
            import openai
        except ImportError as e:
            raise GenerationError("the openai backend needs the openai package: pip install "
                                  f"'rag-curriculum[openai]' [{e}]") from e
        self._openai = openai
        self.model_name = str(model)
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.concurrency = int(concurrency)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_n_per_request = max_n_per_request
        self.extra_body = {**(_NEUTRAL if disable_server_defaults else {}), **(extra_body or {})}
        self.client = openai.OpenAI(base_url=self.base_url,
                                    api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                    timeout=timeout, max_retries=0)  # retries are ours, with backoff
        self.retries = 0  # retried requests so far (for reports and tests)
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_name, "max_n_per_request": self.max_n_per_request}

    # -- one request ---------------------------------------------------------------------------------------------
    def _delay(self, attempt: int, error: Exception) -> float:
        response = getattr(error, "response", None)
        retry_after = None
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after"))
            except (TypeError, ValueError):
                retry_after = None
        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        wait_s = base * (0.5 + 0.5 * _jitter.random())
        return max(wait_s, min(retry_after, self.max_backoff)) if retry_after is not None else wait_s

    def _request(self, messages: Messages, sampling: SamplingConfig, n: int, seed: int | None) -> list[str]:
        openai = self._openai
        kwargs: dict[str, Any] = dict(model=self.model_name, messages=list(messages), n=n,
                                      temperature=sampling.temperature, top_p=sampling.top_p,
                                      max_tokens=sampling.max_tokens)
        if seed is not None:
            kwargs["seed"] = int(seed)
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        attempt = 0
        while True:
            try:
                resp = self.client.chat.completions.create(**kwargs)
            except openai.BadRequestError as e:
                text = str(e).lower()
                if any(m in text for m in _CONTEXT_MARKERS):
                    raise _PromptTooLong(str(e)) from e
                raise GenerationError(f"{self.base_url}: the server refused the request: {e}") from e
            except (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                retryable = status is None or status in _RETRY_STATUS or status >= 500
                if not retryable:
                    hint = {401: " (check --api-key / $OPENAI_API_KEY)",
                            404: " (check --base-url and that --model is the served model's name)"}.get(status, "")
                    raise GenerationError(f"{self.base_url}: HTTP {status}: {e}{hint}") from e
                if attempt >= self.max_retries:
                    raise GenerationError(f"{self.base_url}: request failed after {attempt + 1} attempt(s): {e}; "
                                          "is the server up? (vllm serve MODEL --port 8000)") from e
                delay = self._delay(attempt, e)
                log.warning("%s: %s; retrying in %.1fs (attempt %d of %d)", self.base_url,
                            f"HTTP {status}" if status else type(e).__name__, delay, attempt + 2,
                            self.max_retries + 1)
                with self._lock:
                    self.retries += 1
                time.sleep(delay)
                attempt += 1
                continue
            choices = sorted(resp.choices, key=lambda c: c.index)
            if len(choices) != n:
                raise GenerationError(f"{self.base_url}: asked for n={n} completions, got {len(choices)}; if the "
                                      "server caps n, pass max_n_per_request (--max-n-per-request)")
            return [c.message.content or "" for c in choices]

    def _prompt(self, messages: Messages, sampling: SamplingConfig, seed: int | None) -> list[str]:
        per = self.max_n_per_request or sampling.n
        if sampling.n <= per:
            return self._request(messages, sampling, sampling.n, seed)
        out: list[str] = []
        while len(out) < sampling.n:
            m = min(per, sampling.n - len(out))
            # vLLM seeds the j-th sample of a request with seed + j: a part starting at seed + (samples so far)
            # draws exactly the samples one unsplit request would (seed + 1 per part would repeat samples)
            part_seed = None if seed is None else (seed + len(out)) % _SEED_RANGE
            out += self._request(messages, sampling, m, part_seed)
        return out

    def _one(self, messages: Messages, sampling: SamplingConfig, seed: int | None) -> list[str] | None:
        try:
            return self._prompt(messages, sampling, seed)
        except _PromptTooLong as e:
            log.warning("a prompt is longer than the server's context; skipped (%s)", str(e)[:200])
            return None

    # -- many prompts ----------------------------------------------------------------------------------------------
    def generate_iter(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                      seeds: Sequence[int] | None = None) -> Iterator[tuple[int, list[str] | None]]:
        """``(index, completions)`` as requests finish (any order); None for a prompt over the context length.
        At most ``concurrency`` requests run at once; prompts are submitted in order."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai-backend")
        pending: dict[Future, int] = {}
        nxt = 0
        try:
            while nxt < len(prompts) or pending:
                while nxt < len(prompts) and len(pending) < self.concurrency:
                    seed = None if seeds is None else int(seeds[nxt])
                    pending[pool.submit(self._one, prompts[nxt], sampling, seed)] = nxt
                    nxt += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=pending.__getitem__):
                    i = pending.pop(f)
                    yield i, f.result()
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=False, cancel_futures=True)

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None) -> list[list[str]]:
        results: list[list[str] | None] = [None] * len(prompts)
        too_long = []
        for i, comps in self.generate_iter(prompts, sampling, seeds=seeds):
            if comps is None:
                too_long.append(i)
            results[i] = comps
        if too_long:
            raise PromptTooLongError(too_long, results=results)
        return [r if r is not None else [] for r in results]

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # pragma: no cover
            pass
