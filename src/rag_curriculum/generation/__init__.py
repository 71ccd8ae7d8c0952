"""Generation backends behind one interface (vLLM offline, an OpenAI-compatible server, transformers).

Backends are registered by dotted path, so importing this package never imports vLLM, openai or torch.
:mod:`rag_curriculum.generation.runner` runs a backend over many prompts in resumable, deterministic chunks, in this
process or on a Ray cluster (:class:`EngineConfig`, ``--engine ray``: :mod:`rag_curriculum.generation.ray_engine`).

>>> sorted(BACKENDS.names())
['openai', 'scripted', 'transformers', 'vllm']
"""

from __future__ import annotations

from .base import (
    BACKENDS,
    GenerationBackend,
    GenerationError,
    PromptTooLongError,
    SamplingConfig,
    get_backend,
    seeded_call_supported,
)
from .engine import EngineConfig

__all__ = [
    "BACKENDS", "EngineConfig", "GenerationBackend", "GenerationError", "PromptTooLongError", "SamplingConfig", "get_backend",
    "seeded_call_supported",
]
