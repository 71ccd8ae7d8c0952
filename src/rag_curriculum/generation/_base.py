"""The one interface every generation backend implements.

Given chat prompts (lists of ``{"role", "content"}`` messages) and explicit sampling settings, a backend returns
``n`` completion strings per prompt, in prompt order. Sampling settings are always passed explicitly: a backend
never falls back to a model's ``generation_config`` defaults.

Optional extensions a backend may implement (the toolkit's backends implement those that fit them;
:mod:`rag_curriculum.generation.runner` uses them when present and works without them):

- ``generate(prompts, sampling, *, seeds=None)``: ``seeds[i]`` seeds prompt ``i`` (instead of ``sampling.seed``),
  so a question's samples do not depend on which other questions share its batch.
- ``generate_iter(prompts, sampling, *, seeds=None)``: yields ``(index, completions)`` as prompts finish, in any
  order; ``completions`` is None for a prompt the backend refused as too long (the OpenAI-compatible backend).
- ``describe() -> dict``: the settings that determine the completions (backend, model, dtype, ...), recorded
  with results so that a resumed run can check it continues the same generation. :func:`backend_identity`
  makes it from a backend's constructor options, the same way for every backend (before the backend is built).
- ``generate_calls(calls, *, total)``: runs many of the runner's calls at once and yields ``(call, results,
  backend_seconds)`` as they finish (the Ray engine's pool, :mod:`rag_curriculum.generation._ray_engine`); such a
  backend says whether it takes per-prompt seeds with ``seeded_calls``.
- ``call_size``: how many prompts one ``generate`` call should get for the engine to stay busy.
- ``identity_exclude``: constructor options that cannot change the completions (speed, connection), left out of
  :func:`backend_identity` besides :data:`NON_OUTPUT_OPTIONS`.
- ``replays = True``: the backend replays fixed completions instead of sampling (the scripted one); the runner's
  identical-samples check (:class:`IdenticalSamplesError`) does not apply to it.
- ``sampling_hint``: what to do when the runner finds the samples of most questions identical (how to turn
  sampling on for this backend), shown in :class:`IdenticalSamplesError`.
- progress within a call: a backend that generates a call in steps (transformers: per batch, and each sequence as it
  ends; scripted: per prompt; vLLM: per finished request) calls :func:`report_progress` ``(self, prompts,
  completions)`` after each step, and one that generates token by token may say how far its unfinished sequences
  are (:func:`report_working`, in completions' worth), so the rate and the time left show before the first
  completion ends; the runner shows both under its bar when progress is on, and they cost nothing when it is off.

A prompt longer than the model's context makes ``generate`` raise :class:`PromptTooLongError` naming it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .._plumbing import AsDict, expected_type, file_sha256, init_hints, is_secret, mask_secrets
from .._settings import MODEL_PATH_BACKENDS, check_model_ref
from ..errors import ConfigError, SettingError, UsageError
from ..models import is_gguf, resolve_model
from ..prompts import completion_prompt
from ..registry import Registry

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SamplingConfig(AsDict):
    """Sampling settings, passed to every backend explicitly (never the model's defaults).

    Attributes:
        n: completions per prompt.
        temperature: sampling temperature (0: greedy).
        top_p: nucleus sampling's top-p, in (0, 1].
        max_tokens: the most new tokens per completion.
        seed: the sampling seed.

    Raises:
        ConfigError: a value out of range (``n`` or ``max_tokens`` below 1, a negative temperature, ``top_p``
            outside (0, 1]).

    Examples:
        >>> from rag_curriculum.generation import SamplingConfig
        >>> SamplingConfig(n=8, temperature=1.0, max_tokens=800).to_dict()
        {'n': 8, 'temperature': 1.0, 'top_p': 1.0, 'max_tokens': 800, 'seed': 0}
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 800
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")


@runtime_checkable
class GenerationBackend(Protocol):
    """``generate(prompts, sampling) -> list[list[str]]``: ``sampling.n`` completions for each prompt.

    What the partition and the evaluation generate with: the built-in backends (``vllm``, ``transformers``,
    ``openai``, ``scripted``) and any registered in ``BACKENDS`` (docs/extending.md). ``prompts`` are chat
    messages (``[{"role": ..., "content": ...}, ...]``); a backend raises :class:`PromptTooLongError` for prompts
    longer than its model's context and :class:`GenerationError` for what else it cannot do.
    """

    name: str

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig) -> list[list[str]]: ...

    def close(self) -> None: ...


#: Where :func:`report_progress` (and :func:`report_working`) go: set by the runner around a backend call while its
#: progress is on: (the backend, its completions' callback, its working callback or None).
_PROGRESS: contextvars.ContextVar[tuple[Any, Callable[[int, int], None], Callable[[float], None] | None] | None] = (
    contextvars.ContextVar("rag_curriculum_generation_progress", default=None))


def report_progress(source: Any, prompts: int, completions: int) -> None:
    """``source`` (the backend the runner called) finished ``prompts`` more prompts of the call in flight, with
    ``completions`` completions in all. Shown under the runner's bar when progress is on; a no-op otherwise, and
    for a backend called by another one (a search agent's inner model: its turns are not the call's prompts).

    >>> report_progress(object(), 1, 4)  # no run listening: nothing happens
    """
    target = _PROGRESS.get()
    if target is not None and target[0] is source:
        target[1](prompts, completions)


def report_working(source: Any, completions: float) -> None:
    """How far ``source``'s unfinished sequences of the call in flight are, in completions' worth (each one's tokens
    so far over its token limit, summed): a gauge, each report replacing the last, 0 once they are done and
    reported with :func:`report_progress`. The runner's rate and time left count it, so they show from the first
    tokens rather than from the first completion (which, under load, can be many minutes away); the completions
    count does not. A no-op unless the runner listens for it.

    >>> report_working(object(), 0.5)  # no run listening: nothing happens
    """
    target = _PROGRESS.get()
    if target is not None and target[0] is source and target[2] is not None:
        target[2](completions)


def progress_listened(source: Any) -> bool:
    """Whether :func:`report_progress` from ``source`` is shown now (a backend may skip the work of measuring)."""
    target = _PROGRESS.get()
    return target is not None and target[0] is source


@contextlib.contextmanager
def listening(source: Any, callback: Callable[[int, int], None],
              working: Callable[[float], None] | None = None) -> Iterator[None]:
    """Send ``source``'s :func:`report_progress` calls to ``callback(prompts, completions)`` inside the block, and
    its :func:`report_working` calls to ``working(completions)`` (when given)."""
    token = _PROGRESS.set((source, callback, working))
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """``text`` up to and including the first of the ``stop`` strings: where a backend's generation stops (a
    token may run past the string; a script may overshoot).

    >>> cut_at_stop("<search>q</search> more <answer>a</answer>", ["</search>", "</answer>"])
    '<search>q</search>'
    """
    ends = [i + len(s) for s in stop or () if s and (i := text.find(s)) >= 0]
    return text[:min(ends)] if ends else text


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt as a backend generates from it: its token ids, and for a base model (no chat template) the
    response prefix that ends the prompt (returned as the start of every completion) and the template's stop
    strings (:func:`rag_curriculum.prompts.completion_prompt`)."""

    ids: list[int]
    prefix: str = ""
    stop: tuple[str, ...] = ()


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` renders chat messages itself (a chat template is set)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompt(tokenizer: Any, messages: Messages) -> RenderedPrompt:
    """``messages`` as the model sees them: with the tokenizer's chat template (a generation prompt; a conversation
    ending with an assistant message continued), tokenized without added special tokens, as ``LLM.chat`` and TRL
    do; or, for a tokenizer without a chat template (a base model), the completion-style text of
    :func:`~rag_curriculum.prompts.completion_prompt`, tokenized with the tokenizer's own special tokens (its BOS),
    as a base model was pretrained. Never a chat template borrowed from elsewhere."""
    messages = list(messages)
    if has_chat_template(tokenizer):
        if messages and messages[-1].get("role") == "assistant":
            text = tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=False)
        else:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return RenderedPrompt(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    p = completion_prompt(messages)
    return RenderedPrompt(list(tokenizer(p.text)["input_ids"]), p.prefix, p.stop)


def finish_completion(text: str, prompt: RenderedPrompt, stop: Sequence[str] | None) -> str:
    """A generated text as the completion a backend returns: cut after the first of ``stop`` and the prompt's own
    stop strings, and opened with the prompt's response prefix (empty for a chat model).

    >>> finish_completion(" Paris\\n</answer>\\nAnswer: Paris", RenderedPrompt([], "Final answer:", ("</answer>",)), None)
    'Final answer: Paris\\n</answer>'
    """
    stops = [*(stop or ()), *prompt.stop]
    return prompt.prefix + (cut_at_stop(text, stops) if stops else text)


def seeded_call_supported(backend: Any) -> bool:
    """Whether ``backend.generate`` accepts per-prompt ``seeds`` (a backend without its own ``generate``, such as
    the Ray engine's pool, says so with ``seeded_calls``)."""
    if getattr(backend, "seeded_calls", None) is not None:
        return bool(backend.seeded_calls)
    try:
        return "seeds" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):
        return False


#: Backends that replay fixed completions instead of sampling (a class may also say ``replays = True``).
REPLAY_BACKENDS = frozenset({"scripted"})


def replays(backend: Any) -> bool:
    """Whether ``backend`` replays fixed completions (so identical samples say nothing about its sampling)."""
    return bool(getattr(backend, "replays", False)) or getattr(backend, "name", None) in REPLAY_BACKENDS


# -- what the completions depend on ---------------------------------------------------------------------------------
#: Constructor options of any backend that cannot change a completion: connection, speed, retries, progress
#: output, secrets. Every other option is part of :func:`backend_identity`.
NON_OUTPUT_OPTIONS = frozenset({
    "api_key", "base_url", "concurrency", "max_retries", "timeout", "backoff", "max_backoff",  # openai
    "gpu_memory_utilization", "call_size", "show_progress", "in_process_engine",  # vllm
    "delay",  # scripted
})
#: The small files of a model directory that decide how prompts are rendered and tokenized and how generation
#: stops: hashed by content into the identity (weights by name, size and :func:`sampled_digest`: hashing gigabytes
#: whole would be slow).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja", "chat_template.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.json", "merges.txt", "tokenizer.model", "preprocessor_config.json", "processor_config.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_SMALL_FILE = 64 << 20


def is_secret_option(name: str) -> bool:
    """Option names whose values are never recorded (``api_key``, ``hf_token``, ... but not ``tokenizer``): the
    toolkit's one masking rule, :func:`rag_curriculum._plumbing.is_secret`.

    >>> [is_secret_option(k) for k in ("api_key", "hf_token", "tokenizer", "max_tokens", "password")]
    [True, True, False, False, True]
    """
    return is_secret(name)


@functools.lru_cache(maxsize=32)
def _cached_sha256(path: Path, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


#: A weights file's sampled digest: this many blocks of :data:`_SAMPLE_BYTES`, at even offsets from its first byte to
#: its last. Training changes every tensor, so a checkpoint saved again under the same name and size (a run resumed
#: into the same folder, ``save_total_limit`` rotating names) reads as another model; 1 MiB read whatever the size.
_SAMPLES = 16
_SAMPLE_BYTES = 64 << 10


@functools.lru_cache(maxsize=64)
def sampled_digest(path: Path, size: int, mtime_ns: int) -> str:
    """``size`` and the SHA-256 of :data:`_SAMPLES` blocks of the file spread evenly over it (the whole file when it
    is smaller than the blocks together).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = Path(d) / "w.safetensors"
    ...     _ = p.write_bytes(bytes(2 << 20))
    ...     before = sampled_digest(p, 2 << 20, 0)
    ...     with open(p, "r+b") as f:
    ...         _ = f.seek((2 << 20) - 1); _ = f.write(b"x")   # the last byte: the last block holds it
    ...     sampled_digest(p, 2 << 20, 1) != before
    True
    """
    h = hashlib.sha256(f"{size}\0".encode())
    with open(path, "rb") as f:
        if size <= _SAMPLES * _SAMPLE_BYTES:
            h.update(f.read())
        else:
            step = (size - _SAMPLE_BYTES) / (_SAMPLES - 1)
            for i in range(_SAMPLES):
                f.seek(int(i * step))
                h.update(f.read(_SAMPLE_BYTES))
    return f"sampled:{h.hexdigest()}"


def local_files_digest(path: str | Path) -> str | None:
    """A content digest of a local model directory (its config, tokenizer and chat-template files; weights by
    name, size and :func:`sampled_digest`) or of a local file (a script, a template, a ``.gguf`` model: its SHA-256
    whatever its size); None when ``path`` is not on this machine."""
    try:
        p = Path(path).expanduser()
        if p.is_file():
            st = p.stat()
            if st.st_size <= _SMALL_FILE or is_gguf(p):  # a GGUF file is the model: its content, whatever its size
                return _cached_sha256(p, st.st_size, st.st_mtime_ns)
            return f"{p.name}:{sampled_digest(p, st.st_size, st.st_mtime_ns)}"
        if not p.is_dir():
            return None
        h = hashlib.sha256()
        for f in sorted(p.iterdir(), key=lambda f: f.name):
            if not f.is_file():
                continue
            if f.name in MODEL_FILES:
                h.update(f"{f.name}\0{file_sha256(f)}\0".encode())
            elif f.name.endswith(_WEIGHT_SUFFIXES):
                st = f.stat()
                h.update(f"{f.name}\0{sampled_digest(f, st.st_size, st.st_mtime_ns)}\0".encode())
        return h.hexdigest()
    except (OSError, ValueError):
        return None


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if callable(v):  # a script function, a class: its import path (a repr would hold a memory address)
        return f"{getattr(v, '__module__', '?')}:{getattr(v, '__qualname__', type(v).__name__)}"
    return json.loads(json.dumps(v, default=str))


def backend_identity(backend: str | type, model: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """Everything about a backend that can change a completion, before it is built: its name, the model, every
    constructor option (given, or its default) except those that cannot change completions
    (:data:`NON_OUTPUT_OPTIONS`, the class's ``identity_exclude``) and secrets (never recorded), and a content
    digest of the local model directory (config, tokenizer, chat template) and of any local tokenizer / template
    path among the options. Sampling is recorded beside it by the runner.

    >>> backend_identity("openai", "m", {"concurrency": 8, "api_key": "sk-1", "extra_body": {"do_sample": True}})
    {'backend': 'openai', 'model': 'm', 'options': {'disable_server_defaults': True, 'extra_body': {'do_sample': True}}}
    """
    cls = BACKENDS.get(backend) if isinstance(backend, str) else backend
    name = backend if isinstance(backend, str) else getattr(cls, "name", cls.__name__)
    exclude = NON_OUTPUT_OPTIONS | set(getattr(cls, "identity_exclude", ()))
    resolved: dict[str, Any] = {}
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):  # pragma: no cover - a builtin
        params = []
    for p in params:
        if p.name == "model" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty:
            resolved[p.name] = p.default
    resolved.update({k: v for k, v in options.items() if k != "model"})  # **engine_kwargs too
    opts = {k: mask_secrets(_jsonable(v)) for k, v in sorted(resolved.items())  # nested secrets: extra_body
            if v is not None and k not in exclude and not is_secret_option(k)}
    identity: dict[str, Any] = {"backend": name, "model": None if model is None else str(model), "options": opts}
    files = {}
    for k, v in [("model", model), *((k, v) for k, v in opts.items() if "tokenizer" in k or "template" in k)]:
        if isinstance(v, str) and v and (digest := local_files_digest(v)) is not None:
            files[k] = digest
    if files:
        identity["files"] = files
    return identity


BACKENDS: Registry[type] = Registry(
    "generation backend", check=lambda o: isinstance(o, type) and callable(getattr(o, "generate", None)),
    must_be="a backend class with a generate(prompts, sampling) method")
BACKENDS.register("vllm", "rag_curriculum.generation._vllm_backend:VLLMBackend")
BACKENDS.register("openai", "rag_curriculum.generation._openai_backend:OpenAIBackend")
BACKENDS.register("transformers", "rag_curriculum.generation._hf_backend:TransformersBackend")
BACKENDS.register("scripted", "rag_curriculum.generation._scripted:ScriptedBackend")


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Build the backend registered under ``name`` (its heavy library is imported only now).

    Args:
        name: ``vllm``, ``transformers``, ``openai``, ``scripted``, or a registered backend.
        **kwargs: the backend's options (``model``, and e.g. ``tensor_parallel_size`` for vllm, ``base_url`` for
            openai, ``script`` for scripted), checked against what it takes.

    Returns:
        The backend.

    Raises:
        UnknownNameError: no backend of that name (with a "did you mean").
        UsageError: an option the backend does not take (with a "did you mean" and the options it takes).
        ConfigError: an option value the backend refuses (a :class:`SettingError` for one of the wrong type).
        GenerationError: a backend that cannot start (vLLM or openai not installed, a model it cannot use).

    Examples:
        >>> from rag_curriculum.generation import SamplingConfig, get_backend
        >>> backend = get_backend("scripted", script={"Who founded Rome?": ["Romulus", "Remus"]})
        >>> backend.generate([[{"role": "user", "content": "Who founded Rome?"}]], SamplingConfig(n=2))
        [['Romulus', 'Remus']]

        ```python
        backend = get_backend("vllm", model="Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=2)
        ```
    """
    cls = BACKENDS.get(name)
    check_backend_args(name, kwargs, cls)
    return cls(**kwargs)


def check_backend_model(model: str | None, backend: str, *, label: str = "model") -> None:
    """Refuse, before anything is loaded, a model ``backend`` would load that is neither a local path nor a Hub id
    to be had (:func:`~rag_curriculum._settings.check_model_ref`); a GGUF file, for a backend that loads model paths,
    is converted now (once: a bad file is refused here, a good one is read from the cache after)."""
    check_model_ref(model, backend=backend, label=label, loads=True)
    if is_gguf(model) and backend in MODEL_PATH_BACKENDS:
        resolve_model(str(model))


def check_backend_args(name: str, args: Mapping[str, Any], cls: Any = None) -> None:
    """Refuse an option the backend ``name`` does not take (``--backend-arg nosuch=1``), in one line with a "did you
    mean" and the options it takes; a backend that passes unknown options on (vllm: to vLLM's engine) takes any."""
    import difflib

    cls = cls if cls is not None else BACKENDS.get(name)
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = sorted(k for k, p in params.items() if k not in ("self", "model")
                   and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    for key in args:
        if key == "model" or key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        raise UsageError(f"the {name} backend has no option {key!r} (--backend-arg {key}=...)"
                         + (f"; did you mean {close[0]!r}?" if close else ""),
                         hint=f"its options: {', '.join(known)}")
    hints = init_hints(cls)
    for key, value in args.items():  # a value of the wrong type fails here, not as a TypeError deep inside
        want = expected_type(value, hints[key]) if key in hints else None
        if want is not None:
            raise SettingError(f"--backend-arg {key}", value, f"a value of type {want} (the {name} backend)")
