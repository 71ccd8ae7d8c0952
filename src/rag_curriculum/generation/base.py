"""The one interface every generation backend implements.

Given chat prompts (lists of ``{"role", "content"}`` messages) and explicit sampling settings, a backend returns
``n`` completion strings per prompt, in prompt order. Sampling settings are always passed explicitly: a backend
never falls back to a model's ``generation_config`` defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class GenerationBackend(Protocol):
    """``generate(prompts, sampling) -> list[list[str]]``: ``sampling.n`` completions for each prompt."""

    name: str

    def generate(self, prompts: Sequence[Messages], sampling: SamplingConfig) -> list[list[str]]: ...

    def close(self) -> None: ...


BACKENDS: Registry[type] = Registry("generation backend")
BACKENDS.register("vllm", "rag_curriculum.generation.vllm_backend:VLLMBackend")
BACKENDS.register("openai", "rag_curriculum.generation.openai_backend:OpenAIBackend")
BACKENDS.register("transformers", "rag_curriculum.generation.hf_backend:TransformersBackend")
BACKENDS.register("scripted", "rag_curriculum.generation.scripted:ScriptedBackend")


def get_backend(name: str, **kwargs: Any) -> GenerationBackend:
    """Build the backend registered under ``name`` (its heavy library is imported only now)."""
    return BACKENDS.get(name)(**kwargs)
