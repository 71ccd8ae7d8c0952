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

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports
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

#: In-process or Ray (``_engine``, with the Ray engine and the chunked runner behind it), imported on first use: a
#: judge that calls a backend (the rewards') needs the interface above, not the runner or its shards.
__getattr__, __dir__ = lazy_exports(__name__, {"EngineConfig": "._engine"}, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from ._engine import EngineConfig

__all__ = [
    "BACKENDS", "EngineConfig", "GenerationBackend", "GenerationError", "IdenticalSamplesError", "PromptTooLongError", "SamplingConfig",
    "get_backend", "report_progress", "seeded_call_supported",
]
