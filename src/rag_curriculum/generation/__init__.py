"""Generation backends behind one interface (vLLM offline, an OpenAI-compatible server, transformers).

Backends are registered by dotted path, so importing this package never imports vLLM, openai or torch.
:mod:`rag_curriculum.generation.runner` runs a backend over many prompts in resumable, deterministic chunks, in this
process or on a Ray cluster (:class:`EngineConfig`, ``--engine ray``: :mod:`rag_curriculum.generation._ray_engine`).

Every other module is private (``_base``: the interface, sampling and the registry; ``_engine``: in-process or Ray;
``_vllm_backend``, ``_openai_backend``, ``_hf_backend``, ``_scripted``: the shipped backends; ``_ray_engine``): the
public names are exported here, and the other packages import them from here.

>>> sorted(BACKENDS.names())
['openai', 'scripted', 'transformers', 'vllm']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports
from ..errors import GenerationError, IdenticalSamplesError, PromptTooLongError
from ._base import (
    BACKENDS,
    GenerationBackend,
    SamplingConfig,
    backend_identity,
    check_backend_args,
    check_backend_model,
    cut_at_stop,
    get_backend,
    is_secret_option,
    replays,
    report_progress,
    report_working,
    seeded_call_supported,
)

# In-process or Ray (``_engine``, with the Ray engine and the chunked runner behind it), and the transformers
# backend's stop criteria (a TRL rollout stops its turns with them), the TYPE_CHECKING imports below, load on first
# use: a judge that calls a backend (the rewards') needs the interface above, not the runner or its shards.
__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from ._engine import BackendSpec, open_engine
    from ._engine_config import EngineConfig, without_engine_options
    from ._hf_backend import stop_kwargs

__all__ = [
    "BACKENDS", "BackendSpec", "EngineConfig", "GenerationBackend", "GenerationError", "IdenticalSamplesError",
    "PromptTooLongError", "SamplingConfig", "backend_identity", "check_backend_args", "check_backend_model",
    "cut_at_stop", "get_backend", "is_secret_option", "open_engine", "replays", "report_progress",
    "report_working", "seeded_call_supported", "stop_kwargs", "without_engine_options",
]
