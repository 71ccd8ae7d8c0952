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
- Retries (``tenacity``: exponential backoff with jitter, honouring ``Retry-After``, abandoned at once when the
  run stops) on connection errors, timeouts, HTTP 408/409/429 and 5xx, each one logged; other errors fail at once with what the server said (the message or ``detail`` of
  its response body) and the option that fixes it (:data:`HINTS`). A 400 saying the prompt exceeds the context
  length marks that prompt as too long (:class:`PromptTooLongError`) instead of failing the run.
- Servers tested for real (tests/generation/test_openai_servers.py, tests/tier_vllm/test_vllm_serve.py): ``vllm serve`` works
  with the defaults. ``transformers serve`` rejects ``top_k``/``min_p``/``repetition_penalty``
  (``disable_server_defaults=False``), returns one choice whatever ``n`` (``max_n_per_request=1``) and decodes
  greedily unless the request turns sampling on: ``extra_body={"generation_config": "{\"do_sample\": true,
  \"top_k\": 0}"}`` (a JSON string: it replaces the model's generation config; ``top_k`` 0 turns off the
  global default top-k 50). The runner stops a run whose samples are identical (:class:`IdenticalSamplesError`).

``base_url`` defaults to ``$OPENAI_BASE_URL`` or ``http://127.0.0.1:8000/v1`` (``vllm serve``'s default);
``api_key`` to ``$OPENAI_API_KEY`` or ``"EMPTY"``. The ``openai`` package is imported when the backend is built.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import re
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from ..errors import ConfigError, GenerationError, PromptTooLongError
from ._base import (
    Messages,
    SamplingConfig,
    backend_identity,
    report_progress,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
_CONTEXT_MARKERS = ("context length", "context_length", "maximum context", "too long", "max_model_len",
                    "longer than the maximum")
_RETRY_STATUS = {408, 409, 429}
_SEED_RANGE = 1 << 63  # vLLM's server accepts int64 seeds
#: Sampling extensions sent so that a server's generation_config defaults cannot change the samples.
_NEUTRAL = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}
_jitter = random.Random()  # timing only; never affects completions
#: ``extra_body`` that turns sampling on in ``transformers serve`` (it decodes greedily otherwise).
TRANSFORMERS_SERVE_SAMPLING = {"generation_config": json.dumps({"do_sample": True, "top_k": 0})}

#: What to do about each kind of refusal; every ``--flag`` named is a real option of `curriculum partition` and
#: `curriculum eval`, every ``--backend-arg KEY=`` a real option of :class:`OpenAIBackend` (tested).
HINTS: dict[str, str] = {
    "server_defaults": "the server rejects the sampling fields sent so that its generation-config defaults "
                       "cannot change the samples (top_k, min_p, repetition_penalty): pass --backend-arg "
                       "disable_server_defaults=false",
    "extra_body": "the server rejects a field given in --backend-arg extra_body=...: leave it out",
    "n": "the server ignores or caps n (samples per request): pass --backend-arg max_n_per_request=1 (or the "
         "server's cap; the parts of a split request are seeded to draw the samples one request would)",
    "fields": "if it names a field the toolkit sends: top_k / min_p / repetition_penalty -> --backend-arg "
              "disable_server_defaults=false; n -> --backend-arg max_n_per_request=1; a field of --backend-arg "
              "extra_body=... -> leave it out",
    "auth": "check --api-key (or $OPENAI_API_KEY)",
    "not_found": "check --base-url (the server's URL ending in /v1) and that --model is the model name the "
                 "server serves (GET /v1/models lists it)",
    "model": "check that --model is the model name the server serves (GET /v1/models lists it)",
    "unreachable": "is the server up at --base-url? (`vllm serve MODEL` listens on 127.0.0.1:8000 by default); "
                   "--backend-arg max_retries=N and --backend-arg timeout=SECONDS wait longer",
    "sampling": "the server most likely decodes greedily: vllm serve and SGLang honour temperature, but "
                "`transformers serve` samples only when the request turns sampling on: pass --backend-arg "
                f"'extra_body={json.dumps(TRANSFORMERS_SERVE_SAMPLING)}' (with --backend-arg "
                "disable_server_defaults=false --backend-arg max_n_per_request=1 for that server)",
}
_NEUTRAL_RE = re.compile(r"\b(top_k|min_p|repetition_penalty)\b")
_FIELDS_RE = re.compile(r"unexpected|unknown|unrecogni[sz]ed|extra (inputs|fields)|not permitted|"
                        r"extra_forbidden|not allowed|unsupported", re.IGNORECASE)
_N_RE = re.compile(r"(?<![\w-])n(?![\w-])")  # the field n, as a word of its own


def server_detail(error: Exception, limit: int = 600) -> str:
    """What the server said about a refused request: its body's ``message`` (OpenAI, vLLM), ``detail``
    (FastAPI: ``transformers serve``), validation errors (``loc``: ``msg``), or the raw text.

    >>> class E(Exception): body = {"detail": "Unexpected fields in the request: {'top_k'}"}
    >>> server_detail(E())
    "Unexpected fields in the request: {'top_k'}"
    """

    def text(b: Any) -> str:
        if b is None:
            return ""
        if isinstance(b, str):
            return b
        if isinstance(b, dict):
            if "msg" in b and "loc" in b:  # pydantic / FastAPI validation error
                loc = ".".join(str(x) for x in b.get("loc") or [])
                return f"{loc}: {b['msg']}" if loc else str(b["msg"])
            for key in ("message", "detail", "error", "msg"):
                if b.get(key):
                    return text(b[key])
            return json.dumps(b, default=str)
        if isinstance(b, list):
            return "; ".join(t for t in (text(x) for x in b) if t)
        return str(b)

    detail = text(getattr(error, "body", None)).strip()
    if not detail:
        response = getattr(error, "response", None)
        try:
            detail = (response.text or "").strip() if response is not None else ""
        except Exception:  # pragma: no cover - a streamed body that cannot be read
            detail = ""
    if not detail:
        detail = str(error)
    return detail if len(detail) <= limit else detail[:limit] + " ..."


class _PromptTooLong(Exception):
    pass


class _Aborted(Exception):
    """The call this request belonged to was abandoned (an error elsewhere, the backend closed): stop quietly."""


class _Workers:
    """``n`` daemon threads running submitted calls (a ThreadPoolExecutor's workers are joined at interpreter
    exit, so a request stuck on a dead server would hold the process for up to ``timeout``; these never do)."""

    def __init__(self, n: int) -> None:
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"openai-backend-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
                future.set_exception(e)

    def submit(self, fn: Any, *args: Any) -> Future:
        future: Future = Future()
        self._tasks.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


def _check_base_url(url: str) -> None:
    """Refuse a base URL no request can reach (a port that is not a number: a password holding ``#``, ``/`` or
    ``?`` ends the URL's authority there), naming it with its secrets masked: not a traceback from the client."""
    from urllib.parse import urlsplit

    from .._plumbing import mask_secrets

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # the error's text would echo the port, part of a password perhaps
        raise ConfigError(f"--base-url {mask_secrets(url)}: its port is not a number in 1..65535",
                          hint="give e.g. http://127.0.0.1:8000/v1; a password holding '#', '/' or '?' must be "
                               "written percent-encoded (%23, %2F, %3F)") from None
    if not parts.hostname or port == 0:
        raise ConfigError(f"--base-url {mask_secrets(url)}: " + ("port 0 is not a port a server listens on" if
                          parts.hostname else "the URL names no host"), hint="give e.g. http://127.0.0.1:8000/v1")


class OpenAIBackend:
    """Chat completions from an OpenAI-compatible server, ``concurrency`` requests at a time."""

    name = "openai"
    sampling_hint = HINTS["sampling"]

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 32, max_retries: int = 6, timeout: float = 600.0, backoff: float = 1.0,
                 max_backoff: float = 60.0, max_n_per_request: int | None = None,
                 disable_server_defaults: bool = True, extra_body: dict[str, Any] | None = None) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        if max_n_per_request is not None and max_n_per_request < 1:
            raise ConfigError(f"max_n_per_request must be >= 1, got {max_n_per_request}")
        try:
            import openai
            import tenacity  # noqa: F401  (the retries; installed with the openai extra)
        except ImportError as e:
            raise GenerationError("the openai backend needs the openai package: pip install "
                                  f"'rag-curriculum[openai]' [{e}]") from e
        self._openai = openai
        self.model_name = str(model)
        self._options = {"max_n_per_request": max_n_per_request, "disable_server_defaults": disable_server_defaults,
                         "extra_body": extra_body}  # what can change completions (see describe)
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        _check_base_url(self.base_url)
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
        self._in_flight = 0  # HTTP requests under way (close() waits for them before closing the client)
        self._closed = threading.Event()

    def describe(self) -> dict[str, Any]:
        """The options that can change completions (``extra_body``, ``disable_server_defaults``,
        ``max_n_per_request``), as :func:`~rag_curriculum.generation._base.backend_identity` records them."""
        return backend_identity(type(self), self.model_name, self._options)

    def _refusal(self, status: int | None, error: Exception) -> str:
        """The message of a request the server refused: the status, the server's own words, what to do."""
        detail = server_detail(error)
        hint = None
        if status in (401, 403):
            hint = HINTS["auth"]
        elif status == 404:
            hint = HINTS["not_found"]
        elif status is not None and 400 <= status < 500:
            extra = set(self.extra_body) - set(_NEUTRAL) if self.extra_body else set()
            fields = _FIELDS_RE.search(detail)
            if fields and _NEUTRAL_RE.search(detail) and self.extra_body.keys() & _NEUTRAL.keys():
                hint = HINTS["server_defaults"]
            elif fields and any(re.search(rf"\b{re.escape(k)}\b", detail) for k in extra):
                hint = HINTS["extra_body"]
            elif _N_RE.search(detail):
                hint = HINTS["n"]
            elif "model" in detail.lower():
                hint = HINTS["model"]
            else:
                hint = HINTS["fields"]
        return f"{self.base_url}: HTTP {status}: {detail}" + (f" (hint: {hint})" if hint else "")

    # -- one request ---------------------------------------------------------------------------------------------
    def _delay(self, attempt: int, error: BaseException | None) -> float:
        """tenacity's exponential backoff with jitter (``backoff`` x 2^attempt, at most ``max_backoff``, drawn in
        its upper half), or the server's ``Retry-After`` when it asks for longer."""
        from tenacity import wait_random

        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        wait_s = wait_random(base / 2, base)(None)  # type: ignore[arg-type]  # (tenacity's wait of a bare draw)
        response = getattr(error, "response", None)
        retry_after = None
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after"))
            except (TypeError, ValueError):
                retry_after = None
        return max(wait_s, min(retry_after, self.max_backoff)) if retry_after is not None else wait_s

    def _create(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            self._in_flight += 1
        try:
            return self.client.chat.completions.create(**kwargs)
        finally:
            with self._lock:
                self._in_flight -= 1
                last = self._in_flight == 0 and self._closed.is_set()
            if last:
                self._close_client()

    def _request(self, messages: Messages, sampling: SamplingConfig, n: int, seed: int | None,
                 stop: threading.Event | None = None, stop_strings: Sequence[str] | None = None) -> list[str]:
        stop = stop or threading.Event()
        kwargs: dict[str, Any] = dict(model=self.model_name, messages=list(messages), n=n,
                                      temperature=sampling.temperature, top_p=sampling.top_p,
                                      max_tokens=sampling.max_tokens)
        if seed is not None:
            kwargs["seed"] = int(seed)
        extra = dict(self.extra_body or {})
        if messages and messages[-1].get("role") == "assistant":  # continue it (vLLM's chat-completions options)
            extra.update(continue_final_message=True, add_generation_prompt=False)
        if stop_strings:
            kwargs["stop"] = list(stop_strings)
        if extra:
            kwargs["extra_body"] = extra
        resp = self._with_retries(kwargs, stop)
        choices = sorted(resp.choices, key=lambda c: c.index)
        if len(choices) != n:
            raise GenerationError(f"{self.base_url}: asked for n={n} completions, got {len(choices)} (hint: "
                                  f"{HINTS['n']})")
        texts = [c.message.content or "" for c in choices]
        if stop_strings:
            texts = [_restore_stop(t, c, stop_strings) for t, c in zip(texts, choices, strict=True)]
        return texts

    def _with_retries(self, kwargs: dict[str, Any], stop: threading.Event) -> Any:
        """One chat-completions request, retried by ``tenacity`` on what may pass (connection errors, timeouts,
        HTTP 408/409/429 and 5xx); a refusal fails at once with the server's words and the option that fixes it
        (:data:`HINTS`), a prompt over the context length is marked too long. A stopped run abandons it."""
        import tenacity

        openai = self._openai

        def retryable(e: BaseException) -> bool:
            if not isinstance(e, (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError)):
                return False
            if isinstance(e, openai.BadRequestError):
                return False
            status = getattr(e, "status_code", None)
            return status is None or status in _RETRY_STATUS or status >= 500

        def wait(state: tenacity.RetryCallState) -> float:
            return self._delay(state.attempt_number - 1, state.outcome.exception() if state.outcome else None)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            e = state.outcome.exception() if state.outcome else None
            status = getattr(e, "status_code", None)
            log.warning("%s: %s; retrying in %.1fs (attempt %d of %d)", self.base_url,
                        f"HTTP {status}" if status else type(e).__name__, state.upcoming_sleep,
                        state.attempt_number + 1, self.max_retries + 1)
            with self._lock:
                self.retries += 1

        def sleep(seconds: float) -> None:
            if stop.wait(seconds) or self._closed.is_set():
                raise _Aborted()

        def create() -> Any:
            if stop.is_set() or self._closed.is_set():
                raise _Aborted()
            return self._create(kwargs)

        try:
            return tenacity.Retrying(stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=wait,
                                     retry=tenacity.retry_if_exception(retryable), before_sleep=before_sleep,
                                     sleep=sleep, reraise=True)(create)
        except openai.BadRequestError as e:
            text = f"{e} {server_detail(e)}".lower()
            if any(m in text for m in _CONTEXT_MARKERS):
                raise _PromptTooLong(server_detail(e)) from e
            raise GenerationError(f"the server refused the request: {self._refusal(400, e)}") from e
        except (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError) as e:
            status = getattr(e, "status_code", None)
            if stop.is_set() or self._closed.is_set():  # the call was abandoned: no retries, no warnings
                raise _Aborted() from e
            if not retryable(e):
                raise GenerationError(f"the server refused the request: {self._refusal(status, e)}") from e
            what = f"HTTP {status}: {server_detail(e)}" if status is not None else str(e)
            raise GenerationError(f"{self.base_url}: request failed after {self.max_retries + 1} attempt(s): "
                                  f"{what} (hint: {HINTS['unreachable']})") from e

    def _prompt(self, messages: Messages, sampling: SamplingConfig, seed: int | None,
                stop: threading.Event | None = None, stop_strings: Sequence[str] | None = None) -> list[str]:
        per = self.max_n_per_request or sampling.n
        if sampling.n <= per:
            return self._request(messages, sampling, sampling.n, seed, stop, stop_strings)
        out: list[str] = []
        while len(out) < sampling.n:
            m = min(per, sampling.n - len(out))
            # vLLM seeds the j-th sample of a request with seed + j: a part starting at seed + (samples so far)
            # draws exactly the samples one unsplit request would (seed + 1 per part would repeat samples)
            part_seed = None if seed is None else (seed + len(out)) % _SEED_RANGE
            out += self._request(messages, sampling, m, part_seed, stop, stop_strings)
        return out

    def _one(self, messages: Messages, sampling: SamplingConfig, seed: int | None,
             stop: threading.Event | None = None, stop_strings: Sequence[str] | None = None) -> list[str] | None:
        try:
            return self._prompt(messages, sampling, seed, stop, stop_strings)
        except _PromptTooLong as e:
            log.warning("a prompt is longer than the server's context; skipped (%s)", str(e)[:200])
            return None

    # -- many prompts ----------------------------------------------------------------------------------------------
    def generate_iter(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                      seeds: Sequence[int] | None = None, stop_strings: Sequence[str] | None = None
                      ) -> Iterator[tuple[int, list[str] | None]]:
        """``(index, completions)`` as requests finish (any order); None for a prompt over the context length.
        At most ``concurrency`` requests run at once; prompts are submitted in order. When the caller stops
        early (an error here or in its own code), requests still under way are abandoned: they retry no more and
        their threads never hold the process."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ConfigError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        if self._closed.is_set():
            raise GenerationError("the openai backend was closed")
        workers = _Workers(min(self.concurrency, max(len(prompts), 1)))
        stop = threading.Event()
        pending: dict[Future, int] = {}
        nxt = 0
        try:
            while nxt < len(prompts) or pending:
                while nxt < len(prompts) and len(pending) < self.concurrency:
                    seed = None if seeds is None else int(seeds[nxt])
                    pending[workers.submit(self._one, prompts[nxt], sampling, seed, stop, stop_strings)] = nxt
                    nxt += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=pending.__getitem__):
                    i = pending.pop(f)
                    try:
                        result = f.result()
                    except _Aborted:
                        raise GenerationError("the openai backend was closed while requests were under way"
                                              ) from None
                    yield i, result
        finally:
            stop.set()
            for f in pending:
                f.cancel()
            workers.shutdown()

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig, *,
                 seeds: Sequence[int] | None = None, stop: Sequence[str] | None = None) -> list[list[str]]:
        """``stop``: strings that end a completion, kept in it (the server strips the one it stopped at: it is put
        back from vLLM's ``stop_reason``, or, from a server without it, as the closing tag of an open tag). A
        conversation ending with an assistant message is continued (vLLM's ``continue_final_message``)."""
        results: list[list[str] | None] = [None] * len(prompts)
        too_long = []
        for i, comps in self.generate_iter(prompts, sampling, seeds=seeds, stop_strings=stop):
            if comps is None:
                too_long.append(i)
            results[i] = comps
            report_progress(self, 1, len(comps) if comps is not None else 0)
        if too_long:
            raise PromptTooLongError(too_long, results=results)
        return [r if r is not None else [] for r in results]

    def _close_client(self) -> None:
        try:
            self.client.close()
        except Exception:  # pragma: no cover
            pass

    def close(self) -> None:
        """Abandon what is under way and close the HTTP client (once no request is on the wire: closing a socket
        another thread is reading would leave that thread blocked until the timeout)."""
        self._closed.set()
        with self._lock:
            idle = self._in_flight == 0
        if idle:
            self._close_client()


def _restore_stop(text: str, choice: Any, stops: Sequence[str]) -> str:
    """Put back the stop string the server stripped: vLLM says which (``stop_reason``); otherwise, when the server
    stopped (``finish_reason == "stop"``) with a closing tag ``</x>`` among the stops and ``<x>`` left open."""
    if getattr(choice, "finish_reason", None) != "stop" or any(text.endswith(s) for s in stops):
        return text
    reason = getattr(choice, "stop_reason", None)
    if isinstance(reason, str):
        return text + reason if reason in stops else text
    for s in stops:
        if s.startswith("</") and s.endswith(">"):
            opening = "<" + s[2:]
            if text.rfind(opening) > text.rfind(s):
                return text + s
    return text
