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
  with results so that a resumed run can check it continues the same generation.
- ``call_size``: how many prompts one ``generate`` call should get for the engine to stay busy.

A prompt longer than the model's context makes ``generate`` raise :class:`PromptTooLongError` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import CurriculumError
from ..registry import Registry

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings, passed to every backend explicitly (never the model's defaults)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 800
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GenerationError(CurriculumError):
    """A generation backend that cannot do what it was asked (bad settings, a server that keeps failing)."""


class PromptTooLongError(GenerationError):
    """Some prompts do not fit the model's context. ``indices`` are their positions in the call; ``results``,
    when the backend already generated the other prompts, holds their completions (None at ``indices``)."""

    def __init__(self, indices: Sequence[int], *, limit: int | None = None,
                 results: list[list[str] | None] | None = None, detail: str = "") -> None:
        self.indices = sorted(set(indices))
        self.limit = limit
        self.results = results
        shown = ", ".join(map(str, self.indices[:10])) + (" ..." if len(self.indices) > 10 else "")
        lim = f" of {limit} tokens" if limit else ""
        super().__init__(f"{len(self.indices)} prompt(s) longer than the model's context{lim} (positions {shown})"
                         + (f": {detail}" if detail else ""))


@runtime_checkable
class GenerationBackend(Protocol):
    """``generate(prompts, sampling) -> list[list[str]]``: ``sampling.n`` completions for each prompt."""

    name: str

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig) -> list[list[str]]: ...

    def close(self) -> None: ...


def seeded_call_supported(backend: Any) -> bool:
    """Whether ``backend.generate`` accepts per-prompt ``seeds``."""
    import inspect

    try:
        return "seeds" in inspect.signature(backend.generate).parameters
    except (TypeError, ValueError):
        return False


BACKENDS: Registry[type] = Registry("generation backend")
BACKENDS.register("vllm", "rag_curriculum.generation.vllm_backend:VLLMBackend")
BACKENDS.register("openai", "rag_curriculum.generation.openai_backend:OpenAIBackend")
BACKENDS.register("transformers", "rag_curriculum.generation.hf_backend:TransformersBackend")
BACKENDS.register("scripted", "rag_curriculum.generation.scripted:ScriptedBackend")


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Build the backend registered under ``name`` (its heavy library is imported only now)."""
    return BACKENDS.get(name)(**kwargs)
