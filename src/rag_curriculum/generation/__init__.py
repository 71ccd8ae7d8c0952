"""Generation backends behind one interface (vLLM offline, an OpenAI-compatible server, transformers).

Backends are registered by dotted path, so importing this package never imports vLLM, openai or torch.
:mod:`rag_curriculum.generation.runner` runs a backend over many prompts in resumable, deterministic chunks, in this
process or on a Ray cluster (:class:`EngineConfig`, ``--engine ray``: :mod:`rag_curriculum.generation._ray_engine`).

Every other module is private (``_base``: the interface, sampling and the registry; ``_engine``: in-process or Ray;
``_vllm_backend``, ``_openai_backend``, ``_hf_backend``, ``_scripted``: the shipped backends; ``_ray_engine``): the
public names are exported here.

>>> sorted(BACKENDS.names())
['openai', 'scripted', 'transformers', 'vllm']
"""

from __future__ import annotations

from ._base import (
    BACKENDS,
    GenerationBackend,
    GenerationError,
    IdenticalSamplesError,
    PromptTooLongError,
    SamplingConfig,
    get_backend,
    report_progress,
    seeded_call_supported,
)
from ._engine import EngineConfig

__all__ = [
    "BACKENDS", "EngineConfig", "GenerationBackend", "GenerationError", "IdenticalSamplesError", "PromptTooLongError", "SamplingConfig",
    "get_backend", "report_progress", "seeded_call_supported",
]
